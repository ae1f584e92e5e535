"""A policy-driven maintenance run beside a pipeline: fewer files, same rows, positions kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from icetide.maintenance.health import HealthThresholds
from icetide.maintenance.maintain import MaintenancePolicy, maintain
from icetide.sources.generator import AdEventsConfig, ad_events
from tests.ad_events import stream_ad_events
from tests.commands import demo_warehouse, run_cli

COLUMNS = ["impression_id", "event_time", "ad_id", "clicks", "updated_at"]


def test_maintain_compacts_folds_deletes_and_expires_without_changing_rows(spark: Any, table_name: str) -> None:
    sink = stream_ad_events(spark, table_name, pipeline_id="m", batches=6, events=600)
    before = sorted(tuple(r) for r in spark.table(table_name).select(*COLUMNS).collect())
    files_before = spark.sql(f"SELECT count(*) FROM {table_name}.files").first()[0]
    policy = MaintenancePolicy(
        thresholds=HealthThresholds(max_small_files=2, max_delete_files=1, max_snapshots=3), retain_snapshots=2
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


def test_cli_maintain_runs_once(tmp_path: Path) -> None:
    warehouse = tmp_path / "warehouse"
    demo_warehouse(warehouse, batches=3, events=400)
    done = run_cli("maintain", "lake.demo.ad_events", "--warehouse", str(warehouse))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "lake.demo.ad_events: done in" in done.stderr


def test_time_budget_stops_compaction_after_the_worst_group(spark: Any, table_name: str) -> None:
    stream_ad_events(spark, table_name, pipeline_id="budget", batches=4, events=600)
    before = sorted(tuple(r) for r in spark.table(table_name).select(*COLUMNS).collect())
    policy = MaintenancePolicy(thresholds=HealthThresholds(max_small_files=1), time_budget_seconds=0)
    report = maintain(spark, table_name, policy)
    assert report.compaction is not None and report.compaction.groups == 1
    assert any(s.kind == "deferred" for s in report.compaction.skipped)  # the rest waits for the next run
    assert sorted(tuple(r) for r in spark.table(table_name).select(*COLUMNS).collect()) == before
