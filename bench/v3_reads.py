"""Benchmark: format v3 upsert tables written with equality deletes and with deletion vectors
(`deletes="vectors"`), read in Spark, DuckDB and PyIceberg, beside a compacted copy.

    .venv/bin/python bench/v3_reads.py [--rows 200000] [--batches 10] [--keys 20000] [--record]

Two v3 tables get `--rows` rows appended, then the same `--batches` upsert batches of `--keys`
keys each (20% of them update existing keys, the rest are new): `equality` through today's sink,
`vectors` through `UpsertSink(deletes="vectors")`. Reported: each sink's batch latency (median),
and full scan (count and a sum over every row) and point lookup per engine, for `equality` as
streamed, `vectors` as streamed, `equality` after folding its deletes into DVs
(`convert_equality_deletes`, what `fold_deletes: position` maintenance does on v3) and after
compaction (the compacted copy every ratio is against). Medians of 3 after a warm-up; a read over
10 s is timed once. PyIceberg refuses equality deletes.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    READ_ENGINES,
    UPSERT_SCHEMA,
    ReadTarget,
    TableReads,
    UpsertBatches,
    bench_session,
    current_metadata,
    duckdb_with_iceberg,
    in_temp_warehouse,
    median,
    parser,
    render_table,
    report,
    tables_reads,
    timed,
)

TABLE = "lake.bench.v3"


def run(rows: int, batches: int, keys: int, warehouse: str) -> str:
    import icetide
    from icetide.maintenance.compaction import compact
    from icetide.maintenance.position_deletes import convert_equality_deletes

    spark = bench_session(warehouse)
    tables = {mode: f"{TABLE}_{mode}" for mode in ("equality", "vectors")}
    sinks = {}
    for mode, name in tables.items():
        icetide.create_table(spark, name, schema=UPSERT_SCHEMA, key=["id"], format_version=3)
        UpsertBatches.initial(spark, rows).writeTo(name).append()
        sinks[mode] = icetide.UpsertSink(spark, name, pipeline_id="bench", order_by="seq", deletes=mode)
    stream = UpsertBatches(rows, keys)
    latency: dict[str, list[float]] = {"equality": [], "vectors": []}
    for b in range(1, batches + 1):
        df = stream.batch(spark, b)
        for mode, sink in sinks.items():
            latency[mode].append(sink.write(df, batch_id=b).total_seconds)
        df.unpersist()
        print(f"batch {b}: equality {latency['equality'][-1]:.2f}s, vectors {latency['vectors'][-1]:.2f}s", flush=True)

    probe = stream.rng.randrange(rows)
    eq, vec = tables["equality"], tables["vectors"]
    states: list[tuple[str, TableReads, str]] = []
    with duckdb_with_iceberg() as con:

        def reads(name: str) -> TableReads:
            return tables_reads(spark, [ReadTarget(name, current_metadata(spark, name))], probe, con)[0]

        states.append(("equality, as streamed", reads(eq), ""))
        states.append(("vectors, as streamed", reads(vec), ""))
        seconds, converted = timed(lambda: convert_equality_deletes(spark, eq))
        states.append(
            ("equality, deletes folded into DVs", reads(eq), f"{converted.position_files_added} DVs, {seconds:.1f}s")
        )
        seconds, compacted = timed(lambda: compact(spark, eq, min_input_files=2))
        states.append(("compacted", reads(eq), f"{compacted.files_added} files, {seconds:.1f}s"))
    spark.stop()
    base = states[-1][1]

    table_rows = []
    for name, reads, note in states:
        row = [name]
        for engine in READ_ENGINES:
            row += [reads.scan[engine].show(base.scan[engine]), reads.lookup[engine].show(base.lookup[engine])]
        table_rows.append([*row, note])
    table = render_table(
        [
            "table state",
            "Spark scan s",
            "Spark lookup s",
            "DuckDB scan s",
            "DuckDB lookup s",
            "PyIceberg scan s",
            "PyIceberg lookup s",
            "maintenance",
        ],
        table_rows,
    )
    eq_latency, vec_latency = median(latency["equality"]), median(latency["vectors"])
    return (
        f"{rows:,} rows appended, then {batches} upsert batches of {keys:,} keys (20% updates) through UpsertSink "
        f"into two format v3 tables, `deletes=equality` and `deletes=vectors`; each state read in Spark "
        f"3.5.7/Iceberg 1.10.2, DuckDB 1.5.5 and PyIceberg 0.12.0 (in brackets: times the compacted state):\n\n"
        f"{table}\n\n- batch latency (write + commit, median): equality {eq_latency:.2f}s, vectors "
        f"{vec_latency:.2f}s ({vec_latency / eq_latency:.2f}x)\n"
    )


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--batches", type=int, default=10)
    p.add_argument("--keys", type=int, default=20_000)
    args = p.parse_args()
    body = in_temp_warehouse(lambda wh: run(args.rows, args.batches, args.keys, wh))
    report(
        "bench/v3_reads.py: v3 upserts with equality deletes and with deletion vectors, read by three engines",
        body,
        save=args.record,
    )


if __name__ == "__main__":
    main()
