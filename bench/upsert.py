"""Benchmark: UpsertSink.write against Spark MERGE INTO (merge-on-read), and INSERT throughput
against Spark's native Iceberg append. Not part of the test suite.

    .venv/bin/python bench/upsert.py [--sizes 1000000,10000000] [--batches 3] [--record]

For each table size, two identical tables are loaded; then the same batches of 20,000 keys
(20% updates of existing keys) go to one through the sink and to the other through MERGE INTO.
Reported: the median batch latency of each (after one warm-up batch), and their ratio.
Beside each sink batch, in the same run, its floor: one Python-worker Spark job over the same
cached rows (`mapInArrow` + collect of a count) plus one bare Iceberg commit (a RowDelta without
validation or pipeline state) of the same files into a twin table that holds the sink table's
loaded files (the same files, so the sink's deletion vectors apply to it as they are).
The sink's phases (plan, write, refresh, commit) are shown beside the floor's two parts.
Then one INSERT-only DataFrame of 2M rows is written through the sink and by
`df.writeTo(table).append()`, in 3 rounds that each start with the next writer, and the median
throughputs compared.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_session, in_temp_warehouse, median, parser, render_table, report, timed

SCHEMA = "id BIGINT NOT NULL, ts TIMESTAMP NOT NULL, user_id BIGINT, amount DOUBLE, status STRING, note STRING"
HOURS = 48


def rows_sql(source: str, salt: int) -> str:
    """Rows for the ids of `source` (a range or a subquery with an `id` column); ts derives from
    id, so a key's partition never changes and an update hits the same key."""
    return (
        f"SELECT id, timestamp_seconds(1767225600 + (id % {HOURS}) * 3600 + (id % 3600)) AS ts, "
        f"id % 100000 AS user_id, CAST((id * {salt + 1}) % 1000 / 10.0 AS DOUBLE) AS amount, "
        f"element_at(array('new','paid','shipped','done'), CAST(id % 4 AS INT) + 1) AS status, "
        f"concat('note-', CAST(id * {salt + 7} % 100000 AS STRING)) AS note "
        f"FROM {source}"
    )


def id_range(start: int, count: int) -> str:
    return f"range({start}, {start + count})"


