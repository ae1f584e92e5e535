"""Soak: Kafka upserts at a steady rate through `icetide run`, with maintenance, kills and a broker restart.

    .venv/bin/python bench/soak.py [--minutes 30] [--rate 500] [--keys 20000] [--max-records 50000] [--record]

For `--minutes` it produces JSON upserts (about 5% `_op: DELETE`, and one deliberately bad record
every `--bad-every` events) over a bounded key space into a 4-partition topic on an Apache Kafka
broker (tests/kafka_broker.py, one KRaft node), while these run as real subprocesses, as a user would run them:
- `icetide run pipeline.yaml` (mode upsert, trigger 2s), SIGKILLed at random moments every
  10-20% of the run (3-6 minutes in a 30-minute soak) and started again once it has exited;
- `icetide maintain --pipeline pipeline.yaml --every 1m` beside it.
Half way through, the broker is killed (SIGKILL, a crash), stays down for `--broker-down`
seconds and starts again on the same ports with its log: the runner has to ride the outage out
through its `restart:` supervision and read on from the table's position. The producer pauses
(everything sent is acknowledged) before the kill and produces on once the broker serves again.

At the end it waits for the runner to reach the last offsets, stops both processes and checks:
the table equals a reference model (per partition, upserts and deletes applied in offset order;
keys never span partitions); the dead-letter table holds exactly the bad records; the
metadata.json files and snapshots stay bounded (counted at start, middle and end); and reports
freshness (produce -> the commit that made the record visible, from each snapshot's committed
source position and time).
"""

from __future__ import annotations

import bisect
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT, bench_session, parser, render_table, report

SCHEMA = "k STRING NOT NULL, n BIGINT, amount DOUBLE, tag STRING, ts TIMESTAMP, produced_at TIMESTAMP"
COLUMNS = ["k", "n", "amount", "tag", "ts", "produced_at"]
TOPIC = "soak"
PARTITIONS = 4
TABLE = "lake.soak.kv"
DEAD_LETTER = "lake.soak.kv_dead_letter"
TAGS = ["red", "green", "blue", "cyan", "magenta"]


def log(msg: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# -- the producer and the reference model ---------------------------------------------------------


class ProducedLog:
    """Produces records at a steady rate (paused while the broker restarts) and remembers per topic,
    partition and offset what landed (`(key, value, ...)` as `records` gives it)."""

    def __init__(self, bootstrap: str, rate: int, topics: list[str], partitions: int) -> None:
        self.bootstrap = bootstrap
        self.rate = rate
        self.partitions = partitions
        self.log: dict[str, dict[int, dict[int, tuple[Any, ...]]]] = {
            t: {p: {} for p in range(partitions)} for t in topics
        }
        self.errors: list[str] = []
        self.paused = threading.Event()
        self.stopped = threading.Event()
        self.idle = threading.Event()
        self.producer = self._producer("soak")

    def records(self) -> list[tuple[str, int, tuple[Any, ...]]]:
        """The next event's records: (topic, partition, (key, value, what else the log keeps))."""
        raise NotImplementedError

    def _producer(self, client_id: str) -> Any:
        from confluent_kafka import Producer

        return Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "client.id": client_id,
                "linger.ms": 20,
                "acks": "all",
                "enable.idempotence": True,  # no duplicate from a retry across the broker's restart
                "max.in.flight.requests.per.connection": 1,
                "message.timeout.ms": 300000,
                "log_level": 3,  # no reconnect chatter while the broker restarts
            }
        )

    def create_topics(self) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        topics = [NewTopic(t, num_partitions=self.partitions, replication_factor=1) for t in self.log]
        for future in admin.create_topics(topics).values():
            future.result(timeout=30)

    def run(self) -> None:
        began = time.monotonic()
        sent = 0
        while not self.stopped.is_set():
            if self.paused.is_set():
                self.producer.flush(300)
                self.idle.set()
                while self.paused.is_set() and not self.stopped.is_set():
                    time.sleep(0.05)
                self.idle.clear()
                began, sent = time.monotonic(), 0
                continue
            due = int((time.monotonic() - began) * self.rate)
            while sent < due:
                for topic, partition, rec in self.records():

                    def delivered(err: Any, msg: Any, rec: Any = rec) -> None:
                        if err is not None:
                            self.errors.append(str(err))
                        else:
                            self.log[msg.topic()][msg.partition()][msg.offset()] = rec

                    self.producer.produce(topic, key=rec[0], value=rec[1], partition=partition, on_delivery=delivered)
                sent += 1
            self.producer.poll(0)
            time.sleep(0.02)
        self.producer.flush(300)
        self.idle.set()

    def ends(self) -> dict[str, dict[int, int]]:
        """Per topic and partition, the next offset (every record delivered so far)."""
        return {t: {p: max(r, default=-1) + 1 for p, r in parts.items()} for t, parts in self.log.items()}


