"""What the next maintenance pass (`maintain` under a policy) would do, planned and not run.

The same decisions `maintain` takes, read at the current snapshot: the health suggestions that
make steps due, the compaction groups it would rewrite (planned exactly as compaction plans
them, in the order they would run), and the snapshots expiry would drop. Nothing is written.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from icetide.maintenance.compaction import compaction
from icetide.maintenance.health import TableHealth, table_health
from icetide.maintenance.maintain import MaintenancePolicy
from icetide.maintenance.planning import SkippedGroup
from icetide.table.create import MAX_SNAPSHOT_AGE_MS, MIN_SNAPSHOTS_TO_KEEP, RETENTION_DEFAULTS
from icetide.table.iceberg import load_table, table_property

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class PlannedGroup:
    """One compaction group the next pass would rewrite."""

    partition: str  # its label, as people read it
    input_files: int
    input_bytes: int
    output_files: int
    delete_files: int  # delete files applying to its files, folded away by the rewrite


@dataclass(frozen=True)
class NextPass:
    """The next maintenance pass, planned."""

    due: tuple[str, ...]  # the health suggestions that make steps due
    groups: tuple[PlannedGroup, ...]  # compaction groups, in the order they would run
    left_alone: tuple[SkippedGroup, ...]  # candidate groups not worth rewriting yet, with why
    snapshots_to_expire: int  # by the table's history.expire.* properties (retention defaults if unset)

    def lines(self) -> list[str]:
        """One line per step, for a terminal or a page."""
        out = []
        if self.groups:
            files = sum(g.input_files for g in self.groups)
            folded = sum(g.delete_files for g in self.groups)
            where = self.groups[0].partition + (f" .. {self.groups[-1].partition}" if len(self.groups) > 1 else "")
            out.append(
                f"compact {len(self.groups)} group(s) ({where}): {files} data files -> "
                f"{sum(g.output_files for g in self.groups)}, folding {folded} delete file(s)"
            )
        if self.left_alone:
            names = ", ".join(s.partition for s in self.left_alone[:3]) + (", ..." if len(self.left_alone) > 3 else "")
            out.append(f"leave {len(self.left_alone)} group(s) for a later pass ({names}): too few small files yet")
        if self.snapshots_to_expire:
            out.append(f"expire {self.snapshots_to_expire} snapshot(s)")
        return out or ["nothing due"]


def snapshots_due(total: int, older: int, *, keep: int) -> int:
    """How many snapshots expiry would drop: the `older` ones past the age limit (the oldest of
    the `total`), never the `keep` newest, never the current one (Iceberg's ExpireSnapshots rules)."""
    return max(0, min(older, total - max(keep, 1)))


def next_pass(
    spark: SparkSession,
    table: str,
    policy: MaintenancePolicy | None = None,
    *,
    health: TableHealth | None = None,
) -> NextPass:
    """Plan what `maintain(spark, table, policy)` would do now."""
    p = policy or MaintenancePolicy()
    h = health or table_health(spark, table, p.health_thresholds)
    due = tuple(h.suggestions)
    groups: tuple[PlannedGroup, ...] = ()
    left: tuple[SkippedGroup, ...] = ()
    if any(s.startswith(("compact", "fold deletes")) for s in due):
        job = compaction(
            spark,
            table,
            min_input_files=p.min_input_files,
            delete_file_threshold=p.compaction_delete_threshold,
            group_order=p.group_order,
            vector_deleted_share=p.vector_deleted_share,
            vector_file_rows=p.vector_file_rows,
        )
        groups = tuple(
            PlannedGroup(g.label, len(g.files), g.input_bytes, g.output_files, len(g.delete_files))
            for g in job.plan.groups
        )
        left = job.plan.skipped
    jtable = load_table(spark, table)
    max_age = int(table_property(jtable, MAX_SNAPSHOT_AGE_MS, RETENTION_DEFAULTS[MAX_SNAPSHOT_AGE_MS]))
    keep = int(table_property(jtable, MIN_SNAPSHOTS_TO_KEEP, RETENTION_DEFAULTS[MIN_SNAPSHOTS_TO_KEEP]))
    if p.max_snapshot_age_seconds is not None:
        max_age = int(p.max_snapshot_age_seconds * 1000)
    if p.retain_snapshots is not None:
        keep = p.retain_snapshots
    cutoff = int(time.time() * 1000) - max_age
    counts = spark.sql(
        f"SELECT count(*) AS total, count_if(unix_millis(committed_at) < {cutoff}) AS older FROM {table}.snapshots"
    ).first()
    total, older = (int(counts["total"]), int(counts["older"] or 0)) if counts else (0, 0)  # type: ignore[index]
    expire = snapshots_due(total, older, keep=keep)
    return NextPass(due=due, groups=groups, left_alone=left, snapshots_to_expire=expire)
