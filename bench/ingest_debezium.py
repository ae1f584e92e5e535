"""Schema-aware Debezium decoding beside the plain JSON path, on the same rows (bench/ingest.py --debezium N).

The same N events go into two topics: as plain JSON objects, and as Debezium JSON-converter
messages with `schemas.enable=true` (the Connect schema repeated in every message, a MySQL source
block with binlog positions). Each topic is drained by the runner in upsert mode (the Spark path:
decode, collapse, equality deletes, commit), in alternating rounds; rows/s per core is rows over
the CPU seconds this benchmark's processes (driver, Spark JVM, Python workers, broker) spent
during the run, so other load on a shared machine does not count.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

from bench.common import median, render_table

WARM_UP_EVENTS = 20_000

ROW_FIELDS = [
    {"type": "string", "optional": False, "field": "event_id"},
    {"type": "int64", "optional": False, "name": "io.debezium.time.Timestamp", "version": 1, "field": "event_time"},
    {"type": "int64", "optional": True, "field": "ad_id"},
    {"type": "int64", "optional": True, "field": "campaign_id"},
    {"type": "string", "optional": True, "field": "country"},
    {"type": "string", "optional": True, "field": "device"},
    {"type": "double", "optional": True, "field": "price"},
    {"type": "int32", "optional": True, "field": "clicks"},
    {"type": "int64", "optional": True, "name": "io.debezium.time.Timestamp", "version": 1, "field": "produced_at"},
]
SOURCE_FIELDS = [
    {"type": "string", "optional": False, "field": "version"},
    {"type": "string", "optional": False, "field": "connector"},
    {"type": "string", "optional": False, "field": "name"},
    {"type": "int64", "optional": False, "field": "ts_ms"},
    {"type": "string", "optional": True, "field": "db"},
    {"type": "string", "optional": True, "field": "table"},
    {"type": "string", "optional": False, "field": "file"},
    {"type": "int64", "optional": False, "field": "pos"},
    {"type": "int32", "optional": True, "field": "row"},
]
SCHEMA = {
    "type": "struct",
    "name": "dbserver1.ads.events.Envelope",
    "optional": False,
    "fields": [
        {"type": "struct", "fields": ROW_FIELDS, "optional": True, "name": "dbserver1.ads.events.Value", "field": f}
        for f in ("before", "after")
    ]
    + [
        {"type": "struct", "fields": SOURCE_FIELDS, "optional": False, "field": "source"},
        {"type": "string", "optional": False, "field": "op"},
        {"type": "int64", "optional": True, "field": "ts_ms"},
    ],
}


def debezium_event(row: dict[str, Any], i: int) -> bytes:
    """`row` as a Debezium create event with its schema, as the JSON converter writes it."""
    source = {
        "version": "2.7.0.Final",
        "connector": "mysql",
        "name": "dbserver1",
        "ts_ms": row["produced_at"],
        "db": "ads",
        "table": "events",
        "file": "mysql-bin.000042",
        "pos": 4 + 300 * i,
        "row": 0,
    }
    payload = {"before": None, "after": row, "source": source, "op": "c", "ts_ms": row["produced_at"]}
    return json.dumps({"schema": SCHEMA, "payload": payload}, separators=(",", ":")).encode()  # as Kafka JsonConverter


def produce_both(bootstrap: str, plain_topic: str, dbz_topic: str, count: int, event: Any) -> tuple[int, int]:
    """The same `count` rows into both topics; the mean message sizes."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 500000})
    now = int(time.time() * 1000)
    sizes = [0, 0]
    for i in range(count):
        plain = event(i, now)
        dbz = debezium_event(json.loads(plain), i)
        sizes[0] += len(plain)
        sizes[1] += len(dbz)
        for topic, value in ((plain_topic, plain), (dbz_topic, dbz)):
            while True:
                try:
                    producer.produce(topic, value=value, partition=i % 4)
                    break
                except BufferError:
                    producer.poll(0.05)
    producer.flush(120)
    return sizes[0] // count, sizes[1] // count


def config(bootstrap: str, topic: str, name: str, fmt: str, schema: str, max_records: int) -> Any:
    from icetide.config import PipelineConfig

    return PipelineConfig.from_dict(
        {
            "pipeline": name,
            "source": {"kafka": {"bootstrap_servers": bootstrap, "topic": topic, "starting_offsets": "earliest"}},
            "format": fmt,
            "table": {
                "name": f"lake.bench.{name}",
                "schema": schema,
                "key": ["event_id", "event_time"],
                "partition_by": ["hours(event_time)"],
            },
            "mode": "upsert",
            "trigger": {"interval": "1s", "max_records": max_records},
            "dead_letter": f"lake.bench.{name}_dead_letter",
        }
    )


def run_debezium(events: int, warehouse: str, broker_log: Any, max_records: int, rounds: int, schema: str) -> str:
    """Alternating rounds of the plain JSON and the Debezium-with-schema pipelines on the same rows."""
    from bench.ingest import event, process_cpu_seconds
    from icetide.pipeline.runner import Runner
    from tests.kafka_broker import create_topic, tansu_broker

    with tansu_broker(broker_log) as bootstrap:
        from bench.common import bench_session

        spark = bench_session(warehouse)
        results: dict[str, list[float]] = {"json": [], "debezium": []}
        sizes = (0, 0)
        # Round -1 warms the JVM up on both paths and is not counted.
        for r in range(-1, rounds):
            count = min(events, WARM_UP_EVENTS) if r < 0 else events
            plain_topic = create_topic(bootstrap, partitions=4, prefix="plain")
            dbz_topic = create_topic(bootstrap, partitions=4, prefix="dbz")
            sizes = produce_both(bootstrap, plain_topic, dbz_topic, count, event)
            order = [("json", plain_topic), ("debezium", dbz_topic)]
            random.Random(r).shuffle(order)
            for fmt, topic in order:
                cfg = config(bootstrap, topic, f"{fmt}_{r + 1}", fmt, schema, max_records)
                runner = Runner(cfg, spark)
                busy = sum(process_cpu_seconds().values())
                summary = runner.run(once=True, handle_signals=False)
                core_seconds = sum(process_cpu_seconds().values()) - busy
                rows = sum(b.records_in for b in summary.batches)
                assert rows == count and sum(b.bad_records for b in summary.batches) == 0, (fmt, rows)
                if r >= 0:
                    results[fmt].append(rows / core_seconds)
        spark.stop()
    table = render_table(
        ["path", "message bytes", "rows/s per core (median)", "runs"],
        [
            ["plain JSON (format: json)", str(sizes[0]), f"{median(results['json']):,.0f}", _runs(results["json"])],
            [
                "Debezium with schema (format: debezium)",
                str(sizes[1]),
                f"{median(results['debezium']):,.0f}",
                _runs(results["debezium"]),
            ],
        ],
    )
    ratio = median(results["debezium"]) / median(results["json"])
    return (
        f"{events:,} rows, 4 Kafka partitions (Tansu on 127.0.0.1), upsert mode, batches of up to "
        f"{max_records:,}, {rounds} alternating rounds after an uncounted warm-up round of "
        f"{min(events, WARM_UP_EVENTS):,}; CPU seconds of this benchmark's processes.\n\n{table}\n\n"
        f"Debezium with schema / plain JSON: {ratio:.2f}x (target: at least 0.5x).\n"
    )


def _runs(values: list[float]) -> str:
    return " ".join(f"{v:,.0f}" for v in values)