class Stream(ProducedLog):
    """The upsert stream; its log keeps (key, value, produced_ms, kind), kind "u" | "d" | "bad"."""

    def __init__(self, bootstrap: str, rate: int, keys: int, bad_every: int, seed: int) -> None:
        super().__init__(bootstrap, rate, [TOPIC], PARTITIONS)
        self.keys = keys
        self.bad_every = bad_every
        self.rng = random.Random(seed)
        self.seq = 0

    def records(self) -> list[tuple[str, int, tuple[Any, ...]]]:
        self.seq += 1
        i = self.seq
        k = self.rng.randrange(self.keys)
        key = f"k{k:06d}"
        now = int(time.time() * 1000)
        if self.bad_every and i % self.bad_every == 0:
            kind, body = "bad", {"k": key, "n": i, "ts": "not a time", "produced_at": now}
        elif self.rng.random() < 0.05:
            kind, body = "d", {"k": key, "_op": "DELETE", "produced_at": now}
        else:
            kind = "u"
            body = {
                "k": key,
                "n": i,
                "amount": round(self.rng.random() * 1000, 3),
                "tag": self.rng.choice(TAGS) if self.rng.random() < 0.9 else None,
                "ts": now - self.rng.randrange(86_400_000),
                "produced_at": now,
            }
        return [(TOPIC, k % PARTITIONS, (key.encode(), json.dumps(body).encode(), now, kind))]

    def model(self) -> tuple[dict[str, tuple[Any, ...]], set[str]]:
        """key -> row after applying each partition in offset order; the bad records' positions."""
        from datetime import UTC, datetime

        def ts(ms: int) -> datetime:
            return datetime.fromtimestamp(ms / 1000, UTC).replace(tzinfo=None)

        rows: dict[str, tuple[Any, ...]] = {}
        bad: set[str] = set()
        for p, records in self.log[TOPIC].items():
            for o in sorted(records):
                _, value, _, kind = records[o]
                r = json.loads(value)
                if kind == "bad":
                    bad.add(f"{TOPIC}/{p}@{o}")
                elif kind == "d":
                    rows.pop(r["k"], None)
                else:
                    rows[r["k"]] = (r["k"], r["n"], r["amount"], r["tag"], ts(r["ts"]), ts(r["produced_at"]))
        return rows, bad


# -- watching the table's metadata from outside ---------------------------------------------------


class MetadataWatch:
    """Polls the table's metadata folder: metadata.json files, snapshots, committed positions."""

    def __init__(self, table_dir: Path) -> None:
        self.dir = table_dir / "metadata"
        self.commits: dict[int, tuple[int, dict[int, int]]] = {}  # snapshot id -> (ms, position)
        self.latest: dict[int, int] = {}
        self.peak = (0, 0, 0)  # most metadata.json files, their bytes, snapshots seen at once
        self.stop = threading.Event()

    def sample(self) -> tuple[int, int, int]:
        """(metadata.json files, their bytes, snapshots in the current metadata)."""
        files = [f for f in self.dir.glob("*.metadata.json")] if self.dir.exists() else []
        size = sum(f.stat().st_size for f in files if f.exists())
        snaps = -1
        for _ in range(5):
            try:
                version = (self.dir / "version-hint.text").read_text().strip()
                meta = json.loads((self.dir / f"v{version}.metadata.json").read_text())
            except (OSError, ValueError):
                time.sleep(0.1)
                continue
            snaps = len(meta.get("snapshots", []))
            for s in meta.get("snapshots", []):
                pos = s.get("summary", {}).get("icetide.source-position")
                if pos and s["snapshot-id"] not in self.commits:
                    position = parse_position(json.loads(pos))
                    if position:
                        self.commits[s["snapshot-id"]] = (s["timestamp-ms"], position)
                        for p, o in position.items():
                            self.latest[p] = max(self.latest.get(p, 0), o)
            break
        self.peak = (max(self.peak[0], len(files)), max(self.peak[1], size), max(self.peak[2], snaps))
        return len(files), size, snaps

    def run(self) -> None:
        while not self.stop.wait(2):
            with contextlib.suppress(OSError):
                self.sample()


