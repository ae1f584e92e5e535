"""Benchmark: icetide beside Apache Iceberg's Flink sink (and, on appends, Iceberg's Kafka Connect
sink), the same topic on the same broker, one run.

    .venv/bin/python bench/peers/compare.py --workload ads [--hours 24] [--events-per-batch 2000]
        [--rate 2000] [--record]
    .venv/bin/python bench/peers/compare.py --workload appends [--events 200000] [--rate 4000] [--record]

One topic (4 partitions) is produced once and read by every system, each into its own table of
one Hadoop catalog (one warehouse folder):
- icetide: `icetide run` on a pipeline file with icetide's defaults (trigger 5 s / 100,000
  records, distribution dynamic, upsert or append, Kafka from the earliest offset), its own
  process with its own Spark;
- Flink: bench/peers/flink/job.py, the Iceberg Flink sink as its docs set it up (format v2,
  `write.distribution-mode=hash`, the key as identifier fields and `upsert-enabled` for upserts),
  PyFlink 2.0.2 with Iceberg 1.11.0, checkpoint interval = icetide's trigger interval (5 s),
  parallelism = the machine's cores; its own process (PyFlink's client and its JVM);
- on appends only (it has no upsert mode), Iceberg's Kafka Connect sink 1.12.0
  (bench/peers/kafka_connect/peer.py) in its own Kafka Connect 4.3.1 worker, as its docs set it
  up: the table created first, `iceberg.control.commit.interval-ms` = icetide's trigger
  interval, the JSON converter without schemas, `tasks.max` = the machine's cores; its one JVM.
All start, a warm-up (the workload's first part) is produced and waited for until every table
holds it, then the rest is produced at a steady `rate` while all consume; the run ends when each
table holds the model (polled every few seconds). Per system, from the end of the warm-up to the
moment its table held the model:
- rows/s per core: messages produced after the warm-up / CPU seconds of the system's whole process
  tree (utime+stime of every process, JVMs and Python workers included, from /proc);
- freshness: per row of the final table produced after the warm-up, the commit time of the
  snapshot that added its data file minus its `produced_at`; p50 and p99;
- peak memory: the largest summed resident memory of the process tree (1 s samples);
- files: data and delete files per partition (hour) and their average size, from `<table>.files`;
- reads: a full scan (count + sum) and a point lookup by key in Spark, DuckDB and PyIceberg
  (PyIceberg refuses equality deletes), medians of 3 after a warm-up, in the harness's Spark.
Every table is checked against the model (the last message per key, or every message): the run
fails if any differs. The broker is bench.common.kafka_broker; the harness's own work
(generation, production, polling, reads) is not counted for any system.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from bench.common import (
    ROOT,
    ReadTarget,
    TableReads,
    bench_session,
    current_metadata,
    duckdb_with_iceberg,
    in_temp_warehouse,
    kafka_broker,
    parser,
    produce_waiting,
    render_table,
    report,
    tables_reads,
)
from bench.peers.flink.peer import (
    FLINK_VERSION,
    ICEBERG_FLINK_VERSION,
    FlinkSink,
    FlinkSinkSpec,
    create_iceberg_table,
)
from bench.peers.kafka_connect.peer import (
    ICEBERG_KAFKA_CONNECT_VERSION,
    KafkaConnectSink,
    KafkaConnectSinkSpec,
    create_sink_table,
)
from bench.peers.live_cdc import TABLE as LIVE_TABLE
from bench.peers.live_cdc import live_database
from bench.peers.processes import TreeMeter, stop_group
from bench.peers.workloads import Workload, ads, appends, debezium
from tests.connect_jars import DEBEZIUM_VERSION
from tests.kafka_jars import KAFKA_VERSION

PARTITIONS = 4
TRIGGER_SECONDS = 5.0  # icetide's default trigger.interval (icetide/config/runner.py)
POLL_SECONDS = 3.0
# Each peer's short name (ratio columns) and its column's heading.
PEERS = {
    "flink": ("Flink", f"Flink {FLINK_VERSION} sink"),
    "kafka_connect": ("Kafka Connect", f"Kafka Connect sink {ICEBERG_KAFKA_CONNECT_VERSION}"),
}


def systems_for(workload: Workload) -> tuple[str, ...]:
    """icetide and its peers on `workload`: Iceberg's Kafka Connect sink has no upsert mode, so it
    runs on appends only."""
    return ("icetide", "flink") if workload.upsert else ("icetide", "flink", "kafka_connect")


@dataclass
class SystemRun:
    """One system's part of the run."""

    name: str
    table: str
    pid: int = 0
    cpu_at_start: float = 0.0
    cpu_at_end: float = 0.0
    caught_up_at: float | None = None  # monotonic
    seconds: float = 0.0


