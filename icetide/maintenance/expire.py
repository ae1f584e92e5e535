"""Snapshot expiry that never loses a pipeline's state.

The sink keeps each pipeline's last batch and source position twice: in its snapshot's summary
(history) and in the table property `icetide.pipeline.<id>` (what restarts read). Expiry drops
snapshots, never properties, so the state survives as long as the property is current. This
module refuses to expire when it is not: when some snapshot records a batch newer than the
property says, that snapshot may be the only record of the pipeline's progress (Iceberg issue
5846 is exactly a position lost with its snapshot).

How much history stays is the table's own business: Iceberg's properties
`history.expire.max-snapshot-age-ms` and `history.expire.min-snapshots-to-keep`, which icetide
sets at create time to an hour and 10 snapshots (icetide.table.create.RETENTION_DEFAULTS).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from icetide.commit.committer import SUMMARY_BATCH, SUMMARY_PIPELINE
from icetide.commit.pipeline_state import PipelineState, all_pipeline_states
from icetide.errors import ConfigError, PipelineStateAtRiskError
from icetide.spark.py4j_collections import java_list
from icetide.table.create import MAX_SNAPSHOT_AGE_MS, MIN_SNAPSHOTS_TO_KEEP
from icetide.table.iceberg import load_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# Iceberg's own defaults, for a table without the properties (TableProperties in Iceberg's API).
ICEBERG_MAX_SNAPSHOT_AGE_MS_DEFAULT = 5 * 24 * 3600 * 1000
ICEBERG_MIN_SNAPSHOTS_TO_KEEP_DEFAULT = 1


@dataclass(frozen=True)
class ExpireResult:
    """What an expiry did."""

    expired_snapshots: int
    snapshots_left: int
    pipelines: tuple[PipelineState, ...]  # every pipeline's state, identical before and after
    cutoff_ms: int = 0  # snapshots committed before this (epoch ms) could expire ...
    retained: int = 1  # ... except the newest this many of the current history


def _summary_batches(metadata: Any) -> dict[str, int]:
    """The newest batch each pipeline's snapshots record, from the snapshot summaries."""
    newest: dict[str, int] = {}
    for snapshot in java_list(metadata.snapshots()):
        summary = snapshot.summary()
        pipeline = summary.get(SUMMARY_PIPELINE)
        batch = summary.get(SUMMARY_BATCH)
        if pipeline is not None and batch is not None:
            newest[str(pipeline)] = max(newest.get(str(pipeline), -1), int(batch))
    return newest


def _table_setting(metadata: Any, name: str, default: int) -> int:
    value = metadata.properties().get(name)
    if value is None:
        return default
    try:
        return int(str(value))
    except ValueError:
        raise ConfigError(f"table property {name}: {value!r} is not a whole number") from None


def _expirable(metadata: Any, cutoff_ms: int, retain: int) -> int:
    """How many snapshots an expiry with these settings would drop (0: no commit needed)."""
    current = metadata.currentSnapshot()
    kept: set[int] = set()
    snapshot = current
    while snapshot is not None and len(kept) < retain:
        kept.add(int(snapshot.snapshotId()))
        parent = snapshot.parentId()
        snapshot = metadata.snapshot(parent) if parent is not None else None
    return sum(
        1
        for s in java_list(metadata.snapshots())
        if int(s.snapshotId()) not in kept and int(s.timestampMillis()) < cutoff_ms
    )


def expire_snapshots(
    spark: SparkSession,
    table: str,
    *,
    retain_last: int | None = None,
    older_than: timedelta | None = None,
    clean_files: bool = True,
    before_ms: int | None = None,
) -> ExpireResult:
    """Expire snapshots older than `older_than` (or committed before `before_ms`, milliseconds
    since the epoch, when given), always keeping the `retain_last` newest.

    Left out, `older_than` and `retain_last` come from the table's properties
    `history.expire.max-snapshot-age-ms` and `history.expire.min-snapshots-to-keep` (Iceberg's
    defaults, 5 days and 1, for a table without them). When no snapshot is due, nothing is
    committed.

    Guarantees: every pipeline's state (`icetide.pipeline.<id>` properties) is the same after
    as before; if a snapshot records a batch newer than its pipeline's property, nothing is
    expired and PipelineStateAtRiskError names the pipeline. Data and metadata files only the
    expired snapshots referenced are deleted when `clean_files`; files staged by an in-flight
    batch or compaction are in no snapshot and are never touched.
    """
    if retain_last is not None and retain_last < 1:
        raise ConfigError("retain_last: must be at least 1")
    if older_than is not None and older_than < timedelta(0):
        raise ConfigError("older_than: must not be negative")
    jtable = load_table(spark, table)
    jtable.refresh()
    metadata = jtable.operations().current()  # properties and snapshots from one version
    if retain_last is None:
        retain_last = _table_setting(metadata, MIN_SNAPSHOTS_TO_KEEP, ICEBERG_MIN_SNAPSHOTS_TO_KEEP_DEFAULT)
        if retain_last < 1:
            raise ConfigError(f"table property {MIN_SNAPSHOTS_TO_KEEP}: must be at least 1")
    if older_than is None:
        age_ms = _table_setting(metadata, MAX_SNAPSHOT_AGE_MS, ICEBERG_MAX_SNAPSHOT_AGE_MS_DEFAULT)
        older_than = timedelta(milliseconds=max(0, age_ms))
    cutoff_ms = before_ms if before_ms is not None else int((time.time() - older_than.total_seconds()) * 1000)
    states = {s.pipeline_id: s for s in all_pipeline_states(metadata)}
    for pipeline, batch in sorted(_summary_batches(metadata).items()):
        state = states.get(pipeline)
        if state is None or state.batch_id < batch:
            raise PipelineStateAtRiskError(
                f"expire {table}: pipeline {pipeline!r} committed batch {batch} but its state property records "
                f"{state.batch_id if state else 'nothing'}; expiring could lose its position, so nothing was expired"
            )
    before = {int(s.snapshotId()) for s in java_list(metadata.snapshots())}
    if not _expirable(metadata, cutoff_ms, retain_last):
        log.debug(
            "%s: no snapshot older than %s beyond the newest %d; nothing to expire", table, cutoff_ms, retain_last
        )
        return ExpireResult(0, len(before), tuple(states.values()), cutoff_ms=cutoff_ms, retained=retain_last)
    jtable.expireSnapshots().expireOlderThan(cutoff_ms).retainLast(retain_last).cleanExpiredFiles(clean_files).commit()
    jtable.refresh()
    after = {int(s.snapshotId()) for s in java_list(jtable.operations().current().snapshots())}
    pipelines = tuple(all_pipeline_states(jtable))
    expired = len(before - after)  # the stream may have added snapshots meanwhile
    log.info("expired %d snapshot(s) of %s, %d left", expired, table, len(after))
    return ExpireResult(
        expired_snapshots=expired,
        snapshots_left=len(after),
        pipelines=pipelines,
        cutoff_ms=cutoff_ms,
        retained=retain_last,
    )
