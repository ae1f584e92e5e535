"""Profile one sync fast-path task in-process: Debezium JSON messages (schema in each) -> staged files.

    .venv/bin/python bench/profile_sync_task.py [--events 100000] [--passes 5] [--top 30]

Starts an Apache Kafka broker (tests/kafka_broker.py), produces `events` Debezium JSON-converter
messages (bench/ingest_debezium.py `debezium_event` of bench/ingest.py `event` rows) into a
4-partition topic, creates the bench's upsert table (key event_id+event_time, hours(event_time))
in a temporary warehouse through a local Spark session, and calls `sync_task` directly, without
Spark, `passes` times: CPU microseconds per row for the whole process, the decoding thread's read/decode loop, its write
(collapse, partition values, Parquet), the BlockReader thread (consume, Message objects) and the
other threads (librdkafka's own). A last pass runs under cProfile (the decoding thread only;
the BlockReader thread's consume is in the process CPU) and prints the top functions by tottime.
Files are written but never committed; the warehouse is removed afterwards.
"""

from __future__ import annotations

import cProfile
import dataclasses
import io
import json
import pstats
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import in_temp_warehouse, median, parser, produce_waiting, render_table


def _produce(bootstrap: str, topic: str, count: int) -> int:
    """`count` Debezium messages into the topic's 4 partitions; their mean size."""
    from confluent_kafka import Producer

    from bench.ingest import event
    from bench.ingest_debezium import debezium_event

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 500000})
    now = int(time.time() * 1000)
    size = 0
    for i in range(count):
        value = debezium_event(json.loads(event(i, now)), i)
        size += len(value)
        produce_waiting(producer, topic, value=value, partition=i % 4)
    producer.flush(120)
    return size // count


def _task_config(runner: Any, batch_id: int) -> Any:
    """The SyncTaskConfig `SyncFastPath.write` would build for the runner's one table."""
    from icetide.executor.sync_task import SyncTaskConfig
    from icetide.pipeline.spark_path import avro_transcoding, payload_limits
    from icetide.pipeline.staged import Fallback

    fast, c = runner.changes, runner.config
    built = fast.table(runner.sink)
    assert not isinstance(built, Fallback), built
    table = dataclasses.replace(built, writer=dataclasses.replace(built.writer, batch_id=batch_id))
    return SyncTaskConfig(
        consumer_settings=fast.consumer_settings,
        read_timeout=fast.read_timeout,
        template=c.table.name,
        tables={runner.sink.table_name: table},
        elsewhere={},
        op_mode=c.mode,
        conversions=fast.conversions,
        limits=payload_limits(c),
        evolving=c.schema_evolution,
        avro=avro_transcoding(c),
    )


def run(warehouse: str, events: int, passes: int, top: int, profile_out: str | None = None) -> str:
    from bench.common import bench_session
    from bench.ingest import SCHEMA
    from bench.ingest_debezium import config as pipeline_config
    from icetide.executor import sync_task as task_module
    from icetide.executor.kafka_blocks import no_cycle_collection
    from icetide.pipeline.table_runner import Runner
    from icetide.sources.kafka_reader import OffsetRange
    from tests.kafka_broker import BENCH_JVM_OPTIONS, apache_kafka, create_topic

    with apache_kafka(Path(warehouse) / "kafka", jvm_options=BENCH_JVM_OPTIONS) as bootstrap:
        topic = create_topic(bootstrap, partitions=4, prefix="dbz")
        size = _produce(bootstrap, topic, events)
        spark = bench_session(warehouse)
        cfg = pipeline_config(bootstrap, topic, "profile_sync", "debezium", SCHEMA, events)
        runner = Runner(cfg, spark)
        assert runner.changes is not None, runner.no_fast
        task_config = _task_config(runner, 1)
        counts = [events // 4 + (1 if p < events % 4 else 0) for p in range(4)]
        ranges = [OffsetRange(topic, p, 0, n) for p, n in enumerate(counts)]

        write_cpu = [0.0]
        write_table = task_module.write_changes

        def timed_write(*args: Any) -> Any:
            started = time.thread_time()
            try:
                return write_table(*args)
            finally:
                write_cpu[0] += time.thread_time() - started

        reader_cpu = [0.0]
        block_reader = task_module.BlockReader

        class TimedReader(block_reader):  # type: ignore[misc, valid-type]
            def __exit__(self, *exc: object) -> None:
                super().__exit__(*exc)
                reader_cpu[0] += self.cpu_seconds

        task_module.write_changes = timed_write  # type: ignore[assignment]
        task_module.BlockReader = TimedReader  # type: ignore[misc]
        rows: list[list[str]] = []
        totals: list[float] = []
        files = rows_written = 0
        try:
            for i in range(passes + 1):  # pass 0 warms up (imports, first plans)
                write_cpu[0] = reader_cpu[0] = 0.0
                cpu, thread = time.process_time(), time.thread_time()
                with no_cycle_collection():
                    result = task_module.sync_task(task_config, ranges, f"prof{i}")
                cpu, thread = time.process_time() - cpu, time.thread_time() - thread
                assert result.not_here is None and not result.new_tables, result.not_here
                assert result.records == events, result.records
                share = next(iter(result.tables.values()))
                files = len(share.files)
                rows_written = sum(f["record_count"] for f in share.files if f["content"] == "data")
                if i == 0:
                    continue
                reader = reader_cpu[0]
                phases = (cpu, thread - write_cpu[0], write_cpu[0], reader, cpu - thread - reader)
                per_row = [1e6 * t / events for t in phases]
                totals.append(per_row[0])
                rows.append([str(i), *(f"{v:.2f}" for v in per_row)])
            profiler = cProfile.Profile()
            with no_cycle_collection():
                profiler.enable()
                task_module.sync_task(task_config, ranges, "profiled")
                profiler.disable()
        finally:
            task_module._write_table = write_table  # type: ignore[assignment]
            task_module.BlockReader = block_reader  # type: ignore[misc]
            spark.stop()
    if profile_out:
        profiler.dump_stats(profile_out)
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    table = render_table(
        [
            "pass",
            "process CPU µs/row",
            "decode thread: read+decode",
            "decode thread: write",
            "BlockReader thread",
            "other threads (librdkafka's)",
        ],
        rows,
    )
    return (
        f"{events:,} Debezium messages of {size:,} bytes, 4 partitions; {files} files "
        f"({rows_written:,} data rows) per pass.\n\n{table}\n\nmedian process CPU: {median(totals):.2f} µs/row\n\n"
        f"cProfile of one more pass (decoding thread), top {top} by tottime:\n{out.getvalue()}"
    )


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--events", type=int, default=100_000)
    p.add_argument("--passes", type=int, default=5)
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--profile-out", help="also save the cProfile stats to this file (for pstats)")
    args = p.parse_args()
    print(in_temp_warehouse(lambda wh: run(wh, args.events, args.passes, args.top, args.profile_out)))


if __name__ == "__main__":
    main()
