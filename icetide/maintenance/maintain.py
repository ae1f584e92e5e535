"""One policy-driven maintenance run: look at the table's health, do what its thresholds call for.

Order: retention defaults set on a table that lacks them (bounded metadata files, an hour of
snapshot history), equality deletes converted to position deletes (`fold_deletes="position"`), compaction
(newest partitions first; with `fold_deletes="rewrite"` it also folds equality deletes into the
rewritten files), dangling deletes, manifest rewrite, snapshot expiry (as the table's
`history.expire.*` properties say, unless the policy overrides them). With `fold_all`, folding and
compaction run now whatever the thresholds say, and every file an equality delete applies to is
rewritten (`rewrite`) or has its deletes converted (`position`, compaction rewriting what the
conversion left), so no equality delete is left for engines that refuse them. Every step is safe beside a
running stream: compaction commits with the starting sequence number and skips a conflicting
group instead of failing, a conversion that conflicts lands nothing, and expiry never loses a
pipeline's position.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from icetide.errors import ConfigError, driver_stopped, one_line
from icetide.maintenance.actions import ManifestRewriteResult, remove_dangling_deletes, rewrite_manifests
from icetide.maintenance.compaction import compact
from icetide.maintenance.expire import ExpireResult, expire_snapshots
from icetide.maintenance.health import HealthThresholds, TableHealth, planned_health, table_health
from icetide.maintenance.inventory import Scanned, TableFiles
from icetide.maintenance.planning import (
    DEFAULT_COMBINE_GROUPS_BYTES,
    DEFAULT_DRIVER_REWRITE_BYTES,
    GROUP_ORDERS,
    GroupOrder,
)
from icetide.maintenance.position_deletes import DeleteConversionResult, convert_equality_deletes
from icetide.maintenance.progress import ProgressCallback
from icetide.maintenance.results import CompactionResult
from icetide.table.create import apply_retention_defaults
from icetide.table.iceberg import load_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

FoldDeletes = Literal["rewrite", "position"]
FOLD_DELETES = ("rewrite", "position")


@dataclass(frozen=True)
class MaintenancePolicy:
    """When each maintenance step runs, and how."""

    thresholds: HealthThresholds = field(default_factory=HealthThresholds)
    min_input_files: int = 2  # a partition's small files are compacted from this many on
    delete_file_threshold: int = 1  # fold_deletes=rewrite: a data file with this many delete files is rewritten
    position_delete_file_threshold: int = 4  # fold_deletes=position: the same, once deletes are positions
    max_manifests: int = 50  # rewrite manifests above this count
    retain_snapshots: int | None = (
        None  # snapshots expiry keeps; None: the table's history.expire.min-snapshots-to-keep
    )
    max_snapshot_age_seconds: float | None = None  # None: the table's history.expire.max-snapshot-age-ms
    time_budget_seconds: float | None = None  # compaction stops taking new work past this
    fold_deletes: FoldDeletes = "rewrite"  # how equality deletes are folded away
    group_order: GroupOrder = "newest"  # which compaction groups run first
    # Deletion vectors (format v3; docs/design.md "A maintenance policy for deletion vectors"): a
    # data file whose DV marks this share of its rows is compacted, and so is every file with a DV
    # of a partition where such files hold this many rows. None turns a rule off.
    vector_deleted_share: float | None = 0.1
    vector_file_rows: int | None = 1_000_000
    # small groups rewritten in one Spark job and committed together, up to this input (0: each alone)
    combine_groups_bytes: int = DEFAULT_COMBINE_GROUPS_BYTES
    # units of compaction reading at most this much are rewritten with Arrow on the driver (0: Spark)
    driver_rewrite_bytes: int = DEFAULT_DRIVER_REWRITE_BYTES
    # a table of at most this many live files is judged from the planner's scan, not a Spark query
    scan_health_files: int = 2_000

    def __post_init__(self) -> None:
        if self.fold_deletes not in FOLD_DELETES:
            raise ConfigError(f"fold_deletes: must be one of {', '.join(FOLD_DELETES)}, got {self.fold_deletes!r}")
        if self.group_order not in GROUP_ORDERS:
            raise ConfigError(f"group_order: must be one of {', '.join(GROUP_ORDERS)}, got {self.group_order!r}")
        if self.time_budget_seconds is not None and self.time_budget_seconds < 0:
            raise ConfigError("time_budget_seconds: must not be negative")
        if self.retain_snapshots is not None and self.retain_snapshots < 1:
            raise ConfigError("retain_snapshots: must be at least 1")
        if self.max_snapshot_age_seconds is not None and self.max_snapshot_age_seconds < 0:
            raise ConfigError("max_snapshot_age_seconds: must not be negative")
        share = self.vector_deleted_share
        if share is not None and (isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1):
            raise ConfigError(f"vector_deleted_share: must be a number above 0 and at most 1, got {share!r}")
        rows = self.vector_file_rows
        if rows is not None and (isinstance(rows, bool) or not isinstance(rows, int) or rows < 1):
            raise ConfigError(f"vector_file_rows: must be a whole number of at least 1, got {rows!r}")
        combine = self.combine_groups_bytes
        if isinstance(combine, bool) or not isinstance(combine, int) or combine < 0:
            raise ConfigError(f"combine_groups_bytes: must be a whole number of bytes, 0 or more, got {combine!r}")
        if isinstance(self.scan_health_files, bool) or not isinstance(self.scan_health_files, int):
            raise ConfigError(f"scan_health_files: must be a whole number, got {self.scan_health_files!r}")
        driver = self.driver_rewrite_bytes
        if isinstance(driver, bool) or not isinstance(driver, int) or driver < 0:
            raise ConfigError(f"driver_rewrite_bytes: must be a whole number of bytes, 0 or more, got {driver!r}")

    @property
    def health_thresholds(self) -> HealthThresholds:
        """The health thresholds, with this policy's deletion-vector rules."""
        return replace(
            self.thresholds,
            max_vector_deleted_share=self.vector_deleted_share,
            max_vector_file_rows=self.vector_file_rows,
        )

    @property
    def compaction_delete_threshold(self) -> int:
        """The delete-file threshold compaction runs with under this policy's way of folding."""
        return self.delete_file_threshold if self.fold_deletes == "rewrite" else self.position_delete_file_threshold


