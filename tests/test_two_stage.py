"""A pipeline with a merge engine: source -> raw table -> stateful stage -> table, exactly once."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from icetide.config.pipeline import PipelineConfig
from icetide.pipeline.two_stage import TwoStageRunner
from icetide.stateful.merge import MergeSpec
from tests.commands import crash_tour, stop_with_signal, warehouse_reader
from tests.merge_model import merge_events
from tests.model import table_rows

ROOT = Path(__file__).resolve().parent.parent
KEY = ["ad_id", "hour"]
VALUES = ["clicks", "last_click", "country", "event_time"]
MERGE = {"engine": "aggregate", "columns": {"clicks": "sum", "last_click": "max", "country": "first"}}


def pipeline_doc(name: str, landing: Path, warehouse: Path) -> dict[str, Any]:
    return {
        "pipeline": name,
        "warehouse": str(warehouse),
        "source": {"files": {"path": str(landing), "format": "json", "min_age_seconds": 0.001}},
        "table": {
            "name": f"lake.two.{name}",
            "schema": "ad_id STRING NOT NULL, hour TIMESTAMP NOT NULL, clicks INT, last_click TIMESTAMP, "
            "country STRING, event_time TIMESTAMP NOT NULL",
            "key": KEY,
            "partition_by": ["days(hour)"],
        },
        "order_by": "event_time",
        "merge": MERGE,
        "state": {"watermark": "1d"},
        "trigger": {"interval": "1s", "max_files": 2},
        "dead_letter": f"lake.two.{name}_dead_letter",
    }


def land(landing: Path, files: int, seed: int, first: int = 0) -> tuple[list[dict[str, Any]], int]:
    """Click events (some repeated verbatim, some out of order, some bad); returns the good records."""
    rng = random.Random(seed)
    landing.mkdir(parents=True, exist_ok=True)
    good, bad = [], 0
    for n in range(first, first + files):
        lines = []
        for i in range(40):
            second = rng.randrange(3600)
            e = {
                "ad_id": f"ad{rng.randrange(15)}",
                "hour": "2026-01-01T01:00:00",
                "event_time": f"2026-01-01T01:{second // 60:02d}:{second % 60:02d}.{n:03d}{i:03d}",
                "clicks": rng.randrange(3),
                "country": rng.choice(["JP", "US"]),
            }
            if e["clicks"]:
                e["last_click"] = e["event_time"]
            if rng.random() < 0.05:
                lines.append('{"ad_id": "broken", ')
                bad += 1
                continue
            lines.append(json.dumps(e))
            good.append(e)
            if rng.random() < 0.1:
                lines.append(json.dumps(e))  # delivered twice: kept in the raw table, merged once
                good.append(e)
        tmp = landing / f".part-{n:03d}.json"
        tmp.write_text("\n".join(lines) + "\n")
        os.utime(tmp, (1_767_225_600 + n, 1_767_225_600 + n))
        os.replace(tmp, landing / f"part-{n:03d}.json")
    return good, bad


def expected(events: list[dict[str, Any]]) -> dict[Any, Any]:
    def ts(v: str | None) -> datetime | None:
        return datetime.fromisoformat(v) if v else None

    typed = [
        {**e, "hour": ts(e["hour"]), "event_time": ts(e["event_time"]), "last_click": ts(e.get("last_click"))}
        for e in events
    ]
    return merge_events(typed, KEY, "event_time", VALUES, MergeSpec.from_dict(MERGE))


def test_two_stages_in_process_merge_every_event_once(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both stages merge every event once, run after run; a run whose first commit fails past its
    retries restarts, and `on_restart` hears it, as for a pipeline of one stage."""
    from icetide import faults

    doc = pipeline_doc("inproc", tmp_path / "landing", tmp_path / "warehouse")
    doc["warehouse"] = None  # the test session's warehouse
    doc["state"]["checkpoint"] = str(tmp_path / "chk")
    doc["restart"] = {"max_attempts": 2, "backoff": "0.1s"}
    events, bad = land(tmp_path / "landing", 3, seed=1)
    runner = TwoStageRunner(PipelineConfig.from_dict(doc), spark)
    runner.run(once=True, handle_signals=False)
    table = "lake.two.inproc"
    assert table_rows(spark, table, KEY + VALUES, KEY) == expected(events)
    assert spark.table("lake.two.inproc_dead_letter").count() == bad
    first_deletes = runner.progress.delete_rows
    assert first_deletes == 0  # every key was new: INSERTs only
    more, _ = land(tmp_path / "landing", 2, seed=2, first=3)
    for t in ("lake.two.inproc_raw", "lake.two.inproc_dead_letter"):  # one retry, then the run restarts
        spark.sql(f"ALTER TABLE {t} SET TBLPROPERTIES ('icetide.commit.retry.num-retries' = '1')")
    monkeypatch.setenv(faults.FAIL_AT, "before_commit_call")
    monkeypatch.setenv(faults.FAIL_TIMES, "2")  # both attempts of the run's first commit
    faults._failed.clear()
    restarts: list[Any] = []
    runner = TwoStageRunner(PipelineConfig.from_dict(doc), spark)
    try:
        runner.run(once=True, handle_signals=False, on_restart=restarts.append)
    finally:
        faults._failed.clear()
    assert [r.attempt for r in restarts] == [1], restarts
    assert table_rows(spark, table, KEY + VALUES, KEY) == expected(events + more)
    assert spark.table("lake.two.inproc_raw").count() == len(events + more)  # the replayable history


