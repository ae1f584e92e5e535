"""A Kafka Connect worker on 127.0.0.1 with Debezium's connectors, for tests: Apache Kafka's own
Connect runtime of the broker's release, started once per test session beside the session's
broker (tests/kafka_broker.py).

The jars come from Maven Central by their coordinates (tests/connect_jars.py). The worker runs in
distributed mode, as users run Connect in production: connector configurations, source offsets
and task status live in three Kafka topics, so a worker that restarts (`restart`) resumes every
connector from its last committed offsets with no file to carry over, and exactly-once source
support (`exactly.once.source.support`) exists in this mode only. A standalone worker would keep
its offsets in a local file and its connectors on its command line. One worker, so the group has
one member; `scheduled.rebalance.max.delay.ms=0` makes a restarted worker take its tasks back at
once instead of after Connect's 5-minute grace for a departed member.

Each connector plugin gets its own folder under `plugin.path` (links to the cached jars), so
Debezium's dependencies load in the plugin's class loader, apart from the worker's. (The worker's
log names Debezium's `CloudEventsConverter` as not loadable: it needs jars of an optional
dependency the connectors do not use here.) Converters:
the JSON converter with schemas, for keys and values, unless a connector names its own (Apicurio's
Avro converter, a plugin folder of its own too). The worker's log is `workdir/connect.log`.

`kafka_connect` (session fixture) gives the running `KafkaConnect`; tests register connectors with
`create_connector` and remove them with `delete_connector`. The peer harness
(bench/peers/kafka_connect/peer.py) runs its own worker of this class with Iceberg's sink as its
one plugin (`plugins`) and a benchmark's JVM options (`jvm_options`).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.connect_jars import PLUGIN_SERVICES, fetch_connector_jars, fetch_worker_jars
from tests.kafka_broker import KafkaBroker, ServerProcess, _die_with_parent, free_port, java, started

START_TIMEOUT_SECONDS = 90.0
JVM_OPTIONS = ("-Xms64m", "-Xmx512m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")

_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c{1})%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = out
logger.reflections.name = org.reflections
logger.reflections.level = ERROR
logger.kafka.name = org.apache.kafka.clients
logger.kafka.level = WARN
"""


