"""The health report: numbers agree with the table's files, suggestions follow the thresholds,
partitions carry labels people read, deletion vectors are counted."""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from icetide.maintenance.health import HealthThresholds, planned_health, table_health
from icetide.maintenance.timeline import snapshot_timeline
from tests.ad_events import stream_ad_events
from tests.commands import demo_warehouse, run_cli


def test_health_counts_files_deletes_and_pipelines(spark: Any, table_name: str) -> None:
    stream_ad_events(spark, table_name, pipeline_id="health", batches=4, events=800)
    health = table_health(spark, table_name, HealthThresholds(max_small_files=2, max_delete_files=2))
    files = spark.sql(f"SELECT content, count(*) AS n, sum(record_count) AS r FROM {table_name}.files GROUP BY 1")
    by = {int(r["content"]): (int(r["n"]), int(r["r"])) for r in files.collect()}
    assert health.data_files == by[0][0]
    assert health.delete_files == by[2][0]
    assert health.equality_delete_rows == by[2][1]
    assert health.snapshots == 4
    assert [(p.pipeline_id, p.batch_id, p.source_position) for p in health.pipelines] == [("health", 3, {"batch": 3})]
    busiest = max(health.partitions, key=lambda p: p.data_files)
    assert busiest.data_files == 4 and busiest.small_files == 4  # one small file per batch
    assert any(s.startswith(f"compact {busiest.label}") for s in health.suggestions)
    assert any(s.startswith("fold deletes") for s in health.suggestions)
    hours = {
        r["h"]: int(r["n"])
        for r in spark.sql(
            f"SELECT date_format(event_time, 'yyyy-MM-dd HH:00') AS h, count(*) AS n FROM {table_name} GROUP BY 1"
        ).collect()
    }
    labels = [p.label for p in health.partitions]
    assert set(hours) <= set(labels) and labels == sorted(labels, reverse=True)  # newest first
    assert health.partitioned_by == "hours(event_time)"
    doc = json.loads(health.to_json())
    assert doc["data_files"] == by[0][0] and doc["pipelines"][0]["batch_id"] == 3
    first = doc["partitions"][0]
    assert first["label"] == labels[0] and isinstance(first["values"]["event_time_hour"], int)
    events = snapshot_timeline(spark, table_name)
    assert [(e.kind, e.writer, e.batch_id) for e in events] == [("stream", "health", b) for b in range(4)]
    added = spark.sql(f"SELECT sum(record_count) AS n FROM {table_name}.files WHERE content = 0").first()["n"]
    assert sum(e.rows_added for e in events) == added  # no file was removed yet: every added row is in a live file


def test_deletion_vectors_are_counted_per_partition(spark: Any, table_name: str) -> None:
    spark.sql(
        f"CREATE TABLE {table_name} (id BIGINT, day DATE, v STRING) USING iceberg PARTITIONED BY (day) "
        "TBLPROPERTIES ('format-version'='3', 'write.delete.mode'='merge-on-read')"
    )
    spark.sql(f"INSERT INTO {table_name} SELECT id, DATE'2026-01-01' + CAST(id % 2 AS INT), 'x' FROM range(0, 100)")
    spark.sql(f"DELETE FROM {table_name} WHERE id < 10")  # merge-on-read on v3: deletion vectors
    dvs = spark.sql(
        f"SELECT count(*) AS n, sum(record_count) AS r FROM {table_name}.files "
        "WHERE content = 1 AND file_format = 'PUFFIN'"
    ).first()
    assert dvs["n"] >= 1
    health = table_health(spark, table_name)
    assert health.deletion_vectors == dvs["n"]
    assert sum(p.deletion_vector_rows for p in health.partitions) == dvs["r"] == 10
    assert sum(p.position_delete_files for p in health.partitions) == 0
    assert {p.label for p in health.partitions} == {"2026-01-01", "2026-01-02"}
    deleted = snapshot_timeline(spark, table_name)[-1]
    assert (deleted.kind, deleted.deletion_vectors_added, deleted.position_deletes_added) == ("other", dvs["n"], 10)


