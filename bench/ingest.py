"""Benchmark: Kafka -> Iceberg append through the runner, beside the practical limits.

    .venv/bin/python bench/ingest.py [--events 1000000] [--freshness-seconds 30] [--record]

Starts a Tansu broker on 127.0.0.1, produces `events` JSON events of about 200 bytes into 4
partitions, and measures in one run:
- icetide: the runner (append mode, so the one-pass fast path of pipeline/fast_append.py) draining
  the topic into an Iceberg table: Kafka read, JSON decode, dead-letter check, write and commit,
  after a warm-up pipeline of 20,000 events on its own topic (JVM JIT, Spark's Python workers),
  reported apart;
- bare PyArrow: the same events decoded by pyarrow's JSON reader and written as one Parquet
  file (no Kafka, no Iceberg: the practical limit of writing these rows);
- Spark append: the same decoded rows, cached in Spark, written by `df.writeTo(t).append()`.
Then freshness: a producer sends a steady 10k events/s while the runner polls every second;
for each row, the time from production to the commit that made it visible.
"""

from __future__ import annotations

import io
import json
import os
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_session, in_temp_warehouse, median, parser, render_table, report, timed

SCHEMA = (
    "event_id STRING NOT NULL, event_time TIMESTAMP NOT NULL, ad_id BIGINT, campaign_id BIGINT, country STRING, "
    "device STRING, price DOUBLE, clicks INT, produced_at TIMESTAMP"
)
COUNTRIES = ["JP", "US", "GB", "DE", "FR", "KR", "TW", "BR"]
DEVICES = ["ios", "android", "web"]


def event(i: int, produced_ms: int) -> bytes:
    """One JSON event of about 200 bytes."""
    rng = random.Random(i)
    return json.dumps(
        {
            "event_id": f"evt-{i:012d}",
            "event_time": produced_ms - rng.randrange(0, 3_600_000),
            "ad_id": rng.randrange(1_000_000),
            "campaign_id": rng.randrange(10_000),
            "country": rng.choice(COUNTRIES),
            "device": rng.choice(DEVICES),
            "price": round(rng.random() * 5, 4),
            "clicks": rng.randrange(3),
            "produced_at": produced_ms,
        }
    ).encode()


def produce(bootstrap: str, topic: str, start: int, count: int, rate: float | None = None) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 500000,
        }
    )
    began = time.monotonic()
    for i in range(start, start + count):
        while True:
            try:
                producer.produce(topic, value=event(i, int(time.time() * 1000)), partition=i % 4)
                break
            except BufferError:
                producer.poll(0.05)
        if rate and i % 500 == 0:
            ahead = (i - start) / rate - (time.monotonic() - began)
            if ahead > 0:
                time.sleep(ahead)
            producer.poll(0)
    producer.flush(60)


def pipeline(bootstrap: str, topic: str, name: str, interval: str, max_records: int) -> Any:
    from icetide.config import PipelineConfig

    return PipelineConfig.from_dict(
        {
            "pipeline": name,
            "source": {"kafka": {"bootstrap_servers": bootstrap, "topic": topic}},
            "table": {
                "name": f"lake.bench.{name}",
                "schema": SCHEMA,
                "key": ["event_id", "event_time"],
                "partition_by": ["hours(event_time)"],
            },
            "mode": "append",
            "trigger": {"interval": interval, "max_records": max_records},
            "dead_letter": f"lake.bench.{name}_dead_letter",
        }
    )