def batch_df(spark: Any, size: int, batch: int, keys: int = 20_000, update_share: float = 0.2) -> Any:
    """`keys` rows: `update_share` of them existing ids spread over the table, the rest new ids."""
    updates = int(keys * update_share)
    stride = max(1, size // updates)
    existing = spark.sql(rows_sql(f"(SELECT id * {stride} + {batch} AS id FROM range(0, {updates}))", 100 + batch))
    new = spark.sql(rows_sql(id_range(size + batch * keys, keys - updates), batch))
    return existing.unionByName(new).cache()


def count_rows(batches: Any) -> Any:
    """The floor job's task: read every Arrow batch, yield one row count."""
    import pyarrow as pa

    n = 0
    for b in batches:
        n += b.num_rows
    yield pa.RecordBatch.from_pydict({"n": [n]})


def floor_commit(spark: Any, source_table: str, floor_table: str) -> float:
    """Seconds of one bare commit, into `floor_table`, of the files the last snapshot of
    `source_table` added, and of the DVs it removed (each replaced by the file's new DV, which a
    v3 table needs): a RowDelta with no validation (but Iceberg's check of DVs added since the
    snapshot it starts from), no summary and no table property."""
    from icetide.table.iceberg import load_table

    source = load_table(spark, source_table)
    snapshot = source.currentSnapshot()
    data = list(snapshot.addedDataFiles(source.io()))
    deletes = list(snapshot.addedDeleteFiles(source.io()))
    replaced = list(snapshot.removedDeleteFiles(source.io()))
    target = load_table(spark, floor_table)

    def commit() -> None:
        delta = target.newRowDelta()
        if replaced:  # a DV replacing one committed earlier: Iceberg checks DVs added since this
            delta.validateFromSnapshot(target.currentSnapshot().snapshotId())  # (else: all history)
        for f in data:
            delta.addRows(f)
        for f in deletes:
            delta.addDeletes(f)
        for f in replaced:
            delta.removeDeletes(f)
        delta.commit()

    seconds, _ = timed(commit)
    return seconds


def load(spark: Any, table: str, size: int) -> None:
    import icetide

    icetide.create_table(spark, table, schema=SCHEMA, key=["id", "ts"], partition_by=["hours(ts)"])
    spark.sql(rows_sql(id_range(0, size), 0)).writeTo(table).append()


def load_twin(spark: Any, source_table: str, twin_table: str) -> None:
    """`twin_table`: a new table like `source_table` (as `load` makes it) holding its live data
    files, the same files: the DVs the sink later writes for them apply to the twin as well."""
    import icetide
    from icetide.spark.py4j_collections import java_iter
    from icetide.table.iceberg import load_table

    icetide.create_table(spark, twin_table, schema=SCHEMA, key=["id", "ts"], partition_by=["hours(ts)"])
    source, target = load_table(spark, source_table), load_table(spark, twin_table)
    append = target.newAppend()
    tasks = source.newScan().planFiles()
    try:
        for task in java_iter(tasks):
            append.appendFile(task.file().copy())
    finally:
        tasks.close()
    append.commit()


def run(
    sizes: list[int],
    batches: int,
    insert_rows: int,
    warehouse: str,
    *,
    merge: bool,
    insert: bool,
    deletes: str | None = None,
) -> str:
    import icetide

    spark = bench_session(warehouse)
    rows, floor_rows = [], []
    for size in sizes:
        sink_table, merge_table = f"lake.bench.sink_{size}", f"lake.bench.merge_{size}"
        twin_table = f"lake.bench.floor_{size}"
        for t in (sink_table, *([merge_table] if merge else [])):
            load(spark, t, size)
        load_twin(spark, sink_table, twin_table)
        sink = icetide.UpsertSink(spark, sink_table, pipeline_id="bench", deletes=deletes)
        sink_times, merge_times = [], []
        phases: dict[str, list[float]] = {k: [] for k in ("plan", "write", "refresh", "commit", "job", "bare commit")}
        for b in range(batches + 1):  # batch 0 warms up
            df = batch_df(spark, size, b)
            df.count()
            s, result = timed(lambda df=df, b=b, sink=sink: sink.write(df, batch_id=b + 1))
            job, _ = timed(lambda df=df: df.mapInArrow(count_rows, "n long").collect())
            bare = floor_commit(spark, sink_table, twin_table)
            m = 0.0
            if merge:
                df.createOrReplaceTempView("_src")
                m, _ = timed(
                    lambda merge_table=merge_table: spark.sql(
                        f"MERGE INTO {merge_table} t USING _src s ON t.id = s.id AND t.ts = s.ts "
                        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
                    ).collect()
                )
            df.unpersist()
            if b:
                sink_times.append(s)
                merge_times.append(m)
                for k, v in (
                    ("plan", result.plan_seconds),
                    ("write", result.write_seconds),
                    ("refresh", result.refresh_seconds),
                    ("commit", result.commit_seconds),
                    ("job", job),
                    ("bare commit", bare),
                ):
                    phases[k].append(v)
            print(
                f"size {size:,} batch {b}: sink {s:.2f}s (plan {result.plan_seconds:.2f} write "
                f"{result.write_seconds:.2f} refresh {result.refresh_seconds:.2f} commit {result.commit_seconds:.2f}), "
                f"floor {job + bare:.2f}s (job {job:.2f} commit {bare:.2f})" + (f", MERGE {m:.2f}s" if merge else ""),
                flush=True,
            )
        if merge:
            a = spark.table(sink_table).exceptAll(spark.table(merge_table)).count()
            z = spark.table(merge_table).exceptAll(spark.table(sink_table)).count()
            assert a == z == 0, f"sink and MERGE tables differ at {size}: {a} / {z} rows"
        twin_rows = spark.table(twin_table).count()
        assert twin_rows == spark.table(sink_table).count(), "the floor's twin table should hold the sink's rows"
        ms = median(sink_times)
        floors = [j + c for j, c in zip(phases["job"], phases["bare commit"], strict=True)]
        ratios = [t / f for t, f in zip(sink_times, floors, strict=True)]
        floor_rows.append(
            (
                f"{size:,}",
                f"{ms:.2f}",
                *(f"{median(phases[k]):.2f}" for k in ("plan", "write", "refresh", "commit")),
                f"{median(floors):.2f}",
                f"{median(phases['job']):.2f}",
                f"{median(phases['bare commit']):.3f}",
                f"{median(ratios):.2f}x",
                " ".join(f"{r:.2f}" for r in ratios),
            )
        )
        if merge:
            mm = median(merge_times)
            rows.append(
                (
                    f"{size:,}",
                    f"{ms:.2f}",
                    f"{mm:.2f}",
                    f"{mm / ms:.1f}x",
                    " ".join(f"{t:.2f}" for t in sink_times),
                    " ".join(f"{t:.2f}" for t in merge_times),
                )
            )
    floor_table = render_table(
        [
            "table rows",
            "sink batch s",
            "plan",
            "write",
            "refresh",
            "commit",
            "floor s",
            "floor job",
            "floor commit",
            "batch/floor",
            "per batch",
        ],
        floor_rows,
    )
    body = (
        f"Upsert batches of 20,000 keys (20% updates), medians of {batches} batches after a warm-up; "
        "the floor (one Python-worker job over the same rows + one bare commit of the same files) "
        "measured beside each batch, batch/floor the median of the per-batch ratios:\n\n"
        f"{floor_table}\n"
    )
    if merge:
        upsert_table = render_table(
            ["table rows", "sink median s", "MERGE median s", "MERGE/sink", "sink batches s", "MERGE batches s"],
            rows,
        )
        body += f"\nThe same batches through MERGE INTO:\n\n{upsert_table}\n"
    if insert:
        body += "\n" + insert_rounds(spark, insert_rows)
    spark.stop()
    return body


def insert_rounds(spark: Any, insert_rows: int) -> str:
    """The INSERT-only comparison: the sink (changelog INSERT, INSERT with deletes) against
    Spark's native append, 3 rounds, each starting with the next writer."""
    from pyspark.sql import functions as F

    import icetide

    # Every row an INSERT: with changelog=True the sink trusts that its key is new and writes no
    # equality delete; without, an INSERT deletes its key first like an UPSERT.
    src = spark.sql(rows_sql(id_range(10**9, insert_rows), 3)).withColumn("_op", F.lit("INSERT")).cache()
    src.count()
    ins_rows = []
    native_table, sink_table = "lake.bench.native_insert", "lake.bench.sink_insert"
    for t in (native_table, sink_table):
        icetide.create_table(spark, t, schema=SCHEMA, key=["id", "ts"], partition_by=["hours(ts)"])
    times: dict[str, list[float]] = {"native append": [], "sink changelog INSERT": [], "sink INSERT (+deletes)": []}
    sink_cl = icetide.UpsertSink(spark, sink_table, pipeline_id="ins-cl", changelog=True)
    sink_up = icetide.UpsertSink(spark, sink_table, pipeline_id="ins-up")
    writers: list[tuple[str, Any]] = [
        ("native append", lambda i: src.drop("_op").writeTo(native_table).append()),
        ("sink changelog INSERT", lambda i: sink_cl.write(src, batch_id=i)),
        ("sink INSERT (+deletes)", lambda i: sink_up.write(src, batch_id=i)),
    ]
    for i in range(3):
        # Each round starts with the next writer, so none always runs first (or last) in a round.
        for name, write in writers[i % 3 :] + writers[: i % 3]:
            t, result = timed(lambda write=write, i=i: write(i))
            times[name].append(t)
            if result is not None:
                phases = ("plan", "write", "refresh", "commit")
                print(
                    f"  {name}: {t:.2f}s ("
                    + " ".join(f"{p} {getattr(result, p + '_seconds'):.2f}" for p in phases)
                    + f"; {result.data_files} data, {result.delete_files} delete files)",
                    flush=True,
                )
        print(f"insert round {i}: " + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in times.items()), flush=True)
    native = median(times["native append"])
    for name, values in times.items():
        med = median(values)
        ins_rows.append((name, f"{med:.2f}", f"{insert_rows / med:,.0f}", f"{native / med:.2f}x"))
    insert_table = render_table(["writer", "median s", "rows/s", "vs native"], ins_rows)
    src.unpersist()
    return (
        f"INSERT-only batch of {insert_rows:,} rows, medians of 3 rounds, each starting with the next writer:"
        f"\n\n{insert_table}\n"
    )


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--sizes", default="1000000,10000000")
    p.add_argument("--batches", type=int, default=3)
    p.add_argument("--insert-rows", type=int, default=2_000_000)
    p.add_argument("--no-merge", action="store_true", help="skip MERGE INTO (the floor comparison only)")
    p.add_argument("--no-insert", action="store_true", help="skip the INSERT-only comparison")
    p.add_argument(
        "--deletes",
        choices=("vectors", "equality"),
        help="the sink's delete mode (default: the table's, deletion vectors on a new table)",
    )
    args = p.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    body = in_temp_warehouse(
        lambda wh: run(
            sizes,
            args.batches,
            args.insert_rows,
            wh,
            merge=not args.no_merge,
            insert=not args.no_insert,
            deletes=args.deletes,
        )
    )
    report("bench/upsert.py: UpsertSink vs MERGE INTO, and INSERT vs native append", body, save=args.record)


if __name__ == "__main__":
    main()