def pipeline_file(
    path: Path,
    workload: Workload,
    warehouse: str,
    bootstrap: str,
    topic: str,
    table: str,
    maintenance: dict[str, Any] | str | None = None,
    *,
    read_ahead: bool = True,
) -> None:
    """icetide's pipeline file: its defaults, except what names the source and the table (and
    `maintenance`, the pipeline's maintenance block at its default policy, or "off"; None: the
    default block, a thread every 10s).
    A Debezium workload is a database sync (docs/how-to/debezium-sync.md): the topics of the
    connector's tables, each table created from its messages, `table` the one this workload feeds."""
    config: dict[str, Any] = {
        "pipeline": f"peer-{workload.name}",
        "warehouse": warehouse,
        "source": {"kafka": {"bootstrap_servers": bootstrap, "topic": topic, "starting_offsets": "earliest"}},
        "format": "json",
        "table": {
            "name": table,
            "schema": workload.spark_schema,
            "key": workload.key,
            "partition_by": [workload.partition_by],
        },
        "mode": "upsert" if workload.upsert else "append",
    }
    if not read_ahead:
        config["trigger"] = {"read_ahead": False}
    if workload.envelope == "debezium":
        # topic <topic.prefix>.<schema>.<source table>; `table` ends with the source table's name
        schema_topics, _, source_table = topic.rpartition(".")
        names = table.removesuffix(source_table)
        config["source"]["kafka"] = {
            "bootstrap_servers": bootstrap,
            "topic_pattern": schema_topics.replace(".", r"\.") + r"\..*",
            "starting_offsets": "earliest",
        }
        config["format"] = "debezium"
        config["table"] = {"name": names + "{table}"}
        config["tables"] = {table: {"partition_by": [workload.partition_by]}}
        config["dead_letter"] = names + "dead_letter"
    elif workload.order_by:
        config["order_by"] = workload.order_by
    if maintenance is not None:
        config["maintenance"] = maintenance
    path.write_text(json.dumps(config, indent=2))  # JSON is YAML


def maintenance_block(args: Any) -> dict[str, Any] | str | None:
    """icetide's `maintenance:` block from the command line: None (its default, every 10s), "off",
    or a schedule."""
    if args.icetide_maintenance == "off":
        return "off"
    if args.icetide_maintenance:
        return {"every": args.icetide_maintenance}
    if args.icetide_maintenance_batches:
        return {"every_batches": args.icetide_maintenance_batches}
    return None


def maintenance_words(block: dict[str, Any] | str | None) -> str:
    """How a report names icetide's maintenance block."""
    if block is None:
        return "its default maintenance (a thread every 10s)"
    if block == "off":
        return "`maintenance: off`"
    assert isinstance(block, dict)
    return f"`maintenance: {{{', '.join(f'{k}: {v}' for k, v in block.items())}}}` at its default policy"


def start_icetide(config: Path, log: Path) -> subprocess.Popen[bytes]:
    """`icetide run` of this checkout, in its own process group."""
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "icetide.cli", "run", str(config)],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def produce(bootstrap: str, topic: str, workload: Workload, messages: list[dict[str, Any]], rate: float | None) -> None:
    """Produce `messages` (stamping `produced_at`, epoch ms) at `rate` per second (None: at once);
    a message's partition is the CRC32 of its key, so a key's changes stay in order."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 500000})
    began = time.monotonic()
    for i, m in enumerate(messages):
        key = workload.key_of(m).encode()
        value = workload.encode(m, int(time.time() * 1000))
        produce_waiting(producer, topic, key=key, value=value, partition=zlib.crc32(key) % PARTITIONS)
        if rate and i % 200 == 0:
            ahead = i / rate - (time.monotonic() - began)
            if ahead > 0:
                time.sleep(ahead)
            producer.poll(0)
    if producer.flush(60):
        raise RuntimeError(f"messages still unsent to {topic} after 60 s")


def rows_of(workload: Workload) -> list[dict[str, Any]]:
    """The model's rows."""
    model = workload.model()
    return list(model.values()) if isinstance(model, dict) else model


