"""Benchmark: a live PostgreSQL database synced into Iceberg through Debezium, Kafka Connect, Apache
Kafka and `icetide run`, at a steady rate of changes; rows/s per core and the lag from the database
commit to the change being visible in Iceberg.

    .venv/bin/python bench/cdc_live.py [--seconds 120] [--rate 1000] [--tables 3] [--runs 1] [--record]

The servers are the tests' (tests/postgres_server.py, tests/kafka_broker.py with the benchmarks'
JVM options, tests/kafka_connect.py), started once on 127.0.0.1 and stopped at the end; each run
gets its own database, connector (as tests/test_cdc_live.py registers it: pgoutput, initial
snapshot), replication slot, topics and Iceberg namespace, and its own `icetide run` process on the
pipeline file of docs/how-to/debezium-sync.md ("A live database", trigger `--interval`).

Per run: `--tables` tables (`id bigint` key, an integer, a numeric, a text, `changed_at timestamptz
default clock_timestamp()`), `--initial-rows` rows each before the connector starts (its initial
snapshot, waited for until it is in the lake). Then a producer thread commits `--rate` changes/s
for `--seconds`, one transaction every 10 ms on one table in turn: about half inserts, a third
updates, the rest deletes of live rows (one statement of each kind per transaction). Measured:
- lag: per change, from its commit in PostgreSQL (`source.ts_us` of its Debezium event, the
  transaction's commit time) to (a) the record in Kafka (its timestamp, set by Connect's producer),
  (b) the Iceberg commit that holds it (`timestamp-ms` of the first snapshot of its table whose
  `icetide.source-position` is past the record's offset) and (c) that snapshot being visible (the
  time a poller reading each table's version-hint and metadata every 0.1 s first saw it). A
  consumer in this process reads every change topic for the offsets. The first `--warmup`
  seconds of changes are left out.
- rows/s per core: the changes committed over the CPU seconds (utime + stime from /proc, per
  process tree: bench/peers/processes.py) that PostgreSQL (postmaster, backends, the walsender),
  the broker, Kafka Connect, and `icetide run` (its Python driver; its Spark JVM with any Python
  workers under it) spent from the first paced change until the lake held the last one. This
  script's own work (producer, consumer, poller) is not counted, though the broker's and
  PostgreSQL's share of it is.
After the runs, one Spark session checks each table against the database (count, sums of the
numeric and the integer).
"""

from __future__ import annotations

import bisect
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT, bench_session, parser, render_table, report
from bench.peers.processes import Every, TreeMeter, stop_group

