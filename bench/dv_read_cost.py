"""Benchmark: what one deletion vector costs each reader of a data file (issue 45's read targets).

    .venv/bin/python bench/dv_read_cost.py [--rows 2000000] [--updates 4000] [--repeats 5] [--record]

Three format v3 tables hold the same `--rows` rows in one data file each:
- `plain`: the rows appended in one file, then one upsert batch through `UpsertSink`
  (`deletes="vectors"`) updating `--updates` keys drawn uniformly: one DV on the big file;
- `compacted`: the rows appended as 4 files and compacted by icetide (its output carries Iceberg's
  row-lineage columns `_row_id` and `_last_updated_sequence_number`), then the same batch: one DV;
- `copy`: the rows of `plain` after the batch, written as one file without any delete.

Each is read in Spark, DuckDB and PyIceberg, in turn (`bench.common.tables_reads`): a full scan
and a point lookup, medians of `--repeats`. The ratio to `copy` is what a file with a DV costs a
reader however few rows the DV marks, which no compaction policy avoids right after a batch that
puts a DV on every file.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    READ_ENGINES,
    UPSERT_SCHEMA,
    ReadTarget,
    UpsertBatches,
    bench_session,
    current_metadata,
    duckdb_with_iceberg,
    in_temp_warehouse,
    parser,
    render_table,
    report,
    tables_reads,
)

PREFIX = "lake.bench.dvcost_"


def run(rows: int, updates: int, repeats: int, warehouse: str) -> str:
    import icetide
    from icetide.maintenance.compaction import compact

    spark = bench_session(warehouse)
    names = {t: PREFIX + t for t in ("plain", "compacted", "copy")}
    for table in ("plain", "compacted"):
        icetide.create_table(spark, names[table], schema=UPSERT_SCHEMA, key=["id"], format_version=3)
    quarter = rows // 4
    for i in range(4):
        spark.sql(f"SELECT id + {i * quarter} AS id, 'v0' v, rand(7) amount, 0L seq FROM range({quarter})").writeTo(
            names["compacted"]
        ).append()
    spark.sql(f"SELECT id, 'v0' v, rand(7) amount, 0L seq FROM range({4 * quarter})").coalesce(1).writeTo(
        names["plain"]
    ).append()
    if compact(spark, names["compacted"], min_input_files=2).groups != 1:
        raise AssertionError("the four files were not compacted into one")
    batch = UpsertBatches(4 * quarter, updates * 5).batch(spark, 1)  # a fifth of a batch updates
    for table in ("plain", "compacted"):
        sink = icetide.UpsertSink(spark, names[table], pipeline_id="bench", order_by="seq", deletes="vectors")
        if not sink.write(batch, batch_id=1).committed:
            raise AssertionError(f"{table}: the batch was not committed")
    batch.unpersist()
    spark.read.table(names["plain"]).coalesce(1).writeTo(names["copy"]).using("iceberg").tableProperty(
        "format-version", "3"
    ).createOrReplace()
    layouts = {
        t: spark.sql(
            f"SELECT (SELECT count(*) FROM {n}.data_files), (SELECT count(*) FROM {n}.delete_files)"
        ).collect()[0]
        for t, n in names.items()
    }
    with duckdb_with_iceberg() as con:
        targets = [ReadTarget(n, current_metadata(spark, n)) for n in names.values()]
        found = dict(zip(names, tables_reads(spark, targets, rows // 3, con, repeats=repeats), strict=True))
    spark.stop()
    counts = {t: r.rows for t, r in found.items()}
    if len(set(counts.values())) != 1:
        raise AssertionError(f"the tables hold different row counts: {counts}")
    base = found["copy"]
    table = render_table(
        [
            "table",
            "data files",
            "delete files",
            *(f"{e} scan s" for e in READ_ENGINES),
            *(f"{e} lookup s" for e in READ_ENGINES),
        ],
        [
            [
                t,
                str(layouts[t][0]),
                str(layouts[t][1]),
                *(r.scan[e].show(base.scan[e]) for e in READ_ENGINES),
                *(r.lookup[e].show(base.lookup[e]) for e in READ_ENGINES),
            ]
            for t, r in found.items()
        ],
    )
    return (
        f"{counts['copy']:,} rows, all but the batch's new ones in one data file; one upsert batch "
        f"updating {updates:,} keys drawn uniformly "
        f'(`deletes="vectors"`: one DV on the file); medians of {repeats} reads in turn, '
        f"in brackets: times `copy`.\n\n{table}\n"
    )


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--updates", type=int, default=4_000)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    body = in_temp_warehouse(lambda wh: run(args.rows, args.updates, args.repeats, wh))
    report("bench/dv_read_cost.py: what one deletion vector costs each reader of a data file", body, save=args.record)


if __name__ == "__main__":
    main()
