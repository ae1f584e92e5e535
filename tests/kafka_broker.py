"""Apache Kafka on 127.0.0.1 for tests and benchmarks: one KRaft node (broker and controller in one
process), its log on disk, started once per test session.

The jars come from Maven Central by their coordinates (tests/kafka_jars.py), fetched once into
`$ICETIDE_CACHE/maven`; the broker runs on the JDK that runs Spark. `KafkaBroker` formats its log
folder (the `kafka-storage format` step, `kafka.tools.StorageTool`), starts `kafka.Kafka` on two
free ports (clients, controller) and waits until it serves metadata. A restart (`restart`, or
`kill` then `start`) is a restart of that process on the same ports and the same log, so what was
produced survives it, as on a user's broker. Anything else that speaks to a broker (a Kafka Connect
worker, say) takes `bootstrap` and, for the log, `log_path`.

The broker's settings are Kafka's defaults except: one partition for the internal topics (one node),
no retention time unless a topic sets `retention.ms` (tests stamp records with fixed past times), a
retention check every half second and a cleaner that looks for work every 200 ms (the data-loss
and compaction tests wait for them), a 3 s broker session (a restarted node registers again once
its last session has expired), and `broker_settings` given by the caller.

Tests create their own uniquely named topics (`create_topic`). The session fixture `kafka_broker`
gives the bootstrap servers; `kafka_server` gives the `KafkaBroker` itself, for a test that
restarts it (each xdist worker has its own broker, so a restart reaches only that worker's tests;
`restart` returns once the broker serves its partitions again).
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.kafka_jars import fetch_broker_jars

START_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 30.0
# Small and cheap JVMs for tests: the broker holds little, and C2 and parallel GC threads would
# compete with Spark for the two cores. Benchmarks pass their own (`jvm_options`).
TEST_JVM_OPTIONS = ("-Xms64m", "-Xmx512m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
BENCH_JVM_OPTIONS = ("-Xms256m", "-Xmx1g", "-XX:+UseG1GC")

_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c{1})%n
rootLogger.level = {level}
rootLogger.appenderRef.out.ref = out
logger.cleaner.name = kafka.log.LogCleaner
logger.cleaner.level = info
"""


