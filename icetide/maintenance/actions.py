"""Iceberg's own Spark maintenance actions that are safe beside the stream as they are.

Both commit `replace` snapshots that change no row, which the sink's commit validation ignores
(it checks only appends, overwrites and deltas), so a stream commit never fails because of them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from icetide.errors import IcetideError
from icetide.spark.py4j_collections import java_iter
from icetide.table.iceberg import format_version, java_exception_class, java_message, jvm, load_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

MANIFEST_REWRITE_ATTEMPTS = 3
_LOST_RACE = (
    "org.apache.iceberg.exceptions.ValidationException",  # a concurrent commit replaced its manifests
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
    On a v3 table every row keeps its `_row_id` (see `_rewrite_keeping_lineage`).
    A stream commits one manifest per batch, so planning slows with the batch count until
    this runs. A commit beside it that replaces manifests it planned to replace (the stream's
    own manifest merging, another maintenance run) makes Iceberg refuse the rewrite; it is
    planned again from the new snapshot, up to MANIFEST_REWRITE_ATTEMPTS times, then skipped:
    a manifest rewrite is never worth failing a maintenance pass.
    """
    jtable = load_table(spark, table)
    lost = ""
    for attempt in range(1, MANIFEST_REWRITE_ATTEMPTS + 1):
        jtable.refresh()
        try:
            if format_version(jtable) >= 3:
                rewritten, added = _rewrite_keeping_lineage(spark, jtable)
            else:
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


def _rewrite_keeping_lineage(spark: SparkSession, jtable: Any) -> tuple[int, int]:
    """Rewrite a v3 table's manifests without renumbering its rows; returns (replaced, written).

    Iceberg 1.10's Spark action drops each data file's `first_row_id` when it moves the file to
    a new manifest (apache/iceberg#16699, fixed in 1.11), so every row would read with a new
    `_row_id`. Data manifests therefore go through the core RewriteManifests, which copies the
    entries as they are, into one cluster (rolled by the manifest target size; partition
    clustering would cost a callback per file). Delete manifests carry no row ids: the Spark
    action rewrites them, chosen by a predicate. Two `replace` commits, each changing no row.
    """
    io = jtable.io()
    rewritten = added = 0
    if jtable.currentSnapshot() is None:
        return rewritten, added
    if jtable.currentSnapshot().deleteManifests(io).size() > 1:
        from pyspark.java_gateway import ensure_callback_server_started

        ensure_callback_server_started(spark.sparkContext._gateway)
        result = _actions(spark).rewriteManifests(jtable).rewriteIf(_DeleteManifests()).execute()
        rewritten += sum(1 for _ in java_iter(result.rewrittenManifests()))
        added += sum(1 for _ in java_iter(result.addedManifests()))
        jtable.refresh()
    if jtable.currentSnapshot().dataManifests(io).size() > 1:
        jtable.rewriteManifests().clusterBy(_one_cluster(spark)).commit()
        summary = jtable.currentSnapshot().summary()  # the table holds the metadata it committed
        rewritten += int(summary.get("manifests-replaced") or 0)
        added += int(summary.get("manifests-created") or 0)
    return rewritten, added


def _one_cluster(spark: SparkSession) -> Any:
    """A java.util.function.Function mapping every data file to one key, evaluated in the JVM:
    Eclipse Collections' fixed-value function, which the pinned Iceberg runtime bundles."""
    functions = jvm(spark).org.eclipse.collections.impl.block.factory.Functions
    if not callable(getattr(functions, "getFixedValue", None)) or type(functions).__name__ == "JavaPackage":
        raise IcetideError(
            "manifest rewrite of a v3 table needs Eclipse Collections, which the pinned Iceberg runtime "
            "bundles; this Spark session's Iceberg runtime does not"
        )
    return functions.getFixedValue("all")


class _DeleteManifests:
    """A java.util.function.Predicate choosing delete manifests (py4j callback, one per manifest)."""

    def test(self, manifest: Any) -> bool:
        return bool(manifest.content().id() == 1)  # ManifestContent.DELETES

    class Java:
        implements: ClassVar[list[str]] = ["java.util.function.Predicate"]


def remove_dangling_deletes(spark: SparkSession, table: str) -> int:
    """Drop delete files that apply to no live data file; returns how many were dropped.

    Uses Iceberg's RemoveDanglingDeleteFiles action: an equality delete goes when every live
    data file of its partition is at least as new as it, a position delete when every one is
    newer (the rules in `icetide.maintenance.deletes`). No row changes. Compaction already
    drops such files in its own commit (`remove_deletes=True`); this catches the rest.
    """
    jtable = load_table(spark, table)
    jtable.refresh()
    result = _actions(spark).removeDanglingDeleteFiles(jtable).execute()
    removed = sum(1 for _ in java_iter(result.removedDeleteFiles()))
    log.info("dropped %d dangling delete file(s) of %s", removed, table)
    return removed
