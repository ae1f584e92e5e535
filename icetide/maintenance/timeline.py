"""A table's recent snapshots as events: who committed, and what each added and removed.

Read from the snapshots' summaries (Iceberg's `added-records`, `deleted-data-files`, ... and
icetide's own keys), so no manifest is opened. A snapshot is a stream commit when it carries a
pipeline id (`icetide.pipeline-id`), a maintenance commit when icetide's maintenance wrote it
(`icetide.maintenance`) or it is a `replace` (a rewrite of files or manifests that changes no
row), and "other" for anything else (a Spark SQL statement, another engine).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from icetide.commit.committer import SUMMARY_BATCH, SUMMARY_PIPELINE
from icetide.maintenance.compaction import SUMMARY_OPERATION

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CommitKind = Literal["stream", "maintenance", "other"]
DEFAULT_SNAPSHOTS = 200


@dataclass(frozen=True)
class SnapshotEvent:
    """One snapshot: who wrote it and what it changed (counts from its summary; 0 when absent)."""

    snapshot_id: int
    committed_at: str  # ISO 8601, UTC
    operation: str  # Iceberg's: append, overwrite, delete, replace
    kind: CommitKind
    writer: str  # the pipeline id, the maintenance step (compaction, fold-deletes, ...) or the operation
    batch_id: int | None
    rows_added: int
    rows_removed: int  # rows of data files removed (a compaction's input), not rows deleted by deletes
    data_files_added: int
    data_files_removed: int
    delete_files_added: int
    delete_files_removed: int
    equality_deletes_added: int  # equality-delete rows
    equality_deletes_removed: int
    position_deletes_added: int  # positions, deletion vectors' included
    position_deletes_removed: int
    deletion_vectors_added: int
    deletion_vectors_removed: int


def _int(summary: Mapping[str, str], key: str) -> int:
    try:
        return int(summary.get(key) or 0)
    except ValueError:
        return 0


def snapshot_event(snapshot_id: int, committed_at: str, operation: str, summary: Mapping[str, str]) -> SnapshotEvent:
    """A snapshot's summary as a SnapshotEvent; guarantees the kind rules of the module docstring."""
    pipeline = summary.get(SUMMARY_PIPELINE)
    step = summary.get(SUMMARY_OPERATION)
    kind: CommitKind
    if pipeline:
        kind, writer = "stream", pipeline
    elif step:
        kind, writer = "maintenance", step
    elif operation == "replace":
        kind, writer = "maintenance", "rewrite"
    else:
        kind, writer = "other", operation
    batch = summary.get(SUMMARY_BATCH)
    return SnapshotEvent(
        snapshot_id=snapshot_id,
        committed_at=committed_at,
        operation=operation,
        kind=kind,
        writer=writer,
        batch_id=int(batch) if batch and batch.isdigit() else None,
        rows_added=_int(summary, "added-records"),
        rows_removed=_int(summary, "deleted-records"),
        data_files_added=_int(summary, "added-data-files"),
        data_files_removed=_int(summary, "deleted-data-files"),
        delete_files_added=_int(summary, "added-delete-files"),
        delete_files_removed=_int(summary, "removed-delete-files"),
        equality_deletes_added=_int(summary, "added-equality-deletes"),
        equality_deletes_removed=_int(summary, "removed-equality-deletes"),
        position_deletes_added=_int(summary, "added-position-deletes"),
        position_deletes_removed=_int(summary, "removed-position-deletes"),
        deletion_vectors_added=_int(summary, "added-dvs"),
        deletion_vectors_removed=_int(summary, "removed-dvs"),
    )


def snapshot_timeline(spark: SparkSession, table: str, *, limit: int = DEFAULT_SNAPSHOTS) -> list[SnapshotEvent]:
    """The table's newest `limit` snapshots (expired ones are gone), oldest first."""
    rows = spark.sql(
        f"SELECT snapshot_id, date_format(committed_at, \"yyyy-MM-dd'T'HH:mm:ss.SSS'Z'\") AS at, operation, summary "
        f"FROM {table}.snapshots ORDER BY committed_at DESC, snapshot_id DESC LIMIT {int(limit)}"
    ).collect()
    return [
        snapshot_event(int(r["snapshot_id"]), str(r["at"]), str(r["operation"] or ""), dict(r["summary"] or {}))
        for r in reversed(rows)
    ]