def _compact_within(
    spark: SparkSession,
    table: str,
    policy: MaintenancePolicy,
    stopped: Callable[[], bool] | None,
    progress: ProgressCallback | None,
    *,
    fold_all: bool = False,
    scanned: Scanned | None = None,
) -> CompactionResult:
    """Compaction in the policy's group order; when it may be stopped (a time budget, a stop
    request), unit by unit (a group, or small groups together), committing each, until `stopped()`
    says so: the rest is deferred.
    With `fold_all`, any data file with a delete (`rewrite`) or an equality delete (`position`:
    what the conversion could not convert) is rewritten, even alone."""
    options: dict[str, Any] = {
        "min_input_files": policy.min_input_files,
        "delete_file_threshold": policy.compaction_delete_threshold,
        "group_order": policy.group_order,
        "vector_deleted_share": policy.vector_deleted_share,
        "vector_file_rows": policy.vector_file_rows,
        "combine_groups_bytes": policy.combine_groups_bytes,
        "driver_rewrite_bytes": policy.driver_rewrite_bytes,
    }
    if fold_all and policy.fold_deletes == "rewrite":
        options["delete_file_threshold"] = 1
    elif fold_all:
        options["equality_delete_file_threshold"] = 1
    if stopped is None:
        return compact(spark, table, progress=progress, scanned=scanned, **options)
    return compact(spark, table, progress=progress, stop=stopped, partial_progress=True, scanned=scanned, **options)


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
    conversion: DeleteConversionResult | None = None
    stopped: bool = False  # a stop request cut the run short
    properties_set: dict[str, str] = field(default_factory=dict)  # retention defaults the table lacked
    equality_deletes_left: int | None = None  # with fold_all: equality-delete files still live after it

    @property
    def did_nothing(self) -> bool:
        """Nothing was due and nothing changed (a pass a schedule logs at DEBUG only)."""
        return self.lines() == ["nothing due"]

    def lines(self) -> list[str]:
        """One line per thing done, for a terminal or a log."""
        out = []
        if self.properties_set:
            out.append("set " + ", ".join(f"{k}={v}" for k, v in sorted(self.properties_set.items())))
        if self.conversion is not None:
            v = self.conversion
            if v.conflict is not None:
                out.append(f"converting equality deletes conflicted, nothing landed: {v.conflict}")
            elif v.committed:
                out.append(
                    f"converted {v.equality_files_removed} equality-delete file(s) ({v.equality_rows_removed} rows) "
                    f"into {v.position_files_added} "
                    + ("deletion vector(s)" if v.vectors else "position-delete file(s)")
                    + f" ({v.positions_added} positions)"
                    + (f", {v.earlier_deletes_replaced} earlier one(s) merged" if v.earlier_deletes_replaced else "")
                    + (
                        f", {v.unused_equality_files_removed} unused equality-delete file(s) dropped"
                        if v.unused_equality_files_removed
                        else ""
                    )
                    + (f", {len(v.left)} left" if v.left else "")
                )
        if self.compaction is not None:
            c = self.compaction
            out.append(
                f"compacted {c.groups} group(s): {c.files_rewritten} files -> {c.files_added}, "
                f"{c.delete_files_removed} delete files and {c.rows_removed} deleted rows folded away"
                + (f", {len(c.skipped)} group(s) skipped" if c.skipped else "")
            )
        if self.dangling_deletes_removed:
            out.append(f"removed {self.dangling_deletes_removed} dangling delete file(s)")
        if self.manifests is not None and self.manifests.skipped:
            out.append(f"manifest rewrite skipped: {self.manifests.skipped}")
        elif self.manifests is not None:
            out.append(f"rewrote {self.manifests.rewritten} manifests into {self.manifests.added}")
        if self.expiry is not None and self.expiry.expired_snapshots:
            out.append(f"expired {self.expiry.expired_snapshots} snapshot(s), {self.expiry.snapshots_left} left")
        if self.stopped:
            out.append("stopped early on request")
        if self.equality_deletes_left == 0:
            out.append("no equality delete left: every engine reads this snapshot (PyIceberg included)")
        elif self.equality_deletes_left:
            out.append(
                f"{self.equality_deletes_left} equality-delete file(s) left (a conflict with a commit beside "
                "this run, or the time budget): engines that refuse equality deletes cannot read this "
                "snapshot yet; run again"
            )
        return out or ["nothing due"]


