"""The runner's Prometheus endpoint, scraped over HTTP on 127.0.0.1 after a landing-files run."""

from __future__ import annotations

import math
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from icetide.config.pipeline import PipelineConfig
from icetide.ops.prometheus import record_restart, scrape_lines
from icetide.pipeline.table_runner import Runner
from tests.test_runner_files import land_files, pipeline_doc


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    return {(name, tuple(sorted(labels.items()))): value for name, labels, value in scrape_lines(text)}


def test_runner_serves_prometheus_metrics(spark: Any, tmp_path: Path) -> None:
    _, bad = land_files(tmp_path / "landing", 5, seed=21)
    doc = pipeline_doc("prom", tmp_path / "landing")
    doc["metrics"] = {"prometheus_port": 0}  # a free port on 127.0.0.1
    doc["maintenance"] = {"every_batches": 3}
    config = PipelineConfig.from_dict(doc)
    runner = Runner(config, spark)
    assert runner.prometheus is not None and runner.prometheus.port
    port = runner.prometheus.port
    summary = runner.run(once=True, handle_signals=False)
    assert [b.batch_id for b in summary.batches] == [1, 2, 3] and len(runner.maintenance_runs) == 1

    got = _scrape(port)
    table = (("pipeline", "prom"), ("table", "lake.runner.prom"))

    def value(name: str, labels: tuple[tuple[str, str], ...] = table) -> float:
        return got[(name, tuple(sorted(labels)))]

    assert value("icetide_rows_written_total") == summary.rows_written > 0
    assert value("icetide_records_in_total") == sum(b.records_in for b in summary.batches)
    assert value("icetide_bad_records_total") == bad == spark.table(config.dead_letter).count() > 0
    assert value("icetide_nested_as_text_total") == 0  # json: {nested_as_text: true} not asked for
    assert value("icetide_batches_total", (*table, ("outcome", "committed"))) == 3
    assert value("icetide_batches_total", (*table, ("outcome", "noop"))) == 0
    # How each batch ran: labels from fixed lists (pipeline/batch_path.py), as in the metrics line.
    ran = Counter((str(b.path), str(b.fallback or "none")) for b in summary.batches)
    assert ran == {("json_fast", "none"): 3}, ran  # landing JSON files take the JSON fast path
    for (path, fallback), count in ran.items():
        assert value("icetide_batch_paths_total", (*table, ("fallback", fallback), ("path", path))) == count
    assert value("icetide_overlapped_commits_total") == sum(b.overlapped for b in summary.batches)
    assert value("icetide_records_as_columns_total") == 0  # JSON: no run is read as columns
    assert value("icetide_commit_seconds_count") == 3
    assert all(b.commit_attempts >= 1 for b in summary.batches)  # each batch's commit made one call at least
    assert value("icetide_commit_retries_total") == sum(b.commit_attempts - 1 for b in summary.batches)
    assert math.isclose(
        value("icetide_commit_seconds_sum"), sum(b.commit_seconds for b in summary.batches), abs_tol=0.01
    )
    assert 0 <= value("icetide_seconds_since_last_commit") < 120
    assert value("icetide_maintenance_runs_total") == 1
    assert got[("icetide_source_lag", (("partition", "files"), ("pipeline", "prom"), ("source", "files")))] == 0
    assert got[("icetide_restarts_total", (("pipeline", "prom"),))] == 0

    # The supervisor's hook; and a second run with a new file counts on from the first.
    record_restart("prom")
    land_files(tmp_path / "landing", 1, seed=22, first=100)
    again = Runner(config, spark)
    assert again.prometheus is not None and again.prometheus.port == port  # one server per process and address
    more = again.run(once=True, handle_signals=False)
    got = _scrape(port)
    assert got[("icetide_restarts_total", (("pipeline", "prom"),))] == 1
    assert value("icetide_rows_written_total") == summary.rows_written + more.rows_written > summary.rows_written
    assert value("icetide_batches_total", (*table, ("outcome", "committed"))) == 4
    assert value("icetide_commit_seconds_count") == 4
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    assert "icetide_commit_seconds_bucket" in text and "# TYPE icetide_source_lag gauge" in text


def test_a_retried_commit_counts_its_retries_once_per_extra_attempt() -> None:
    """A table's batch whose commit took three attempts (two lost races or failed calls) adds 2 to
    `icetide_commit_retries_total`, a first-attempt batch adds nothing, and a no-op batch counts
    too (its attempts were made), as the counter's help says. Read by scraping, as Prometheus does."""
    from icetide.ops.prometheus import PipelineMetrics, TableCounts

    metrics = PipelineMetrics("retries", "lake.db.retried", source="kafka")
    port = metrics.serve("127.0.0.1", 0)
    labels = tuple(sorted({"pipeline": "retries", "table": "lake.db.retried"}.items()))
    assert _scrape(port)[("icetide_commit_retries_total", labels)] == 0  # present from the start
    for attempts, committed in ((3, True), (1, True), (2, False)):
        metrics.record_batch(TableCounts(committed, 10, 10 if committed else 0, 0, 0.1, commit_attempts=attempts))
    got = _scrape(port)
    assert got[("icetide_commit_retries_total", labels)] == 3
    assert got[("icetide_commit_seconds_count", labels)] == 2  # the no-op batch made no commit