def _die_with_parent() -> None:
    """In the broker's process before exec (Linux): SIGTERM it when the process that started it
    ends, also by a signal that skips atexit and fixture teardown (a killed pytest left brokers)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def free_port() -> int:
    """A port no process listens on now (another may take it before the caller binds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def broker_classpath() -> str:
    """The broker's jars, fetched now unless this machine has them (one line naming the jar if not)."""
    return os.pathsep.join(fetch_broker_jars())


def java() -> str:
    from icetide.spark.java import java_executable

    found = java_executable()
    if found is None:
        raise RuntimeError("no java: Apache Kafka's broker needs Java 17 or later (apt-get install openjdk-17-jdk)")
    return found


class ServerProcess:
    """A server in a child process (the broker, Kafka Connect), stopped or killed as a test needs."""

    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        raise NotImplementedError

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        """A clean shutdown (SIGTERM), killed if it takes longer than STOP_TIMEOUT_SECONDS."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT_SECONDS)

    def kill(self) -> None:
        """SIGKILL, as a crash: the next start recovers."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=STOP_TIMEOUT_SECONDS)


class KafkaBroker(ServerProcess):
    """One Apache Kafka node (KRaft, broker and controller) in `workdir`: `start`, `stop`, `kill`,
    `restart`; `bootstrap` is where clients connect. The log in `workdir/data` outlives the process."""

    def __init__(
        self,
        workdir: Path,
        *,
        broker_settings: Mapping[str, str] | None = None,
        jvm_options: tuple[str, ...] = TEST_JVM_OPTIONS,
        log_level: str = "WARN",
    ) -> None:
        self.workdir = Path(workdir)
        self.data = self.workdir / "data"
        self.log_path = self.workdir / "broker.log"
        self.broker_settings = dict(broker_settings or {})
        self.jvm_options = jvm_options
        self.log_level = log_level
        self.port = 0
        self.controller_port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.start_seconds: list[float] = []  # how long each start took until the broker served
        self.format_seconds = 0.0  # the `kafka-storage format` run of the first start

    @property
    def bootstrap(self) -> str:
        """`127.0.0.1:PORT`, the clients' bootstrap servers."""
        return f"127.0.0.1:{self.port}"

    def _properties(self) -> str:
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.data),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "log.initial.task.delay.ms": "0",
            # Tests stamp records with fixed times long past, which Kafka's 7-day default would
            # delete at once (the active segment too): no time limit unless a topic sets one.
            "log.retention.ms": "-1",
            "log.retention.check.interval.ms": "500",
            "log.cleaner.backoff.ms": "200",
            # A restarted node cannot register again while its last session lives (a crash leaves
            # it to time out, 9 s by default): keep the session short, the heartbeats shorter.
            "broker.session.timeout.ms": "3000",
            "broker.heartbeat.interval.ms": "500",
        }
        settings.update(self.broker_settings)
        return "".join(f"{k}={v}\n" for k, v in settings.items())

    def _jvm(self, main: str, *args: str) -> list[str]:
        return [
            java(),
            *self.jvm_options,
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
            "-cp",
            broker_classpath(),
            main,
            *args,
        ]

    def _format(self) -> None:
        """`kafka-storage format`: a new cluster id and metadata in an empty log folder."""
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        config = str(self.workdir / "server.properties")
        done = subprocess.run(
            # `--cluster-id=ID` in one argument: an id that starts with "-" (1 in 64) is otherwise
            # taken for an option ("argument --cluster-id/-t: expected one argument").
            self._jvm("kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", "--config", config),
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            raise RuntimeError(f"kafka-storage format failed: {(done.stderr or done.stdout).strip()[-2000:]}")

    def start(self) -> None:
        """Start the broker and return once it serves metadata and every partition has its leader.
        The first start takes two free ports and formats the log folder; later starts reuse both."""
        if self.running:
            return
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "log4j2.properties").write_text(_LOG4J2.replace("{level}", self.log_level))
        first = self.port == 0
        for attempt in range(3 if first else 1):
            if first:
                self.port, self.controller_port = free_port(), free_port()
            (self.workdir / "server.properties").write_text(self._properties())
            if not (self.data / "meta.properties").exists():
                began = time.monotonic()
                self._format()
                self.format_seconds = time.monotonic() - began
            started = time.monotonic()
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    self._jvm("kafka.Kafka", str(self.workdir / "server.properties")),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # a terminal's Ctrl-C goes to pytest, which stops it
                    preexec_fn=_die_with_parent,
                )
            try:
                self.wait_ready(START_TIMEOUT_SECONDS)
            except RuntimeError:
                self.kill()
                if attempt == 2 or not first:
                    raise
                continue  # most likely lost a port to another process between probe and bind
            self.start_seconds.append(time.monotonic() - started)
            return

    def wait_ready(self, timeout: float) -> None:
        """Until the broker answers metadata with itself listed and every partition led."""
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        # log_level 0: "Connection refused" until the broker listens is the expected answer here,
        # not one for the console (the last error is in the exception below)
        admin = AdminClient(
            {"bootstrap.servers": self.bootstrap, "socket.connection.setup.timeout.ms": "1000", "log_level": 0}
        )
        last = "no answer"
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"the Kafka broker exited with code {self.proc.returncode}; see {self.log_path}")
            try:
                metadata = admin.list_topics(timeout=1.0)
            except Exception as exc:  # not listening yet
                last = str(exc)
                time.sleep(0.05)
                continue
            leaderless = [
                f"{t.topic}/{p.id}" for t in metadata.topics.values() for p in t.partitions.values() if p.leader < 0
            ]
            if metadata.brokers and not leaderless:
                return
            last = f"partitions without a leader: {leaderless[:3]}" if leaderless else "no broker in metadata"
            time.sleep(0.05)
        raise RuntimeError(f"the Kafka broker did not serve on {self.bootstrap} within {timeout:g}s ({last})")

    def restart(self, *, crash: bool = False) -> None:
        """Stop (or with `crash`, kill) and start again on the same ports and log."""
        (self.kill if crash else self.stop)()
        self.start()


@contextlib.contextmanager
def kafka_broker_process(
    workdir: Path,
    *,
    broker_settings: Mapping[str, str] | None = None,
    jvm_options: tuple[str, ...] = TEST_JVM_OPTIONS,
    log_level: str = "WARN",
) -> Iterator[KafkaBroker]:
    """A started `KafkaBroker` (options as its constructor's), stopped afterwards, also on errors and
    at interpreter exit."""
    broker = KafkaBroker(workdir, broker_settings=broker_settings, jvm_options=jvm_options, log_level=log_level)
    with started(broker):
        yield broker


@contextlib.contextmanager
def started(server: ServerProcess) -> Iterator[None]:
    """`server` started, and stopped afterwards, also on errors and at interpreter exit."""
    atexit.register(server.kill)
    try:
        server.start()
        yield
    finally:
        server.stop()
        atexit.unregister(server.kill)