def maintain(
    spark: SparkSession,
    table: str,
    policy: MaintenancePolicy | None = None,
    *,
    progress: ProgressCallback | None = None,
    stop: Callable[[], bool] | None = None,
    fold_all: bool = False,
) -> MaintenanceReport:
    """Run the maintenance the table's health calls for, once; returns what it did.

    `progress` receives ProgressEvents of the long steps (nothing is printed). `stop` is asked
    between steps and between compaction groups: once it returns True, the run commits nothing
    more and returns (what it committed stays committed; the rest waits for the next run).

    `fold_all=True` makes the table readable by every engine now: deletes are folded and
    compaction runs whatever the health thresholds say. With `fold_deletes="rewrite"` every data
    file a delete applies to is rewritten with its deletes applied (no delete file is left); with
    `"position"` equality deletes become position deletes (deletion vectors on v3) and compaction
    rewrites the files of any equality delete left. `report.equality_deletes_left` says how many
    equality-delete files a commit beside the run (the stream's next batch adds its own) left.
    """
    p = policy or MaintenancePolicy()
    started = time.monotonic()
    deadline = started + p.time_budget_seconds if p.time_budget_seconds is not None else None

    def requested() -> bool:
        return stop is not None and stop()

    def out_of_time() -> bool:
        return requested() or (deadline is not None and time.monotonic() >= deadline)

    properties_set = apply_retention_defaults(spark, table) if not requested() else {}
    scanned, health = _health(spark, table, p)
    due = tuple(health.suggestions)
    folding = any(s.startswith("fold deletes") for s in due) or (fold_all and health.delete_files > 0)
    conversion = None
    if p.fold_deletes == "position" and folding and not requested():
        conversion = convert_equality_deletes(spark, table, progress=progress)
    compaction = None
    if (fold_all or folding or any(s.startswith("compact") for s in due)) and not requested():
        stoppable = out_of_time if deadline is not None or stop is not None else None
        # the scan is stale once a conversion committed: compaction plans from the new snapshot
        compaction = _compact_within(spark, table, p, stoppable, progress, fold_all=fold_all, scanned=scanned)
    # The action's Spark jobs only when the health report says some delete file may dangle.
    dangling = remove_dangling_deletes(spark, table) if health.may_have_dangling_deletes and not requested() else 0
    manifests = None
    if not requested() and manifest_count(spark, table) > p.max_manifests:
        manifests = rewrite_manifests(spark, table)
    expiry = None
    if not requested():  # every run: expiry is age-based, and commits nothing when nothing is due
        age = timedelta(seconds=p.max_snapshot_age_seconds) if p.max_snapshot_age_seconds is not None else None
        expiry = expire_snapshots(spark, table, retain_last=p.retain_snapshots, older_than=age)
    left = equality_delete_files(spark, table) if fold_all else None
    report = MaintenanceReport(
        table=table,
        due=due,
        compaction=compaction,
        dangling_deletes_removed=dangling,
        manifests=manifests,
        expiry=expiry,
        seconds=time.monotonic() - started,
        conversion=conversion,
        stopped=requested(),
        properties_set=properties_set,
        equality_deletes_left=left,
    )
    level = logging.DEBUG if report.did_nothing else logging.INFO
    log.log(level, "maintenance of %s: %s", table, "; ".join(report.lines()))
    return report


