"""Benchmark: Kafka -> Iceberg append through the runner, beside the practical limits.

    .venv/bin/python bench/ingest.py [--events 1000000] [--freshness-seconds 30] [--record]
    .venv/bin/python bench/ingest.py --tables 50 [--events-per-table 20000] [--rounds 1]   (bench/ingest_tables.py)
    .venv/bin/python bench/ingest.py --avro 100000 [--rounds 3]   (bench/ingest_avro.py)

Starts an Apache Kafka broker (tests/kafka_broker.py) on 127.0.0.1, produces `events` JSON events
of about 200 bytes into 4 partitions, and measures in one run:
- icetide: the runner (append mode, the one-pass fast path of pipeline/json_fast.py) draining
  the topic into an Iceberg table: Kafka read, JSON decode, dead-letter check, write and commit,
  after a warm-up pipeline of 60,000 events on its own topic (JVM JIT, Spark's Python workers),
  reported apart;
- bare PyArrow: the same events decoded by pyarrow's JSON reader and written as one Parquet
  file (no Kafka, no Iceberg: the practical limit of writing these rows), timed twice: decode and
  write together, and the write alone of the already decoded rows (the issue's "bare PyArrow
  Parquet write of the same decoded rows");
- Spark append: the same decoded rows, cached in Spark, written by `df.writeTo(t).append()`.
CPU: core-seconds used during the icetide run, machine-wide (/proc/stat) and per process of this
benchmark (broker, Spark JVM, Python workers, driver), plus the fast path's per-task step timings.
Then freshness: a producer sends a steady 10k events/s while the runner polls every second;
for each row, the time from production to the commit that made it visible.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import json
import os
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_session, in_temp_warehouse, median, parser, produce_waiting, render_table, report, timed

SCHEMA = (
    "event_id STRING NOT NULL, event_time TIMESTAMP NOT NULL, ad_id BIGINT, campaign_id BIGINT, country STRING, "
    "device STRING, price DOUBLE, clicks INT, produced_at TIMESTAMP"
)
COUNTRIES = ["JP", "US", "GB", "DE", "FR", "KR", "TW", "BR"]
DEVICES = ["ios", "android", "web"]
WARM_UP_EVENTS = 60_000
PHASES = (
    "source_plan_seconds",
    "read_decode_seconds",
    "plan_seconds",
    "write_seconds",
    "refresh_seconds",
    "commit_seconds",
)  # BatchMetrics


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


def machine_busy_seconds() -> float:
    """Core-seconds the whole machine has spent busy since boot (all cores, /proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def process_cpu_seconds() -> dict[str, float]:
    """CPU seconds (own + reaped children) of this process and its descendants, by kind."""
    tick = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[int, str, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        name = raw[raw.index("(") + 1 : raw.rindex(")")]
        rest = raw[raw.rindex(")") + 2 :].split()
        ppid, times = int(rest[1]), sum(int(x) for x in rest[11:15]) / tick
        kind = "broker" if b"kafka.Kafka" in cmdline else "spark jvm" if name == "java" else "python"
        stats[int(entry.name)] = (ppid, kind, times)
    me = os.getpid()
    out: dict[str, float] = {}
    for pid, (_, kind, times) in stats.items():
        if pid == me:
            continue  # counted below, with os.times()
        chain, ancestor = [], pid
        while ancestor in stats and ancestor != me:
            chain.append(ancestor)
            ancestor = stats[ancestor][0]
        if ancestor != me:
            continue
        if kind == "python":
            kind = "python workers" if any(stats[a][1] == "spark jvm" for a in chain[1:]) else "other"
        out[kind] = out.get(kind, 0.0) + times
    own = os.times()
    out["driver (python)"] = own.user + own.system
    return out


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
        produce_waiting(producer, topic, value=event(i, int(time.time() * 1000)), partition=i % 4)
        if rate and i % 500 == 0:
            ahead = (i - start) / rate - (time.monotonic() - began)
            if ahead > 0:
                time.sleep(ahead)
            producer.poll(0)
    producer.flush(60)


def pipeline(bootstrap: str, topic: str, name: str, interval: str, max_records: int) -> Any:
    from icetide.config.pipeline import PipelineConfig

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


def cpu_timed(fn: Any, runs: int = 3) -> tuple[list[float], float]:
    """Wall seconds of each run and the median CPU seconds of this process per run."""
    walls, cpus = [], []
    for _ in range(runs):
        cpu_started = time.process_time()
        walls.append(timed(fn)[0])
        cpus.append(time.process_time() - cpu_started)
    return walls, median(cpus)


def run(events: int, freshness_seconds: int, warehouse: str, broker_dir: Path, max_records: int, runs: int) -> str:
    from icetide.pipeline.table_runner import Runner
    from tests.kafka_broker import BENCH_JVM_OPTIONS, apache_kafka, create_topic

    cores = os.cpu_count() or 1
    with apache_kafka(broker_dir, jvm_options=BENCH_JVM_OPTIONS) as bootstrap:
        topic = create_topic(bootstrap, partitions=4)
        produce_s, _ = timed(lambda: produce(bootstrap, topic, 0, events))
        print(f"produced {events:,} events in {produce_s:.1f}s", flush=True)
        spark = bench_session(warehouse)
        # Warm-up: a small topic through its own pipeline starts the JVM's JIT and Spark's Python
        # workers (WARM_UP_EVENTS is enough for two tasks, so both cores have a worker, as in a
        # pipeline that has been running); reported apart, not counted in the measured run.
        warm_topic = create_topic(bootstrap, partitions=4)
        produce(bootstrap, warm_topic, 0, WARM_UP_EVENTS)
        warm = Runner(pipeline(bootstrap, warm_topic, "warmup", "1s", 250_000), spark)
        warm_s, _ = timed(lambda: warm.run(once=True, handle_signals=False))
        print(f"warm-up: {WARM_UP_EVENTS:,} events in {warm_s:.1f}s", flush=True)
        # Measured: the same topic drained into a new table per run, alternating trigger.overlap_commit
        # on (the default) and off, so the two are compared side by side on the same machine state.
        tasks: list[tuple[float, ...]] = []
        times: dict[bool, list[float]] = {True: [], False: []}
        busy, cpu = 0.0, {}
        batches: list[Any] = []
        for run_index in range(2 * runs):
            overlap = run_index % 2 == 0 if (run_index // 2) % 2 == 0 else run_index % 2 == 1
            name = f"ingest{run_index}"
            cfg = pipeline(bootstrap, topic, name, "1s", max_records)
            cfg = dataclasses.replace(cfg, trigger=dataclasses.replace(cfg.trigger, overlap_commit=overlap))
            runner = Runner(cfg, spark)
            run_tasks: list[tuple[float, ...]] = []
            if runner.fast is not None:
                fast_write = runner.fast.write

                def write(batch_id: int, ranges: Any, fast_write: Any = fast_write, out: Any = run_tasks) -> Any:
                    result = fast_write(batch_id, ranges)
                    out.extend(result.task_timings)
                    return result

                runner.fast.write = write  # type: ignore[method-assign]
            busy_before, cpu_before = machine_busy_seconds(), process_cpu_seconds()
            run_s, summary = timed(
                lambda runner=runner: runner.run(
                    once=True, handle_signals=False, on_batch=lambda m: print(m.to_json(), flush=True)
                )
            )
            print(f"run {run_index + 1}: overlap_commit {overlap}: {run_s:.2f}s", flush=True)
            times[overlap].append(run_s)
            rows = spark.table(f"lake.bench.{name}").count()
            assert rows == events, f"{rows} rows for {events} events"
            if overlap:
                busy += machine_busy_seconds() - busy_before
                cpu_after = process_cpu_seconds()
                for k in cpu_after:
                    cpu[k] = cpu.get(k, 0.0) + cpu_after.get(k, 0.0) - cpu_before.get(k, 0.0)
                tasks.extend(run_tasks)
                batches = summary.batches
        icetide_s, serial_s = median(times[True]), median(times[False])

        # The same events, decoded once, for the two reference writers.
        payload = b"\n".join(event(i, 1_767_225_600_000) for i in range(events))
        import pyarrow.json as pj
        import pyarrow.parquet as pq

        def bare() -> None:
            table = pj.read_json(io.BytesIO(payload))
            pq.write_table(table, os.path.join(warehouse, "bare.parquet"), compression="zstd")

        decoded_rows = pj.read_json(io.BytesIO(payload))

        def bare_write() -> None:
            pq.write_table(decoded_rows, os.path.join(warehouse, "bare-write.parquet"), compression="zstd")

        bare_times, bare_cpu = cpu_timed(bare)
        write_times, write_cpu = cpu_timed(bare_write)
        decoded = spark.table("lake.bench.ingest0").cache()
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
        fresh_batches: list[tuple[float, Any]] = []  # (monotonic time at the end of the batch, metrics)
        fresh_busy = machine_busy_seconds()
        producer.start()
        stop.start()
        fresh.run(handle_signals=False, on_batch=lambda m: fresh_batches.append((time.monotonic(), m)))
        producer.join()
        fresh_busy = machine_busy_seconds() - fresh_busy
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
    write_rate = events / median(write_times)
    native_rate = events / median(native_times)
    table = render_table(
        ["writer", "seconds (median)", "rows/s", "rows/s per core", "vs bare decode+write", "vs bare write"],
        [
            (
                "icetide runner: Kafka -> Iceberg",
                f"{icetide_s:.1f}",
                f"{icetide_rate:,.0f}",
                f"{icetide_rate / cores:,.0f}",
                f"{icetide_rate / bare_rate:.2f}x",
                f"{icetide_rate / write_rate:.2f}x",
            ),
            (
                "icetide runner, overlap_commit off",
                f"{serial_s:.1f}",
                f"{events / serial_s:,.0f}",
                f"{events / serial_s / cores:,.0f}",
                f"{events / serial_s / bare_rate:.2f}x",
                f"{events / serial_s / write_rate:.2f}x",
            ),
            (
                "bare PyArrow: JSON decode + Parquet write",
                f"{median(bare_times):.2f}",
                f"{bare_rate:,.0f}",
                f"{bare_rate / cores:,.0f}",
                "1.00x",
                f"{bare_rate / write_rate:.2f}x",
            ),
            (
                "bare PyArrow: Parquet write of decoded rows",
                f"{median(write_times):.2f}",
                f"{write_rate:,.0f}",
                f"{write_rate / cores:,.0f}",
                f"{write_rate / bare_rate:.2f}x",
                "1.00x",
            ),
            (
                "Spark Iceberg append (decoded, cached)",
                f"{median(native_times):.1f}",
                f"{native_rate:,.0f}",
                f"{native_rate / cores:,.0f}",
                f"{native_rate / bare_rate:.2f}x",
                f"{native_rate / write_rate:.2f}x",
            ),
        ],
    )
    per_m = 1_000_000 / (events * runs)  # CPU of the overlap_commit runs, per million rows
    cpu_line = ", ".join(f"{k} {v * per_m:.2f}" for k, v in sorted(cpu.items(), key=lambda kv: -kv[1]) if v > 0.005)
    step_names = ("read cpu", "wait for a block", "decode cpu", "partition+write wall", "task process cpu")
    step_line = ", ".join(f"{n} {sum(t[i] for t in tasks) * per_m:.2f}" for i, n in enumerate(step_names))
    cpu_text = (
        f"CPU during the icetide run, core-seconds per million rows: machine {busy * per_m:.2f} "
        f"({busy / sum(times[True]) / cores:.0%} of {cores} cores over the overlap runs); by process: {cpu_line}. "
        f"Fast path tasks ({len(tasks)}), summed seconds per million rows: {step_line}. "
        f"Bare PyArrow CPU per million rows: decode+write {bare_cpu * per_m:.2f}, write alone {write_cpu * per_m:.2f} "
        "(pyarrow threads included).\n\n"
    )
    pick = lambda q: lags[min(len(lags) - 1, int(q * len(lags)))]  # noqa: E731
    gaps = sorted(b[0] - a[0] for a, b in itertools.pairwise(fresh_batches))
    slowest = max((m for _, m in fresh_batches), key=lambda m: sum(getattr(m, p) for p in PHASES), default=None)
    fresh_text = (
        f"{len(fresh_batches)} batches, one every {median(gaps):.2f}s (median; longest gap {gaps[-1]:.2f}s); "
        + (
            "slowest batch "
            + ", ".join(f"{p.removesuffix('_seconds')} {getattr(slowest, p):.2f}s" for p in PHASES)
            + f" ({slowest.records_in:,} records); "
            if slowest is not None
            else ""
        )
        + f"machine busy {fresh_busy / (freshness_seconds + 8) / cores:.0%} of {cores} cores."
        if len(gaps) > 1
        else ""
    )
    per_batch = " ".join(f"{sum(getattr(b, p) for p in PHASES):.1f}" for b in batches)
    return (
        f"{events:,} JSON events of about {len(event(0, 0))} bytes in 4 Kafka partitions (Apache Kafka on 127.0.0.1), "
        f"{cores} cores; the runner took {len(batches)} batches of up to {max_records:,} records "
        f"({per_batch} s "
        f"read+decode+write+commit), after a warm-up pipeline of {WARM_UP_EVENTS:,} events "
        f"({warm_s:.1f} s, not counted). {runs} runs each with trigger.overlap_commit on and off, alternating "
        f"(on: {' '.join(f'{t:.2f}' for t in times[True])} s; off: {' '.join(f'{t:.2f}' for t in times[False])} s); "
        f"overlap on/off rows/s: {serial_s / icetide_s:.2f}x."
        f"\n\n{table}\n\n"
        f"{cpu_text}"
        f"Freshness at a steady 10,000 events/s for {freshness_seconds}s, trigger interval 1s "
        f"({len(lags):,} rows): produced -> visible median {pick(0.5):.1f}s, p95 {pick(0.95):.1f}s, "
        f"p99 {pick(0.99):.1f}s, max {lags[-1]:.1f}s. {fresh_text}\n"
    )


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--freshness-seconds", type=int, default=30)
    p.add_argument("--max-records", type=int, default=250_000, help="the measured pipeline's trigger.max_records")
    p.add_argument(
        "--debezium",
        type=int,
        default=0,
        metavar="N",
        help="instead: N rows as plain JSON and as Debezium messages with schemas (bench/ingest_debezium.py)",
    )
    p.add_argument(
        "--avro",
        type=int,
        default=0,
        metavar="N",
        help="instead: N rows as Debezium JSON with schemas and as Debezium Avro (bench/ingest_avro.py)",
    )
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds of --debezium, --avro or --tables")
    p.add_argument("--runs", type=int, default=3, help="measured runner drains per overlap_commit setting")
    p.add_argument(
        "--tables",
        type=int,
        default=0,
        metavar="N",
        help="instead: N topics into N tables through one pipeline, against one table (bench/ingest_tables.py)",
    )
    p.add_argument("--events-per-table", type=int, default=20_000, help="messages per table with --tables")
    p.add_argument(
        "--fast-path",
        choices=("auto", "off"),
        default="auto",
        help="with --tables: every pipeline's fast_path (off: the Spark paths)",
    )
    args = p.parse_args()
    if args.tables:
        from bench.ingest_tables import run_tables

        body = in_temp_warehouse(
            lambda wh: run_tables(
                args.tables,
                args.events_per_table,
                wh,
                Path(wh) / "kafka",
                args.max_records,
                args.rounds,
                SCHEMA,
                args.fast_path,
            )
        )
        report("bench/ingest.py --tables: a database of many tables through one pipeline", body, save=args.record)
        return
    if args.avro:
        from bench.ingest_avro import run_avro

        body = in_temp_warehouse(
            lambda wh: run_avro(
                args.avro, wh, Path(wh) / "kafka", min(args.max_records, args.avro), args.rounds, SCHEMA
            )
        )
        report("bench/ingest.py --avro: Debezium Avro beside Debezium JSON with schemas", body, save=args.record)
        return
    if args.debezium:
        from bench.ingest_debezium import run_debezium

        body = in_temp_warehouse(
            lambda wh: run_debezium(
                args.debezium, wh, Path(wh) / "kafka", min(args.max_records, args.debezium), args.rounds, SCHEMA
            )
        )
        report("bench/ingest.py --debezium: schema-aware Debezium decoding beside plain JSON", body, save=args.record)
        return
    body = in_temp_warehouse(
        lambda wh: run(args.events, args.freshness_seconds, wh, Path(wh) / "kafka", args.max_records, args.runs)
    )
    report("bench/ingest.py: Kafka to Iceberg append", body, save=args.record)


if __name__ == "__main__":
    main()
