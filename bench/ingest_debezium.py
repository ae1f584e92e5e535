"""Schema-aware Debezium decoding beside the plain JSON path, on the same rows (bench/ingest.py --debezium N).

The same N events go into two topics: as plain JSON objects, and as Debezium JSON-converter
messages with `schemas.enable=true` (the Connect schema repeated in every message, a MySQL source
block with binlog positions). Six single-table pipelines drain them, in shuffled order each round:
the plain JSON topic in append mode (the append fast path) and in upsert mode, on the fast path
(with the default deletion vectors, and with `deletes: equality`, the default before format v3: the
figure to compare with code older than that) and with `fast_path: off` (the Spark path: how JSON
upserts ran before the fast path took them), and the Debezium topic in upsert mode with `fast_path:
off` (the Spark path: how every one-table Debezium pipeline ran before the sync fast path served
it) and on the fast path. Rows/s per core is rows over the CPU seconds this benchmark's processes
(driver, Spark JVM, Python workers, broker) spent during the run, so other load on a shared machine
does not count.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

from bench.common import median, produce_waiting, render_table

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
            produce_waiting(producer, topic, value=value, partition=i % 4)
    producer.flush(120)
    return sizes[0] // count, sizes[1] // count


VARIANTS = {  # name -> (topic, format, mode, fast_path, deletes)
    "json append": ("plain", "json", "append", "auto", None),
    "json upsert": ("plain", "json", "upsert", "auto", None),
    # the delete mode before deletion vectors became the default (compared with older code; after
    # the row above, so a pattern for "upsert (fast path)" finds this one last)
    "json upsert, equality deletes": ("plain", "json", "upsert", "auto", "equality"),
    "json upsert, Spark path": ("plain", "json", "upsert", "off", None),
    "debezium, Spark path": ("dbz", "debezium", "upsert", "off", None),
    "debezium, fast path": ("dbz", "debezium", "upsert", "auto", None),
}
LABELS = {
    "json append": "plain JSON, append (append fast path)",
    "json upsert": "plain JSON, upsert (fast path)",
    "json upsert, equality deletes": "plain JSON, upsert (fast path), deletes: equality",
    "json upsert, Spark path": "plain JSON, upsert, fast_path: off (Spark path)",
    "debezium, Spark path": "Debezium with schema, upsert, fast_path: off (Spark path)",
    "debezium, fast path": "Debezium with schema, upsert (fast path)",
}


def config(
    bootstrap: str,
    topic: str,
    name: str,
    fmt: str,
    schema: str,
    max_records: int,
    mode: str = "upsert",
    fast_path: str = "auto",
    deletes: str | None = None,
) -> Any:
    from icetide.config.pipeline import PipelineConfig

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
                **({"deletes": deletes} if deletes else {}),
            },
            "mode": mode,
            "fast_path": fast_path,
            "trigger": {"interval": "1s", "max_records": max_records},
            "dead_letter": f"lake.bench.{name}_dead_letter",
        }
    )


def run_debezium(events: int, warehouse: str, broker_dir: Path, max_records: int, rounds: int, schema: str) -> str:
    """Alternating rounds of the plain JSON and the Debezium-with-schema pipelines on the same rows."""
    from bench.ingest import event, process_cpu_seconds
    from icetide.pipeline.table_runner import Runner
    from tests.kafka_broker import BENCH_JVM_OPTIONS, apache_kafka, create_topic

    with apache_kafka(broker_dir, jvm_options=BENCH_JVM_OPTIONS) as bootstrap:
        from bench.common import bench_session

        spark = bench_session(warehouse)
        results: dict[str, list[float]] = {name: [] for name in VARIANTS}
        paths: dict[str, set[str]] = {name: set() for name in VARIANTS}
        by_kind: dict[str, dict[str, float]] = {name: {} for name in VARIANTS}  # CPU seconds by process kind
        sizes = (0, 0)
        # Round -1 warms the JVM up on every path and is not counted.
        for r in range(-1, rounds):
            count = min(events, WARM_UP_EVENTS) if r < 0 else events
            topics = {
                "plain": create_topic(bootstrap, partitions=4, prefix="plain"),
                "dbz": create_topic(bootstrap, partitions=4, prefix="dbz"),
            }
            sizes = produce_both(bootstrap, topics["plain"], topics["dbz"], count, event)
            order = list(VARIANTS)
            random.Random(r).shuffle(order)
            for name in order:
                source, fmt, mode, fast_path, deletes = VARIANTS[name]
                table = name.replace(",", "").replace(" ", "_")
                cfg = config(
                    bootstrap, topics[source], f"{table}_{r + 1}", fmt, schema, max_records, mode, fast_path, deletes
                )
                runner = Runner(cfg, spark)
                before = process_cpu_seconds()
                summary = runner.run(once=True, handle_signals=False)
                after = process_cpu_seconds()
                core_seconds = sum(after.values()) - sum(before.values())
                rows = sum(b.records_in for b in summary.batches)
                assert rows == count and sum(b.bad_records for b in summary.batches) == 0, (name, rows)
                if r >= 0:
                    results[name].append(rows / core_seconds)
                    paths[name] |= {b.path.split(":")[0] for b in summary.batches}
                    for kind, seconds in after.items():
                        spent = by_kind[name].get(kind, 0.0) + seconds - before.get(kind, 0.0)
                        by_kind[name][kind] = spent
        spark.stop()
    table = render_table(
        ["pipeline", "message bytes", "paths", "rows/s per core (median)", "runs"],
        [
            [
                LABELS[name],
                str(sizes[0] if VARIANTS[name][0] == "plain" else sizes[1]),
                " ".join(sorted(paths[name])),
                f"{median(results[name]):,.0f}",
                _runs(results[name]),
            ]
            for name in VARIANTS
        ],
    )
    per_million = 1_000_000 / (events * rounds)
    cpu_lines = "\n".join(
        f"- {LABELS[name]}: "
        + ", ".join(f"{kind} {seconds * per_million:.1f}" for kind, seconds in sorted(by_kind[name].items()))
        for name in VARIANTS
    )
    m = {name: median(values) for name, values in results.items()}
    return (
        f"{events:,} rows, 4 Kafka partitions (Apache Kafka on 127.0.0.1), batches of up to "
        f"{max_records:,}, {rounds} rounds in shuffled order after an uncounted warm-up round of "
        f"{min(events, WARM_UP_EVENTS):,}; CPU seconds of this benchmark's processes.\n\n{table}\n\n"
        f"Debezium upsert on the fast path / plain JSON append fast path: "
        f"{m['debezium, fast path'] / m['json append']:.2f}x (target: at least 0.4x); "
        f"Debezium fast path / Debezium Spark path: {m['debezium, fast path'] / m['debezium, Spark path']:.2f}x; "
        f"Debezium Spark path / plain JSON upsert Spark path: "
        f"{m['debezium, Spark path'] / m['json upsert, Spark path']:.2f}x; "
        f"plain JSON upsert fast path / Spark path: {m['json upsert'] / m['json upsert, Spark path']:.2f}x; "
        f"deletion vectors (the default) / equality deletes: "
        f"{m['json upsert'] / m['json upsert, equality deletes']:.2f}x.\n\n"
        f"CPU seconds per million rows, by process (all rounds):\n\n{cpu_lines}\n"
    )


def _runs(values: list[float]) -> str:
    return " ".join(f"{v:,.0f}" for v in values)
