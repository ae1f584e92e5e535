"""A policy-driven maintenance run beside a pipeline: fewer files, same rows, positions kept."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from icetide.cli.progress import ProgressBars, ProgressLines, progress_view
from icetide.errors import ConfigError
from icetide.maintenance.health import HealthThresholds
from icetide.maintenance.maintain import MaintenancePolicy, current_snapshot_id, maintain, maintain_tables
from icetide.maintenance.progress import ProgressEvent
from icetide.sources.generator import AdEventsConfig, ad_events
from tests.ad_events import stream_ad_events
from tests.commands import demo_warehouse, run_cli, stop_with_signal
from tests.test_compaction import Table, rows_of

COLUMNS = ["impression_id", "event_time", "ad_id", "clicks", "updated_at"]


def test_maintain_compacts_folds_deletes_and_expires_without_changing_rows(spark: Any, table_name: str) -> None:
    sink = stream_ad_events(spark, table_name, pipeline_id="m", batches=6, events=600)
    before = sorted(tuple(r) for r in spark.table(table_name).select(*COLUMNS).collect())
    files_before = spark.sql(f"SELECT count(*) FROM {table_name}.files").first()[0]
    policy = MaintenancePolicy(
        thresholds=HealthThresholds(max_small_files=2, max_delete_files=1, max_snapshots=3),
        retain_snapshots=2,
        max_snapshot_age_seconds=0,
    )
    report = maintain(spark, table_name, policy)
    assert report.compaction is not None and report.compaction.groups > 0
    assert report.expiry is not None and report.expiry.snapshots_left == 2
    after = sorted(tuple(r) for r in spark.table(table_name).select(*COLUMNS).collect())
    assert after == before
    files_after = spark.sql(f"SELECT count(*) FROM {table_name}.files").first()[0]
    assert files_after < files_before
    assert sink.last_committed().source_position == {"batch": 5}  # type: ignore[union-attr]
    sink.write(
        ad_events(spark, 6, AdEventsConfig(events_per_batch=600)), batch_id=6
    )  # the stream goes on after maintenance
    assert sink.last_committed().batch_id == 6  # type: ignore[union-attr]


@pytest.mark.guarantee
def test_cli_maintain_runs_once(spark: Any, tmp_path: Path) -> None:
    warehouse = tmp_path / "warehouse"
    demo_warehouse(spark, warehouse, batches=3, events=400, format_version=2)  # equality deletes to convert
    args = ("maintain", "lake.demo.ad_events", "--warehouse", str(warehouse), "--fold-deletes", "position")
    done = run_cli(*args, "--orphans")
    assert done.returncode == 0, done.stderr[-2000:]
    err = done.stderr
    assert "lake.demo.ad_events: done in" in err
    # Not a terminal: progress comes as plain lines, each step's first and last at least.
    assert "lake.demo.ad_events: scan data files 1/" in err and "converted " in err
    assert re.search(r"lake.demo.ad_events: rewrite groups \d+/", err) and "commit groups" in err
    assert "lake.demo.ad_events: list files" in err and "removed 0 orphan file(s)" in err
    # --every runs until SIGTERM (as a supervisor stops it), which ends it after the step in
    # flight, with exit code 0; without progress lines.
    every = subprocess.Popen(
        [sys.executable, "-m", "icetide.cli", *args, "--no-progress", "--every", "1s"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert every.stderr is not None
        seen = ""
        while ": done in" not in seen:  # one pass is over; the next is running or waiting
            line = every.stderr.readline()
            assert line, f"icetide maintain --every exited early: {seen}"
            seen += line
        _, rest = stop_with_signal(every)
    finally:
        if every.poll() is None:
            every.kill()
            every.wait()
    assert every.returncode == 0, seen + rest
    assert "signal SIGTERM: stopping after the maintenance step in flight" in rest, rest
    assert "rewrite groups" not in seen + rest and "interrupted" not in rest


def test_progress_views() -> None:
    lines_out, bars_out = io.StringIO(), io.StringIO()
    lines = ProgressLines(Console(file=lines_out, force_terminal=False, width=200))
    for n in range(1, 101):
        lines(ProgressEvent("lake.db.t", "scan data files", n, 100, f"file {n}"))
    printed = lines_out.getvalue().splitlines()  # the first, then one a tenth
    assert len(printed) == 11 and printed[-1] == "lake.db.t: scan data files 100/100 (file 100)"
    assert isinstance(progress_view(Console(file=io.StringIO(), force_terminal=False)), ProgressLines)
    console = Console(file=bars_out, force_terminal=True, width=200)
    with progress_view(console) as bars:
        assert isinstance(bars, ProgressBars)
        for n in range(1, 4):
            bars(ProgressEvent("lake.db.t", "rewrite groups", n, 3, "ts_hour=2026-01-01-10"))
    assert "lake.db.t: rewrite groups" in bars_out.getvalue() and "3/3" in bars_out.getvalue()


def _three_hours(t: Table) -> None:
    """Hour 10 has the most small files, hour 12 the newest time, hour 11 was written last."""
    for n in range(4):
        t.append(rows_of([n], "ten", minutes=[n]))
    for n in range(2):
        t.append(rows_of([20 + n], "twelve", minutes=[120 + n]))
    for n in range(2):
        t.append(rows_of([10 + n], "eleven", minutes=[60 + n]))


@pytest.mark.parametrize(("order", "first"), [("newest", "2026-01-01 11:00"), ("worst", "2026-01-01 10:00")])
def test_time_budget_compacts_the_newest_partition_first(spark: Any, table_name: str, order: str, first: str) -> None:
    t = Table(spark, table_name)
    _three_hours(t)
    policy = MaintenancePolicy(
        thresholds=HealthThresholds(max_small_files=1),
        time_budget_seconds=0,
        group_order=order,  # type: ignore[arg-type]
        combine_groups_bytes=0,  # a group a unit of work, so the budget stops after the first
    )
    report = maintain(spark, table_name, policy)
    assert report.compaction is not None and [g.partition for g in report.compaction.committed] == [first]
    deferred = [s for s in report.compaction.skipped if s.kind == "deferred"]
    assert len(deferred) == 2 and "time budget" in deferred[0].reason  # the rest waits for the next run
    t.check()
    report = maintain(spark, table_name, MaintenancePolicy(thresholds=HealthThresholds(max_small_files=1)))
    assert report.compaction is not None and report.compaction.groups == 2
    t.check()


def test_policy_refuses_a_bad_combine_size_at_construction() -> None:
    with pytest.raises(ConfigError, match="combine_groups_bytes: must be a whole number of bytes, 0 or more, got -1"):
        MaintenancePolicy(combine_groups_bytes=-1)


def test_time_budget_takes_small_groups_together(spark: Any, table_name: str) -> None:
    """By default small groups share one Spark job and one commit: a spent budget still compacts
    all three hours, where it stops after one hour with a group a unit (above)."""
    t = Table(spark, table_name)
    _three_hours(t)
    policy = MaintenancePolicy(thresholds=HealthThresholds(max_small_files=1), time_budget_seconds=0)
    report = maintain(spark, table_name, policy)
    assert report.compaction is not None and report.compaction.groups == 3
    assert len(set(report.compaction.snapshot_ids)) == 1
    assert not [s for s in report.compaction.skipped if s.kind == "deferred"]
    t.check()


def _descendants(pid: int) -> list[int]:
    """Every process under `pid` (its children, theirs, ...), from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def test_maintain_every_stops_when_its_spark_driver_is_gone(spark: Any, table_name: str, warehouse: str) -> None:
    """The JVM under `icetide maintain --every` is killed (as the kernel's OOM killer or Spark's own
    exit on OutOfMemoryError would): the command ends with one line saying so and exit code 1,
    instead of printing "Connection refused" every pass forever (bench/v3_stream_reads.py at
    10M rows: 86 such passes)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    t = Table(spark, table_name)
    t.upsert(rows_of([1, 2], "a", seq=1))
    command = [sys.executable, "-m", "icetide.cli", "maintain", table_name, "--warehouse", warehouse]
    process = subprocess.Popen(
        [*command, "--every", "1s", "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        lines: list[str] = []
        assert process.stdout is not None
        while not any(": done in" in line for line in lines):  # one pass: the JVM is up
            line = process.stdout.readline()
            assert line, f"icetide maintain exited early: {''.join(lines)}"
            lines.append(line)
        jvms = [p for p in _descendants(process.pid) if "java" in Path(f"/proc/{p}/cmdline").read_bytes().decode()]
        assert jvms, "no JVM under icetide maintain"
        for pid in jvms:
            os.kill(pid, signal.SIGKILL)
        started = time.monotonic()
        rest, _ = process.communicate(timeout=120)
        assert time.monotonic() - started < 120
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 1, rest
    assert "icetide: error: the Spark driver stopped, so no maintenance can run in this process" in rest, rest
    assert rest.count("maintenance failed") <= 1, rest


def test_cli_fold_all_makes_a_small_v2_table_readable_by_every_engine(
    spark: Any, table_name: str, warehouse: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A v2 table written by UpsertSink at its defaults holds equality deletes, which PyIceberg
    refuses; on a table this small no threshold calls for folding ("nothing due"). `icetide
    maintain --fold-all` (the CLI's main, in this process's Spark) folds them now: PyIceberg,
    DuckDB and Spark then read what the model holds."""
    import icetide
    from icetide.cli.main import main
    from icetide.maintenance.health import table_health
    from icetide.table.iceberg import format_version, load_table
    from tests.lake_readers import duckdb_rows, duckdb_with_iceberg, pyiceberg_rows

    columns, key = ["id", "v"], ["id"]
    icetide.create_table(
        spark,
        table_name,
        schema="id BIGINT NOT NULL, v STRING",
        key=key,
        partition_by=["bucket(2, id)"],
        format_version=2,
    )
    sink = icetide.UpsertSink(spark, table_name, pipeline_id="fold")  # the sink's default delete mode
    model: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    batches = [
        [(n, "one", "UPSERT") for n in range(12)],
        [
            *((n, "two", "UPSERT") for n in range(0, 12, 3)),
            (1, None, "DELETE"),
            (4, None, "DELETE"),
            (20, "new", "INSERT"),
        ],
    ]
    for batch_id, rows in enumerate(batches, start=1):
        sink.write(spark.createDataFrame(rows, "id BIGINT, v STRING, _op STRING"), batch_id=batch_id)
        for n, v, op in rows:
            if op == "DELETE":
                model.pop((n,), None)
            else:
                model[(n,)] = (n, v)

    def metadata() -> str:
        jtable = load_table(spark, table_name)
        jtable.refresh()
        return str(jtable.operations().current().metadataFileLocation())

    def equality_deletes() -> int:
        return int(spark.sql(f"SELECT count(*) FROM {table_name}.delete_files WHERE content = 2").first()[0])

    from pyiceberg.table import StaticTable

    assert equality_deletes() > 0
    assert table_health(spark, table_name).suggestions == []  # what `icetide maintain` alone does: nothing
    with pytest.raises(ValueError, match="equality deletes"):
        pyiceberg_rows(StaticTable.from_metadata(metadata()), columns, key)

    capsys.readouterr()
    assert main(["maintain", table_name, "--warehouse", warehouse, "--fold-all", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "no equality delete left: every engine reads this snapshot" in err, err
    assert equality_deletes() == 0
    assert format_version(load_table(spark, table_name)) == 2  # folding never upgrades the table
    assert pyiceberg_rows(StaticTable.from_metadata(metadata()), columns, key) == model
    with duckdb_with_iceberg() as con:
        assert duckdb_rows(con, f"iceberg_scan('{metadata()}')", columns, key) == model
    spark_rows = [r.asDict() for r in spark.table(table_name).collect()]
    assert {(r["id"],): (r["id"], r["v"]) for r in spark_rows} == model


def test_a_scheduled_pass_skips_a_table_nothing_committed_to(spark: Any, table_name: str) -> None:
    """maintain_tables with `settled` (what the pipeline's maintenance schedule keeps): a table a
    whole pass left unchanged is skipped until something commits to it, then maintained again."""
    t = Table(spark, table_name)
    _three_hours(t)
    policy = MaintenancePolicy(thresholds=HealthThresholds(max_small_files=1))
    settled: dict[str, int] = {}
    first = maintain_tables(spark, [table_name], policy, settled=settled)
    compaction = first.reports[0].compaction
    assert compaction is not None and compaction.groups == 3 and table_name not in settled  # it committed
    second = maintain_tables(spark, [table_name], policy, settled=settled)
    assert second.reports[0].did_nothing and settled == {table_name: current_snapshot_id(spark, table_name)}
    third = maintain_tables(spark, [table_name], policy, settled=settled)
    assert third.reports == [] and third.next_start == 0  # skipped: nothing committed since
    t.append(rows_of([30], "twelve", minutes=[125]))  # a commit beside the schedule
    t.append(rows_of([31], "twelve", minutes=[126]))
    fourth = maintain_tables(spark, [table_name], policy, settled=settled)
    compaction = fourth.reports[0].compaction
    assert compaction is not None and compaction.groups == 1 and table_name not in settled
    t.check()