def expected(workload: Workload, rows: list[dict[str, Any]]) -> tuple[int, int, float]:
    """The poll's check of a table against the rows it must hold: count, sum(clicks), sum(sum column)."""
    return (
        len(rows),
        sum(r["clicks"] or 0 for r in rows),
        round(sum(r[workload.sum_column] or 0.0 for r in rows), 2),
    )


def observed(spark: Any, workload: Workload, table: str) -> tuple[int, int, float] | None:
    if not spark.catalog.tableExists(table):
        return None  # icetide creates its table at its first batch
    try:
        spark.sql(f"REFRESH TABLE {table}")
        r = spark.sql(
            f"SELECT count(*), coalesce(sum(clicks), 0), coalesce(sum({workload.sum_column}), 0.0) FROM {table}"
        ).collect()[0]
    except Exception:  # a commit replaced a file between listing and reading: poll again
        return None
    return int(r[0]), int(r[1]), round(float(r[2]), 2)


def wait_for(
    spark: Any,
    workload: Workload,
    runs: dict[str, SystemRun],
    want: tuple[int, int, float],
    meter: TreeMeter,
    alive: dict[str, Any],
    timeout: float,
) -> None:
    """Poll until every table holds `want`; the moment and CPU of each as it gets there."""
    deadline = time.monotonic() + timeout
    pending = set(runs)
    while pending:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{sorted(pending)} did not reach {want} within {timeout:.0f} s")
        for name in sorted(pending):
            if not alive[name]():
                raise RuntimeError(f"{name} exited before its table held {want}")
            got = observed(spark, workload, runs[name].table)
            if got == want:
                cpu = meter.sample()
                runs[name].caught_up_at = time.monotonic()
                runs[name].cpu_at_end = cpu[name]
                pending.discard(name)
                print(f"{name}: table holds {want}", flush=True)
        if pending:
            time.sleep(POLL_SECONDS)


def check_model(spark: Any, workload: Workload, table: str, rows: list[dict[str, Any]]) -> None:
    """The table equals the model, row for row (times compared in epoch milliseconds)."""
    from pyspark.sql import functions as F

    names = [n for n, _, _ in workload.columns]
    timestamps = {n for n, _, kind in workload.columns if kind == "TIMESTAMP"}
    types = ", ".join(
        f"{n} {'BIGINT' if n in timestamps else t.replace(' NOT NULL', '')}" for n, t, _ in workload.columns
    )
    model = spark.createDataFrame([tuple(r[n] for n in names) for r in rows], types)
    got = spark.table(table).select(*[F.unix_millis(F.col(n)).alias(n) if n in timestamps else F.col(n) for n in names])
    missing = model.exceptAll(got).count()
    extra = got.exceptAll(model).count()
    if missing or extra:
        raise AssertionError(f"{table}: {missing} model rows missing, {extra} rows not in the model")


def freshness(spark: Any, table: str, since_ms: int) -> list[float]:
    """Seconds from produced_at to the commit that made the row visible.

    On a format v3 table that is the first commit of the row's `_last_updated_sequence_number`
    (row lineage, which compaction keeps); otherwise the commit of the snapshot that added the
    row's data file, which after a compaction is the compaction's, not the row's."""
    if _format_version(spark, table) >= 3:
        query = (
            "SELECT (unix_millis(q.committed_at) - unix_millis(t.produced_at)) / 1000.0 "
            f"FROM {table} t JOIN ("
            f"SELECT e.sequence_number seq, min(s.committed_at) committed_at FROM {table}.all_entries e "
            f"JOIN {table}.snapshots s ON e.snapshot_id = s.snapshot_id WHERE e.status = 1 GROUP BY 1"
            ") q ON t._last_updated_sequence_number = q.seq "
            f"WHERE unix_millis(t.produced_at) >= {since_ms}"
        )
    else:
        query = (
            "SELECT (unix_millis(s.committed_at) - unix_millis(t.produced_at)) / 1000.0 "
            f"FROM {table} t JOIN {table}.entries e ON t._file = e.data_file.file_path "
            f"JOIN {table}.snapshots s ON e.snapshot_id = s.snapshot_id "
            f"WHERE e.status <> 2 AND unix_millis(t.produced_at) >= {since_ms}"
        )
    return sorted(float(r[0]) for r in spark.sql(query).collect())


