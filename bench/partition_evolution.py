"""Benchmark: upserts after a partition spec change, two ways of reaching rows of the old spec.

    .venv/bin/python bench/partition_evolution.py [--rows 200000] [--batch 20000] [--batches 4] [--record]

Each table is created unpartitioned, gets `days(ts)` (spec 1) and `rows` rows, then
`REPLACE PARTITION FIELD days(ts) WITH hours(ts)` (spec 2); then `batches` upsert batches of
`batch` existing keys. Measured per design: write and commit seconds per batch, and the time of a
full read that applies the deletes (the cost every reader pays until compaction folds them).
- per-spec (what the sink does): each batch's equality deletes under spec 2 and under spec 1;
- global: the deletes under the unpartitioned spec 0 (they apply to every data file), plus spec 2.
Both stage every batch the same way, outside the sink from its writer plan
(UpsertSink.plan_writers, as the fast paths do), and commit it through the sink's committer;
only the specs the deletes are written under differ.
"""

from __future__ import annotations

import dataclasses
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


def _write_batch(spark: Any, sink: Any, df: Any, batch_id: int, design: str) -> None:
    """Stage `df` (upserts of the table's columns) from the sink's writer plan and commit it.

    per-spec: the plan as the sink makes it, deletes under the current spec and every earlier
    live one; global: the earlier specs replaced by the unpartitioned spec 0, whose deletes apply
    to every data file. Distributed, written and committed as UpsertSink.write does.
    """
    from pyspark.sql import functions as F

    from icetide.commit.committer import WrittenFile
    from icetide.executor.writer import WRITTEN_FILE_DDL, SpecLayout, writer_function
    from icetide.write.collapse import ARRIVAL_COLUMN, OP_COLUMN, UPSERT
    from icetide.write.distribution import distribute, plan_estimated_bytes

    # As UpsertSink.write and the runners do before staging: read the table afresh, so the plan
    # has the spec the ALTER TABLE made (plan_writers plans from the metadata the sink holds).
    sink.last_committed()
    plan = sink.plan_writers(batch_id)
    writer, partitions = plan.writer, plan.partitions
    if design == "global":
        writer = dataclasses.replace(writer, delete_specs=(SpecLayout(0, (), (), (), ()),))
        partitions = tuple((name, t) for name, t in partitions if name in writer.partition_columns)
    prepared = df.select(
        *df.columns, F.lit(UPSERT).alias(OP_COLUMN), F.monotonically_increasing_id().alias(ARRIVAL_COLUMN)
    )
    for name, transform in partitions:
        prepared = prepared.withColumn(
            name, F.expr(transform.spark_expression(sink.catalog)) if transform is not None else F.lit(None)
        )
    routed, _ = distribute(
        prepared,
        mode="dynamic",
        key=sink.key,
        partition_columns=writer.partition_columns,
        parallelism=spark.sparkContext.defaultParallelism,
        target_file_size=writer.target_file_size,
        compression_ratio=sink.compression_ratio,
        value_columns=list(writer.table_schema.names),
        estimated_bytes=plan_estimated_bytes(prepared),
        cached_input=df.is_cached,
    )
    rows = routed.mapInArrow(writer_function(writer), WRITTEN_FILE_DDL).collect()
    outcome = sink.committer.commit(batch_id, [WrittenFile.from_row(r) for r in rows])
    assert outcome.committed, f"{design}: batch {batch_id} not committed: {outcome.reason}"


def run_design(spark: Any, name: str, design: str, rows: int, batch: int, batches: int) -> dict[str, float]:
    import icetide
    from icetide.sink.sink import UpsertSink
    from icetide.table.iceberg import load_table

    icetide.create_table(spark, name, schema="id BIGINT NOT NULL, ts TIMESTAMP NOT NULL, v STRING", key=["id", "ts"])
    spark.sql(f"ALTER TABLE {name} ADD PARTITION FIELD days(ts)")
    sink = UpsertSink(spark, name, pipeline_id="bench")
    _write_batch(spark, sink, _batch(spark, range(rows), "initial"), 1, design)
    spark.sql(f"ALTER TABLE {name} REPLACE PARTITION FIELD days(ts) WITH hours(ts)")
    write_times = []
    for b in range(batches):
        start = (b * batch * 7) % max(1, rows - batch)
        df = _batch(spark, range(start, start + batch), f"b{b}")
        df.count()
        seconds, _ = timed(lambda df=df, b=b: _write_batch(spark, sink, df, b + 2, design))
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