@contextlib.contextmanager
def apache_kafka(
    workdir: Path, *, jvm_options: tuple[str, ...] = TEST_JVM_OPTIONS, log_level: str = "WARN"
) -> Iterator[str]:
    """`kafka_broker_process`, yielding only the bootstrap servers."""
    with kafka_broker_process(workdir, jvm_options=jvm_options, log_level=log_level) as broker:
        yield broker.bootstrap


@pytest.fixture(scope="session")
def kafka_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """The session's broker (this xdist worker's), as an object a test may restart."""
    with kafka_broker_process(tmp_path_factory.mktemp("kafka")) as broker:
        yield broker


@pytest.fixture(scope="session")
def kafka_broker(kafka_server: KafkaBroker) -> str:
    """Bootstrap servers ("127.0.0.1:PORT") of the session's Apache Kafka broker."""
    return kafka_server.bootstrap


def create_topic(
    bootstrap: str,
    partitions: int = 1,
    *,
    prefix: str = "t",
    name: str | None = None,
    config: Mapping[str, str] | None = None,
) -> str:
    """Create a topic named `name` (default: a unique name) with `partitions` partitions and topic
    `config` (cleanup.policy, segment.bytes...); returns its name once its partitions are led."""
    from confluent_kafka.admin import AdminClient, NewTopic

    name = name or f"{prefix}-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(name, num_partitions=partitions, replication_factor=1, config=dict(config or {}))
    for future in admin.create_topics([topic]).values():
        future.result(timeout=20)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # created is not yet led: a produce right after may fail
        info = admin.list_topics(name, timeout=5).topics.get(name)
        led = info is not None and info.error is None and len(info.partitions) == partitions
        if led and all(p.leader >= 0 for p in info.partitions.values()):
            return name
        time.sleep(0.02)
    raise RuntimeError(f"topic {name} has no leader after 20s")


def produce(
    bootstrap: str,
    topic: str,
    records: list[tuple[int, bytes | None, bytes | None, int | None]],
    *,
    batched: bool = True,
) -> None:
    """Produce (partition, key, value, timestamp_ms) records; flush per record unless `batched`."""
    from confluent_kafka import Producer

    failures: list[str] = []

    def delivered(error: object, _message: object) -> None:
        if error is not None:
            failures.append(str(error))

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20 if batched else 0})
    for partition, key, value, timestamp in records:
        producer.produce(
            topic, key=key, value=value, partition=partition, timestamp=timestamp or 0, on_delivery=delivered
        )
        if not batched:
            producer.flush(10)
    remaining = producer.flush(20)
    if remaining or failures:
        raise RuntimeError(f"{remaining} records pending, delivery failures {failures[:3]} on {topic}")


def produce_transactions(
    bootstrap: str,
    topic: str,
    transactions: list[tuple[bool, list[tuple[int, bytes | None, bytes | None]]]],
    *,
    producer: Any = None,
) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """Produce each (commit, [(partition, key, value)]) in a transaction of its own, committed or
    aborted as `commit` says; returns the committed records as (partition, offset, key, value).

    Aborted records are sent to the broker before the abort, so they occupy offsets in the log
    (followed by an abort marker), as a producer that fails mid-transaction leaves them; committed
    ones are followed by a commit marker. `producer`: a transactional producer to use (see
    `transactional_producer`), left open for the caller."""
    own = producer is None
    producer = producer or transactional_producer(bootstrap)
    committed: list[tuple[int, int, bytes | None, bytes | None]] = []
    try:
        for commit, records in transactions:
            delivered: list[tuple[int, int, bytes | None, bytes | None]] = []

            def report(error: Any, message: Any, into: list[Any] = delivered) -> None:
                assert error is None, error
                into.append((message.partition(), message.offset(), message.key(), message.value()))

            producer.begin_transaction()
            for partition, key, value in records:
                producer.produce(topic, key=key, value=value, partition=partition, on_delivery=report)
            remaining = producer.flush(30)
            if remaining:
                raise RuntimeError(f"{remaining} records of a transaction were not sent to {topic}")
            if commit:
                producer.commit_transaction(30)
                committed.extend(delivered)
            else:
                producer.abort_transaction(30)
    finally:
        if own:
            producer.flush(10)
    return committed


def transactional_producer(bootstrap: str) -> Any:
    """A confluent-kafka producer with a transactional id of its own, its transactions initialized."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"tx-{uuid.uuid4().hex[:10]}",
            # A test may hold a transaction open across pipeline runs: the coordinator aborts one
            # older than this (librdkafka's default is 60 s; the broker allows up to 15 minutes).
            "transaction.timeout.ms": 600_000,
        }
    )
    producer.init_transactions(30)
    return producer
