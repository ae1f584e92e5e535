"""Iceberg's own Spark maintenance actions that are safe beside the stream as they are.

Both commit `replace` snapshots that change no row, which the sink's commit validation ignores
(it checks only appends, overwrites and deltas), so a stream commit never fails because of them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from icetide.spark.py4j_collections import java_iter
from icetide.table.iceberg import declares_method, format_version, java_exception_class, java_message, jvm, load_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

MANIFEST_REWRITE_ATTEMPTS = 3
DANGLING_DELETE_ATTEMPTS = 3
_LOST_RACE = (
    # A concurrent commit replaced its manifests, or (dangling deletes) landed at all.
    "org.apache.iceberg.exceptions.ValidationException",
    "org.apache.iceberg.exceptions.CommitFailedException",
)


def _actions(spark: SparkSession) -> Any:
    return jvm(spark).org.apache.iceberg.spark.actions.SparkActions.get(spark._jsparkSession)


@dataclass(frozen=True)
class ManifestRewriteResult:
    """Manifests replaced and written by a manifest rewrite; `skipped` says why none were, when
    every attempt lost its race with concurrent commits (the next pass tries again)."""

    rewritten: int
    added: int
    skipped: str = ""


def rewrite_manifests(spark: SparkSession, table: str) -> ManifestRewriteResult:
    """Rewrite the table's manifests into fewer, partition-clustered ones (Iceberg's action).

    Guarantees: the table's rows and files are unchanged; only how they are listed changes.
    On a v3 table every row keeps its `_row_id`: Iceberg 1.10's action dropped each data file's
    `first_row_id` (apache/iceberg#16699); the pinned 1.12.0 carries it over. A session on an
    Iceberg runtime without that fix (a user's own) skips the rewrite of a v3 table, saying why.
    A stream commits one manifest per batch, so planning slows with the batch count until
    this runs. A commit beside it that replaces manifests it planned to replace (the stream's
    own manifest merging, another maintenance run) makes Iceberg refuse the rewrite; it is
    planned again from the new snapshot, up to MANIFEST_REWRITE_ATTEMPTS times, then skipped:
    a manifest rewrite is never worth failing a maintenance pass.
    """
    jtable = load_table(spark, table)
    if format_version(jtable) >= 3 and not _action_keeps_row_ids(spark):
        reason = "this session's Iceberg runtime would renumber every row of a v3 table (apache/iceberg#16699)"
        log.warning("manifest rewrite of %s skipped: %s", table, reason)
        return ManifestRewriteResult(0, 0, skipped=reason)
    lost = ""
    for attempt in range(1, MANIFEST_REWRITE_ATTEMPTS + 1):
        jtable.refresh()
        try:
            result = _actions(spark).rewriteManifests(jtable).execute()
            rewritten = sum(1 for _ in java_iter(result.rewrittenManifests()))
            added = sum(1 for _ in java_iter(result.addedManifests()))
        except Exception as exc:
            if java_exception_class(exc) not in _LOST_RACE:
                raise
            lost = java_message(exc)
            log.info("manifest rewrite of %s lost a race (attempt %d): %s", table, attempt, lost)
            continue
        log.info("rewrote %d manifest(s) of %s into %d", rewritten, table, added)
        return ManifestRewriteResult(rewritten=rewritten, added=added)
    return ManifestRewriteResult(0, 0, skipped=f"concurrent commits won {MANIFEST_REWRITE_ATTEMPTS} times ({lost})")


def _action_keeps_row_ids(spark: SparkSession) -> bool:
    """Whether this JVM's Spark action carries `first_row_id` over: the fix of apache/iceberg#16699
    is SparkContentFile's own `firstRowId()` (without it, the interface's default returns null)."""
    return declares_method(spark, "org.apache.iceberg.spark.SparkContentFile", "firstRowId")


def remove_dangling_deletes(spark: SparkSession, table: str) -> int:
    """Drop delete files that apply to no live data file; returns how many were dropped.

    Uses Iceberg's RemoveDanglingDeleteFiles action: an equality delete goes when every live
    data file of its partition is at least as new as it, a position delete when every one is
    newer (the rules in `icetide.maintenance.deletes`). No row changes. Compaction already
    drops such files in its own commit (`remove_deletes=True`); this catches the rest.
    The action refuses to commit when any snapshot landed since it planned ("current snapshot
    changed"), as a stream beside it does every batch: it is planned again from the new snapshot,
    up to DANGLING_DELETE_ATTEMPTS times, then left to the next pass (0 dropped), never failing it.
    """
    jtable = load_table(spark, table)
    lost = ""
    for attempt in range(1, DANGLING_DELETE_ATTEMPTS + 1):
        jtable.refresh()
        try:
            result = _actions(spark).removeDanglingDeleteFiles(jtable).execute()
        except Exception as exc:
            if java_exception_class(exc) not in _LOST_RACE:
                raise
            lost = java_message(exc)
            log.info("dangling delete removal of %s lost a race (attempt %d): %s", table, attempt, lost)
            continue
        removed = sum(1 for _ in java_iter(result.removedDeleteFiles()))
        log.info("dropped %d dangling delete file(s) of %s", removed, table)
        return removed
    log.info("dangling delete removal of %s skipped: concurrent commits won %d times (%s)", table, attempt, lost)
    return 0
