"""Scale-out: the sink on a Spark standalone cluster (master + worker on 127.0.0.1)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from icetide.spark.jars import spark_line
from icetide.spark.state_store import PROVIDER_CLASS, SPARK_PROVIDER_CLASS

pytestmark = pytest.mark.cluster


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(predicate, seconds: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{what} did not come up within {seconds}s")


@pytest.fixture(scope="module")
def standalone_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    import pyspark

    spark_home = os.path.dirname(pyspark.__file__)
    spark_class = os.path.join(spark_home, "bin", "spark-class")
    work = tmp_path_factory.mktemp("cluster")
    env = {
        **os.environ,
        "SPARK_HOME": spark_home,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_NO_DAEMONIZE": "1",
        "PYSPARK_PYTHON": sys.executable,
    }
    port, ui, worker_ui = free_port(), free_port(), free_port()
    logs = [open(work / "master.log", "wb"), open(work / "worker.log", "wb")]  # noqa: SIM115
    master = subprocess.Popen(
        [
            spark_class,
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(ui),
        ],
        env=env,
        stdout=logs[0],
        stderr=subprocess.STDOUT,
    )
    worker = None
    try:
        wait_for(lambda: socket.create_connection(("127.0.0.1", port), timeout=1).close() is None, 60, "Spark master")
        worker = subprocess.Popen(
            [
                spark_class,
                "org.apache.spark.deploy.worker.Worker",
                "--host",
                "127.0.0.1",
                "--cores",
                "2",
                "--memory",
                "2g",
                "--webui-port",
                str(worker_ui),
                "--work-dir",
                str(work / "work"),
                f"spark://127.0.0.1:{port}",
            ],
            env=env,
            stdout=logs[1],
            stderr=subprocess.STDOUT,
        )

        def worker_alive() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as r:
                return any(w.get("state") == "ALIVE" for w in json.load(r).get("workers", []))

        wait_for(worker_alive, 90, "Spark worker")
        yield f"spark://127.0.0.1:{port}", worker.pid
    finally:
        for proc in (worker, master):
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
        for f in logs:
            f.close()


def test_sink_writes_from_executor_processes(standalone_cluster: tuple[str, int], tmp_path: Path) -> None:
    master, worker_pid = standalone_cluster
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-m", "tests.cluster_driver", master, str(tmp_path / "warehouse"), str(worker_pid)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["rows"] == 30_000  # 50k rows over 30k keys collapse to one row per key
    assert result["latest"] == 30_000  # every key carries the last batch's value
    assert result["writer_pids"] and result["driver_pid"] not in result["writer_pids"]
    assert result["under_worker"], result  # the Python writers ran under the worker's executor JVM
    assert result["executors"] >= 2  # the driver plus at least one executor
    # The stateful stage's state lives on the executors: on Spark 3.5 on icetide's provider shipped in
    # its jar, on 4.1 on Spark's own (SPARK-51955 fixed).
    assert result["state_provider"] == (PROVIDER_CLASS if spark_line() == "3.5" else SPARK_PROVIDER_CLASS)
    assert result["stateful_clicks"] == {f"k{i}": 8 for i in range(1000)}
