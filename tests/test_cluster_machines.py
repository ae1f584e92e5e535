"""A Spark standalone cluster of machines that share no disk: `icetide run` exactly once when a worker dies.

Five machines, each a network namespace on a bridge (tests/netns.py): a Spark master, two workers,
the driver (`icetide run`) and a machine for `icetide maintain`. The warehouse and the landing
files are on the S3 server (moto, tests/s3_server.py) and the catalog is JDBC on PostgreSQL
(tests/postgres_server.py); both listen on the bridge's host address, which every machine
reaches. The executors get icetide's code as a user's cluster would: a wheel built from this
repository (`pip wheel --no-deps`), shipped by Spark itself (`spark.submit.pyFiles`, the
`--py-files` of spark-submit, the wheel under a `.zip` name since PySpark adds only .zip, .egg and
.jar files to its workers' path) from the driver's disk to each executor. The workers' Python is a
venv of their own with the dependencies (pyspark, pyarrow, ...) and without icetide.

Batch 2's task pauses, in its first attempt, right after writing its files to S3
(ICETIDE_PAUSE_AT and ICETIDE_PAUSE_BATCH in the workers' environment), and the test SIGKILLs
every process of the worker it paused on: its files are written but never reported, the driver
reruns the task on the other worker, and the table still equals the model, each bad record once
in the dead-letter table. `icetide maintain` compacts the table from its own machine meanwhile,
started as the worker dies (local Spark there: the cluster's cores are the run's).

What is isolated: the network (each machine has only its own address and loopback; the servers
are reached over the bridge), and each machine's /tmp, a folder of its own (Spark's work and
local dirs, temp files, the driver's pipeline file and wheel); on the workers this checkout's
code (icetide/ and tests/; its .venv, where a clone keeps Python's site-packages, stays) and
icetide's jar cache are covered by empty mounts, and their Python cannot import icetide (checked),
so icetide's code and jars reach them only through Spark's file server on the driver. What is
shared: the process table, the CPU and memory, and the rest of the file system (the JDK, Python
and its site-packages, installed on every machine of a real cluster too); the driver and
maintenance machines run icetide from the repository. The kill closes the dead machine's
connections, so the driver learns at once; a machine that vanishes silently is not simulated.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from icetide.spark.maven import cache_dir
from tests import netns
from tests.commands import ROOT, catalog_reader
from tests.model import table_rows
from tests.postgres_server import USER, postgres_server
from tests.s3_server import s3_server, upload
from tests.test_runner_files import COLUMNS, KEY, expected, land_files, pipeline_doc

pytestmark = pytest.mark.cluster

SPARK_PORT, SPARK_UI = 7077, 8080
PAUSE_POINT = "task_files_written"
WHEEL = "icetide-0.1.0-py3-none-any.zip"  # the wheel, named so PySpark puts it on its workers' path


def wait_for(what: str, seconds: float, predicate: Any, *procs: subprocess.Popen[Any]) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            if predicate():
                return
        for proc in procs:
            assert proc.poll() is None, f"{what}: {repr(proc.args)[-300:]} exited with {proc.returncode}"
        time.sleep(0.5)
    raise TimeoutError(f"{what} within {seconds}s")


def build_wheel(into: Path) -> subprocess.Popen[str]:
    """`pip wheel --no-deps` of the repository's tracked sources, started in a copy (no build/ in
    the repository); the wheel lands in `into`/dist."""
    source = into / "source"
    tracked = subprocess.run(
        ["git", "ls-files", "icetide", "pyproject.toml", "README.md"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for name in tracked:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    return subprocess.Popen(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(into / "dist"), str(source)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def worker_venv(folder: Path) -> None:
    """A venv with this one's site-packages as plain path entries: the dependencies import, and
    icetide does not (its editable install's .pth hook is not run for such an entry)."""
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=120)  # type: ignore[attr-defined]
    (site,) = glob.glob(str(folder / "lib" / "python*" / "site-packages"))
    Path(site, "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")


WORKER_DIR = "work"  # SPARK_WORKER_DIR, in each machine's own /tmp


def spark_env(machine: netns.Machine, **more: str) -> dict[str, str]:
    """A Spark daemon's whole environment on `machine`: no PYTHONPATH, its own dirs under its /tmp."""
    import pyspark

    return {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/root"),
        "SPARK_HOME": os.path.dirname(pyspark.__file__),
        "SPARK_NO_DAEMONIZE": "1",
        "SPARK_LOCAL_IP": machine.address,
        "SPARK_LOCAL_DIRS": "/tmp/local",
        "SPARK_WORKER_DIR": f"/tmp/{WORKER_DIR}",
        "SPARK_LOG_DIR": "/tmp/logs",
        "TMPDIR": "/tmp",
        **more,
    }