def run(events: int, freshness_seconds: int, warehouse: str, broker_log: Path) -> str:
    from icetide.pipeline.runner import Runner
    from tests.kafka_broker import create_topic, tansu_broker

    cores = os.cpu_count() or 1
    with tansu_broker(broker_log) as bootstrap:
        topic = create_topic(bootstrap, partitions=4)
        produce_s, _ = timed(lambda: produce(bootstrap, topic, 0, events))
        print(f"produced {events:,} events in {produce_s:.1f}s", flush=True)
        spark = bench_session(warehouse)
        # Warm-up: a small topic through its own pipeline starts the JVM's JIT and Spark's Python
        # workers; reported apart, not counted in the measured run.
        warm_topic = create_topic(bootstrap, partitions=4)
        produce(bootstrap, warm_topic, 0, 20_000)
        warm = Runner(pipeline(bootstrap, warm_topic, "warmup", "1s", 250_000), spark)
        warm_s, _ = timed(lambda: warm.run(once=True, handle_signals=False))
        print(f"warm-up: 20,000 events in {warm_s:.1f}s", flush=True)
        runner = Runner(pipeline(bootstrap, topic, "ingest", "1s", 250_000), spark)
        icetide_s, summary = timed(
            lambda: runner.run(once=True, handle_signals=False, on_batch=lambda m: print(m.to_json(), flush=True))
        )
        rows = spark.table("lake.bench.ingest").count()
        assert rows == events, f"{rows} rows for {events} events"
        batches = summary.batches

        # The same events, decoded once, for the two reference writers.
        payload = b"\n".join(event(i, 1_767_225_600_000) for i in range(events))
        import pyarrow.json as pj
        import pyarrow.parquet as pq

        def bare() -> None:
            table = pj.read_json(io.BytesIO(payload))
            pq.write_table(table, os.path.join(warehouse, "bare.parquet"), compression="zstd")

        bare_times = [timed(bare)[0] for _ in range(3)]
        decoded = spark.table("lake.bench.ingest").cache()
        decoded.count()
        spark.sql(f"CREATE TABLE lake.bench.native ({SCHEMA}) USING iceberg PARTITIONED BY (hours(event_time))")
        native_times = [timed(lambda: decoded.writeTo("lake.bench.native").append())[0] for _ in range(3)]
        decoded.unpersist()

        # Freshness at a steady 10k events/s.
        fresh_topic = create_topic(bootstrap, partitions=4)
        fresh = Runner(pipeline(bootstrap, fresh_topic, "fresh", "1s", 100_000), spark)
        count = 10_000 * freshness_seconds
        producer = threading.Thread(target=produce, args=(bootstrap, fresh_topic, 0, count, 10_000.0))
        stop = threading.Timer(freshness_seconds + 8, fresh.stop)
        producer.start()
        stop.start()
        fresh.run(handle_signals=False)
        producer.join()
        lags = [
            r[0]
            for r in spark.sql(
                "SELECT (unix_millis(s.committed_at) - unix_millis(t.produced_at)) / 1000.0 AS lag "
                "FROM lake.bench.fresh t JOIN lake.bench.fresh.entries e ON t._file = e.data_file.file_path "
                "JOIN lake.bench.fresh.snapshots s ON e.snapshot_id = s.snapshot_id"
            ).collect()
        ]
        spark.stop()
    lags.sort()
    icetide_rate = events / icetide_s
    bare_rate = events / median(bare_times)
    native_rate = events / median(native_times)
    table = render_table(
        ["writer", "seconds (median)", "rows/s", "rows/s per core", "vs bare PyArrow"],
        [
            (
                "icetide runner: Kafka -> Iceberg",
                f"{icetide_s:.1f}",
                f"{icetide_rate:,.0f}",
                f"{icetide_rate / cores:,.0f}",
                f"{icetide_rate / bare_rate:.2f}x",
            ),
            (
                "bare PyArrow JSON -> Parquet",
                f"{median(bare_times):.1f}",
                f"{bare_rate:,.0f}",
                f"{bare_rate / cores:,.0f}",
                "1.00x",
            ),
            (
                "Spark Iceberg append (decoded, cached)",
                f"{median(native_times):.1f}",
                f"{native_rate:,.0f}",
                f"{native_rate / cores:,.0f}",
                f"{native_rate / bare_rate:.2f}x",
            ),
        ],
    )
    pick = lambda q: lags[min(len(lags) - 1, int(q * len(lags)))]  # noqa: E731
    return (
        f"{events:,} JSON events of about {len(event(0, 0))} bytes in 4 Kafka partitions (Tansu on 127.0.0.1), "
        f"{cores} cores; the runner took {len(batches)} batches of up to 250,000 records "
        f"({' '.join(f'{b.read_decode_seconds + b.write_seconds + b.commit_seconds:.1f}' for b in batches)} s "
        f"read+decode+write+commit), after a warm-up pipeline of 20,000 events ({warm_s:.1f} s, not counted)."
        f"\n\n{table}\n\n"
        f"Freshness at a steady 10,000 events/s for {freshness_seconds}s, trigger interval 1s "
        f"({len(lags):,} rows): produced -> visible median {pick(0.5):.1f}s, p95 {pick(0.95):.1f}s, "
        f"max {lags[-1]:.1f}s.\n"
    )


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--freshness-seconds", type=int, default=30)
    args = p.parse_args()
    body = in_temp_warehouse(lambda wh: run(args.events, args.freshness_seconds, wh, Path(wh) / "tansu.log"))
    report("bench/ingest.py: Kafka to Iceberg append", body, save=args.record)


if __name__ == "__main__":
    main()
