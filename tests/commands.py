"""Running the `icetide` command line from tests, as a user would."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`python -m icetide.cli ARGS` in the repository root; output captured as text. If it has
    not ended after `timeout` seconds the test fails with the stacks of its threads."""
    command = [sys.executable, "-m", "icetide.cli", *args]
    proc = subprocess.Popen(
        command, cwd=ROOT, env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    out, err = communicate(proc, timeout)
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def communicate(proc: subprocess.Popen[str], timeout: float) -> tuple[str, str]:
    """`proc.communicate(timeout)`; if `proc` (an `icetide` command) is still running then, its
    threads' stacks (it prints them on SIGUSR1) fail the test, and it is killed, as it is when
    the wait ends any other way (Ctrl-C)."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=3)  # reading on while it prints them
        proc.kill()
        try:  # the pipes close when its Spark JVM (which shares them) has gone too
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            out, err = "", "(its output pipes stayed open after the kill)"
        raise AssertionError(
            f"{proc.args} still running after {timeout}s; its stdout ends:\n{out[-2000:]}\n"
            f"its stderr (the stacks last) ends:\n{err[-12000:]}"
        ) from None
    except BaseException:
        proc.kill()
        raise


def stop_with_signal(proc: subprocess.Popen[str], timeout: float = 120) -> tuple[str, str]:
    """SIGTERM `proc` (an `icetide` command) and wait for it to end; its output."""
    proc.send_signal(signal.SIGTERM)
    return communicate(proc, timeout)


def demo_warehouse(
    spark: Any, warehouse: Path, batches: int = 2, events: int = 300, format_version: int | None = None
) -> None:
    """Fill `warehouse` with the demo table lake.demo.ad_events as `icetide demo` does (its
    `run_demo`), in the test's Spark: a session whose catalog `lake` is that warehouse. The demo
    command itself is tested in test_demo.py; this spares a driver JVM to tests of other commands.
    `format_version=2` makes the table the stream writes equality deletes into."""
    from icetide.cli.demo import run_demo

    other = spark.newSession()
    other.conf.set("spark.sql.catalog.lake.warehouse", str(warehouse))
    run_demo(other, batches=batches, events_per_batch=events, format_version=format_version)


def opened(other: Any, catalog: str) -> Any:
    """`other` with its catalog `catalog` opened. Spark's CatalogManager opens a catalog with the
    settings of the thread's active session (SQLConf.get) and keeps it: opened from py4j outside
    a query (icetide's runner, load_table), it would be the test session's catalog of that name,
    e.g. `lake` on the local warehouse. So it is opened with `other` active (a query would do it
    too, but listing namespaces fails on a file catalog whose warehouse does not exist yet)."""
    sessions = other._jvm.org.apache.spark.sql.SparkSession
    active = sessions.getActiveSession()
    sessions.setActiveSession(other._jsparkSession)
    try:
        other._jsparkSession.sessionState().catalogManager().catalog(catalog)
    finally:
        if active.isDefined():
            sessions.setActiveSession(active.get())
        else:
            sessions.clearActiveSession()
    return other


def warehouse_reader(spark: Any, catalog: str, warehouse: Path | str) -> Any:
    """A session of the test's Spark with `catalog` on another process's warehouse, uncached, to
    read what a `icetide run` subprocess committed."""
    other = spark.newSession()
    prefix = f"spark.sql.catalog.{catalog}"
    other.conf.set(prefix, "org.apache.iceberg.spark.SparkCatalog")
    other.conf.set(f"{prefix}.type", "hadoop")
    other.conf.set(f"{prefix}.warehouse", str(warehouse))
    other.conf.set(f"{prefix}.cache-enabled", "false")
    return opened(other, catalog)


def crash_tour(
    config_path: Path,
    stops: Sequence[tuple[str, str]],
    *,
    kill_within: float = 1.0,
    timeout: float = 300,
    between: Callable[[], None] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`icetide run CONFIG --once` killed with SIGKILL at each stop in turn, each run a restart
    after the kill before it, then run again to the end; returns that last run.

    A stop is a crash point and the batch it fires in (ICETIDE_CRASH_AT, ICETIDE_CRASH_BATCH) or
    ("random", ""): a kill -9 at a random moment of the streaming, within `kill_within` seconds
    after the run's first batch committed (its metrics line); the run must still be going then
    (a run that ended first tested nothing: the source needs more batches). A named stop must be
    reached: a batch's points in the order a batch passes them
    (`after_dead_letter`, `after_write`, `after_table_commit`, `after_commit`), each batch's
    after the one before. A batch whose dead letters committed is read again under the next id.
    `between` runs after the last kill, before the final run (the source growing meanwhile).
    One tour of N stops starts N + 1 runners where N crash tests start 2N.
    """
    import random
    import time

    run = ("run", str(config_path), "--once")
    for point, batch in stops:
        if point == "random":
            proc = subprocess.Popen(
                [sys.executable, "-m", "icetide.cli", *run],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            assert proc.stdout is not None
            first = proc.stdout.readline()  # one line per committed batch, flushed
            time.sleep(random.uniform(0, kill_within))
            alive = proc.poll() is None
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            assert first and alive, f"the run ended before the random kill (first line {first!r})"
            continue
        crashed = run_cli(*run, env={"ICETIDE_CRASH_AT": point, "ICETIDE_CRASH_BATCH": batch}, timeout=timeout)
        assert crashed.returncode == -signal.SIGKILL, (point, batch, crashed.returncode, crashed.stderr[-2000:])
    if between is not None:
        between()
    done = run_cli(*run, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def catalog_reader(spark: Any, catalog: str, options: dict[str, str]) -> Any:
    """A session of the test's Spark whose catalog `catalog` is the one `options` describe (JDBC,
    REST), uncached. A JDBC catalog keeps its tables under its Spark name, so `catalog` is the
    name the pipeline uses (its other settings in this session are cleared). The catalog is
    opened before it is returned, so what is written through the session lands in it."""
    other = spark.newSession()
    prefix = f"spark.sql.catalog.{catalog}"
    for key in ("type", "warehouse", "lock-impl", "uri", "catalog-impl"):
        other.conf.unset(f"{prefix}.{key}")
    other.conf.set(prefix, "org.apache.iceberg.spark.SparkCatalog")
    for key, value in options.items():
        other.conf.set(f"{prefix}.{key}", value)
    other.conf.set(f"{prefix}.cache-enabled", "false")
    return opened(other, catalog)
