"""Landing files that arrive after the late window are reported as data loss, never skipped silently."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from icetide.errors import DataLossError
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
