"""Executor side: stop Spark's Python workers from re-reading zip archives before every task.

PySpark's worker calls `importlib.invalidate_caches()` as each task starts. Before Python 3.12 a
zipimporter answers that by reading its archive's whole directory again (3.12 made it lazy,
CPython gh-103200), and Spark puts three archives on every worker's path: pyspark.zip, py4j's
zip and the spark-core jar, thousands of entries in all. Profiled on the append fast path: 28% of
the Python workers' CPU, about 0.15 core-seconds a task (docs/design.md, "Python task start").

`keep_zip_directories()` brings 3.12's effect to older Pythons: an archive's directory is read
again only when its size or modification time changed. Every icetide task function calls it
first; a reused worker (Spark's default) keeps it for all the tasks after its first.
"""

from __future__ import annotations

import os
import sys
import zipimport
from typing import Any

_installed = False


def keep_zip_directories() -> None:
    """Make zipimporter cache invalidation re-read an archive only if it changed (idempotent)."""
    global _installed
    if _installed or sys.version_info >= (3, 12):
        return
    reread = zipimport.zipimporter.invalidate_caches
    stamps: dict[str, tuple[int, int]] = {}

    def invalidate_caches(self: Any) -> None:
        try:
            status = os.stat(self.archive)
        except OSError:
            reread(self)
            return
        stamp = (status.st_mtime_ns, status.st_size)
        if stamps.get(self.archive) != stamp:
            reread(self)
            stamps[self.archive] = stamp

    zipimport.zipimporter.invalidate_caches = invalidate_caches  # type: ignore[method-assign]
    _installed = True