def parse_position(pos: Any) -> dict[int, int]:
    """The committed Kafka position, partition -> next offset (whatever nesting the summary uses)."""
    if isinstance(pos, dict):
        if pos and all(str(k).isdigit() for k in pos) and all(isinstance(v, int) for v in pos.values()):
            return {int(k): int(v) for k, v in pos.items()}
        for key in ("position", "offsets", TOPIC, "kafka"):
            if key in pos:
                found = parse_position(pos[key])
                if found:
                    return found
        for v in pos.values():
            found = parse_position(v)
            if found:
                return found
    return {}


# -- the run --------------------------------------------------------------------------------------


def spawn(args: list[str], out: Path) -> subprocess.Popen[bytes]:
    with open(out, "ab") as f:
        return subprocess.Popen(
            [sys.executable, "-m", "icetide.cli", *args], cwd=ROOT, stdout=f, stderr=subprocess.STDOUT
        )


def pick(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))]


class SoakRun:
    """What a soak runs and disturbs: the broker, `icetide run` (SIGKILLed every 10-20% of the run and
    started again, or started again when it exits on its own), `icetide maintain --every 1m` beside
    it once the table is there, and one broker crash and restart half way (the producer paused).
    Logs go to runner.log, maintain.log and kafka/broker.log in `work`."""

    def __init__(self, work: Path, minutes: float, seed: int, broker_down: float) -> None:
        self.work = work
        self.duration = minutes * 60
        self.rng = random.Random(seed + 1)
        self.broker_down = broker_down
        from tests.kafka_broker import BENCH_JVM_OPTIONS, KafkaBroker

        self.broker = KafkaBroker(work / "kafka", jvm_options=BENCH_JVM_OPTIONS, log_level="INFO")
        self.broker.start()
        self.bootstrap = self.broker.bootstrap
        self.runner_out, self.maintain_out = work / "runner.log", work / "maintain.log"
        self.config = work / "pipeline.yaml"
        self.runner: subprocess.Popen[bytes] | None = None
        self.maintain: subprocess.Popen[bytes] | None = None
        self.kills, self.maintain_exits = 0, 0
        self.unexpected_exits: list[str] = []
        self.broker_restarted, self.broker_down_s = False, 0.0
        self.started = time.monotonic()

    def run(
        self,
        pipeline: dict[str, Any],
        stream: ProducedLog,
        *,
        table_ready: Callable[[], bool],
        on: Callable[[str, float], None] = lambda event, elapsed: None,
    ) -> None:
        """Write `pipeline` to pipeline.yaml and produce `stream` for the soak's duration with the
        runner, maintain, the kills and the broker restart; then stop producing. `on(event, seconds
        since the start)` hears "tick" every half second, "maintain" when maintain starts (once
        `table_ready()`) and "broker restart" before the broker goes down."""
        import yaml

        self.config.write_text(yaml.safe_dump(pipeline))
        self.started = time.monotonic()
        producer_thread = threading.Thread(target=stream.run, daemon=True)
        producer_thread.start()
        self.runner = spawn(["run", str(self.config)], self.runner_out)
        next_kill = self.started + self.rng.uniform(0.1, 0.2) * self.duration
        broker_restart_at = self.started + 0.5 * self.duration
        while time.monotonic() - self.started < self.duration:
            time.sleep(0.5)
            now = time.monotonic()
            elapsed = now - self.started
            on("tick", elapsed)
            if self.maintain is None and table_ready():
                on("maintain", elapsed)
                self.maintain = self._spawn_maintain()
                log("the table is there; maintain --every 1m started")
            if self.maintain is not None and self.maintain.poll() is not None:
                self.maintain_exits += 1
                log(f"maintain exited with {self.maintain.returncode}; starting it again (see {self.maintain_out})")
                self.maintain = self._spawn_maintain()
            self.keep_runner(f"{elapsed:.0f}s")
            if now >= next_kill:
                self.runner.send_signal(signal.SIGKILL)
                self.runner.wait()
                self.kills += 1
                log(f"SIGKILL runner #{self.kills} at {elapsed:.0f}s; restarting it")
                self.runner = spawn(["run", str(self.config)], self.runner_out)
                next_kill = now + self.rng.uniform(0.1, 0.2) * self.duration
            if not self.broker_restarted and now >= broker_restart_at:
                on("broker restart", elapsed)
                self._restart_broker(stream)
        log("producing stopped")
        stream.stopped.set()
        producer_thread.join()

    def _spawn_maintain(self) -> subprocess.Popen[bytes]:
        return spawn(["maintain", "--pipeline", str(self.config), "--every", "1m", "--no-progress"], self.maintain_out)

    def _restart_broker(self, stream: ProducedLog) -> None:
        log("broker restart: pausing the producer")
        stream.paused.set()
        stream.idle.wait()
        down = time.monotonic()
        self.broker.kill()
        time.sleep(self.broker_down)  # the runner finds no broker for this long
        self.broker.start()  # the same ports and log; returns once every partition is led again
        self.broker_down_s = time.monotonic() - down
        stream.paused.clear()
        self.broker_restarted = True
        log(
            f"broker restarted after {self.broker_down_s:.1f}s down (start {self.broker.start_seconds[-1]:.1f}s); "
            "producing again"
        )

    def keep_runner(self, when: str) -> None:
        """Start the runner again if it exited on its own (counted in `unexpected_exits`)."""
        assert self.runner is not None
        if self.runner.poll() is not None:
            self.unexpected_exits.append(f"{when}: exit {self.runner.returncode}")
            log(f"runner exited on its own with {self.runner.returncode}; starting it again (see {self.runner_out})")
            self.runner = spawn(["run", str(self.config)], self.runner_out)

    def drain(self, done: Callable[[], bool], timeout: float) -> tuple[bool, float]:
        """Wait until `done()` (the tables reached the source's end), keeping the runner running;
        whether it got there, and how long after producing stopped."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not done():
            self.keep_runner("drain")
            time.sleep(2)
        return done(), time.monotonic() - self.started - self.duration

    def stop(self) -> None:
        """SIGTERM the runner and maintain (SIGKILL after 2 minutes), then stop the broker."""
        for proc in (self.runner, self.maintain):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(120)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.broker.stop()

    def rows(self) -> list[tuple[str, str]]:
        """The report's lines on the runner, the broker restart and maintain."""
        runner_lines = self.runner_out.read_text(errors="replace").splitlines()
        restarts = sum(1 for line in runner_lines if '"event": "restart"' in line)
        broker = f"killed, down {self.broker_down_s:.1f}s, started again with its log"
        return [
            (
                "runner",
                f"{self.kills} SIGKILLs, {restarts} supervised restarts (restart lines), "
                f"{len(self.unexpected_exits)} exits on its own {self.unexpected_exits[:5]}",
            ),
            ("broker restart", broker if self.broker_restarted else "not reached"),
            ("maintain", f"exited and restarted {self.maintain_exits} times"),
        ]

    def batches(self) -> list[dict[str, Any]]:
        """The metrics lines of the batches the runner committed."""
        lines = self.runner_out.read_text(errors="replace").splitlines()
        return [json.loads(line) for line in lines if line.startswith('{"') and '"batch_id"' in line]


