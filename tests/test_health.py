"""The health report: numbers agree with the table's files, suggestions follow the thresholds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from icetide.maintenance.health import HealthThresholds, files_over_time_html, table_health
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
    assert any(s.startswith(f"compact {busiest.partition}") for s in health.suggestions)
    assert any(s.startswith("fold deletes") for s in health.suggestions)
    doc = json.loads(health.to_json())
    assert doc["data_files"] == by[0][0] and doc["pipelines"][0]["batch_id"] == 3
    page = files_over_time_html(spark, table_name)
    assert page.count("<polyline") >= 1 and table_name in page


def test_cli_status_prints_text_json_and_chart(tmp_path: Path) -> None:
    warehouse = tmp_path / "warehouse"
    demo_warehouse(warehouse, batches=2, events=300)
    chart = tmp_path / "files.html"
    done = run_cli("status", "lake.demo.ad_events", "--warehouse", str(warehouse), "--chart", str(chart))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "files per partition" in done.stdout and "demo" in done.stdout and "next maintenance" in done.stdout
    assert "<svg" in chart.read_text()
