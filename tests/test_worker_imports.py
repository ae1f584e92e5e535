"""Spark's Python workers call importlib.invalidate_caches() before every task; icetide's task
functions make that cheap for zip archives that did not change (icetide/spark/worker_imports.py)."""

from __future__ import annotations

import importlib
import os
import sys
import zipfile
import zipimport
from pathlib import Path

import pytest

from icetide.spark import worker_imports


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="Python 3.12 re-reads zip directories lazily itself")
def test_an_unchanged_archive_is_not_read_again_and_a_changed_one_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "lib.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("icetide_zip_probe_a.py", "VALUE = 1\n")
    monkeypatch.setattr(worker_imports, "_installed", False)
    monkeypatch.setattr(zipimport.zipimporter, "invalidate_caches", zipimport.zipimporter.invalidate_caches)
    reads: list[str] = []
    read_directory = zipimport._read_directory  # type: ignore[attr-defined]
    monkeypatch.setattr(zipimport, "_read_directory", lambda path: (reads.append(path), read_directory(path))[1])
    monkeypatch.syspath_prepend(str(archive))

    worker_imports.keep_zip_directories()
    worker_imports.keep_zip_directories()  # idempotent
    assert importlib.import_module("icetide_zip_probe_a").VALUE == 1
    reads.clear()
    for _ in range(3):
        importlib.invalidate_caches()  # what every task start does
    assert reads.count(str(archive)) == 1  # the first call reads it once, to know its stamp

    with zipfile.ZipFile(archive, "a") as z:  # a new module: size and mtime change
        z.writestr("icetide_zip_probe_b.py", "VALUE = 2\n")
    os.utime(archive, ns=(os.stat(archive).st_atime_ns, os.stat(archive).st_mtime_ns + 1_000_000))
    importlib.invalidate_caches()
    assert reads.count(str(archive)) == 2
    assert importlib.import_module("icetide_zip_probe_b").VALUE == 2
