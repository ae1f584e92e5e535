"""A database of many tables through one pipeline, beside one table with the same events
(bench/ingest.py --tables N [--events-per-table E]).

N topics of E Debezium JSON-converter messages each (`schemas.enable=true`, a MySQL source block
naming table t<i>), drained by one `table.name: lake.bench_sync.{table}` pipeline (SyncRunner)
into N tables; and the same N x E messages in one topic (4 partitions) drained into one table,
by the single-table runner (the sync fast path with one fixed route, since 76a9bf9) and by a
SyncRunner (`topics: [that topic]`, one table name: the sync fast path, as the N tables). All in upsert mode with the
same table schema, key and batch size, in rotating order. rows/s per core is rows over the CPU seconds this benchmark's
processes (driver, Spark JVM, Python workers, broker) spent during the run.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from bench.common import median, produce_waiting, render_table
from bench.ingest_debezium import debezium_event


def produce_tables(bootstrap: str, prefix: str, tables: int, per_table: int, event: Any) -> tuple[list[str], str]:
    """`per_table` messages into each of `tables` topics, and all of them into one more topic."""
    from confluent_kafka import Producer

    from tests.kafka_broker import create_topic

    topics = [create_topic(bootstrap, partitions=1, prefix=f"{prefix}.t{i:03d}") for i in range(tables)]
    single = create_topic(bootstrap, partitions=4, prefix=f"{prefix}-all")
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 500000})
    now = int(time.time() * 1000)
    n = 0
    for i, topic in enumerate(topics):
        for j in range(per_table):
            row = json.loads(event(n, now))
            value = debezium_event(row, n)
            named = value.replace(b'"table":"events"', f'"table":"t{i:03d}"'.encode(), 1)
            assert named != value, "the source block's table name was not found"  # else all go to one table
            value = named
            for target, partition in ((topic, 0), (single, n % 4)):
                produce_waiting(producer, target, value=value, partition=partition)
            n += 1
            del j
    producer.flush(300)
    return topics, single


def _config(
    bootstrap: str,
    name: str,
    source: dict[str, Any],
    table: str,
    schema: str,
    max_records: int,
    fast_path: str = "auto",
) -> Any:
    from icetide.config.pipeline import PipelineConfig

    return PipelineConfig.from_dict(
        {
            "pipeline": name,
            "source": {"kafka": {"bootstrap_servers": bootstrap, "starting_offsets": "earliest", **source}},
            "format": "debezium",
            "table": {"name": table, "schema": schema, "key": ["event_id", "event_time"]},
            "mode": "upsert",
            "trigger": {"interval": "1s", "max_records": max_records},
            "dead_letter": f"lake.bench_sync.{name}_dead_letter",
            "fast_path": fast_path,
        }
    )


def run_tables(
    tables: int,
    per_table: int,
    warehouse: str,
    broker_dir: Path,
    max_records: int,
    rounds: int,
    schema: str,
    fast_path: str = "auto",
) -> str:
    """Alternating rounds: N tables through one SyncRunner, and one table with the same events
    (`fast_path`: every pipeline's, `off` to measure the Spark paths)."""
    from bench.common import bench_session
    from bench.ingest import event, process_cpu_seconds
    from icetide.pipeline.sync.runner import SyncRunner
    from icetide.pipeline.table_runner import Runner
    from tests.kafka_broker import BENCH_JVM_OPTIONS, apache_kafka

    total = tables * per_table
    kinds = ["many", "one", "one_sync"]
    results: dict[str, list[float]] = {k: [] for k in kinds}
    wall: dict[str, list[float]] = {k: [] for k in kinds}  # rows per second of wall time
    batches: dict[str, list[int]] = {k: [] for k in kinds}
    with apache_kafka(broker_dir, jvm_options=BENCH_JVM_OPTIONS) as bootstrap:
        spark = bench_session(warehouse)
        # Warm-up (JVM JIT, Spark's Python workers), not measured: both kinds of pipeline, small.
        topics, single = produce_tables(bootstrap, "warm", 2, 2_000, event)
        SyncRunner(
            _config(bootstrap, "warm_many", {"topics": topics}, "lake.bench_warm.{table}", schema, max_records), spark
        ).run(once=True, handle_signals=False)
        Runner(
            _config(bootstrap, "warm_one", {"topic": single}, "lake.bench_warm.one", schema, max_records), spark
        ).run(once=True, handle_signals=False)
        for r in range(rounds):
            prefix = f"sync{r}x{int(time.time())}"
            topics, single = produce_tables(bootstrap, prefix, tables, per_table, event)
            order = kinds[r % 3 :] + kinds[: r % 3]
            for kind in order:
                if kind == "many":
                    cfg = _config(
                        bootstrap,
                        f"many{r}",
                        {"topic_pattern": prefix.replace(".", "\\.") + r"\.t[0-9]+-.*"},
                        f"lake.bench_sync_{r}.{{table}}",
                        schema,
                        max_records,
                        fast_path,
                    )
                    runner: Any = SyncRunner(cfg, spark)
                elif kind == "one_sync":
                    name = f"onesync{r}"
                    cfg = _config(
                        bootstrap, name, {"topics": [single]}, f"lake.bench_sync.{name}", schema, max_records, fast_path
                    )
                    runner = SyncRunner(cfg, spark)
                else:
                    cfg = _config(
                        bootstrap,
                        f"one{r}",
                        {"topic": single},
                        f"lake.bench_sync.one{r}",
                        schema,
                        max_records,
                        fast_path,
                    )
                    runner = Runner(cfg, spark)
                busy = sum(process_cpu_seconds().values())
                began = time.monotonic()
                summary = runner.run(once=True, handle_signals=False)
                seconds = time.monotonic() - began
                core_seconds = sum(process_cpu_seconds().values()) - busy
                rows = sum(b.records_in for b in summary.batches)
                assert rows == total and sum(b.bad_records for b in summary.batches) == 0, (kind, rows)
                results[kind].append(rows / core_seconds)
                wall[kind].append(rows / seconds)
                paths = sorted({getattr(b, "path", "runner") for b in summary.batches})
                print(
                    f"round {r} {kind}: {core_seconds:.1f} core-s, {seconds:.1f} s, "
                    f"{len(summary.batches)} batches, paths {paths}"
                )
                batches[kind].append(len(summary.batches))
            written = [spark.table(f"lake.bench_sync_{r}.t{i:03d}").count() for i in (0, tables - 1)]
            assert written == [per_table, per_table], written
        spark.stop()
    path = "fast path" if fast_path == "auto" else f"fast_path: {fast_path}"
    table = render_table(
        ["pipeline", "tables", "rows/s per core (median)", "runs", "rows/s, wall (median)", "batches"],
        [
            [
                f"{tables} topics -> {tables} tables (SyncRunner)",
                str(tables),
                f"{median(results['many']):,.0f}",
                " ".join(f"{v:,.0f}" for v in results["many"]),
                f"{median(wall['many']):,.0f}",
                " ".join(map(str, batches["many"])),
            ],
            *[
                [
                    label,
                    "1",
                    f"{median(results[kind]):,.0f}",
                    " ".join(f"{v:,.0f}" for v in results[kind]),
                    f"{median(wall[kind]):,.0f}",
                    " ".join(map(str, batches[kind])),
                ]
                for kind, label in (
                    ("one", f"1 topic (4 partitions) -> 1 table (Runner, {path})"),
                    ("one_sync", f"1 topic (4 partitions) -> 1 table (SyncRunner, {path})"),
                )
            ],
        ],
    )
    ratio = median(results["many"]) / median(results["one"])
    same_path = median(results["many"]) / median(results["one_sync"])
    return (
        f"{tables} tables x {per_table:,} Debezium messages with schemas = {total:,} events, against one table "
        f"with the same {total:,}; upsert mode, batches of up to {max_records:,} records, {rounds} round(s) in "
        f"alternating order; CPU seconds of this benchmark's processes "
        f"(rows/s, wall: rows over the drain's elapsed seconds).\n\n{table}\n\n"
        f"{tables} tables / one table: {ratio:.2f}x against the single-table runner (target: at least 0.7x), "
        f"{same_path:.2f}x against one table through the same sync {path}.\n"
        f"{tables} tables, wall clock: {median(wall['many']):,.0f} rows/s.\n"
    )