def _format_version(spark: Any, table: str) -> int:
    rows = spark.sql(f"SHOW TBLPROPERTIES {table} ('format-version')").collect()
    return int(rows[0]["value"]) if rows and str(rows[0]["value"]).isdigit() else 2


@dataclass(frozen=True)
class Files:
    """Live files of a table by partition."""

    partitions: int
    data_per_partition: float
    data_max: int
    deletes_per_partition: float
    data_kib: float
    delete_kib: float


def files(spark: Any, table: str) -> Files:
    rows = spark.sql(
        f"SELECT partition, content, count(*) n, sum(file_size_in_bytes) b FROM {table}.files GROUP BY 1, 2"
    ).collect()
    parts = {str(r["partition"]) for r in rows}
    data = [r for r in rows if r["content"] == 0]
    deletes = [r for r in rows if r["content"] != 0]
    n_data, n_del = sum(r["n"] for r in data), sum(r["n"] for r in deletes)
    return Files(
        partitions=len(parts),
        data_per_partition=n_data / max(1, len(parts)),
        data_max=max((r["n"] for r in data), default=0),
        deletes_per_partition=n_del / max(1, len(parts)),
        data_kib=sum(r["b"] for r in data) / max(1, n_data) / 1024,
        delete_kib=sum(r["b"] for r in deletes) / max(1, n_del) / 1024,
    )


def commits(spark: Any, table: str, since_ms: int) -> int:
    """Snapshots committed since `since_ms` (epoch ms)."""
    return int(
        spark.sql(f"SELECT count(*) FROM {table}.snapshots WHERE unix_millis(committed_at) >= {since_ms}").collect()[0][
            0
        ]
    )


