"""Landing files that arrive after the late window are reported as data loss, never skipped silently."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from icetide.config.pipeline import PipelineConfig
from icetide.errors import DataLossError
from icetide.pipeline.table_runner import Runner
from icetide.sources.files import FileSource, FileSourceConfig, LandedFile


def _land(folder: Path, name: str, mtime: float) -> Path:
    path = folder / name
    path.write_text('{"id": 1}\n')
    os.utime(path, (mtime, mtime))
    return path


def test_late_file_is_reported_once_and_old_ingested_files_are_not(tmp_path: Path) -> None:
    now = time.time()
    _land(tmp_path, "old.json", now - 500)
    _land(tmp_path, "a.json", now - 100)
    source = FileSource(FileSourceConfig(path=str(tmp_path), format="json", min_age_seconds=0, late_window_seconds=60))
    files, position = source.plan(None, 10)
    assert sorted(Path(f).name for f in files) == ["a.json", "old.json"]
    assert sorted(position["files"]) == ["a.json", "old.json"]  # this plan's files, even below the horizon
    time.sleep(0.1)
    files, position = source.plan(position, 10)
    assert files == [] and list(position["files"]) == ["a.json"]  # old.json has fallen out of the position
    time.sleep(0.1)
    files, position = source.plan(position, 10)
    assert files == []  # and counts as done, not as a loss: it was there before the last listing
    time.sleep(0.1)
    late = _land(tmp_path, "late.json", now - 300)  # renamed into place with an old mtime
    with pytest.raises(DataLossError, match=r"late\.json landed after the late window.*on_data_loss: skip"):
        source.plan(position, 10)
    found: list[LandedFile] = []
    files, after = source.plan(position, 10, late=found)
    assert files == [] and [f.path for f in found] == [str(late)]
    time.sleep(0.1)
    again: list[LandedFile] = []
    assert source.plan(after, 10, late=again)[0] == [] and again == []  # reported once


def test_runner_stops_on_a_late_file_or_records_it_as_a_dead_letter(spark: Any, tmp_path: Path) -> None:
    """Through the runner: by default a late file stops the pipeline (nothing committed); with
    `on_data_loss: skip` it becomes one dead-letter row naming the file, and is never read."""
    landing = tmp_path / "landing"
    landing.mkdir()
    now = time.time()
    _land(landing, "a.json", now - 100)
    name = f"late{uuid.uuid4().hex[:8]}"
    doc: dict[str, Any] = {
        "pipeline": name,
        "source": {"files": {"path": str(landing), "format": "json", "min_age_seconds": 0, "late_window_seconds": 60}},
        "format": "json",
        "table": {"name": f"lake.late.{name}", "schema": "id BIGINT NOT NULL", "key": ["id"]},
        "mode": "upsert",
        "dead_letter": f"lake.late.{name}_dead_letter",
    }
    config = PipelineConfig.from_dict(doc)
    assert [b.batch_id for b in Runner(config, spark).run(once=True, handle_signals=False).batches] == [1]
    time.sleep(0.1)
    late = landing / "late.json"
    late.write_text('{"id": 2}\n')
    os.utime(late, (now - 300, now - 300))  # renamed into place with an old mtime
    with pytest.raises(DataLossError, match=r"late\.json landed after the late window"):
        Runner(config, spark).run(once=True, handle_signals=False)
    assert [r["id"] for r in spark.table(config.table.name).collect()] == [1]
    skip = PipelineConfig.from_dict({**doc, "on_data_loss": "skip"})
    summary = Runner(skip, spark).run(once=True, handle_signals=False)
    assert [(b.batch_id, b.lost_ranges) for b in summary.batches] == [(2, 1)]
    dead = spark.table(f"lake.late.{name}_dead_letter").collect()
    assert [(r["source_position"], r["payload"]) for r in dead] == [(str(late), None)]
    assert dead[0]["error"].startswith("data loss: file landed after the late window (late_window_seconds 60)")
    assert [r["id"] for r in spark.table(config.table.name).collect()] == [1]  # never read
    assert Runner(skip, spark).run(once=True, handle_signals=False).batches == []  # recorded once
    assert spark.table(f"lake.late.{name}_dead_letter").count() == 1
