"""Maintenance on a thread beside the runner: batches keep committing, the table stays right."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from icetide.config.pipeline import PipelineConfig
from icetide.pipeline.maintenance_thread import THREAD_NAME
from icetide.pipeline.table_runner import Runner, RunSummary
from icetide.table.iceberg import load_table
from tests.model import table_rows
from tests.test_runner_files import COLUMNS, KEY, expected, land_files, pipeline_doc

FILES = 10


def _did_something(report: Any) -> bool:
    compacted = report.compaction is not None and report.compaction.groups > 0
    converted = report.conversion is not None and report.conversion.committed
    return compacted or converted


@pytest.mark.parametrize("fold", ["rewrite", "position"])
def test_thread_maintains_while_batches_commit(spark: Any, tmp_path: Path, fold: str) -> None:
    landing = tmp_path / "landing"
    lines, _ = land_files(landing, 2, seed=0)
    doc = pipeline_doc(f"threaded_{fold}", landing)
    doc["trigger"] = {"interval": "200ms", "max_files": 1}
    doc["maintenance"] = {"every": "1s", "fold_deletes": fold}
    runner = Runner(PipelineConfig.from_dict(doc), spark)
    outcome: list[RunSummary | BaseException] = []

    def run() -> None:
        try:
            outcome.append(runner.run(handle_signals=False))
        except BaseException as exc:  # a failed batch commit ends the run with its error
            outcome.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    try:
        for n in range(2, FILES):  # files keep landing while batches and maintenance run
            more, _ = land_files(landing, 1, seed=n, first=n)
            lines += more
            time.sleep(0.5)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and worker.is_alive():
            state = runner.sink.last_committed()
            caught_up = state is not None and state.batch_id >= FILES
            if caught_up and any(_did_something(r) for r in runner.maintenance_runs):
                break
            time.sleep(0.5)
    finally:
        runner.stop()
        worker.join(600)
    assert not worker.is_alive()
    assert THREAD_NAME not in {t.name for t in threading.enumerate()}  # stopped with the run
    [summary] = outcome
    assert isinstance(summary, RunSummary), summary  # no batch commit failed
    assert [b.batch_id for b in summary.batches] == list(range(1, FILES + 1))
    assert all(b.committed for b in summary.batches)
    assert runner.maintenance_runs, "maintenance never ran"
    assert any(_did_something(r) for r in runner.maintenance_runs), [r.lines() for r in runner.maintenance_runs]
    load_table(spark, runner.config.table.name).refresh()
    assert table_rows(spark, runner.config.table.name, COLUMNS, KEY) == expected(lines)


def test_a_failed_pass_is_one_warning_line_and_the_thread_goes_on(spark: Any, caplog: pytest.LogCaptureFixture) -> None:
    """A pass that raises (here the pipeline's table list, with a py4j-shaped message) is one
    WARNING line naming the Java cause, the stack trace only at DEBUG; the thread keeps its
    schedule and counts each failure."""
    from icetide.maintenance.maintain import MaintenancePolicy
    from icetide.pipeline.maintenance_thread import MaintenanceThread

    def tables() -> list[str]:
        raise RuntimeError(
            "An error occurred while calling o42.loadTable.\n"
            ": org.apache.iceberg.exceptions.NoSuchTableException: Table does not exist: lake.db.gone\n"
            "\tat org.apache.iceberg.BaseMetastoreCatalog.loadTable(BaseMetastoreCatalog.java:50)"
        )

    caplog.set_level("WARNING", logger="icetide.pipeline.maintenance_thread")
    thread = MaintenanceThread(spark, tables, MaintenancePolicy(), 0.05, name="lake.db.gone").start()
    try:
        deadline = time.monotonic() + 30
        while thread.failures < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert thread.failures >= 2 and thread.running  # it went on after the first failure
    finally:
        assert thread.stop(30)
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert warnings and all(r.exc_info is None for r in warnings)  # no stack trace at WARNING
    line = warnings[0].getMessage()
    assert "\n" not in line and "NoSuchTableException: Table does not exist: lake.db.gone" in line, line
    assert "maintenance of lake.db.gone failed" in line and "the pipeline goes on" in line