def _health(spark: SparkSession, table: str, policy: MaintenancePolicy) -> tuple[Scanned | None, TableHealth]:
    """What the pass decides by. A table of at most `policy.scan_health_files` live files (by its
    snapshot summary) is scanned by the compaction planner, and its health counted from that scan
    (`planned_health`; compaction then plans from the same scan while the snapshot is current);
    a larger one, or one whose summary has no totals, gets the metadata-table query
    (`table_health`): the scan costs about 1 ms a file through py4j, the query about 0.4 s."""
    jtable = load_table(spark, table)
    jtable.refresh()
    snapshot = jtable.currentSnapshot()
    if snapshot is None:
        files = TableFiles(spark, table, jtable)
        return (-1, files, []), planned_health(files, [], [], policy.health_thresholds)
    summary = snapshot.summary()
    totals = [summary.get(k) for k in ("total-data-files", "total-delete-files")]
    if None in totals or sum(int(t) for t in totals) > policy.scan_health_files:
        return None, table_health(spark, table, policy.health_thresholds, partition_times=False)
    files = TableFiles(spark, table, jtable)
    snapshot_id = int(snapshot.snapshotId())
    refs = files.scan(snapshot_id)
    health = planned_health(files, refs, files.live_deletes(snapshot_id), policy.health_thresholds)
    return (snapshot_id, files, refs), health


def current_snapshot_id(spark: SparkSession, table: str) -> int:
    """The table's current snapshot id as its catalog has it now (-1 before the first commit)."""
    jtable = load_table(spark, table)
    jtable.refresh()
    snapshot = jtable.currentSnapshot()
    return int(snapshot.snapshotId()) if snapshot is not None else -1


