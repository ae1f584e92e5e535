"""Benchmark: upserts after a partition spec change, two ways of reaching rows of the old spec.

    .venv/bin/python bench/partition_evolution.py [--rows 200000] [--batch 20000] [--batches 4] [--record]

Each table is created unpartitioned, gets `days(ts)` (spec 1) and `rows` rows, then
`REPLACE PARTITION FIELD days(ts) WITH hours(ts)` (spec 2); then `batches` upsert batches of
`batch` existing keys. Measured per design: write and commit seconds per batch, and the time of a
full read that applies the deletes (the cost every reader pays until compaction folds them).
- per-spec (what the sink does): each batch's equality deletes under spec 2 and under spec 1;
- global: the deletes under the unpartitioned spec 0 (they apply to every data file), plus spec 2.
"""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_session, in_temp_warehouse, median, parser, render_table, report, timed

T0 = datetime(2026, 1, 1)


def _batch(spark: Any, ids: range, tag: str) -> Any:
    from pyspark.sql import functions as F

    return (
        spark.range(ids.start, ids.stop)
        .select(
            F.col("id"),
            (F.lit(T0) + F.expr("make_interval(0, 0, 0, 0, int(id % 240), 0, 0)")).alias("ts"),
            F.lit(tag).alias("v"),
        )
        .cache()
    )


def _global_layouts(sink: Any, jtable: Any, *, has_fields: bool) -> list[Any]:
    from icetide.sink.writer import SpecLayout

    return [(SpecLayout(0, (), (), (), ()), [])]


def run_design(spark: Any, name: str, design: str, rows: int, batch: int, batches: int) -> dict[str, float]:
    import icetide
    from icetide.sink.sink import UpsertSink
    from icetide.table.iceberg import load_table

    icetide.create_table(spark, name, schema="id BIGINT NOT NULL, ts TIMESTAMP NOT NULL, v STRING", key=["id", "ts"])
    spark.sql(f"ALTER TABLE {name} ADD PARTITION FIELD days(ts)")
    sink = UpsertSink(spark, name, pipeline_id="bench")
    if design == "global":
        sink._earlier_specs = lambda jtable, has_fields: _global_layouts(sink, jtable, has_fields=has_fields)  # type: ignore[method-assign]
    sink.write(_batch(spark, range(rows), "initial"), batch_id=1)
    spark.sql(f"ALTER TABLE {name} REPLACE PARTITION FIELD days(ts) WITH hours(ts)")
    write_times = []
    for b in range(batches):
        start = (b * batch * 7) % max(1, rows - batch)
        df = _batch(spark, range(start, start + batch), f"b{b}")
        df.count()
        seconds, result = timed(lambda df=df, b=b: sink.write(df, batch_id=b + 2))
        assert result.committed
        write_times.append(seconds)
    reads = []
    for _ in range(3):
        seconds, _count = timed(lambda: spark.table(name).selectExpr("sum(hash(id, ts, v))", "count(*)").collect())
        reads.append(seconds)
    total = spark.table(name).count()
    assert total == rows, f"{design}: {total} rows, expected {rows}"
    deletes = spark.sql(f"SELECT count(*) FROM {name}.files WHERE content = 2").collect()[0][0]
    # Load-independent read cost: the (data file, delete file) pairs a full scan must apply, and
    # the delete rows behind them, from Iceberg's own scan planning.
    pairs = delete_rows = 0
    jtable = load_table(spark, name)
    jtable.refresh()
    tasks = jtable.newScan().planFiles()
    it = tasks.iterator()
    while it.hasNext():
        for d in it.next().deletes():
            pairs += 1
            delete_rows += int(d.recordCount())
    tasks.close()
    return {
        "write": median(write_times),
        "read": median(reads),
        "delete_files": float(deletes),
        "pairs": float(pairs),
        "delete_rows": float(delete_rows),
    }


def main() -> None:
    args_parser = parser(__doc__)
    args_parser.add_argument("--rows", type=int, default=200_000)
    args_parser.add_argument("--batch", type=int, default=20_000)
    args_parser.add_argument("--batches", type=int, default=4)
    args_parser.add_argument(
        "--designs", default="per-spec,global", help="order to run them in (JIT warm-up favours later)"
    )
    args = args_parser.parse_args()

    def body(warehouse: str) -> str:
        spark = bench_session(warehouse)
        results = {}
        for design in args.designs.split(","):
            results[design] = run_design(
                spark, f"lake.bench.pe_{design.replace('-', '_')}", design, args.rows, args.batch, args.batches
            )
        table = render_table(
            [
                "design",
                "write+commit s/batch (median)",
                "full read s (median of 3)",
                "delete files",
                "(data, delete) file pairs a scan applies",
                "delete rows a scan reads",
            ],
            [
                [
                    d,
                    f"{r['write']:.2f}",
                    f"{r['read']:.2f}",
                    *(int(r[k]) for k in ("delete_files", "pairs", "delete_rows")),
                ]
                for d, r in results.items()
            ],
        )
        return f"{args.rows} rows, {args.batches} upsert batches of {args.batch} keys after days->hours\n\n{table}"

    report("Partition evolution: deletes per live spec vs global deletes", in_temp_warehouse(body), save=args.record)


if __name__ == "__main__":
    main()