TICK_SECONDS = 0.01
POLL_SECONDS = 0.1
MIX = (("insert", 0.5), ("update", 0.35), ("delete", 0.15))
PROCESSES = ("PostgreSQL", "broker", "Kafka Connect", "icetide driver", "Spark JVM + workers")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def pick(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


class KeyPool:
    """A table's live keys, for updates and deletes drawn at random."""

    def __init__(self) -> None:
        self.keys: list[int] = []
        self.at: dict[int, int] = {}
        self.next_key = 1

    def new(self, count: int) -> list[int]:
        keys = list(range(self.next_key, self.next_key + count))
        self.next_key += count
        for key in keys:
            self.at[key] = len(self.keys)
            self.keys.append(key)
        return keys

    def draw(self, rng: random.Random, count: int) -> list[int]:
        return rng.sample(self.keys, min(count, len(self.keys)))

    def remove(self, key: int) -> None:
        i = self.at.pop(key)
        last = self.keys.pop()
        if last != key:
            self.keys[i] = last
            self.at[last] = i


class Producer:
    """Commits changes to PostgreSQL at a steady rate, on a thread."""

    def __init__(self, conn: Any, tables: list[str], rate: float, seed: int) -> None:
        self.conn = conn
        self.tables = tables
        self.rate = rate
        self.rng = random.Random(seed)
        self.pools = {t: KeyPool() for t in tables}
        self.changes = 0
        self.transactions = 0
        self.most_behind = 0  # the most changes it was ever behind its schedule
        self.started = 0.0  # wall-clock time of the first paced change
        self.seconds = 0.0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def create(self, initial_rows: int) -> None:
        with self.conn.cursor() as cur:
            for table in self.tables:
                cur.execute(
                    f"CREATE TABLE {table} (id bigint PRIMARY KEY, k integer NOT NULL, amount numeric(12,2) NOT NULL,"
                    " note text, changed_at timestamptz NOT NULL DEFAULT clock_timestamp())"
                )
        with self.conn.transaction(), self.conn.cursor() as cur:
            for table in self.tables:
                self.insert(cur, table, initial_rows)

    def insert(self, cur: Any, table: str, count: int) -> None:
        keys = self.pools[table].new(count)
        r = self.rng
        cur.execute(
            f"INSERT INTO {table} (id, k, amount, note)"
            " SELECT * FROM unnest(%s::bigint[], %s::integer[], %s::numeric[], %s::text[])",
            (
                keys,
                [r.randrange(1_000_000) for _ in keys],
                [round(r.uniform(-1e6, 1e6), 2) for _ in keys],
                [f"note {r.randrange(10_000)}" for _ in keys],
            ),
        )

    def change(self, table: str, count: int) -> None:
        """One transaction of `count` changes to `table`."""
        ops = self.rng.choices([m for m, _ in MIX], weights=[w for _, w in MIX], k=count)
        pool = self.pools[table]
        drawn = pool.draw(self.rng, ops.count("update") + ops.count("delete"))
        updates, deletes = drawn[: ops.count("update")], drawn[ops.count("update") :]
        inserts = count - len(updates) - len(deletes)
        with self.conn.transaction(), self.conn.cursor() as cur:
            if inserts:
                self.insert(cur, table, inserts)
            if updates:
                cur.execute(
                    f"UPDATE {table} SET amount = amount + 1, k = k + 1, note = %s, changed_at = clock_timestamp()"
                    " WHERE id = ANY(%s)",
                    (f"update {self.transactions}", updates),
                )
            if deletes:
                cur.execute(f"DELETE FROM {table} WHERE id = ANY(%s)", (deletes,))
        for key in deletes:
            pool.remove(key)
        self.changes += count
        self.transactions += 1

    def start(self, seconds: float) -> None:
        def loop() -> None:
            began = time.monotonic()
            self.started = time.time()
            turn = 0
            try:
                while not self._stop.is_set():
                    elapsed = time.monotonic() - began
                    if elapsed >= seconds:
                        break
                    due = int(self.rate * elapsed) - self.changes
                    self.most_behind = max(self.most_behind, due)
                    if due > 0:
                        # a late tick catches up, in transactions of at most 10 ticks' changes
                        self.change(self.tables[turn % len(self.tables)], min(due, max(1, int(self.rate / 10))))
                        turn += 1
                    next_tick = began + (int(elapsed / TICK_SECONDS) + 1) * TICK_SECONDS
                    self._stop.wait(max(0.0, next_tick - time.monotonic()))
            except BaseException as exc:
                self.error = exc
            self.seconds = time.monotonic() - began

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()
        if self.error is not None:
            raise RuntimeError(f"the producer failed: {self.error!r}") from self.error

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


@dataclass
class Change:
    topic: str
    partition: int
    offset: int
    committed_us: int  # source.ts_us: the transaction's commit time in PostgreSQL
    kafka_ms: int  # the record's timestamp


class ChangeReader:
    """Reads every change topic from the start, on a thread: each change's offset and commit time."""

    def __init__(self, bootstrap: str, topics: list[str], group: str) -> None:
        from confluent_kafka import Consumer, TopicPartition

        settings = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
        self.consumer = Consumer(settings)
        self._watermarks = Consumer(settings)  # the caller's: a consumer is used from one thread only
        self.consumer.assign([TopicPartition(t, 0, 0) for t in topics])
        self.topics = topics
        self.changes: list[Change] = []
        self.ends: dict[tuple[str, int], int] = {}  # next offset after the last record read
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        try:
            self._read()
        except BaseException as exc:
            self.error = repr(exc)
            raise

    def _read(self) -> None:
        while not self._stop.is_set():
            for message in self.consumer.consume(1000, timeout=0.2):
                if message.error() is not None:
                    self.error = str(message.error())
                    continue
                topic, partition = str(message.topic()), int(message.partition() or 0)
                offset = int(message.offset() or 0)
                self.ends[(topic, partition)] = offset + 1
                value = message.value()
                if value is None:  # the tombstone after a delete
                    continue
                source = json.loads(value)["payload"]["source"]
                committed = source.get("ts_us") or source["ts_ms"] * 1000
                self.changes.append(Change(topic, partition, offset, int(committed), message.timestamp()[1]))

    def high_watermarks(self) -> dict[tuple[str, int], int]:
        from confluent_kafka import TopicPartition

        return {
            (t, 0): self._watermarks.get_watermark_offsets(TopicPartition(t, 0), timeout=10)[1] for t in self.topics
        }

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.consumer.close()
        self._watermarks.close()


@dataclass
class Seen:
    """One snapshot of one table, as the poller first saw it."""

    snapshot_id: int
    committed_ms: int
    seen_s: float
    position: dict[str, dict[int, int]]


@dataclass
class LakePoller:
    """Reads each table's current metadata every POLL_SECONDS, on a thread (Hadoop catalog files:
    version-hint.text, then v<N>.metadata.json when it changed), noting when each snapshot appeared."""

    folder: Path  # the namespace's folder in the warehouse
    snapshots: dict[str, list[Seen]] = field(default_factory=dict)  # table -> snapshots, in order seen
    _versions: dict[str, str] = field(default_factory=dict)
    _every: Every | None = None

    def poll(self) -> None:
        now = time.time()
        for table_dir in self.folder.iterdir() if self.folder.exists() else []:
            meta = table_dir / "metadata"
            try:
                version = (meta / "version-hint.text").read_text().strip()
                if self._versions.get(table_dir.name) == version:
                    continue
                doc = json.loads((meta / f"v{version}.metadata.json").read_text())
            except (OSError, ValueError):
                continue  # not there yet, or being replaced: the next poll reads it
            self._versions[table_dir.name] = version
            seen = self.snapshots.setdefault(table_dir.name, [])
            known = {s.snapshot_id for s in seen}
            for snapshot in sorted(doc.get("snapshots", []), key=lambda s: s.get("sequence-number", 0)):
                if snapshot["snapshot-id"] in known:
                    continue
                text = snapshot.get("summary", {}).get("icetide.source-position")
                position = {
                    topic: {int(p): int(o) for p, o in parts.items()}
                    for topic, parts in (json.loads(text) if text else {}).items()
                    if isinstance(parts, dict)
                }
                seen.append(Seen(snapshot["snapshot-id"], snapshot["timestamp-ms"], now, position))

    def committed(self, table: str, topic: str) -> int:
        """The highest next offset of `topic` (partition 0) that `table` has committed."""
        return max((s.position.get(topic, {}).get(0, 0) for s in self.snapshots.get(table, [])), default=0)

    def start(self) -> LakePoller:
        self._every = Every(POLL_SECONDS, self.poll).start()
        return self

    def stop(self) -> None:
        if self._every is not None:
            self._every.stop()


def lags(changes: list[Change], poller: LakePoller, table_of: dict[str, str]) -> dict[str, list[float]]:
    """Seconds from each change's commit in PostgreSQL to Kafka, to the Iceberg commit holding it and
    to that commit being seen; changes never seen in the lake are left out (counted by the caller)."""
    out: dict[str, list[float]] = {"kafka": [], "iceberg commit": [], "visible": []}
    timelines: dict[str, tuple[list[int], list[Seen]]] = {}
    for topic, table in table_of.items():
        reach, seen, best = [], [], 0
        for s in poller.snapshots.get(table, []):
            offset = s.position.get(topic, {}).get(0, 0)
            if offset > best:  # a snapshot that moved this topic's position on
                best = offset
                reach.append(offset)
                seen.append(s)
        timelines[topic] = (reach, seen)
    for c in changes:
        reach, seen = timelines[c.topic]
        i = bisect.bisect_right(reach, c.offset)  # the first snapshot whose next offset is past it
        committed_s = c.committed_us / 1e6
        out["kafka"].append(c.kafka_ms / 1000 - committed_s)
        if i < len(seen):
            out["iceberg commit"].append(seen[i].committed_ms / 1000 - committed_s)
            out["visible"].append(seen[i].seen_s - committed_s)
    return out


def postmaster_pid(conn: Any) -> int:
    """PostgreSQL's postmaster: the parent of this connection's backend."""
    with conn.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        backend = cur.fetchone()[0]
    return parent_pid(backend)


def parent_pid(pid: int | str) -> int:
    """The parent of process `pid`, from /proc."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def spark_jvm_pid(driver: int) -> int:
    """The Spark JVM of `icetide run` (pid `driver`): its child running SparkSubmit (not the short
    `java -version` of its Java check)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            if parent_pid(entry.name) == driver and b"SparkSubmit" in (entry / "cmdline").read_bytes():
                return int(entry.name)
    raise RuntimeError(f"icetide run ({driver}) runs no Spark JVM")


@dataclass
class RunResult:
    """What one run measured."""

    changes: int
    produce_seconds: float
    most_behind: int
    window_seconds: float  # first paced change -> the lake held the last one
    drain_seconds: float  # producer done -> the lake held the last change
    cpu: dict[str, float]  # process -> CPU seconds in the window
    harness_cpu: float
    lag: dict[str, list[float]]
    late_lag_p50: float  # visible lag of the changes in the last fifth of the paced phase
    unseen: int  # changes read from Kafka that no snapshot reached (should be 0)
    batches: dict[str, Any]
    tables: dict[str, str]  # lake table -> database table, for the check
    database: str
    load: tuple[tuple[float, ...], tuple[float, ...]]  # load averages when the changes began, and at the end

    @property
    def cpu_total(self) -> float:
        return sum(self.cpu.values())


def batch_stats(log_path: Path, since: float) -> dict[str, Any]:
    """The runner's metrics lines of batches finished after `since` (epoch s)."""
    from datetime import datetime

    lines = []
    for line in log_path.read_text(errors="replace").splitlines():
        if line.startswith("{") and '"batch_id"' in line:
            with contextlib.suppress(ValueError):
                lines.append(json.loads(line))
    mine = [b for b in lines if datetime.fromisoformat(b["finished_at"]).timestamp() >= since]
    paths: dict[str, int] = {}
    for b in mine:
        path = str(b.get("path", "?")).split(":")[0]
        paths[path] = paths.get(path, 0) + 1

    def med(key: str) -> float:
        return statistics.median([float(b.get(key) or 0) for b in mine]) if mine else float("nan")

    return {
        "count": len(mine),
        "paths": paths,
        "records": med("records_in"),
        "read_decode": med("read_decode_seconds"),
        "write": med("write_seconds"),
        "commit": med("commit_seconds"),
    }


def harness_cpu() -> float:
    """CPU seconds of this process's own threads (not its children)."""
    t = os.times()
    return t.user + t.system


def one_run(servers: Any, args: Any, work: Path, index: int) -> RunResult:
    from tests.kafka_broker import _die_with_parent
    from tests.test_cdc_live import postgres_connector, with_slot_dropped

    postgres, broker, connect = servers
    tag = uuid.uuid4().hex[:8]
    database = postgres.new_database()
    conn = postgres.connect(database)
    tables = [f"t{i:02d}" for i in range(args.tables)]
    producer = Producer(conn, tables, args.rate, seed=46 + index)
    producer.create(args.initial_rows)
    prefix, namespace = f"pg{tag}", f"cdcbench{tag}"
    topics = {f"{prefix}.public.{t}": t for t in tables}
    table_of = {topic: f"{database}_{t}" for topic, t in topics.items()}
    connector = f"bench-{tag}"
    warehouse = work / "warehouse"
    pipeline = {
        "pipeline": f"cdc-bench-{tag}",
        "warehouse": str(warehouse),
        "source": {
            "kafka": {
                "bootstrap_servers": broker.bootstrap,
                "topic_pattern": rf"{prefix}\..*",
                "starting_offsets": "earliest",
            }
        },
        "format": "debezium",
        "table": {"name": f"lake.{namespace}.{{db}}_{{table}}"},
        "schema_evolution": True,
        "mode": "upsert",
        "trigger": {"interval": args.interval},
        "dead_letter": f"lake.{namespace}.dead_letter",
    }
    config = work / f"pipeline-{tag}.yaml"
    config.write_text(yaml.safe_dump(pipeline, sort_keys=False))
    sync_log = work / f"sync-{tag}.log"
    sync: subprocess.Popen[bytes] | None = None
    reader: ChangeReader | None = None
    poller = LakePoller(warehouse / namespace).start()
    try:
        connect.create_connector(connector, postgres_connector(postgres, database, prefix, tag))
        with sync_log.open("ab") as out:
            sync = subprocess.Popen(
                [sys.executable, "-m", "icetide.cli", "run", str(config)],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,  # never outlives this script, however it ends
            )
        # The initial snapshot in the lake: every table holds its topic's records so far.
        wait_topics(broker.bootstrap, list(topics), args.drain_timeout)
        reader = ChangeReader(broker.bootstrap, list(topics), f"bench-{tag}")
        deadline = time.monotonic() + args.drain_timeout
        while not all(reader.ends.get((t, 0), 0) >= args.initial_rows for t in topics) or not all(
            poller.committed(table_of[t], t) >= reader.ends[(t, 0)] for t in topics
        ):
            if sync.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the initial snapshot did not reach the lake; see {sync_log}")
            time.sleep(0.2)
        log(f"run {index + 1}: the initial snapshot ({args.initial_rows:,} rows x {args.tables}) is in the lake")
        assert broker.proc is not None and connect.proc is not None
        jvm = spark_jvm_pid(sync.pid)
        meter = TreeMeter(
            {
                "PostgreSQL": postmaster_pid(conn),
                "broker": broker.proc.pid,
                "Kafka Connect": connect.proc.pid,
                "icetide": sync.pid,
                "Spark JVM + workers": jvm,
            }
        ).start()
        before, own_before, load_before = meter.sample(), harness_cpu(), os.getloadavg()
        producer.start(args.seconds)
        said = time.monotonic()
        while producer.running():
            if sync.poll() is not None:
                raise RuntimeError(f"icetide run exited with {sync.returncode}; see {sync_log}")
            if time.monotonic() - said >= 15:
                said = time.monotonic()
                lake = sum(poller.committed(table_of[t], t) for t in topics)
                read = sum(reader.ends.values())
                log(f"  {producer.changes:,} changes; offsets read {read:,}, in the lake {lake:,}")
            time.sleep(0.5)
        producer.join()
        done = time.time()
        log(f"run {index + 1}: {producer.changes:,} changes in {producer.seconds:.1f}s; waiting for the lake")
        deadline = time.monotonic() + args.drain_timeout
        started_us = producer.started * 1e6
        while sum(c.committed_us >= started_us for c in reader.changes) < producer.changes:  # Connect's last ones
            if time.monotonic() > deadline or reader.error:
                raise RuntimeError(f"not every change reached Kafka in time (reader: {reader.error})")
            time.sleep(0.2)
        ends = reader.high_watermarks()
        while not all(reader.ends.get(w, 0) >= end for w, end in ends.items()):  # and the tombstones
            if time.monotonic() > deadline or reader.error:
                raise RuntimeError(f"the reader did not reach the topics' ends in time (reader: {reader.error})")
            time.sleep(0.1)
        while not all(poller.committed(table_of[t], t) >= ends[(t, 0)] for t in topics):
            if sync.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the lake did not reach the topics' ends in time; see {sync_log}")
            time.sleep(POLL_SECONDS)
        caught_up = time.time()
        after, own_after = meter.sample(), harness_cpu()
        meter.stop()
        load = os.getloadavg()
    finally:
        if sync is not None:
            stop_group(sync)
        poller.stop()
        producer.stop()
        if reader is not None:
            reader.stop()
        connect.delete_connector(connector)
        conn.close()
        with_slot_dropped(postgres, database, f"dbz_{tag}")
    cpu = {name: after.get(name, 0.0) - before.get(name, 0.0) for name in after}
    cpu["icetide driver"] = cpu.pop("icetide") - cpu["Spark JVM + workers"]
    counted_from = producer.started + args.warmup
    paced = [c for c in reader.changes if c.committed_us / 1e6 >= counted_from]
    measured = lags(paced, poller, table_of)
    late = [c for c in paced if c.committed_us / 1e6 >= producer.started + 0.8 * producer.seconds]
    late_lag = lags(late, poller, table_of)["visible"]
    return RunResult(
        changes=producer.changes,
        produce_seconds=producer.seconds,
        most_behind=producer.most_behind,
        window_seconds=caught_up - producer.started,
        drain_seconds=caught_up - done,
        cpu={name: cpu[name] for name in PROCESSES},
        harness_cpu=own_after - own_before,
        lag=measured,
        late_lag_p50=pick(late_lag, 0.5),
        unseen=len(paced) - len(measured["visible"]),
        batches=batch_stats(sync_log, producer.started),
        tables={f"lake.{namespace}.{lake}": topics[t] for t, lake in table_of.items()},
        database=database,
        load=(load_before, load),
    )


def wait_topics(bootstrap: str, topics: list[str], timeout: float) -> None:
    """Until the connector's snapshot has created every topic (Connect creates them)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = admin.list_topics(timeout=10).topics
        if all(t in found and found[t].error is None for t in topics):
            return
        time.sleep(0.5)
    raise RuntimeError(f"the connector created no topics {topics} in {timeout:g}s")


def check(postgres: Any, warehouse: Path, results: list[RunResult]) -> list[str]:
    """Each lake table against its database table: count, sum(amount), sum(k). Differences found."""
    spark = bench_session(str(warehouse), memory="1g")
    found = []
    try:
        for result in results:
            conn = postgres.connect(result.database)
            try:
                for lake, table in result.tables.items():
                    with conn.cursor() as cur:
                        cur.execute(f"SELECT count(*), coalesce(sum(amount), 0), coalesce(sum(k), 0) FROM {table}")
                        want = tuple(cur.fetchone())
                    row = spark.sql(f"SELECT count(*), coalesce(sum(amount), 0), coalesce(sum(k), 0) FROM {lake}")
                    got = tuple(row.collect()[0])
                    if tuple(map(str, got)) != tuple(map(str, want)):
                        rows = rows_differing(conn, spark, table, lake)
                        found.append(f"{lake}: lake {got}, database {want}; {rows}")
            finally:
                conn.close()
    finally:
        spark.stop()
    return found


def rows_differing(conn: Any, spark: Any, table: str, lake: str) -> str:
    """The first rows (id, k, amount, note) that differ between the database and the lake."""
    with conn.cursor() as cur:
        cur.execute(f"SELECT id, k, amount::text, note, changed_at FROM {table}")
        want = {r[0]: r[1:] for r in cur.fetchall()}
    got = {
        r[0]: tuple(r[1:])
        for r in spark.sql(f"SELECT id, k, CAST(amount AS STRING), note, changed_at FROM {lake}").collect()
    }
    differ = sorted(k for k in set(want) | set(got) if want.get(k, (None,) * 4)[:3] != got.get(k, (None,) * 4)[:3])
    return f"{len(differ)} rows differ, e.g. " + "; ".join(
        f"id {k}: database {want.get(k)}, lake {got.get(k)}" for k in differ[:3]
    )


@contextlib.contextmanager
def servers(work: Path) -> Iterator[tuple[Any, Any, Any]]:
    """The tests' PostgreSQL, Apache Kafka (benchmark JVM options) and Kafka Connect, stopped after."""
    from tests.kafka_broker import BENCH_JVM_OPTIONS, kafka_broker_process
    from tests.kafka_connect import kafka_connect_process
    from tests.postgres_server import postgres_server

    with (
        postgres_server() as postgres,
        kafka_broker_process(work / "kafka", jvm_options=BENCH_JVM_OPTIONS) as broker,
        kafka_connect_process(work / "connect", broker.bootstrap) as connect,
    ):
        yield postgres, broker, connect


def versions(postgres: Any) -> str:
    import pyspark

    from icetide.spark.maven import ICEBERG_VERSION
    from tests.connect_jars import DEBEZIUM_VERSION
    from tests.kafka_jars import KAFKA_VERSION

    server = postgres.sql("SHOW server_version").split()[0]
    return (
        f"PostgreSQL {server}, Apache Kafka and Kafka Connect {KAFKA_VERSION}, Debezium PostgreSQL connector "
        f"{DEBEZIUM_VERSION}, PySpark {pyspark.__version__}, Iceberg {ICEBERG_VERSION}"
    )


def body(args: Any, results: list[RunResult], diffs: list[str] | None, about: str, command: str) -> str:
    def per_run(fn: Any, fmt: str = "{:,.0f}") -> list[str]:
        values = [fn(r) for r in results]
        shown = [fmt.format(v) for v in values]
        return [*shown, fmt.format(statistics.median(values))] if len(results) > 1 else shown

    rows: list[tuple[str, ...]] = [
        ("changes committed", *per_run(lambda r: r.changes)),
        ("changes/s achieved by the producer", *per_run(lambda r: r.changes / r.produce_seconds)),
        ("most changes behind schedule", *per_run(lambda r: r.most_behind)),
        ("window s (first change -> lake holds the last)", *per_run(lambda r: r.window_seconds, "{:.1f}")),
        ("drain s (last change -> in the lake)", *per_run(lambda r: r.drain_seconds, "{:.1f}")),
        *(
            (f"CPU s, {name}", *per_run(lambda r, n=name: r.cpu[n], "{:.1f}"))  # type: ignore[misc]
            for name in PROCESSES
        ),
        ("CPU s, all of them", *per_run(lambda r: r.cpu_total, "{:.1f}")),
        ("cores busy (CPU s / window s)", *per_run(lambda r: r.cpu_total / r.window_seconds, "{:.2f}")),
        ("rows/s per core (changes / CPU s)", *per_run(lambda r: r.changes / r.cpu_total)),
        ("lag p50 s, commit -> Kafka", *per_run(lambda r: pick(r.lag["kafka"], 0.5), "{:.2f}")),
        ("lag p99 s, commit -> Kafka", *per_run(lambda r: pick(r.lag["kafka"], 0.99), "{:.2f}")),
        ("lag p50 s, commit -> Iceberg commit", *per_run(lambda r: pick(r.lag["iceberg commit"], 0.5), "{:.2f}")),
        ("lag p99 s, commit -> Iceberg commit", *per_run(lambda r: pick(r.lag["iceberg commit"], 0.99), "{:.2f}")),
        ("lag p50 s, commit -> visible", *per_run(lambda r: pick(r.lag["visible"], 0.5), "{:.2f}")),
        ("lag p99 s, commit -> visible", *per_run(lambda r: pick(r.lag["visible"], 0.99), "{:.2f}")),
        ("lag p50 s, commit -> visible, last fifth", *per_run(lambda r: r.late_lag_p50, "{:.2f}")),
        ("changes measured for lag (never seen: 0)", *per_run(lambda r: len(r.lag["visible"]))),
        ("batches", *per_run(lambda r: r.batches["count"])),
        ("batch median: records", *per_run(lambda r: r.batches["records"])),
        ("batch median: read+decode / write / commit s", *(_batch_times(r) for r in results)),
        ("CPU s of this script (not counted)", *per_run(lambda r: r.harness_cpu, "{:.1f}")),
        ("load average 1/5/15 min, start; end", *("; ".join(_load(x) for x in r.load) for r in results)),
    ]
    if any(r.unseen for r in results):
        rows.append(("changes no snapshot reached", *(str(r.unseen) for r in results)))
    headers = ["measure", *(f"run {i + 1}" for i in range(len(results)))]
    if len(results) > 1:
        headers.append("median")
        rows = [(*row, "") if len(row) == len(results) + 1 else row for row in rows]
    paths = "; ".join(f"run {i + 1}: {r.batches['paths']}" for i, r in enumerate(results))
    checked = (
        "not checked (--no-check)"
        if diffs is None
        else ("every table equals its database table (count, sum of the numeric and the integer)" if not diffs else
              "MISMATCH: " + "; ".join(diffs[:5]))
    )  # fmt: skip
    return (
        f"Command: `{command}`. {about}. {args.tables} tables of {args.initial_rows:,} rows (the initial snapshot, "
        f"not measured), then {args.rate:g} changes/s for {args.seconds:g} s (about half inserts, a third updates, "
        f"the rest deletes, one transaction every 10 ms on one table in turn); lag over the changes after the first "
        f"{args.warmup:g} s; `icetide run` trigger {args.interval}. PostgreSQL only (the MariaDB connector is not "
        f"measured). Batch paths: {paths}. Check: {checked}.\n\n{render_table(headers, rows)}\n"
    )


def _load(averages: tuple[float, ...]) -> str:
    return " / ".join(f"{x:.1f}" for x in averages)


def _batch_times(r: RunResult) -> str:
    b = r.batches
    return f"{b['read_decode']:.2f} / {b['write']:.2f} / {b['commit']:.2f}"


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--seconds", type=float, default=120, help="seconds of paced changes per run")
    p.add_argument("--rate", type=float, default=1000, help="changes/s, all tables together")
    p.add_argument("--tables", type=int, default=3)
    p.add_argument("--runs", type=int, default=1, help="runs on the same servers; the table shows their medians")
    p.add_argument("--initial-rows", type=int, default=1000, help="rows per table before the connector starts")
    p.add_argument("--warmup", type=float, default=10, help="seconds of changes left out of the lag")
    p.add_argument("--interval", default="1s", help="the runner's trigger interval")
    p.add_argument("--drain-timeout", type=float, default=600)
    p.add_argument("--no-check", action="store_true", help="skip the check of the lake against the database")
    p.add_argument("--keep", action="store_true", help="keep the work folder (warehouse, logs)")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="icetide-cdc-bench-"))
    results: list[RunResult] = []
    diffs: list[str] | None = None
    with servers(work) as (postgres, broker, connect):
        about = versions(postgres)
        log(f"{about}; work folder {work}")
        for i in range(args.runs):
            results.append(one_run((postgres, broker, connect), args, work, i))
            r = results[-1]
            log(
                f"run {i + 1}: {r.changes / r.cpu_total:,.0f} rows/s per core, visible lag p50 "
                f"{pick(r.lag['visible'], 0.5):.2f}s p99 {pick(r.lag['visible'], 0.99):.2f}s"
            )
        if not args.no_check:
            diffs = check(postgres, work / "warehouse", results)
    if not args.keep:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    command = "python bench/cdc_live.py " + " ".join(sys.argv[1:])
    title = f"bench/cdc_live.py: PostgreSQL through Debezium and Kafka Connect at {args.rate:g} changes/s"
    report(title, body(args, results, diffs, about, command.strip()), save=args.record)


if __name__ == "__main__":
    main()
