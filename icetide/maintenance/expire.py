"""Snapshot expiry that never loses a pipeline's state.

The sink keeps each pipeline's last batch and source position twice: in its snapshot's summary
(history) and in the table property `icetide.pipeline.<id>` (what restarts read). Expiry drops
snapshots, never properties, so the state survives as long as the property is current. This
module refuses to expire when it is not: when some snapshot records a batch newer than the
property says, that snapshot may be the only record of the pipeline's progress (Iceberg issue
5846 is exactly a position lost with its snapshot).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from icetide.errors import ConfigError, TerminalError
from icetide.sink.committer import SUMMARY_BATCH, SUMMARY_PIPELINE, PipelineState, all_pipeline_states
from icetide.table.iceberg import load_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


class PipelineStateAtRiskError(TerminalError):
    """Expiring would drop the only record of a pipeline's last batch; nothing was expired."""


@dataclass(frozen=True)
class ExpireResult:
    """What an expiry did."""

    expired_snapshots: int
    snapshots_left: int
    pipelines: tuple[PipelineState, ...]  # every pipeline's state, identical before and after


def _summary_batches(metadata: Any) -> dict[str, int]:
    """The newest batch each pipeline's snapshots record, from the snapshot summaries."""
    newest: dict[str, int] = {}
    for snapshot in metadata.snapshots():
        summary = snapshot.summary()
        pipeline = summary.get(SUMMARY_PIPELINE)
        batch = summary.get(SUMMARY_BATCH)
        if pipeline is not None and batch is not None:
            newest[str(pipeline)] = max(newest.get(str(pipeline), -1), int(batch))
    return newest


def expire_snapshots(
    spark: SparkSession,
    table: str,
    *,
    retain_last: int = 10,
    older_than: timedelta = timedelta(0),
    clean_files: bool = True,
    before_ms: int | None = None,
) -> ExpireResult:
    """Expire snapshots older than `older_than` (or committed before `before_ms`, milliseconds
    since the epoch, when given), always keeping the `retain_last` newest.

    Guarantees: every pipeline's state (`icetide.pipeline.<id>` properties) is the same after
    as before; if a snapshot records a batch newer than its pipeline's property, nothing is
    expired and PipelineStateAtRiskError names the pipeline. Data and metadata files only the
    expired snapshots referenced are deleted when `clean_files`; files staged by an in-flight
    batch or compaction are in no snapshot and are never touched.
    """
    if retain_last < 1:
        raise ConfigError("retain_last: must be at least 1")
    if older_than < timedelta(0):
        raise ConfigError("older_than: must not be negative")
    jtable = load_table(spark, table)
    jtable.refresh()
    metadata = jtable.operations().current()  # properties and snapshots from one version
    states = {s.pipeline_id: s for s in all_pipeline_states(metadata)}
    for pipeline, batch in sorted(_summary_batches(metadata).items()):
        state = states.get(pipeline)
        if state is None or state.batch_id < batch:
            raise PipelineStateAtRiskError(
                f"expire {table}: pipeline {pipeline!r} committed batch {batch} but its state property records "
                f"{state.batch_id if state else 'nothing'}; expiring could lose its position, so nothing was expired"
            )
    before = {int(s.snapshotId()) for s in metadata.snapshots()}
    cutoff_ms = before_ms if before_ms is not None else int((time.time() - older_than.total_seconds()) * 1000)
    jtable.expireSnapshots().expireOlderThan(cutoff_ms).retainLast(retain_last).cleanExpiredFiles(clean_files).commit()
    jtable.refresh()
    after = {int(s.snapshotId()) for s in jtable.operations().current().snapshots()}
    pipelines = tuple(all_pipeline_states(jtable))
    expired = len(before - after)  # the stream may have added snapshots meanwhile
    log.info("expired %d snapshot(s) of %s, %d left", expired, table, len(after))
    return ExpireResult(expired_snapshots=expired, snapshots_left=len(after), pipelines=pipelines)