class KafkaConnect(ServerProcess):  # stop(): SIGTERM, so tasks stop and commit their offsets
    """One distributed Connect worker in `workdir` on the broker at `bootstrap`: `start`, `stop`,
    `restart`; `url` is its REST API."""

    def __init__(
        self,
        workdir: Path,
        bootstrap: str,
        *,
        group: str = "icetide-connect",
        plugins: Mapping[str, Sequence[str]] | None = None,
        jvm_options: tuple[str, ...] = JVM_OPTIONS,
    ) -> None:
        """`plugins`: the jars of each plugin folder (default: Debezium's connectors, tests/connect_jars.py)."""
        self.workdir = Path(workdir)
        self.bootstrap = bootstrap
        self.group = group
        self.plugins = plugins
        self.jvm_options = jvm_options
        self.log_path = self.workdir / "connect.log"
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _plugin_path(self) -> Path:
        """One folder per plugin, of links to its cached jars (and the manifests its jars lack)."""
        root = self.workdir / "plugins"
        plugins = fetch_connector_jars() if self.plugins is None else self.plugins
        for plugin, jars in plugins.items():
            folder = root / plugin
            folder.mkdir(parents=True, exist_ok=True)
            for jar in jars:
                link = folder / os.path.basename(jar)
                if not link.exists():
                    link.symlink_to(jar)
            if plugin in PLUGIN_SERVICES:
                with zipfile.ZipFile(folder / "service-manifests.jar", "w") as manifests:
                    for service, classes in PLUGIN_SERVICES[plugin].items():
                        manifests.writestr(f"META-INF/services/{service}", "".join(f"{c}\n" for c in classes))
        return root

    def _properties(self) -> str:
        settings = {
            "bootstrap.servers": self.bootstrap,
            "group.id": self.group,
            "config.storage.topic": f"{self.group}-configs",
            "offset.storage.topic": f"{self.group}-offsets",
            "status.storage.topic": f"{self.group}-status",
            "config.storage.replication.factor": "1",
            "offset.storage.replication.factor": "1",
            "status.storage.replication.factor": "1",
            "offset.storage.partitions": "1",
            "status.storage.partitions": "1",
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "key.converter.schemas.enable": "true",
            "value.converter.schemas.enable": "true",
            "listeners": f"http://127.0.0.1:{self.port}",
            "rest.advertised.host.name": "127.0.0.1",
            "plugin.path": str(self._plugin_path()),
            # Every plugin here (Kafka's and Debezium's) has ServiceLoader manifests: no reflective
            # scan of every jar, which took about 20 s of each start on two busy cores.
            "plugin.discovery": "service_load",
            # Offsets committed every second: a restart redelivers at most that much.
            "offset.flush.interval.ms": "1000",
            "scheduled.rebalance.max.delay.ms": "0",
        }
        return "".join(f"{k}={v}\n" for k, v in settings.items())

    def start(self) -> None:
        """Start the worker; returns once its REST API answers and the worker has joined its group."""
        if self.running:
            return
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "log4j2.properties").write_text(_LOG4J2)
        if self.port == 0:
            self.port = free_port()
        config = self.workdir / "worker.properties"
        config.write_text(self._properties())
        command = [
            java(),
            *self.jvm_options,
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
            "-cp",
            os.pathsep.join(fetch_worker_jars()),
            "org.apache.kafka.connect.cli.ConnectDistributed",
            str(config),
        ]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,  # stopped with the test process, however it ends
            )
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        last = "no answer"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Kafka Connect exited with code {self.proc.returncode}; see {self.log_path}")
            try:
                self.request("GET", "/connectors")  # answers 200 only once the worker joined its group
                return
            except (OSError, RuntimeError) as exc:
                last = str(exc)
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"Kafka Connect did not answer on {self.url} within {START_TIMEOUT_SECONDS:g}s ({last})")

    def restart(self) -> None:
        """Stop and start again on the same port; connectors resume from their committed offsets."""
        self.stop()
        self.start()

    def request(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        """One call to the REST API; its JSON answer (None when empty). RuntimeError on HTTP errors."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"{method} {path}: HTTP {exc.code} {exc.read().decode()[:2000]}") from exc
        return json.loads(text) if text else None

    def create_connector(self, name: str, config: Mapping[str, str], *, timeout: float = 60.0) -> None:
        """Register a connector and return once its task runs (fails naming the task's trace if it fails)."""
        self.request("PUT", f"/connectors/{name}/config", dict(config))
        self.wait_running(name, timeout=timeout)

    def wait_running(self, name: str, *, timeout: float = 60.0) -> None:
        """Until the connector and all its tasks (at least one) are RUNNING."""
        deadline = time.monotonic() + timeout
        status: Any = None
        while time.monotonic() < deadline:
            with contextlib.suppress(RuntimeError, OSError):
                status = self.request("GET", f"/connectors/{name}/status")
            if status:
                tasks = status.get("tasks") or []
                failed = [t for t in tasks if t.get("state") == "FAILED"]
                if failed or status["connector"]["state"] == "FAILED":
                    trace = (failed[0] if failed else status["connector"]).get("trace", "")
                    raise RuntimeError(f"connector {name} failed: {trace[:4000]}")
                if status["connector"]["state"] == "RUNNING" and tasks and all(t["state"] == "RUNNING" for t in tasks):
                    return
            time.sleep(0.25)
        raise RuntimeError(f"connector {name} not running after {timeout:g}s: {status}; see {self.log_path}")

    def delete_connector(self, name: str) -> None:
        with contextlib.suppress(RuntimeError):
            self.request("DELETE", f"/connectors/{name}")


@contextlib.contextmanager
def kafka_connect_process(workdir: Path, bootstrap: str) -> Iterator[KafkaConnect]:
    """A started `KafkaConnect`, stopped afterwards, also on errors and at interpreter exit."""
    worker = KafkaConnect(workdir, bootstrap)
    with started(worker):
        yield worker


@pytest.fixture(scope="session")
def kafka_connect(kafka_server: KafkaBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaConnect]:
    """The session's Connect worker (this xdist worker's), on the session's broker."""
    with kafka_connect_process(tmp_path_factory.mktemp("connect"), kafka_server.bootstrap) as worker:
        yield worker
