"""One policy-driven maintenance run: look at the table's health, do what its thresholds call for.

Order: compaction (which also folds equality deletes into the rewritten files), dangling deletes,
manifest rewrite, snapshot expiry. Every step is safe beside a running stream: compaction commits
with the starting sequence number and skips a conflicting group instead of failing, and expiry
never loses a pipeline's position.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from icetide.maintenance.actions import ManifestRewriteResult, remove_dangling_deletes, rewrite_manifests
from icetide.maintenance.compaction import compact
from icetide.maintenance.expire import ExpireResult, expire_snapshots
from icetide.maintenance.health import HealthThresholds, table_health
from icetide.maintenance.results import CompactionResult

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MaintenancePolicy:
    """When each maintenance step runs, and how."""

    thresholds: HealthThresholds = field(default_factory=HealthThresholds)
    min_input_files: int = 2  # a partition's small files are compacted from this many on
    delete_file_threshold: int = 1  # a data file with this many delete files applying is rewritten
    max_manifests: int = 50  # rewrite manifests above this count
    retain_snapshots: int = 10  # snapshots kept by expiry
    time_budget_seconds: float | None = None  # compaction stops taking new groups past this


def _compact_within(
    spark: SparkSession, table: str, policy: MaintenancePolicy, deadline: float | None
) -> CompactionResult:
    """Compaction, worst groups first (most deletes, most files); with a deadline, one group at a
    time until the deadline passes or no group is left."""
    options = {"min_input_files": policy.min_input_files, "delete_file_threshold": policy.delete_file_threshold}
    if deadline is None:
        return compact(spark, table, **options)
    results = []
    while True:
        result = compact(spark, table, max_groups=1, **options)
        results.append(result)
        if not result.committed or time.monotonic() >= deadline:
            break
    return CompactionResult(
        table=table,
        planned_snapshot_id=results[0].planned_snapshot_id,
        data_sequence_number=results[0].data_sequence_number,
        committed=tuple(g for r in results for g in r.committed),
        skipped=results[-1].skipped,
        snapshot_ids=tuple(i for r in results for i in r.snapshot_ids),
        retries=sum(r.retries for r in results),
    )


@dataclass(frozen=True)
class MaintenanceReport:
    """What one maintenance run found and did."""

    table: str
    due: tuple[str, ...]
    compaction: CompactionResult | None = None
    dangling_deletes_removed: int = 0
    manifests: ManifestRewriteResult | None = None
    expiry: ExpireResult | None = None
    seconds: float = 0.0

    def lines(self) -> list[str]:
        """One line per thing done, for a terminal or a log."""
        out = []
        if self.compaction is not None:
            c = self.compaction
            out.append(
                f"compacted {c.groups} group(s): {c.files_rewritten} files -> {c.files_added}, "
                f"{c.delete_files_removed} delete files and {c.rows_removed} deleted rows folded away"
                + (f", {len(c.skipped)} group(s) skipped" if c.skipped else "")
            )
        if self.dangling_deletes_removed:
            out.append(f"removed {self.dangling_deletes_removed} dangling delete file(s)")
        if self.manifests is not None:
            out.append(f"rewrote {self.manifests.rewritten} manifests into {self.manifests.added}")
        if self.expiry is not None:
            out.append(f"expired {self.expiry.expired_snapshots} snapshot(s), {self.expiry.snapshots_left} left")
        return out or ["nothing due"]


def maintain(spark: SparkSession, table: str, policy: MaintenancePolicy | None = None) -> MaintenanceReport:
    """Run the maintenance the table's health calls for, once; returns what it did."""
    p = policy or MaintenancePolicy()
    started = time.monotonic()
    health = table_health(spark, table, p.thresholds)
    due = tuple(health.suggestions)
    compaction = None
    deadline = started + p.time_budget_seconds if p.time_budget_seconds is not None else None
    if any(s.startswith(("compact", "fold deletes")) for s in due):
        compaction = _compact_within(spark, table, p, deadline)
    dangling = remove_dangling_deletes(spark, table) if health.delete_files else 0
    manifests_count = spark.sql(f"SELECT count(*) FROM {table}.manifests").first()[0]  # type: ignore[index]
    manifests = rewrite_manifests(spark, table) if manifests_count > p.max_manifests else None
    expiry = None
    if any(s.startswith("expire") for s in due):
        expiry = expire_snapshots(spark, table, retain_last=p.retain_snapshots)
    report = MaintenanceReport(table, due, compaction, dangling, manifests, expiry, time.monotonic() - started)
    log.info("maintenance of %s: %s", table, "; ".join(report.lines()))
    return report