def soak(args: Any, work: Path) -> str:
    minutes: float = args.minutes
    warehouse = work / "warehouse"
    run = SoakRun(work, minutes, args.seed, args.broker_down)
    stream = Stream(run.bootstrap, args.rate, args.keys, args.bad_every, args.seed)
    stream.create_topics()
    pipeline = {
        "pipeline": "soak",
        "warehouse": str(warehouse),
        "source": {
            "kafka": {
                "bootstrap_servers": run.bootstrap,
                "topic": TOPIC,
                "starting_offsets": "earliest",
                # The range readers' fetch.wait.max.ms (default 500 ms) can be overridden to
                # reproduce the stall an earlier soak found with 10 ms (docs/benchmarks.md).
                **({"consumer": {"fetch.wait.max.ms": args.fetch_wait_ms}} if args.fetch_wait_ms else {}),
            }
        },
        "table": {
            "name": TABLE,
            "schema": SCHEMA,
            "key": ["k"],
            # Iceberg's own expiry properties, which `icetide maintain` honours: a retention
            # shorter than the run shows the snapshot count level off.
            **(
                {"properties": {"history.expire.max-snapshot-age-ms": str(int(args.snapshot_age * 1000))}}
                if args.snapshot_age
                else {}
            ),
        },
        "mode": "upsert",
        "trigger": {"interval": args.interval, "max_records": args.max_records},
        "dead_letter": DEAD_LETTER,
        "restart": {"max_attempts": 30, "backoff": "1s", "max_backoff": "10s"},
        "spark": {"spark.driver.memory": "1g"},
    }
    watch = MetadataWatch(warehouse / "soak" / "kv")
    samples: list[tuple[str, float, int, int, int]] = []

    def sample(event: str, elapsed: float) -> None:
        when = {"maintain": "start (first commit)", "broker restart": "middle"}.get(event)
        if when is not None:
            samples.append((when, elapsed, *watch.sample()))

    threading.Thread(target=watch.run, daemon=True).start()
    log(f"work dir {work}; producing {args.rate}/s over {args.keys} keys for {minutes} min")
    run.run(pipeline, stream, table_ready=lambda: bool(watch.commits), on=sample)
    log("waiting for the runner to reach the end")
    ends = stream.ends()[TOPIC]

    def caught_up() -> bool:
        watch.sample()
        return all(watch.latest.get(p, 0) >= e for p, e in ends.items())

    drained, drain_s = run.drain(caught_up, 600)
    watch.stop.set()
    run.stop()
    samples.append(("end", time.monotonic() - run.started, *watch.sample()))
    samples.append(("peak seen (polled every 2s)", time.monotonic() - run.started, *watch.peak))

    # -- checks ----------------------------------------------------------------------------------
    model, bad = stream.model()
    spark = bench_session(str(warehouse), memory="2g")
    got: dict[str, tuple[Any, ...]] = {}
    for r in spark.table(TABLE).select(*COLUMNS).collect():
        if r["k"] in got:
            got[r["k"] + " (duplicate)"] = tuple(r)
        got[r["k"]] = tuple(r)
    dead = [r["source_position"] for r in spark.table(DEAD_LETTER).select("source_position").collect()]
    snapshots_sql = spark.sql(f"SELECT count(*) FROM {TABLE}.snapshots").collect()[0][0]
    batches = run.batches()
    # A batch that filled max_records commits on the commit thread while the next one is written.
    full = sum(1 for b in batches if b.get("records_in", 0) >= args.max_records)
    spark.stop()
    missing = sorted(k for k in model if k not in got)
    extra = sorted(k for k in got if k not in model)
    differ = sorted(k for k in model if k in got and got[k] != model[k])
    dead_set = set(dead)
    good_in_dead = sorted(dead_set - bad)
    bad_missing = sorted(bad - dead_set)
    for name, keys in (("missing", missing), ("extra", extra), ("differ", differ)):
        for k in keys[:10]:
            log(f"MISMATCH {name} {k}: table {got.get(k)} model {model.get(k)}")

    # freshness: each good record becomes visible at the first commit whose position passes it
    per_partition: dict[int, list[tuple[int, int]]] = {p: [] for p in range(PARTITIONS)}
    for ms, position in sorted(watch.commits.values()):
        for p, o in position.items():
            per_partition.setdefault(p, []).append((o, ms))
    lags: list[float] = []
    unseen = 0
    for p in range(PARTITIONS):
        marks = sorted(per_partition[p])
        positions = [o for o, _ in marks]
        # visible time of offset o: the earliest commit with position > o
        suffix_min: list[int] = [0] * len(marks)
        best = 2**62
        for i in range(len(marks) - 1, -1, -1):
            best = min(best, marks[i][1])
            suffix_min[i] = best
        for o, (_, _, produced_ms, kind) in stream.log[TOPIC][p].items():
            if kind == "bad":
                continue
            i = bisect.bisect_right(positions, o)
            if i == len(marks):
                unseen += 1
                continue
            lags.append((suffix_min[i] - produced_ms) / 1000)
    lags.sort()
    produced = sum(ends.values())
    ok = not (missing or extra or differ or good_in_dead or bad_missing) and drained and not stream.errors
    checks = render_table(
        ["check", "result"],
        [
            (
                "table = model",
                f"{'OK' if not (missing or extra or differ) else 'MISMATCH'}: {len(got):,} rows, model "
                f"{len(model):,}; missing {len(missing)}, extra {len(extra)}, differ {len(differ)}",
            ),
            (
                "dead letter = the bad records",
                f"{'OK' if not (good_in_dead or bad_missing) else 'MISMATCH'}: "
                f"{len(dead):,} rows for {len(bad):,} bad records; good records in it {len(good_in_dead)}, bad "
                f"missing {len(bad_missing)}, duplicates {len(dead) - len(dead_set)}",
            ),
            (
                "freshness produce -> visible",
                f"p50 {pick(lags, 0.5):.1f}s, p95 {pick(lags, 0.95):.1f}s, "
                f"p99 {pick(lags, 0.99):.1f}s, max {lags[-1]:.1f}s over {len(lags):,} records"
                + (f" ({unseen} never seen committed by the watcher)" if unseen else "")
                if lags
                else "no data",
            ),
            ("snapshots (SQL, end)", f"{snapshots_sql}"),
            (
                "batches",
                f"{len(batches):,} committed, {full:,} of them full (max_records {args.max_records:,}: their "
                "commits overlapped the next batch)",
            ),
            *run.rows(),
            ("drain after producing stopped", f"{drain_s:.0f}s, caught up: {drained}"),
            ("producer delivery errors", f"{len(stream.errors)} {stream.errors[:3]}"),
        ],
    )
    meta = render_table(
        ["when", "at (s)", "metadata.json files", "their MB", "snapshots"],
        [(w, f"{t:.0f}", f, f"{b / 1e6:.2f}", s) for w, t, f, b, s in samples],
    )
    return (
        f"{minutes:g} minutes of JSON upserts at {args.rate}/s ({produced:,} records: {len(bad)} bad, about 5% "
        f"deletes) over {args.keys:,} keys in {PARTITIONS} partitions, `icetide run` (trigger {args.interval}) "
        f"and `icetide maintain --every 1m` as subprocesses, runner SIGKILLed every 10-20% of the run, one broker "
        f"crash and restart half way (Apache Kafka, started again with its log). Snapshots kept: "
        f"{f'{args.snapshot_age:g}s (table property)' if args.snapshot_age else 'the streaming default (1 hour)'}. "
        f"Shared 2-core machine, other work running beside it. Overall: "
        f"{'PASS' if ok else 'FAIL'}.\n\n{checks}\n\n{meta}\n"
    )


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--minutes", type=float, default=30)
    p.add_argument("--rate", type=int, default=500, help="events per second")
    p.add_argument("--keys", type=int, default=20_000, help="key space size")
    p.add_argument("--bad-every", type=int, default=5000, help="one deliberately bad record every N events")
    p.add_argument("--interval", default="2s", help="the runner's trigger interval")
    p.add_argument(
        "--max-records",
        type=int,
        default=50_000,
        help="the runner's max_records: below the backlog a kill leaves, batches fill it and commits overlap",
    )
    p.add_argument("--broker-down", type=float, default=20, help="seconds the broker stays down at its restart")
    p.add_argument(
        "--fetch-wait-ms",
        default="",
        help="the pipeline's consumer fetch.wait.max.ms ('': the range readers' default, 500 ms)",
    )
    p.add_argument(
        "--snapshot-age",
        type=float,
        default=0,
        help="seconds of snapshots the table keeps (history.expire.max-snapshot-age-ms; 0: the streaming default, 1h)",
    )
    p.add_argument("--seed", type=int, default=7)
    run_soak(p, soak, "soak", lambda args: f"bench/soak.py: {args.minutes:g}-minute soak")


def run_soak(p: Any, soak: Callable[[Any, Path], str], name: str, title: Callable[[Any], str]) -> None:
    """Parse the arguments (adding --keep), run `soak(args, work)` in a new work folder (kept with
    --keep or on FAIL) in UTC, and report its body under `title(args)`."""
    p.add_argument("--keep", action="store_true", help="keep the work folder (warehouse, logs)")
    args = p.parse_args()
    os.environ["TZ"] = "UTC"  # the model's timestamps are UTC, as Spark returns them here
    time.tzset()
    work = Path(tempfile.mkdtemp(prefix=f"icetide-{name}-"))
    body = soak(args, work)
    if args.keep or "FAIL" in body:
        log(f"kept {work} (warehouse, runner.log, maintain.log, kafka/broker.log)")
    else:
        shutil.rmtree(work, ignore_errors=True)
    report(title(args), body, save=args.record)


if __name__ == "__main__":
    main()