@pytest.mark.guarantee
def test_cli_status_prints_text_and_page(spark: Any, tmp_path: Path) -> None:
    warehouse = tmp_path / "warehouse"
    demo_warehouse(spark, warehouse, batches=2, events=300)
    page = tmp_path / "files.html"
    done = run_cli(
        "status", "lake.demo.ad_events", "--warehouse", str(warehouse), "--chart", str(page), env={"COLUMNS": "80"}
    )
    assert done.returncode == 0, done.stderr[-2000:]
    terminal = done.stdout
    assert "files per partition" in done.stdout and "demo" in done.stdout and "next maintenance" in done.stdout
    assert max(len(line) for line in done.stdout.splitlines() if "┃" in line or "│" in line) <= 80
    text = page.read_text()
    assert "Plotly.newPlot" in text and "Delete backlog per partition" in text  # --chart: the page's alias
    labels = re.findall(r"^│ (\S.*?) +│", terminal, flags=re.MULTILINE)
    hours = [label for label in labels if re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:00", label)]
    assert hours and set(labels) - set(hours) == {"demo"}, labels  # "demo": the pipelines table's row
    for hour in hours:
        assert hour in text


def _planned(spark: Any, table: str, thresholds: HealthThresholds) -> Any:
    from icetide.maintenance.inventory import TableFiles
    from icetide.table.iceberg import load_table

    jtable = load_table(spark, table)
    jtable.refresh()
    files = TableFiles(spark, table, jtable)
    snapshot_id = int(jtable.currentSnapshot().snapshotId())
    return planned_health(files, files.scan(snapshot_id), files.live_deletes(snapshot_id), thresholds)


def _counts(health: Any) -> list[tuple[Any, ...]]:
    """Everything but the partitions' values (Spark's types against Iceberg's JSON) and last_updated."""
    return [tuple(v for k, v in asdict(p).items() if k not in ("values", "last_updated")) for p in health.partitions]


def test_maintenance_health_from_the_planner_scan_agrees_with_the_report(spark: Any, table_name: str) -> None:
    """maintain() decides by `planned_health` (the planner's scan, no Spark job); `icetide status`
    reports `table_health` (the metadata tables). On the same snapshot they count alike: a v2
    table of the generated ad events with equality deletes (some applying to no data file by key
    bounds), and a v3 table with deletion vectors from Spark's own DELETE, one partition by day."""
    thresholds = HealthThresholds(max_small_files=2, max_delete_files=2)
    stream_ad_events(spark, table_name, pipeline_id="health", batches=4, events=800)
    spark.sql(
        f"CREATE TABLE {table_name}_dv (id BIGINT, day DATE, v STRING) USING iceberg PARTITIONED BY (day) "
        "TBLPROPERTIES ('format-version'='3', 'write.delete.mode'='merge-on-read')"
    )
    spark.sql(f"INSERT INTO {table_name}_dv SELECT id, DATE'2026-01-01' + CAST(id % 2 AS INT), 'x' FROM range(0, 100)")
    spark.sql(f"INSERT INTO {table_name}_dv SELECT id, DATE'2026-01-01', 'y' FROM range(100, 150)")
    spark.sql(f"DELETE FROM {table_name}_dv WHERE id < 10 OR id > 140")
    for table in (table_name, f"{table_name}_dv"):
        report, planned = table_health(spark, table, thresholds), _planned(spark, table, thresholds)
        assert _counts(planned) == _counts(report), table
        assert planned.suggestions == report.suggestions
        assert (planned.snapshots, planned.target_file_size, planned.partitioned_by) == (
            report.snapshots,
            report.target_file_size,
            report.partitioned_by,
        )
    assert _planned(spark, f"{table_name}_dv", thresholds).dangling_delete_files == 0


def test_a_table_of_many_files_is_judged_by_the_metadata_query(
    spark: Any, table_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above `scan_health_files` live files a pass asks the metadata tables (one Spark query), not
    the planner's per-file scan, and still does what is due."""
    import icetide.maintenance.maintain as maintain_module
    from icetide.maintenance.maintain import MaintenancePolicy, maintain

    stream_ad_events(spark, table_name, pipeline_id="health", batches=5, events=400)
    asked: list[str] = []

    def query(*args: Any, **kwargs: Any) -> Any:
        asked.append(args[1])
        return table_health(*args, **kwargs)

    monkeypatch.setattr(maintain_module, "table_health", query)
    report = maintain(spark, table_name, MaintenancePolicy(scan_health_files=0))
    assert asked == [table_name]
    assert report.compaction is not None and report.compaction.groups > 0, report.lines()
    asked.clear()
    assert maintain(spark, table_name).due is not None and asked == []  # the default: the scan