@pytest.mark.parametrize(
    "stops",
    [[("after_write", "2"), ("after_commit", "2"), ("state_after_commit", "0")], [("random", "")]],
    ids=["tour", "random"],
)
def test_kill_9_in_either_stage_and_restart_lands_everything_once(
    spark: Any, tmp_path: Path, stops: list[tuple[str, str]]
) -> None:
    import yaml

    warehouse = tmp_path / "warehouse"
    events, bad = land(tmp_path / "landing", 5, seed=len(stops))
    config_path = tmp_path / "pipeline.yaml"
    config_path.write_text(yaml.safe_dump(pipeline_doc("crash", tmp_path / "landing", warehouse)))
    crash_tour(config_path, stops, timeout=400)
    other = warehouse_reader(spark, "twocheck", warehouse)
    assert table_rows(other, "twocheck.two.crash", KEY + VALUES, KEY) == expected(events)
    assert other.table("twocheck.two.crash_raw").count() == len(events)
    dead = [r["source_position"] for r in other.table("twocheck.two.crash_dead_letter").collect()]
    assert len(dead) == len(set(dead)) == bad


def test_running_pipeline_merges_files_as_they_land_and_stops_on_sigterm(spark: Any, tmp_path: Path) -> None:
    import yaml

    warehouse = tmp_path / "warehouse"
    events, _ = land(tmp_path / "landing", 2, seed=7)
    config_path = tmp_path / "pipeline.yaml"
    config_path.write_text(yaml.safe_dump(pipeline_doc("live", tmp_path / "landing", warehouse)))
    proc = subprocess.Popen(
        [sys.executable, "-m", "icetide.cli", "run", str(config_path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    other = warehouse_reader(spark, "livecheck", warehouse)

    def wait_for(wanted: dict[Any, Any]) -> dict[Any, Any]:
        deadline, rows = time.monotonic() + 240, {}
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                rows = table_rows(other, "livecheck.two.live", KEY + VALUES, KEY)
            except Exception:  # the table or its first snapshot is not there yet
                rows = {}
            if rows == wanted:
                break
            time.sleep(2)
        return rows

    try:
        assert wait_for(expected(events)) == expected(events)
        more, _ = land(tmp_path / "landing", 2, seed=8, first=2)  # files landing while it runs
        assert wait_for(expected(events + more)) == expected(events + more)
    finally:
        out, stderr = stop_with_signal(proc)
    assert proc.returncode == 0, stderr[-3000:]
    stage_two = [json.loads(line) for line in out.splitlines() if '"stage": 2' in line]
    assert stage_two and sum(m["rows_written"] for m in stage_two) >= len(expected(events + more))


def _parquet_files(location: str) -> set[str]:
    root = location.removeprefix("file:")
    return {os.path.join(d, n) for d, _, names in os.walk(root) for n in names if n.endswith(".parquet")}


def test_raw_retention_never_drops_what_stage_two_has_not_merged(spark: Any, tmp_path: Path) -> None:
    """Raw rows past the retention are deleted and their snapshots expired (storage reclaimed),
    but a stage 2 that lags behind still merges every event, and stage 1 ingests no file twice."""
    from icetide.table.iceberg import load_table

    doc = pipeline_doc("retain", tmp_path / "landing", tmp_path / "warehouse")
    doc["warehouse"] = None  # the test session's warehouse
    doc["state"]["checkpoint"] = str(tmp_path / "chk")
    doc["raw"] = {"retention": "30d"}  # the events are of 2026-01-01: all past it
    config = PipelineConfig.from_dict(doc)
    table, raw = "lake.two.retain", "lake.two.retain_raw"
    events, _ = land(tmp_path / "landing", 3, seed=11)

    # Stage 1 alone, then retention: stage 2 has merged nothing yet, so nothing may be expired.
    runner = TwoStageRunner(config, spark)
    runner.ingest.run(once=True, handle_signals=False)
    first_files = _parquet_files(load_table(spark, raw).location())
    assert first_files
    result = runner.apply_retention()
    assert result is not None and result.expired_snapshots == 0 and result.skipped_expiry
    assert spark.table(raw).count() == 0  # the rows are past the retention
    assert runner.apply_retention() is None  # at most once per RETENTION_EVERY_SECONDS
    runner.run(once=True, handle_signals=False)
    assert table_rows(spark, table, KEY + VALUES, KEY) == expected(events)  # deleted rows, still merged

    # Stage 2 has passed them now: the next pass expires the old snapshots and their files.
    more, _ = land(tmp_path / "landing", 2, seed=12, first=3)
    runner = TwoStageRunner(config, spark)
    result = runner.apply_retention()
    assert result is not None and result.expired_snapshots > 0 and result.skipped_expiry is None
    jraw = load_table(spark, raw)
    jraw.refresh()
    assert jraw.snapshot(result.kept_from_snapshot) is not None  # where stage 2 is: kept
    runner.run(once=True, handle_signals=False)
    assert table_rows(spark, table, KEY + VALUES, KEY) == expected(events + more)
    assert spark.table(raw).count() == len(more)  # the first files were not ingested again

    # Once stage 2 has read past the delete, the deleted rows' files are gone from storage.
    result = TwoStageRunner(config, spark).apply_retention()
    assert result is not None and result.expired_snapshots > 0
    assert not first_files & _parquet_files(load_table(spark, raw).location())
    assert spark.table(raw).count() == 0
    # A run with nothing new returns (stage 2 restarts past the expired snapshots) and changes nothing.
    TwoStageRunner(config, spark).run(once=True, handle_signals=False)
    assert table_rows(spark, table, KEY + VALUES, KEY) == expected(events + more)


def test_a_failed_retention_pass_is_one_line_and_does_not_raise(spark: Any, tmp_path: Path) -> None:
    from icetide.pipeline.raw_retention import apply_raw_retention

    result = apply_raw_retention(
        spark, "lake.two.no_such_raw", order_by="event_time", retention_seconds=86400, checkpoint=str(tmp_path / "c")
    )
    assert result.deleted_before is None and result.expired_snapshots == 0
    assert result.skipped_expiry is not None and "no_such_raw" in result.skipped_expiry
    assert "\n" not in result.skipped_expiry and "\tat " not in result.skipped_expiry