def manifest_count(spark: SparkSession, table: str) -> int:
    """Manifests of the table's current snapshot, from its manifest list (no Spark job)."""
    jtable = load_table(spark, table)
    jtable.refresh()  # compaction may have committed since the table was loaded
    snapshot = jtable.currentSnapshot()
    return int(snapshot.allManifests(jtable.io()).size()) if snapshot is not None else 0


def equality_delete_files(spark: SparkSession, table: str) -> int:
    """Equality-delete files live in the table's current snapshot (metadata only)."""
    load_table(spark, table).refresh()  # the catalog's cached table, as other processes left it
    row = spark.sql(f"SELECT count(*) FROM {table}.delete_files WHERE content = 2").first()
    return int(row[0]) if row else 0


@dataclass(frozen=True)
class TablesPass:
    """One maintenance pass over several tables: what it did, and where the next pass starts."""

    reports: list[MaintenanceReport]
    not_reached: list[str]  # tables the time budget left for the next pass
    next_start: int  # index (into the pass's table list) the next pass starts from
    seconds: float
    failed: dict[str, str] = field(default_factory=dict)  # table -> error, with keep_going


def maintain_tables(
    spark: SparkSession,
    tables: list[str],
    policy: MaintenancePolicy | None = None,
    *,
    start: int = 0,
    progress: ProgressCallback | None = None,
    stop: Callable[[], bool] | None = None,
    keep_going: bool = False,
    fold_all: bool = False,
    settled: dict[str, int] | None = None,
) -> TablesPass:
    """One pass of `maintain` over `tables` (a pipeline's), within the policy's time budget for the whole pass.

    With `keep_going` (maintenance beside a long-running pipeline), a table whose maintenance
    fails is logged and named in `failed`, and the pass goes on to the next table: one broken
    table never keeps the others from being maintained. Without it the error is raised.

    Tables are taken in turn from index `start` (wrapping around); each gets what is left of the
    budget. Once it is spent, the remaining tables wait for the next pass, which starts with the
    first of them (`next_start`), so every table is reached over a few passes however many there are.
    `fold_all` is passed to every table's `maintain`.

    `settled` (kept by a caller that runs passes on a schedule) maps a table to the snapshot a
    whole pass left unchanged: nothing was due, or nothing due could be done. The table is skipped
    while that snapshot is still current, for the cost of one metadata refresh, and looked at
    again once anything commits to it. Without it every table gets its full pass.
    """
    p = policy or MaintenancePolicy()
    started = time.monotonic()
    budget = p.time_budget_seconds
    reports: list[MaintenanceReport] = []
    failed: dict[str, str] = {}
    n = len(tables)
    order = [tables[(start + i) % n] for i in range(n)] if n else []
    done = 0
    for table in order:
        left = None if budget is None else budget - (time.monotonic() - started)
        if (left is not None and left <= 0 and done) or (stop is not None and stop()):
            break
        table_policy = p if left is None else replace(p, time_budget_seconds=max(0.0, left))
        try:
            before = current_snapshot_id(spark, table) if settled is not None else None
            if settled is not None and settled.get(table) == before:
                log.debug("maintenance of %s: no commit since the last pass, skipped", table)
                done += 1
                continue
            report = maintain(spark, table, table_policy, progress=progress, stop=stop, fold_all=fold_all)
            reports.append(report)
            if settled is not None and before is not None:
                if not report.stopped and current_snapshot_id(spark, table) == before:
                    settled[table] = before
                else:
                    settled.pop(table, None)
        except Exception as exc:
            if not keep_going or driver_stopped(exc):  # no table can be maintained without a driver
                raise
            failed[table] = one_line(exc)
            log.warning("maintenance of %s failed (%s); going on with the next table", table, failed[table])
            log.debug("the maintenance failure", exc_info=True)
        done += 1
    not_reached = order[done:]
    return TablesPass(
        reports=reports,
        not_reached=not_reached,
        next_start=(start + done) % n if n else 0,
        seconds=time.monotonic() - started,
        failed=failed,
    )
