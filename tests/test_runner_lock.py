"""One runner per pipeline: a second `icetide run` exits at once naming the first (host, pid),
leaves the first's in-flight files alone, and a SIGKILLed runner does not block its restart."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from icetide.config.pipeline import PipelineConfig
from icetide.errors import ConfigError
from icetide.ops.runner_lock import PipelineAlreadyRunningError, RunnerLock, hold_local, local_warehouse
from tests.commands import ROOT, run_cli, warehouse_reader
from tests.kafka_broker import create_topic, produce
from tests.model import table_rows
from tests.test_runner_kafka import COLUMNS, KEY, doc, events, model_of


def _config(folder: Path, **extra: Any) -> PipelineConfig:
    d: dict[str, Any] = {
        "pipeline": "p1",
        "source": {"files": {"path": "landing"}},
        "table": {"name": "lake.db.t", "schema": "id INT", "key": ["id"]},
        "warehouse": str(folder),
    }
    return PipelineConfig.from_dict({**d, **extra})


def test_local_lock_is_exclusive_between_processes_and_reentrant_within_one(tmp_path: Path) -> None:
    config = _config(tmp_path / "wh")
    assert local_warehouse(config) == tmp_path / "wh"
    assert local_warehouse(_config(tmp_path, warehouse="hdfs://namenode/wh")) is None  # not this machine
    remote = _config(tmp_path, catalog={"type": "rest", "uri": "http://127.0.0.1:1"})
    assert local_warehouse(remote) is None
    lock = RunnerLock(config)
    lock.acquire()
    with hold_local(tmp_path / "wh", "lake.db.t", "p1"):  # the same process again: fine
        pass
    other = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from tests.test_runner_lock import _config; from icetide.ops.runner_lock import "
            "RunnerLock; from pathlib import Path; RunnerLock(_config(Path(sys.argv[1]))).acquire()",
            str(tmp_path / "wh"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert other.returncode != 0
    assert f"pipeline 'p1' is already running on lake.db.t: host {socket.gethostname()}, pid {os.getpid()}" in (
        other.stderr
    )
    assert "PipelineAlreadyRunningError" in other.stderr
    # a different pipeline id on the same table is another lock
    RunnerLock(_config(tmp_path / "wh", pipeline="p2")).acquire()
    lock.release()
    again = RunnerLock(config)
    again.acquire()  # released: free again
    again.release()
    assert issubclass(PipelineAlreadyRunningError, Exception)
    try:
        _config(tmp_path, restart={"max_attempts": -1})
    except ConfigError as exc:
        assert "restart.max_attempts" in str(exc)
    else:
        raise AssertionError("restart.max_attempts: -1 was accepted")


def test_second_runner_exits_at_once_and_a_killed_runner_restarts(
    spark: Any, kafka_broker: str, tmp_path: Path
) -> None:
    topic = create_topic(kafka_broker, partitions=3)
    records = events(0, 120)
    produce(kafka_broker, topic, records)
    warehouse = tmp_path / "warehouse"
    config_path = tmp_path / "pipeline.yaml"
    config_path.write_text(
        yaml.safe_dump(doc("klock", kafka_broker, topic, warehouse=str(warehouse), trigger={"interval": "1s"}))
    )
    data = warehouse / "kafka" / "klock" / "data"
    # the first runner writes batch 1's files, then holds them in flight (uncommitted)
    first = subprocess.Popen(
        [sys.executable, "-m", "icetide.cli", "run", str(config_path)],
        cwd=ROOT,
        env={**os.environ, "ICETIDE_PAUSE_AT": "after_write", "ICETIDE_PAUSE_SECONDS": "600"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 180
        while not list(data.rglob("icetide-klock-b000000000001-*.parquet")):
            assert first.poll() is None, "the first runner exited"
            assert time.monotonic() < deadline, "the first runner wrote no files"
            time.sleep(0.5)
        in_flight: list[Path] = []
        while in_flight != sorted(data.rglob("icetide-klock-b*.parquet")):  # until the batch is written
            in_flight = sorted(data.rglob("icetide-klock-b*.parquet"))
            time.sleep(3)
        started = time.monotonic()
        second = run_cli("run", str(config_path), timeout=120)
        took = time.monotonic() - started
        assert second.returncode == 1
        line = f"pipeline 'klock' is already running on lake.kafka.klock: host {socket.gethostname()}, pid {first.pid}"
        assert line in second.stderr, second.stderr[-2000:]
        assert len(second.stderr.strip().splitlines()) == 1  # one line, no trace
        assert took < 15, took  # refused before Spark starts
        assert first.poll() is None  # the first keeps running
        assert sorted(data.rglob("icetide-klock-b*.parquet")) == in_flight  # and its files survive
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        restarted = run_cli("run", str(config_path), "--once", timeout=300)
        assert restarted.returncode == 0, restarted.stderr[-3000:]
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    other = warehouse_reader(spark, "klockcheck", warehouse)
    assert table_rows(other, "klockcheck.kafka.klock", COLUMNS, KEY) == model_of(records)
    referenced = {
        r[0].replace("file:", "") for r in other.sql("SELECT file_path FROM klockcheck.kafka.klock.all_files").collect()
    }
    present = {str(p) for p in data.rglob("*.parquet")}
    assert present <= referenced  # the killed runner's in-flight files were removed by the restart


def test_table_lease_refuses_a_live_holder_and_takes_over_an_expired_one(
    spark: Any, table_name: str, monkeypatch: Any
) -> None:
    """The lease used for catalogs without a local folder, on a real table."""
    from icetide.ops import runner_lock
    from icetide.ops.runner_lock import TableLease
    from icetide.table.create import create_table
    from icetide.table.iceberg import load_table

    monkeypatch.setattr(runner_lock, "LEASE_SETTLE_SECONDS", 0.0)
    create_table(spark, table_name, schema="id INT NOT NULL", key=["id"])
    first = TableLease(load_table(spark, table_name), "p", table_name, lease_seconds=60)
    first.acquire()
    second = TableLease(load_table(spark, table_name), "p", table_name, lease_seconds=60)
    try:
        second.acquire()
    except PipelineAlreadyRunningError as exc:
        assert (
            f"pipeline 'p' is already running on {table_name}: host {socket.gethostname()}, pid {os.getpid()}"
            in str(exc)
        )
        assert "icetide.runner.p" in str(exc)
    else:
        raise AssertionError("a live lease was taken over")
    TableLease(load_table(spark, table_name), "other", table_name).acquire()  # another pipeline: its own lease
    first.release()
    second.acquire()  # released: free
    # a holder that died: its lease expires
    second.lease_seconds = 0.2
    second.expires_at_ms = 0
    second.renew()
    time.sleep(0.3)
    third = TableLease(load_table(spark, table_name), "p", table_name, lease_seconds=60)
    third.acquire()
    try:
        second.renew()  # the old holder finds its lease taken
    except PipelineAlreadyRunningError:
        pass
    else:
        raise AssertionError("a taken-over lease was renewed")
    props = load_table(spark, table_name).properties()
    assert third.owner in str(props.get("icetide.runner.p"))


def test_a_lease_whose_holder_died_on_this_machine_is_taken_over_at_once(
    spark: Any, table_name: str, monkeypatch: Any
) -> None:
    """A runner killed by SIGKILL leaves its lease; a restart on the same machine (same host and
    pid namespace) finds the holder's pid gone and takes it over without waiting for it to
    expire. A holder in another pid namespace (another container) is not second-guessed."""
    import json

    from icetide.ops import runner_lock
    from icetide.ops.runner_lock import TableLease
    from icetide.table.create import create_table
    from icetide.table.iceberg import load_table

    monkeypatch.setattr(runner_lock, "LEASE_SETTLE_SECONDS", 0.0)
    create_table(spark, table_name, schema="id INT NOT NULL", key=["id"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    namespace = os.readlink("/proc/self/ns/pid")
    far = int((time.time() + 3600) * 1000)

    def leave_lease(pidns: str) -> None:
        value = {"owner": "killed", "host": socket.gethostname(), "pid": dead.pid, "pidns": pidns, "expires_at_ms": far}
        load_table(spark, table_name).updateProperties().set("icetide.runner.p", json.dumps(value)).commit()

    leave_lease("pid:[1]")  # another namespace: its pid means nothing here
    try:
        TableLease(load_table(spark, table_name), "p", table_name).acquire()
    except PipelineAlreadyRunningError as exc:
        assert f"pid {dead.pid}" in str(exc)
    else:
        raise AssertionError("a lease of another pid namespace was taken over")
    leave_lease(namespace)
    restart = TableLease(load_table(spark, table_name), "p", table_name)
    restart.acquire()
    assert restart.owner in str(load_table(spark, table_name).properties().get("icetide.runner.p"))
