"""Debezium Avro beside Debezium JSON with schemas, on the same rows (bench/ingest.py --avro N).

The same N create events go into two topics: as Debezium JSON-converter messages with
`schemas.enable=true` (bench/ingest_debezium.py's), and as Confluent's AvroConverter writes the
same messages (confluent-kafka's AvroSerializer through the test schema registry of
tests/schema_registry_server.py: magic byte, schema id, Avro body). Both topics are drained, in
alternating rounds, by the same two pipelines:

- runner: the single-table runner, upsert mode, the table given in the file (the sync fast path
  with one fixed route, Avro values read directly; batches it refuses take the Spark path, where
  Avro values are transcoded to the JSON converter's messages in the read task);
- sync: a database sync of that one topic (`topic_pattern`, table created from the stream), whose
  fast path decodes in Python (Avro values read directly, no JSON in between).

rows/s per core: rows over the CPU seconds of this benchmark's processes (driver, Spark JVM,
Python workers, broker) during the drain; producing is not counted. Then the decoders alone, in
this process on the same messages: the sync fast path's event from a JSON message
(decode/debezium/rows.py EnvelopeReader) and from an Avro record (decode/avro/decoder.py, fastavro),
and fastavro's `schemaless_reader` by itself, in microseconds per message (median of 3 passes).
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from bench.common import median, produce_waiting, render_table

WARM_UP_EVENTS = 20_000
RUN = 5_000  # records a run in the decoders' table (the bench's runs: 50,000 rows over 4 partitions)
KEY_SCHEMA = {
    "type": "struct",
    "name": "dbserver1.ads.events.Key",
    "optional": False,
    "fields": [
        {"type": "string", "optional": False, "field": "event_id"},
        {"type": "int64", "optional": False, "name": "io.debezium.time.Timestamp", "version": 1, "field": "event_time"},
    ],
}


def produce_both(bootstrap: str, registry_url: str, json_topic: str, avro_topic: str, count: int) -> tuple[int, int]:
    """The same `count` events into both topics (keys too); the mean value sizes."""
    from confluent_kafka import Producer

    from bench.ingest import event
    from bench.ingest_debezium import debezium_event
    from tests.avro_messages import AvroEncoder

    encoder = AvroEncoder(registry_url)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 500000})
    now = int(time.time() * 1000)
    sizes = [0, 0]
    for i in range(count):
        row = json.loads(event(i, now))
        value = debezium_event(row, i)
        payload = {"event_id": row["event_id"], "event_time": row["event_time"]}
        key = json.dumps({"schema": KEY_SCHEMA, "payload": payload}, separators=(",", ":")).encode()
        avro_key, avro_value = encoder.encode(key, avro_topic, key=True), encoder.encode(value, avro_topic)
        assert avro_value is not None
        sizes[0] += len(value)
        sizes[1] += len(avro_value)
        for topic, k, v in ((json_topic, key, value), (avro_topic, avro_key, avro_value)):
            produce_waiting(producer, topic, key=k, value=v, partition=i % 4)
    producer.flush(120)
    return sizes[0] // count, sizes[1] // count


def decode_micros(registry_url: str, count: int) -> dict[str, float]:
    """Microseconds per message of each decoder alone (median of 3 passes over `count` messages)."""
    import io

    from fastavro import schemaless_reader

    from bench.ingest import event
    from bench.ingest_debezium import debezium_event
    from icetide.config.pipeline import RegistrySettings
    from icetide.decode.avro.decoder import AvroMessages, AvroSettings
    from icetide.decode.debezium.message import EnvelopeReader
    from icetide.decode.debezium.rows import Conversions, TableRows, source_order
    from icetide.decode.limits import PayloadLimits
    from tests.avro_messages import AvroEncoder

    encoder = AvroEncoder(registry_url)
    now = int(time.time() * 1000)
    values = [debezium_event(json.loads(event(i, now)), i) for i in range(count)]
    avro = [encoder.encode(v, "decode") or b"" for v in values]
    settings = AvroSettings(RegistrySettings.from_dict({"url": registry_url}), True, PayloadLimits())
    messages, reader = AvroMessages(settings), EnvelopeReader(PayloadLimits())
    parsed = messages.compiled(int.from_bytes(avro[0][1:5], "big")).parsed

    def timed_all(fn: Any, items: list[bytes]) -> float:
        passes = []
        for _ in range(3):
            started = time.process_time()
            fn(items)
            passes.append((time.process_time() - started) / len(items) * 1e6)
        return median(passes)

    def timed(fn: Any, items: list[bytes]) -> float:
        passes = []
        for _ in range(3):
            started = time.process_time()
            for item in items:
                fn(item)
            passes.append((time.process_time() - started) / len(items) * 1e6)
        return median(passes)

    columns = pa.schema(
        [
            pa.field("event_id", pa.string(), nullable=False),
            pa.field("event_time", pa.timestamp("us", tz="UTC"), nullable=False),
            *[(n, pa.int64()) for n in ("ad_id", "campaign_id")],
            *[(n, pa.string()) for n in ("country", "device")],
            ("price", pa.float64()),
            ("clicks", pa.int32()),
            ("produced_at", pa.timestamp("us", tz="UTC")),
        ]
    )

    def one_by_one(items: list[bytes]) -> None:
        rows = TableRows(columns, ["event_id", "event_time"], "upsert", Conversions())
        for offset, item in enumerate(items):
            envelope = messages.envelope(None, item)
            assert envelope is not None
            rows.add(envelope, source_order(envelope.source, envelope.ts_ms, offset), evolving=False)
        rows.table()

    def as_runs(items: list[bytes]) -> None:
        rows = TableRows(columns, ["event_id", "event_time"], "upsert", Conversions())
        for start in range(0, len(items), RUN):
            run = items[start : start + RUN]
            messages.read_run(run).add_to(
                rows, np.arange(start, start + len(run)), held=-1, by_source=True, evolving=False
            )
        rows.table()

    return {
        "JSON message -> event (EnvelopeReader)": timed(reader.read, values),
        "Avro record -> event (AvroMessages.envelope)": timed(lambda v: messages.envelope(None, v), avro),
        "fastavro schemaless_reader alone": timed(lambda v: schemaless_reader(io.BytesIO(v[5:]), parsed, None), avro),
        "Avro records -> changes, one by one (envelope, TableRows.add)": timed_all(one_by_one, avro),
        f"Avro records -> changes, runs of {RUN:,} as columns (EventRun)": timed_all(as_runs, avro),
    }


def config(bootstrap: str, topic: str, name: str, fmt: str, path: str, registry_url: str, schema: str, n: int) -> Any:
    from icetide.config.pipeline import PipelineConfig

    kafka: dict[str, Any] = {"bootstrap_servers": bootstrap, "starting_offsets": "earliest"}
    doc: dict[str, Any] = {
        "pipeline": name,
        "format": fmt,
        "mode": "upsert",
        "trigger": {"interval": "1s", "max_records": n},
        "dead_letter": f"lake.bench.{name}_dead_letter",
    }
    if fmt == "debezium-avro":
        doc["schema_registry"] = {"url": registry_url}
    if path == "runner":
        kafka["topic"] = topic
        doc["table"] = {
            "name": f"lake.bench.{name}",
            "schema": schema,
            "key": ["event_id", "event_time"],
            "partition_by": ["hours(event_time)"],
        }
    else:
        kafka["topic_pattern"] = topic.replace(".", "\\.")
        doc["table"] = {"name": f"lake.bench_{name}.{{table}}"}
    doc["source"] = {"kafka": kafka}
    return PipelineConfig.from_dict(doc)


def run_avro(events: int, warehouse: str, broker_dir: Path, max_records: int, rounds: int, schema: str) -> str:
    """Alternating rounds of Debezium JSON and Debezium Avro through the runner and the sync."""
    from bench.common import bench_session
    from bench.ingest import process_cpu_seconds
    from icetide.pipeline.sync.runner import SyncRunner
    from icetide.pipeline.table_runner import Runner
    from tests.kafka_broker import BENCH_JVM_OPTIONS, apache_kafka, create_topic
    from tests.schema_registry_server import SchemaRegistryServer

    registry = SchemaRegistryServer().start()
    keys = [(path, fmt) for path in ("runner", "sync") for fmt in ("debezium", "debezium-avro")]
    results: dict[tuple[str, str], list[float]] = {k: [] for k in keys}
    sizes = (0, 0)
    try:
        with apache_kafka(broker_dir, jvm_options=BENCH_JVM_OPTIONS) as bootstrap:
            spark = bench_session(warehouse)
            for r in range(-1, rounds):  # round -1 warms the JVM and the workers up, not counted
                count = min(events, WARM_UP_EVENTS) if r < 0 else events
                json_topic = create_topic(bootstrap, partitions=4, prefix="dbzjson")
                avro_topic = create_topic(bootstrap, partitions=4, prefix="dbzavro")
                sizes = produce_both(bootstrap, registry.url, json_topic, avro_topic, count)
                order = list(keys)
                random.Random(r).shuffle(order)
                for path, fmt in order:
                    topic = avro_topic if fmt == "debezium-avro" else json_topic
                    name = f"{path}_{fmt.replace('-', '_')}_{r + 1}"
                    cfg = config(bootstrap, topic, name, fmt, path, registry.url, schema, max_records)
                    runner: Any = Runner(cfg, spark) if path == "runner" else SyncRunner(cfg, spark)
                    busy = sum(process_cpu_seconds().values())
                    summary = runner.run(once=True, handle_signals=False)
                    core_seconds = sum(process_cpu_seconds().values()) - busy
                    rows = sum(b.records_in for b in summary.batches)
                    bad = sum(b.bad_records for b in summary.batches)
                    assert rows == count and bad == 0, (path, fmt, rows, bad)
                    if r >= 0:
                        results[(path, fmt)].append(rows / core_seconds)
            spark.stop()
        micros = decode_micros(registry.url, min(events, 20_000))
    finally:
        registry.stop()
    rows_out = []
    for path, fmt in keys:
        size = sizes[1] if fmt == "debezium-avro" else sizes[0]
        values = results[(path, fmt)]
        rows_out.append([path, fmt, str(size), f"{median(values):,.0f}", " ".join(f"{v:,.0f}" for v in values)])
    table = render_table(["pipeline", "format", "value bytes", "rows/s per core (median)", "runs"], rows_out)
    ratios = {
        path: median(results[(path, "debezium-avro")]) / median(results[(path, "debezium")])
        for path in ("runner", "sync")
    }
    decoders = render_table(
        ["decoder (one process, same messages)", "µs per message"], [[k, f"{v:.1f}"] for k, v in micros.items()]
    )
    return (
        f"{events:,} rows, 4 Kafka partitions (Apache Kafka on 127.0.0.1), upsert mode, batches of up to "
        f"{max_records:,}, {rounds} alternating rounds after an uncounted warm-up round of "
        f"{min(events, WARM_UP_EVENTS):,}; CPU seconds of this benchmark's processes.\n\n{table}\n\n"
        f"Debezium Avro / Debezium JSON with schemas: runner {ratios['runner']:.2f}x, sync {ratios['sync']:.2f}x "
        f"(target: at least 1.5x).\n\n{decoders}\n"
    )
