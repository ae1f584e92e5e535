"""Orphan-file removal that cannot delete a file some writer is about to commit.

A file under the table's location that no snapshot references is an orphan: a crashed batch's,
a failed compaction's. But a batch or compaction in flight has files that no snapshot
references yet either. Two rules keep those: only files older than `older_than` are
considered, and a file named as a batch of a pipeline (`icetide-<pipeline>-b<batch>-...`) is
never deleted while that batch is after the pipeline's last committed one. Which of the rest
are orphans is decided by Iceberg's own DeleteOrphanFiles action, given exactly that list.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow.fs as pafs

from icetide.commit.pipeline_state import all_pipeline_states
from icetide.errors import ConfigError
from icetide.executor.writer import file_prefix
from icetide.filesystems import filesystem_for
from icetide.maintenance.progress import ProgressCallback, notify
from icetide.spark.py4j_collections import java_iter
from icetide.table.iceberg import jvm, load_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

DEFAULT_ORPHAN_AGE = timedelta(days=3)  # Iceberg's default for remove_orphan_files
_BATCH_FILE = re.compile(r"^icetide-(?P<pipeline>.+)-b(?P<batch>\d{12})-")


@dataclass(frozen=True)
class OrphanResult:
    """Orphans found (and deleted unless `dry_run`), and what was left alone and why."""

    orphans: tuple[str, ...]
    dry_run: bool
    in_flight: tuple[str, ...]  # files of batches after their pipeline's last commit: kept
    too_young: int  # files younger than `older_than`: not considered


def safe_pipeline_name(pipeline_id: str) -> str:
    """The pipeline id as it appears in the sink's file names."""
    prefix = file_prefix(pipeline_id, 0)
    return prefix[len("icetide-") : -len("-b000000000000-")]


def in_flight(name: str, last_batches: dict[str, int]) -> bool:
    """Is `name` a file of a batch its pipeline has not committed yet (or of an unknown pipeline)?"""
    match = _BATCH_FILE.match(name)
    if match is None:
        return False
    last = last_batches.get(match.group("pipeline"))
    return last is None or int(match.group("batch")) > last


def _hidden(relative_path: str) -> bool:
    """Hidden the way Iceberg's listing sees it: a part starting with "." or "_" (checksums,
    _SUCCESS markers), except partition folders such as `_p=1`. Iceberg never lists these."""
    return any(part[:1] in (".", "_") and "=" not in part for part in relative_path.split("/") if part)


class _CollectPaths:
    """A java.util.function.Consumer that records paths instead of deleting them (py4j callback)."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    def accept(self, path: Any) -> None:
        self.paths.append(str(path))

    class Java:
        implements: ClassVar[list[str]] = ["java.util.function.Consumer"]


def remove_orphan_files(
    spark: SparkSession,
    table: str,
    *,
    older_than: timedelta = DEFAULT_ORPHAN_AGE,
    dry_run: bool = True,
    progress: ProgressCallback | None = None,
) -> OrphanResult:
    """Find, and unless `dry_run` delete, files under the table's location no snapshot references.

    Guarantees: never deletes a file younger than `older_than` (keep it above the longest batch
    or compaction), nor a file of a pipeline's batch after its last committed one, nor any file
    a snapshot or the table's metadata references (Iceberg's own reachability, metadata files
    and version hint included). Dry run by default. `progress` hears of every thousandth file
    listed ("list files", no total) and of each orphan deleted ("delete orphans").
    """
    if older_than < timedelta(0):
        raise ConfigError("older_than: must not be negative")
    from pyspark.java_gateway import ensure_callback_server_started

    jtable = load_table(spark, table)
    jtable.refresh()
    last_batches = {safe_pipeline_name(s.pipeline_id): s.batch_id for s in all_pipeline_states(jtable)}
    location = str(jtable.location()).rstrip("/")
    fs, base = filesystem_for(location)
    cutoff = time.time() - older_than.total_seconds()
    candidates: list[tuple[str, datetime]] = []
    kept: list[str] = []
    young = 0
    listed = 0
    for info in fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True)):
        if info.type != pafs.FileType.File:
            continue
        listed += 1
        if listed % 1000 == 0:
            notify(progress, table, "list files", listed, None)
        relative = info.path[len(base.rstrip("/")) :]
        if _hidden(relative):
            continue
        uri = location + relative  # in the form the table's metadata uses
        if info.mtime is None or info.mtime.timestamp() >= cutoff:
            young += 1
        elif in_flight(info.base_name, last_batches):
            kept.append(uri)
        else:
            candidates.append((uri, info.mtime.astimezone(UTC)))
    notify(progress, table, "list files", listed, listed)
    orphans: list[str] = []
    if candidates:
        listing = spark.createDataFrame(candidates, "file_path string, last_modified timestamp")
        collector = _CollectPaths()
        ensure_callback_server_started(spark.sparkContext._gateway)
        action = jvm(spark).org.apache.iceberg.spark.actions.SparkActions.get(spark._jsparkSession)
        result = (
            action.deleteOrphanFiles(jtable)
            .compareToFileList(listing._jdf)
            .olderThan(int(cutoff * 1000))
            .deleteWith(collector)
            .execute()
        )
        orphans = sorted(str(p) for p in java_iter(result.orphanFileLocations()))
    if orphans and not dry_run:
        io = jtable.io()
        for n, path in enumerate(orphans, start=1):
            io.deleteFile(path)
            notify(progress, table, "delete orphans", n, len(orphans))
    log.info(
        "%s %d orphan file(s) of %s; kept %d of in-flight batches, %d younger than %s",
        "found" if dry_run else "deleted",
        len(orphans),
        table,
        len(kept),
        young,
        older_than,
    )
    return OrphanResult(orphans=tuple(orphans), dry_run=dry_run, in_flight=tuple(sorted(kept)), too_young=young)
