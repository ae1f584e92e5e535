"""The status page in a real browser: headless Chromium (Debian's, installed by `make install`)
opens the page of a streamed and compacted table and shows what a person would read."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

import icetide
from icetide.cli.status import pipeline_page, table_status
from icetide.pipeline.sync.status import TableStatus
from icetide.sources.generator import AdEventsConfig, ad_events
from tests.ad_events import stream_ad_events
from tests.browser import Chromium

CHARTS = """
Array.from(document.querySelectorAll('.js-plotly-plot')).map(d => ({
  id: d.id,
  traces: d.querySelectorAll('g.trace').length,
  marks: d.querySelectorAll('.point').length,
  legend: Array.from(d.querySelectorAll('.legendtext')).map(t => t.textContent),
  xticks: Array.from(d.querySelectorAll('g[class^="x"][class$="tick"] text')).map(t => t.textContent),
}))
"""


@pytest.fixture(scope="module")
def browser() -> Any:
    with Chromium() as chromium:
        yield chromium


def test_browser_harness_sees_console_errors(browser: Chromium) -> None:
    page = browser.load("data:text/html,<script>console.error('boom'); undefined_function();</script>")
    assert len(page.errors) == 2 and "boom" in page.errors[0] and "undefined_function" in page.errors[1]


def test_status_page_in_chromium(spark: Any, table_name: str, tmp_path: Path, capsys: Any, browser: Chromium) -> None:
    sink = stream_ad_events(spark, table_name, pipeline_id="page", batches=2, events=300)
    compacted = icetide.compact(spark, table_name, min_input_files=2, delete_file_threshold=1, max_groups=2)
    assert compacted.groups >= 1
    sink.write(ad_events(spark, 2, AdEventsConfig(events_per_batch=300)), batch_id=2, source_position={"batch": 2})
    page_file = tmp_path / "status.html"
    args = argparse.Namespace(html=str(page_file), json=True, partitions=20)
    assert table_status(args, spark, table_name, {}, None) == 0
    doc = json.loads(capsys.readouterr().out)
    # What people should read, computed from the rows themselves, not from the report.
    hours = {
        r["h"]
        for r in spark.sql(
            f"SELECT DISTINCT date_format(event_time, 'yyyy-MM-dd HH:00') AS h FROM {table_name}"
        ).collect()
    }
    assert hours <= {p["label"] for p in doc["partitions"]}
    assert all(isinstance(p["values"]["event_time_hour"], int) for p in doc["partitions"])  # raw beside label

    page = browser.load(page_file.resolve().as_uri())
    assert page.errors == []
    text = page.evaluate("document.body.innerText")
    for hour in hours:
        assert hour in text
    assert "event_time_hour=" not in text
    charts = {c["id"]: c for c in page.evaluate(CHARTS)}
    assert set(charts) == {"t0-files", "t0-deletes", "t0-timeline"}
    for chart in charts.values():
        assert chart["traces"] > 0 and chart["marks"] > 0, chart
    assert set(charts["t0-files"]["xticks"]) <= {p["label"] for p in doc["partitions"]}
    assert charts["t0-files"]["xticks"], "the partition axis has labels"
    assert any(t.startswith("target file size") for t in charts["t0-files"]["legend"])
    assert "equality-delete rows" in charts["t0-deletes"]["legend"]
    assert {"stream commits", "maintenance commits"} <= set(charts["t0-timeline"]["legend"])
    assert "Snapshots: 3 stream commits, 1 maintenance commits" in text
    pipelines = page.evaluate("Array.from(document.querySelectorAll('table.pipelines td')).map(td => td.textContent)")
    assert pipelines[:3] == ["page", table_name, "2"]
    assert "Next maintenance pass" in text

    # The page of a pipeline of many tables: every table's position first, a section per existing table.
    statuses = [
        TableStatus(table_name, 2, {"topic": {"0": 900}}, 0, "2026-01-01T05:00:00+00:00", 1, 1, 1),
        TableStatus(f"{table_name}_missing", None, {}, None, None, None, 0, 0),
    ]
    pipeline_file = tmp_path / "pipeline.html"
    pipeline_file.write_text(pipeline_page(spark, "sync", statuses))
    page = browser.load(pipeline_file.resolve().as_uri())
    assert page.errors == []
    overview = page.evaluate(
        "Array.from(document.querySelector('table.pipelines').querySelectorAll('tr')).map(r => r.innerText)"
    )
    assert len(overview) == 3 and "topic/0@900" in overview[1] and f"{table_name}_missing" in overview[2]
    assert page.evaluate("document.querySelectorAll('section').length") == 1
    assert len(page.evaluate(CHARTS)) == 3
