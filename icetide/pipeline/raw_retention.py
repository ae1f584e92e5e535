"""Retention of a two-stage pipeline's raw table, safe for a stage 2 that lags behind.

`raw.retention` bounds the raw table's replayable history in two steps:

1. rows whose event time is older than the retention, aligned down to a whole day, are deleted
   (whole `days(order_by)` partitions: a metadata-only delete; stage 2 skips delete snapshots);
2. raw snapshots older than stage 2's position are expired, which deletes the data files only
   they referenced (so the storage of deleted rows is reclaimed) and keeps the table's metadata
   from growing by one snapshot per stage-1 batch for ever.

The raw table is append-only, so its rows are its whole history: expiring its snapshots loses no
event a replay would need (a new stage-2 checkpoint reads every row of the oldest snapshot kept,
then what came after). Stage 2 reads the raw table snapshot by snapshot, from the position in its
Spark checkpoint; the snapshot its last committed batch ended in, and every newer one, is kept.
So a stage 2 that was stopped for longer than the retention still finds every event it has not
merged: rows deleted in step 1 stay readable through the kept snapshots that added them, until
stage 2 has passed them. Stage 1's position lives in a table property, which expiry keeps.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from icetide.errors import one_line
from icetide.maintenance.expire import expire_snapshots
from icetide.stateful.stage import committed_source_offsets
from icetide.table.iceberg import load_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RawRetentionResult:
    """What one retention pass did."""

    deleted_before: datetime | None  # rows with an event time before this were deleted (None: failed)
    expired_snapshots: int
    kept_from_snapshot: int | None  # stage 2's position: this snapshot and newer ones were kept
    skipped_expiry: str | None = None  # why no snapshot was expired, when none could be


def stage_two_snapshot(spark: SparkSession, checkpoint: str) -> int | None:
    """The raw snapshot stage 2's last committed batch ended in (it may have read it only in
    part); None before stage 2's first committed batch."""
    offsets = committed_source_offsets(spark, checkpoint)
    if not offsets:
        return None
    offset = json.loads(offsets[0])
    return int(offset["snapshot_id"]) if offset.get("snapshot_id") is not None else None


def apply_raw_retention(
    spark: SparkSession, raw_table: str, *, order_by: str, retention_seconds: float, checkpoint: str
) -> RawRetentionResult:
    """Delete raw rows older than the retention (whole days) and expire the raw snapshots older
    than stage 2's position. Never expires a snapshot stage 2 has not passed. Never fails the
    pipeline: retention is housekeeping, so a pass that fails (a commit conflict, a refused
    expiry) logs one line, reports why, and the next pass tries again."""
    now = datetime.now(UTC)
    cutoff = (now - timedelta(seconds=retention_seconds)).replace(hour=0, minute=0, second=0, microsecond=0)
    stamp = cutoff.strftime("%Y-%m-%d %H:%M:%S")
    try:
        spark.sql(f"DELETE FROM {raw_table} WHERE `{order_by}` < TIMESTAMP '{stamp}'")
    except Exception as exc:  # a Java error arrives as a page of trace: one line, the trace in debug
        log.debug("raw retention: deleting from %s failed", raw_table, exc_info=True)
        return _skipped(cutoff, None, f"deleting rows before {stamp} failed: {one_line(exc)}", deleted=False)
    log.info("raw retention: deleted rows of %s with %s before %s", raw_table, order_by, stamp)

    position = stage_two_snapshot(spark, checkpoint)
    if position is None:
        return _skipped(cutoff, None, "stage 2 has committed no batch yet")
    jtable = load_table(spark, raw_table)
    jtable.refresh()
    snapshot = jtable.snapshot(position)
    if snapshot is None:
        return _skipped(cutoff, position, f"stage 2's position, snapshot {position}, is not in {raw_table}")
    try:  # expires what was committed strictly before stage 2's snapshot
        result = expire_snapshots(spark, raw_table, retain_last=1, before_ms=int(snapshot.timestampMillis()))
    except Exception as exc:
        log.debug("raw retention: expiring snapshots of %s failed", raw_table, exc_info=True)
        return _skipped(cutoff, position, one_line(exc))
    log.info(
        "raw retention: expired %d snapshot(s) of %s older than stage 2's position, snapshot %d",
        result.expired_snapshots,
        raw_table,
        position,
    )
    return RawRetentionResult(cutoff, result.expired_snapshots, position)


def _skipped(cutoff: datetime, position: int | None, why: str, *, deleted: bool = True) -> RawRetentionResult:
    log.warning("raw retention: no snapshot expired (the next pass tries again): %s", why)
    return RawRetentionResult(cutoff if deleted else None, 0, position, skipped_expiry=why)