def pick(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def run(workload_name: str, args: Any, warehouse: str) -> str:
    cores = os.cpu_count() or 1
    work = Path(warehouse) / "_work"
    work.mkdir()
    spark = bench_session(warehouse, memory="2g")
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.bench")
    if workload_name in ("ads", "debezium"):
        workload = ads(spark, hours=args.hours, events_per_batch=args.events_per_batch)
        if workload_name == "debezium":
            workload = debezium(workload)
    else:
        workload = appends(hours=args.hours, events=args.events, warm_up=args.warm_up)
    print(f"{workload.name}: {len(workload.warm_up):,} warm-up + {len(workload.messages):,} messages", flush=True)
    systems = systems_for(workload)
    live = workload.envelope == "debezium"  # (b): changes made to a PostgreSQL table, Debezium's topic
    runs = {s: SystemRun(s, f"lake.bench.{s}_{workload.name}") for s in systems}
    if live:  # a database sync names its tables after the source's: <prefix><table>
        runs["icetide"].table = f"lake.bench.icetide_{LIVE_TABLE}"
    create_iceberg_table(
        spark,
        runs["flink"].table,
        workload.spark_schema,
        key=workload.key if workload.upsert else [],
        partition_by=workload.partition_by,
        upsert=workload.upsert,
    )
    if "kafka_connect" in runs:
        create_sink_table(spark, runs["kafka_connect"].table, workload.spark_schema, partition_by=workload.partition_by)
    with kafka_broker(work / "broker") as bootstrap, contextlib.ExitStack() as source:
        from tests.kafka_broker import create_topic

        database = source.enter_context(live_database(workload, work, bootstrap, PARTITIONS)) if live else None
        topic = database.topic if database else create_topic(bootstrap, PARTITIONS, prefix=workload.name)
        config = work / "icetide-pipeline.yaml"
        pipeline_file(
            config,
            workload,
            warehouse,
            bootstrap,
            topic,
            runs["icetide"].table,
            maintenance_block(args),
            read_ahead=args.icetide_read_ahead == "on",
        )
        cols, select = workload.flink_source()
        flink = FlinkSink(
            FlinkSinkSpec(
                bootstrap=bootstrap,
                topic=topic,
                warehouse=f"file://{warehouse}",
                table=runs["flink"].table,
                source_columns=cols,
                select=select,
                upsert=workload.upsert,
                format="debezium-json" if workload.envelope == "debezium" else "json",
                checkpoint_dir=f"file://{work / 'flink-checkpoints'}",
                checkpoint_seconds=TRIGGER_SECONDS,
                parallelism=args.flink_parallelism or cores,
            ),
            work,
        )
        connect = (
            KafkaConnectSink(
                KafkaConnectSinkSpec(
                    bootstrap=bootstrap,
                    topic=topic,
                    warehouse=f"file://{warehouse}",
                    table=runs["kafka_connect"].table.removeprefix("lake."),
                    commit_interval_seconds=TRIGGER_SECONDS,
                    tasks=args.flink_parallelism or cores,
                ),
                work,
            )
            if "kafka_connect" in runs
            else None
        )
        icetide_proc = start_icetide(config, work / "icetide.log")
        runs["icetide"].pid = icetide_proc.pid
        alive: dict[str, Any] = {"icetide": lambda: icetide_proc.poll() is None}
        meter: TreeMeter | None = None
        try:
            runs["flink"].pid = flink.start()
            alive["flink"] = flink.running
            if connect is not None:
                runs["kafka_connect"].pid = connect.start()  # returns once its tasks run
                alive["kafka_connect"] = connect.running
            meter = TreeMeter({s: runs[s].pid for s in systems}).start()
            if database:  # the warm-up rows are in the table: the connector's snapshot
                first = database.rows()
            else:
                produce(bootstrap, topic, workload, workload.warm_up, None)
                first = rows_of(dataclasses.replace(workload, messages=[]))  # the warm-up alone
            started = time.monotonic()
            wait_for(spark, workload, runs, expected(workload, first), meter, alive, args.timeout)
            print(f"warm-up held by every system after {time.monotonic() - started:.0f} s", flush=True)
            cpu = meter.sample()
            for s in systems:
                runs[s].cpu_at_start = cpu[s]
            paced_ms = int(time.time() * 1000)
            paced_at = time.monotonic()
            if database:
                database.apply(workload.messages, args.rate)
                rows = database.rows()  # the lake against the database itself
                names = [n for n, _, _ in workload.columns]
                differ = Counter(tuple(r[n] for n in names) for r in rows)
                differ.subtract(tuple(r[n] for n in names) for r in rows_of(workload))
                if any(differ.values()):
                    raise AssertionError(f"the database differs from the generated changes in {len(+differ)} rows")
            else:
                produce(bootstrap, topic, workload, workload.messages, args.rate)
                rows = rows_of(workload)  # after production: the messages carry their produced_at
            wait_for(spark, workload, runs, expected(workload, rows), meter, alive, args.timeout)
            for s in systems:
                runs[s].seconds = (runs[s].caught_up_at or paced_at) - paced_at
        except BaseException:
            for name, peer in (("flink", flink), ("kafka_connect", connect)):
                if peer is not None:
                    print(f"{name}'s log ends:\n{peer.tail()}", file=sys.stderr, flush=True)
            raise
        finally:
            if meter is not None:
                meter.stop()
            stop_group(icetide_proc)
            flink.stop()
            if connect is not None:
                connect.stop()
            if args.logs:  # the systems' logs outlive the temporary warehouse
                Path(args.logs).mkdir(parents=True, exist_ok=True)
                for log in (*work.glob("*.log"), *work.glob("*/*.log")):
                    shutil.copy(log, Path(args.logs) / f"{log.parent.name}-{log.name}")
        produce_seconds = len(workload.messages) / args.rate if args.rate else 0.0
    for s in systems:
        check_model(spark, workload, runs[s].table, rows)
    print(f"every table equals the model ({', '.join(systems)})", flush=True)

    n = len(workload.messages)
    assert meter is not None  # started, or the run raised
    per_core = {s: n / max(1e-9, runs[s].cpu_at_end - runs[s].cpu_at_start) for s in systems}
    for s in systems:
        print(
            f"{s}: {runs[s].cpu_at_end - runs[s].cpu_at_start:.1f} CPU s, {per_core[s]:,.0f} rows/s per core, "
            f"held the model after {runs[s].seconds:.1f} s, peak RSS {meter.peak_rss.get(s, 0) / 2**20:,.0f} MiB",
            flush=True,
        )
    lags = {s: freshness(spark, runs[s].table, paced_ms) for s in systems}
    layout = {s: files(spark, runs[s].table) for s in systems}
    snapshots = {s: commits(spark, runs[s].table, paced_ms) for s in systems}
    for s in systems:
        print(
            f"{s}: freshness p50 {pick(lags[s], 0.5):.1f} s p99 {pick(lags[s], 0.99):.1f} s; "
            f"{snapshots[s]} commits; {layout[s]}",
            flush=True,
        )
    probe = rows[len(rows) // 2][workload.key_field]
    reads: dict[str, TableReads] = {}
    with duckdb_with_iceberg() as con:  # the systems' tables read in turn, under the same load
        targets = [ReadTarget(runs[s].table, current_metadata(spark, runs[s].table)) for s in systems]
        found = tables_reads(
            spark,
            targets,
            probe,
            con,
            key_column=workload.key_field,
            sum_column=workload.sum_column,
            duckdb_cap=args.read_cap,
        )
        for s, system_reads in zip(systems, found, strict=True):
            reads[s] = system_reads
            print(f"{s}: reads {reads[s]}", flush=True)
    spark.stop()

    def ratio(a: float, b: float) -> str:
        return f"{a / b:.2f}x" if b else "-"

    peers = systems[1:]
    measures: list[tuple[str, ...]] = [
        ("rows/s per core (CPU s of the process tree)", *(f"{per_core[s]:,.0f}" for s in systems)),
        ("CPU seconds", *(f"{runs[s].cpu_at_end - runs[s].cpu_at_start:.1f}" for s in systems)),
        ("seconds to hold the model (from paced start)", *(f"{runs[s].seconds:.1f}" for s in systems)),
        ("commits (snapshots) after the warm-up", *(str(snapshots[s]) for s in systems)),
        ("freshness p50 s", *(f"{pick(lags[s], 0.5):.1f}" for s in systems)),
        ("freshness p99 s", *(f"{pick(lags[s], 0.99):.1f}" for s in systems)),
        ("peak memory MiB (process tree RSS)", *(f"{meter.peak_rss.get(s, 0) / 2**20:,.0f}" for s in systems)),
        ("partitions (hours)", *(str(layout[s].partitions) for s in systems)),
        ("data files per partition (mean)", *(f"{layout[s].data_per_partition:.1f}" for s in systems)),
        ("data files per partition (max)", *(str(layout[s].data_max) for s in systems)),
        ("delete files per partition (mean)", *(f"{layout[s].deletes_per_partition:.1f}" for s in systems)),
        ("average data file KiB", *(f"{layout[s].data_kib:.0f}" for s in systems)),
        ("average delete file KiB", *(f"{layout[s].delete_kib:.0f}" for s in systems)),
    ]
    for kind in ("scan", "lookup"):
        for engine in ("spark", "duckdb", "pyiceberg"):
            got = {s: getattr(reads[s], kind)[engine] for s in systems}
            measures.append((f"{kind} s, {engine}", *(got[s].show() for s in systems)))

    def number(cell: str) -> float:
        return float(cell.replace(",", "").split()[0])

    body_rows = []
    for name, mine, *theirs in measures:
        ratios = []
        for other in theirs:
            try:
                ratios.append(ratio(number(mine), number(other)))
            except (ValueError, IndexError):
                ratios.append("-")
        body_rows.append((name, mine, *theirs, *ratios))
    table = render_table(
        ["measure", "icetide", *(PEERS[s][1] for s in peers), *(f"icetide / {PEERS[s][0]}" for s in peers)],
        body_rows,
    )
    load = os.getloadavg()
    command = (
        f".venv/bin/python bench/peers/compare.py --workload {workload.name} --hours {args.hours} "
        + (
            f"--events-per-batch {args.events_per_batch} "
            if workload.name != "appends"
            else f"--events {args.events} --warm-up {args.warm_up} "
        )
        + f"--rate {args.rate:g} --read-cap {args.read_cap:g}"
        + (f" --icetide-maintenance {args.icetide_maintenance}" if args.icetide_maintenance else "")
        + (
            f" --icetide-maintenance-batches {args.icetide_maintenance_batches}"
            if args.icetide_maintenance_batches
            else ""
        )
        + (" --icetide-read-ahead off" if args.icetide_read_ahead == "off" else "")
    )
    maintained = f", with {maintenance_words(maintenance_block(args))}"
    maintained += ", reading ahead off" if args.icetide_read_ahead == "off" else ""
    return (
        (
            f"Workload `{workload.name}`: {len(workload.warm_up):,} rows in a PostgreSQL table (the connector's "
            f"snapshot), then {n:,} changes made to it at {args.rate:,.0f}/s (about {produce_seconds:.0f} s), "
            f"captured by Debezium {DEBEZIUM_VERSION}'s PostgreSQL connector into one topic of {PARTITIONS} "
            f"partitions (bench/peers/live_cdc.py)"
            if live
            else f"Workload `{workload.name}`: {len(workload.warm_up):,} warm-up messages then {n:,} at "
            f"{args.rate:,.0f}/s (about {produce_seconds:.0f} s) into one topic of {PARTITIONS} partitions"
        )
        + f", {workload.simulated_hours} "
        f"simulated hours, {'upserts by ' + ', '.join(workload.key) if workload.upsert else 'appends'}; "
        f"{len(rows):,} rows in each table, each equal to the {'database table' if live else 'model'}. "
        f"icetide: `icetide run` {'on a database-sync pipeline ' if live else ''}at its defaults "
        f"(trigger 5 s{maintained}); Flink {FLINK_VERSION} with iceberg-flink-runtime-2.0 {ICEBERG_FLINK_VERSION}, "
        f"checkpoint every {TRIGGER_SECONDS:g} s, parallelism {args.flink_parallelism or cores}, "
        f"write.distribution-mode=hash{', upsert-enabled' if workload.upsert else ''}"
        + (
            f"; Iceberg's Kafka Connect sink {ICEBERG_KAFKA_CONNECT_VERSION} in an Apache Kafka {KAFKA_VERSION} "
            "Connect worker, "
            f"iceberg.control.commit.interval-ms={TRIGGER_SECONDS * 1000:.0f}, "
            f"tasks.max={args.flink_parallelism or cores}, "
            "the JSON converter without schemas"
            if connect is not None
            else ""
        )
        + f". All ran at once on {cores} cores; load average at the end "
        f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1/5/15 min), "
        f"the machine shared with other work. Command: `{command}`.\n\n{table}\n"
    )


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--workload", choices=("ads", "appends", "debezium"), default="ads")
    p.add_argument("--hours", type=int, default=24, help="simulated hours")
    p.add_argument("--events-per-batch", type=int, default=2000, help="ads: events per 15 simulated minutes")
    p.add_argument("--events", type=int, default=200_000, help="appends: messages after the warm-up")
    p.add_argument("--warm-up", type=int, default=2000, help="appends: warm-up messages")
    p.add_argument("--rate", type=float, default=2000.0, help="messages per second after the warm-up")
    p.add_argument(
        "--flink-parallelism",
        type=int,
        default=0,
        help="the Flink job's parallelism and the Kafka Connect sink's tasks.max (default: the machine's cores)",
    )
    p.add_argument(
        "--icetide-maintenance",
        default="",
        metavar="DURATION",
        help="give icetide's pipeline `maintenance: {every: DURATION}` (compaction beside the stream), or `off`; "
        "default: no block, icetide's default (every 10s)",
    )
    p.add_argument(
        "--icetide-maintenance-batches",
        type=int,
        default=0,
        metavar="N",
        help="give icetide's pipeline `maintenance: {every_batches: N}` (compaction between batches)",
    )
    p.add_argument(
        "--icetide-read-ahead",
        choices=("on", "off"),
        default="on",
        help="icetide's `trigger.read_ahead` (default on, its default): off to measure a batch read after its trigger",
    )
    p.add_argument("--logs", default="", metavar="FOLDER", help="copy every system's log into FOLDER at the end")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds to wait for a table to hold its model")
    p.add_argument("--read-cap", type=float, default=60.0, help="seconds after which a DuckDB read is stopped")
    args = p.parse_args()
    # a SIGTERM (a timeout) unwinds like an error: every system's processes are stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    body = in_temp_warehouse(lambda wh: run(args.workload, args, wh))
    peers = "the Flink Iceberg sink" + (" and Iceberg's Kafka Connect sink" if args.workload == "appends" else "")
    maintained = f", icetide with {maintenance_words(maintenance_block(args))}"
    maintained += ", reading ahead off" if args.icetide_read_ahead == "off" else ""
    report(f"bench/peers/compare.py: icetide beside {peers}, {args.workload}{maintained}", body, save=args.record)


if __name__ == "__main__":
    main()
