"""Iceberg's own Spark maintenance actions that are safe beside the stream as they are.

Both commit `replace` snapshots that change no row, which the sink's commit validation ignores
(it checks only appends, overwrites and deltas), so a stream commit never fails because of them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from icetide.spark.py4j_collections import java_iter
from icetide.table.iceberg import jvm, load_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def _actions(spark: SparkSession) -> Any:
    return jvm(spark).org.apache.iceberg.spark.actions.SparkActions.get(spark._jsparkSession)


@dataclass(frozen=True)
class ManifestRewriteResult:
    """Manifests replaced and written by a manifest rewrite."""

    rewritten: int
    added: int


def rewrite_manifests(spark: SparkSession, table: str) -> ManifestRewriteResult:
    """Rewrite the table's manifests into fewer, partition-clustered ones (Iceberg's action).

    Guarantees: the table's rows and files are unchanged; only how they are listed changes.
    A stream commits one manifest per batch, so planning slows with the batch count until
    this runs.
    """
    jtable = load_table(spark, table)
    jtable.refresh()
    result = _actions(spark).rewriteManifests(jtable).execute()
    rewritten = sum(1 for _ in java_iter(result.rewrittenManifests()))
    added = sum(1 for _ in java_iter(result.addedManifests()))
    log.info("rewrote %d manifest(s) of %s into %d", rewritten, table, added)
    return ManifestRewriteResult(rewritten=rewritten, added=added)


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
