"""A Debezium backlog of one table drained on the sync fast path, cut by partitions over two
tasks (`write_parallelism: 2`) beside one task for the table (the default).

    .venv/bin/python bench/sync_backlog.py [--events 400000] [--max-records 100000] [--rounds 3] [--record]

Produces `events` Debezium JSON-converter messages (bench/ingest_debezium.py `debezium_event` of
bench/ingest.py `event` rows, the Connect schema in each) into a 4-partition topic of Apache Kafka
on 127.0.0.1, each keyed by its row's key as Debezium keys them, so the producer's partitioner
puts it. Each round drains the topic twice, in alternating order, with a one-table Debezium
pipeline in upsert mode with `write_parallelism: 2` and at the defaults: wall seconds from the
first batch to the last commit, rows/s, and rows/s per core (the CPU seconds of this benchmark's
processes: driver, Spark JVM, Python workers, broker). An uncounted round of 20,000 warms the
JVM up first.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import in_temp_warehouse, median, parser, produce_waiting, render_table, report

WARM_UP_EVENTS = 20_000
VARIANTS = {"cut by partitions (write_parallelism: 2)": 2, "one task (the default)": None}


def produce_keyed(bootstrap: str, topic: str, count: int) -> int:
    """`count` Debezium messages keyed by their row's key; their mean size."""
    from confluent_kafka import Producer

    from bench.ingest import event
    from bench.ingest_debezium import debezium_event

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 500000})
    now, size = int(time.time() * 1000), 0
    for i in range(count):
        row = json.loads(event(i, now))
        value = debezium_event(row, i)
        key = json.dumps({"event_id": row["event_id"], "event_time": row["event_time"]}).encode()
        size += len(value)
        produce_waiting(producer, topic, key=key, value=value)
    producer.flush(120)
    return size // count


def drain(spark: Any, bootstrap: str, topic: str, name: str, max_records: int, parallelism: int | None) -> Any:
    """One drain of the topic: rows, wall seconds, core seconds."""
    from bench.ingest import SCHEMA, process_cpu_seconds
    from bench.ingest_debezium import config
    from icetide.pipeline.table_runner import Runner

    cfg = dataclasses.replace(
        config(bootstrap, topic, name, "debezium", SCHEMA, max_records), write_parallelism=parallelism
    )
    runner = Runner(cfg, spark)
    before, started = process_cpu_seconds(), time.monotonic()
    summary = runner.run(once=True, handle_signals=False)
    wall, after = time.monotonic() - started, process_cpu_seconds()
    rows = sum(b.records_in for b in summary.batches)
    assert sum(b.bad_records for b in summary.batches) == 0, name
    assert {str(b.path) for b in summary.batches} == {"debezium_fast"}, {b.path for b in summary.batches}
    return rows, wall, sum(after.values()) - sum(before.values())


def run(events: int, warehouse: str, max_records: int, rounds: int) -> str:
    from bench.common import bench_session
    from tests.kafka_broker import BENCH_JVM_OPTIONS, apache_kafka, create_topic

    results: dict[str, list[tuple[float, float, float]]] = {v: [] for v in VARIANTS}
    with apache_kafka(Path(warehouse) / "kafka", jvm_options=BENCH_JVM_OPTIONS) as bootstrap:
        spark = bench_session(warehouse)
        size = 0
        for r in range(-1, rounds):
            count = WARM_UP_EVENTS if r < 0 else events
            topic = create_topic(bootstrap, partitions=4, prefix="dbz")
            size = produce_keyed(bootstrap, topic, count)
            order = list(VARIANTS) if r % 2 == 0 else list(reversed(VARIANTS))
            for i, variant in enumerate(order):
                rows, wall, cpu = drain(spark, bootstrap, topic, f"backlog_{r + 1}_{i}", max_records, VARIANTS[variant])
                assert rows == count, (variant, rows, count)
                if r >= 0:
                    results[variant].append((wall, rows / wall, rows / cpu))
                    print(f"round {r + 1}, {variant}: {wall:.1f} s, {rows / cpu:,.0f} rows/s per core", flush=True)
        spark.stop()
    rows_out = []
    for variant, runs in results.items():
        walls, per_core = [w for w, _, _ in runs], [c for _, _, c in runs]
        rows_out.append(
            [
                variant,
                f"{median(walls):.1f}",
                f"{median([x for _, x, _ in runs]):,.0f}",
                f"{median(per_core):,.0f}",
                " ".join(f"{w:.1f}" for w in walls),
            ]
        )
    cut, one = (median([w for w, _, _ in results[v]]) for v in VARIANTS)
    cut_core, one_core = (median([c for _, _, c in results[v]]) for v in VARIANTS)
    table = render_table(["pipeline", "wall s (median)", "rows/s", "rows/s per core", "wall s, runs"], rows_out)
    return (
        f"{events:,} Debezium JSON messages with schemas ({size:,} bytes each), keyed by the row's key into 4 "
        f"partitions (Apache Kafka on 127.0.0.1), drained by a one-table Debezium pipeline in upsert mode "
        f"in batches of up to {max_records:,}; {rounds} rounds, the two in alternating order, after an "
        f"uncounted warm-up of {WARM_UP_EVENTS:,}; CPU seconds of this benchmark's processes.\n\n{table}\n\n"
        f"Cut by partitions / one task: wall {cut / one:.2f}x, rows/s per core {cut_core / one_core:.2f}x.\n"
    )


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--events", type=int, default=400_000)
    p.add_argument("--max-records", type=int, default=100_000)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    body = in_temp_warehouse(lambda wh: run(args.events, wh, args.max_records, args.rounds))
    report(
        "bench/sync_backlog.py: a Debezium backlog of one table, cut by partitions and in one task",
        body,
        save=args.record,
    )


if __name__ == "__main__":
    main()