def alive_workers(master: netns.Machine) -> int:
    with urllib.request.urlopen(f"http://{master.address}:{SPARK_UI}/json/", timeout=2) as r:
        return sum(w.get("state") == "ALIVE" for w in json.load(r).get("workers", []))


@pytest.fixture
def network(tmp_path: Path) -> Iterator[netns.Network]:
    why = netns.unavailable()
    # Not a skip: without namespaces the guarantee (no shared disk) is unproven, and `make test`
    # runs as root (it installs Debian's packages too), where they work.
    assert why is None, f"cannot make the cluster's machines: {why} (this test needs root and `ip netns`)"
    with netns.Network(tmp_path / "machines") as net:
        yield net


def test_run_on_a_cluster_without_shared_disk_survives_a_dead_worker(
    network: netns.Network, spark: Any, tmp_path: Path
) -> None:
    net = network
    # Each machine's /tmp is a folder of its own, mounted over /tmp: a checkout or a Python that
    # lives under /tmp would vanish from every machine.
    hidden = [str(p) for p in (ROOT, Path(sys.prefix)) if Path("/tmp") in (p.resolve(), *p.resolve().parents)]
    assert not hidden, f"the cluster test gives each machine its own /tmp; move these out of /tmp: {hidden}"
    started = time.monotonic()

    def phase(what: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {what}", flush=True)

    master, w1, w2, driver, maintainer = (net.add(r) for r in ("master", "w1", "w2", "driver", "maint"))
    workers = (w1, w2)
    spark_class = [os.path.join(spark_env(master)["SPARK_HOME"], "bin", "spark-class")]
    log = (tmp_path / "spark.log").open("w")
    master_class = "org.apache.spark.deploy.master.Master"
    url = f"spark://{master.address}:{SPARK_PORT}"
    procs = [
        net.start(master, [*spark_class, master_class, "--host", master.address], env=spark_env(master), stdout=log)
    ]
    # The servers listen on the bridge's host side: the one address every machine reaches (the
    # tests' rule is 127.0.0.1, which inside a namespace is the namespace's own loopback).
    with (
        log,
        (tmp_path / "run.log").open("w") as run_log,
        (tmp_path / "maintain.log").open("w") as maintain_log,
        s3_server(host=net.host) as s3,
        postgres_server(host=net.host, clients=net.subnet) as postgres,
    ):
        building = build_wheel(tmp_path / "wheel")
        for worker in workers:
            worker_venv(worker.path("/tmp/venv"))
        phase("servers, venvs")
        wait_for("the Spark master", 120, lambda: alive_workers(master) == 0, *procs)
        phase("master up")
        # Each worker's first attempt of batch 2's task pauses with its files written; the test
        # kills the machine it paused on, and the rerun on the other goes through.
        pause = {"ICETIDE_PAUSE_AT": PAUSE_POINT, "ICETIDE_PAUSE_BATCH": "2", "ICETIDE_PAUSE_SECONDS": "600"}
        # The repository's code and icetide's jar cache (where this machine has one): not on a
        # worker. Not the whole checkout: a clone's .venv in it holds Spark and the dependencies.
        hidden = [p for p in (str(ROOT / "icetide"), str(ROOT / "tests"), cache_dir()) if os.path.isdir(p)]
        for worker in workers:
            worker_class = "org.apache.spark.deploy.worker.Worker"
            resources = ("--cores", "1", "--memory", "1g")
            argv = [*spark_class, worker_class, "--host", worker.address, *resources, url]
            procs.append(net.start(worker, argv, env=spark_env(worker, **pause), hide=hidden, stdout=log))
        no_icetide = net.run(w1, ["/tmp/venv/bin/python", "-c", "import pyarrow, pyspark, icetide"], env=spark_env(w1))
        assert "No module named 'icetide'" in no_icetide.stderr, no_icetide  # the dependencies import

        bucket = s3.new_bucket()
        catalog = {
            "type": "jdbc",
            "uri": postgres.uri(postgres.new_database()),
            "jdbc.user": USER,
            "jdbc.password": postgres.password,
            "warehouse": f"s3://{bucket}/warehouse",
            **s3.catalog_options(),
        }
        lines, bad = land_files(tmp_path / "landing", 6, seed=47)
        upload(s3, bucket, tmp_path / "landing", "landing")
        doc = pipeline_doc("machines", tmp_path / "landing")
        doc["source"]["files"]["path"] = f"s3a://{bucket}/landing"
        doc["catalog"] = catalog
        doc["trigger"] = {"interval": "1s", "max_files": 2}
        maintainer.path("/tmp/pipeline.yaml").write_text(yaml.safe_dump(doc))  # local Spark on its machine
        # No spark.driver.host, no SPARK_LOCAL_IP: Spark finds the driver's one routable address.
        doc["spark"] = {
            "spark.master": url,
            "spark.submit.pyFiles": f"/tmp/{WHEEL}",
            "spark.executor.cores": "1",
            "spark.executor.memory": "512m",
            "spark.cores.max": "2",
        }
        driver.path("/tmp/pipeline.yaml").write_text(yaml.safe_dump(doc))
        pip_output, _ = building.communicate(timeout=300)
        assert building.returncode == 0, pip_output[-3000:]
        (wheel,) = (tmp_path / "wheel" / "dist").glob("icetide-*.whl")
        shutil.copy(wheel, driver.path(f"/tmp/{WHEEL}"))  # only the driver's machine has it
        phase("wheel built")
        icetide_env = {
            "PATH": os.environ["PATH"],
            "HOME": os.environ.get("HOME", "/root"),
            "PYTHONPATH": str(ROOT),
            "TMPDIR": "/tmp",
        }
        run = net.start(
            driver,
            [sys.executable, "-m", "icetide.cli", "run", "/tmp/pipeline.yaml", "--once"],
            # The executors' Python is the workers' venv, a path on their machines.
            env={**icetide_env, "PYSPARK_PYTHON": "/tmp/venv/bin/python"},
            cwd=str(ROOT),
            stdout=run_log,
        )
        phase("driver started")

        def paused_on() -> netns.Machine | None:
            for worker in workers:
                for f in glob.glob(str(worker.root / WORKER_DIR / "app-*" / "*" / "stderr")):
                    if f"icetide: paused at {PAUSE_POINT}" in Path(f).read_text(errors="replace"):
                        return worker
            return None

        wait_for("batch 2's task paused on a worker", 600, lambda: paused_on() is not None, run, *procs)
        dead = paused_on()
        assert dead is not None
        phase(f"paused on {dead.name}")
        # Maintenance beside the rest of the run: batch 2 rerun elsewhere, and batch 3. (The run
        # reports batch 1 only once batch 2's files are written, so that cannot start it sooner.)
        maintain = net.start(
            maintainer,
            [sys.executable, "-m", "icetide.cli", "maintain", "--pipeline", "/tmp/pipeline.yaml", "--no-progress"],
            env=icetide_env,
            cwd=str(ROOT),
            stdout=maintain_log,
        )
        killed = net.crash(dead)
        assert len(killed) >= 3, killed  # the worker, its executor and the executor's Python workers
        run.wait(timeout=600)
        phase("run done")
        maintain.wait(timeout=600)
        phase("maintain done")
        out, maintained = (tmp_path / "run.log").read_text(), (tmp_path / "maintain.log").read_text()
        assert run.returncode == 0, out[-4000:]
        assert maintain.returncode == 0, maintained[-4000:]
        batches = [json.loads(line)["batch_id"] for line in out.splitlines() if line.startswith("{")]
        assert batches == [1, 2, 3], out[-4000:]
        assert "lake.runner.machines: done in" in maintained

        reader = catalog_reader(spark, "lake", catalog)
        assert table_rows(reader, "lake.runner.machines", COLUMNS, KEY) == expected(lines)
        letters = [r["source_position"] for r in reader.table("lake.runner.machines_dead_letter").collect()]
        assert len(letters) == len(set(letters)) == bad
        # The files the dead machine wrote for batch 2 are in no snapshot: the rerun's are.
        batch_two = [k for k in s3.keys(bucket, "warehouse/runner/machines/data/") if "-b000000000002-" in k]
        committed = {r[0] for r in reader.sql("SELECT file_path FROM lake.runner.machines.all_files").collect()}
        assert any(f"s3://{bucket}/{k}" not in committed for k in batch_two), (batch_two, committed)
        # The wheel reached each executor through Spark, into the executor's own folder.
        for worker in workers:
            shipped = glob.glob(str(worker.root / WORKER_DIR / "app-*" / "*" / WHEEL))
            assert shipped, f"no {WHEEL} in {worker.name}'s executor folder"
        phase("checked")
