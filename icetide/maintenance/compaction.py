"""Compaction beside the stream, in separable steps: plan at a snapshot, rewrite, commit.

    job = compaction(spark, "lake.db.events", min_input_files=2, target_file_size="128MB")
    job.rewrite()   # writes the new files, commits nothing
    job.commit()    # validated from the planned snapshot; raises on a conflict, naming it

The rewrite reads each group's FileScanTasks, planned at the snapshot with the delete files that
applied then, with those deletes applied, and writes new files that no snapshot holds until the
commit: small units with Arrow on the driver (maintenance/driver_rewrite.py), the rest with
Iceberg's own Spark machinery as its rewrite_data_files does (maintenance/rewrite_files.py).
The commit is a `RewriteFiles` validated from the planned snapshot. With
`use_starting_sequence_number` (the default) the new files get the planned snapshot's sequence
number, so equality deletes the stream commits meanwhile still apply to them and the stream never
has to lose to compaction (seed 001). Deletion vectors the stream commits meanwhile on the files
read are carried onto the new files in the same commit (format v3, maintenance/carry.py).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from icetide.commit.failures import CONFLICTS, UNKNOWN, short_message
from icetide.errors import (
    CommitFailedError,
    CommitStateUnknownError,
    CompactionConflictError,
    ConfigError,
    SnapshotGoneError,
    one_line,
)
from icetide.faults import crash_point
from icetide.maintenance.carry import CannotCarry, CarriedVectors, VectorCarrier
from icetide.maintenance.deletes import LiveDataFile, removable_deletes
from icetide.maintenance.driver_rewrite import rewrite_on_driver
from icetide.maintenance.inventory import Scanned, SnapshotChanges, TableFiles
from icetide.maintenance.planning import (
    DEFAULT_TARGET_FILE_SIZE,
    CompactionOptions,
    DeleteRef,
    GroupPlan,
    PartitionKey,
    SkipKind,
    SkippedGroup,
    combine_groups,
    plan_groups,
)
from icetide.maintenance.progress import ProgressCallback, notify
from icetide.maintenance.results import CompactionResult, GroupResult, StagedGroup, committed_groups
from icetide.maintenance.rewrite_files import delete_staged, rewrite_files, rewrite_together
from icetide.table.iceberg import format_version, java_exception_class, java_message, load_table, table_property

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

SUMMARY_OPERATION = "icetide.maintenance"
SUMMARY_PLANNED_SNAPSHOT = "icetide.compaction.planned-snapshot-id"
SUMMARY_COMMIT_ID = "icetide.compaction.commit-id"
SUMMARY_CARRIED_ROWS = "icetide.compaction.carried-rows"  # rows deleted meanwhile, carried onto the new files


class CompactionJob:
    """One compaction of one table, planned at construction; then `rewrite()` and `commit()`.

    Not thread-safe: one job belongs to one thread. Several jobs (and the stream) may run
    concurrently against one table; Iceberg's validation decides which commits conflict.
    """

    def __init__(
        self,
        spark: SparkSession,
        table_name: str,
        options: CompactionOptions,
        *,
        only_partitions: frozenset[PartitionKey] | None = None,
        progress: ProgressCallback | None = None,
        scanned: Scanned | None = None,
    ) -> None:
        self.spark = spark
        self.progress = progress
        self.table_name = table_name
        self.options = options
        self.table = load_table(spark, table_name)
        self.table.refresh()
        snapshot = self.table.currentSnapshot()
        self.planned_snapshot_id: int | None = int(snapshot.snapshotId()) if snapshot is not None else None
        self.planned_sequence_number: int | None = int(snapshot.sequenceNumber()) if snapshot is not None else None
        fresh = scanned is not None and scanned[0] == self.planned_snapshot_id and not options.partition_filter
        self._files = scanned[1] if fresh and scanned else TableFiles(spark, table_name, self.table)
        self._scanned = scanned[2] if fresh and scanned else None  # a scan of the planned snapshot already made
        self._listing: list[LiveDataFile] = []  # every live data file of the planned snapshot
        self._outputs: dict[int, list[Any]] = {}  # group index -> staged Java DataFiles
        self._staged: dict[int, StagedGroup] = {}
        self._finished: set[int] = set()  # groups committed, skipped or aborted
        self._committed: list[GroupResult] = []
        self._skipped: list[SkippedGroup] = []
        self._snapshot_ids: list[int] = []
        self._conflicted: set[PartitionKey] = set()
        self._carriers: dict[tuple[int, ...], VectorCarrier] = {}
        self._rewritten = False
        self.plan: GroupPlan = self._plan(only_partitions)
        self._skipped.extend(self.plan.skipped)
        # units of work, one Spark job and (with partial_progress) one commit each
        self.units: list[list[int]] = combine_groups(self.plan.groups, options, int(self.table.spec().specId()))
        log.info(
            "compaction of %s planned at snapshot %s: %d group(s) of %d file(s), %d left alone",
            table_name,
            self.planned_snapshot_id,
            len(self.plan.groups),
            sum(len(g.files) for g in self.plan.groups),
            len(self.plan.skipped),
        )

    # planning

    def _plan(self, only_partitions: frozenset[PartitionKey] | None) -> GroupPlan:
        if self.planned_snapshot_id is None:
            return GroupPlan((), ())
        predicate = self.options.partition_filter
        files = self._scanned
        if files is None:
            files = self._files.scan(self.planned_snapshot_id, predicate=predicate)
        if predicate is None:
            listing = files
        else:  # delete scoping needs every live file of a partition, not only the filter's
            listing = (
                self._files.scan(self.planned_snapshot_id, keep_tasks=False) if self.options.remove_deletes else []
            )
        self._listing = [LiveDataFile(f.path, f.sequence_number, f.partition) for f in listing]
        plan = plan_groups(files, self.options, only_partitions=only_partitions)
        self._files.keep_only(
            (f.path for g in plan.groups for f in g.files), (d.path for g in plan.groups for d in g.delete_files)
        )
        return plan

    # rewriting

    def rewrite(self) -> tuple[StagedGroup, ...]:
        """Write every planned group's rows, deletes applied, into new files; commit nothing.

        The new files are invisible to readers until `commit()`; `abort()` deletes them. A group
        whose read or write fails is skipped with the reason (its partial output is removed by
        Spark's write abort) and the other groups go on.
        """
        if self._rewritten:
            raise ConfigError("rewrite: this compaction job was already rewritten; plan a new one")
        for unit in self.units:
            self._rewrite_unit([i for i in unit if i not in self._staged and i not in self._finished])
        self._rewritten = True
        return tuple(self._staged[i] for i in sorted(self._staged))

    def _notify(self, step: str, done: int, detail: str = "") -> None:
        notify(self.progress, self.table_name, step, done, len(self.plan.groups), detail)

    def _rewrite_unit(self, indices: list[int]) -> list[int]:
        """Rewrite these groups on the driver where it can, else in one Spark job reading every
        group's files in one split, so each partition gets one new file (`combine_groups`); the
        indices staged. Should the job fail, or write outside the groups' partitions, each group
        is rewritten alone instead."""
        if self._rewrite_on_driver(indices):
            return indices
        if len(indices) <= 1:
            return [i for i in indices if self._rewrite_group(i) is not None]
        groups = {self.plan.groups[i].partition: i for i in indices}
        outputs = rewrite_together(
            self.spark,
            self.table,
            {key: [self._files.tasks[f.path] for f in self.plan.groups[i].files] for key, i in groups.items()},
            weight=sum(f.size + sum(d.size for d in f.deletes) for i in indices for f in self.plan.groups[i].files),
            target_file_size=max(self.plan.groups[i].write_max_file_size for i in indices),
            partition_of=self._files.partition_key,
        )
        if outputs is None:
            return [i for i in indices if self._rewrite_group(i) is not None]
        by_group = {groups[key]: files for key, files in outputs.items()}
        for index, files in by_group.items():
            self._stage(index, files)
        self._notify("rewrite groups", len(self._finished | set(self._staged)), f"{len(indices)} groups in one job")
        log.debug("compaction of %s: %d groups rewritten in one job", self.table_name, len(indices))
        return indices

    def _rewrite_on_driver(self, indices: list[int]) -> bool:
        """Rewrite the unit with Arrow on the driver; False when Spark is to rewrite it."""
        groups = [self.plan.groups[i] for i in indices]
        limit = self.options.driver_rewrite_bytes
        outputs = rewrite_on_driver(self.spark, self.table, groups, self._files, limit=limit)
        if outputs is None:
            return False
        for index, group in zip(indices, groups, strict=True):
            self._stage(index, outputs[group.partition])
        self._notify("rewrite groups", len(self._finished | set(self._staged)), f"{len(indices)} on the driver")
        return True

    def _stage(self, index: int, outputs: list[Any]) -> StagedGroup:
        self._outputs[index] = outputs
        self._staged[index] = StagedGroup.of(self.plan.groups[index], outputs)
        return self._staged[index]

    def _rewrite_group(self, index: int) -> StagedGroup | None:
        group = self.plan.groups[index]
        try:
            outputs = rewrite_files(
                self.spark,
                self.table,
                [self._files.tasks[f.path] for f in group.files],
                split_size=group.split_size,
                target_file_size=group.write_max_file_size,
            )
        except Exception as exc:
            log.warning("compaction of %s: rewriting group %s failed: %s", self.table_name, group.label, one_line(exc))
            log.debug("rewrite failed", exc_info=True)
            self._skip(index, "rewrite_failed", f"rewrite failed: {one_line(exc)}")
            self._notify("rewrite groups", index + 1, f"{group.label} failed")
            return None
        staged = self._stage(index, outputs)
        self._notify("rewrite groups", index + 1, group.label)
        log.debug("compaction of %s: group %s staged %d file(s)", self.table_name, group.label, len(outputs))
        return staged

    # committing

    def commit(self) -> CompactionResult:
        """Commit the rewritten groups, validated from the planned snapshot.

        Atomic (one snapshot for all groups) unless `partial_progress`, which commits each unit
        of work on its own (a group, or small groups rewritten together: `combine_groups`).
        Guarantees: no row is lost or doubled; a group whose input files were all replaced
        meanwhile commits nothing and says so ("already_rewritten"); a conflicting
        commit lands nothing, deletes its new files and raises CompactionConflictError naming
        Iceberg's conflict, after the other groups of a partial-progress job were committed.
        CommitStateUnknownError (nothing deleted) and CommitFailedError pass through.
        """
        if not self._rewritten:
            raise ConfigError("commit: call rewrite() before commit()")
        self._commit_pending()
        result = self.result()
        if result.conflicts:
            reasons = "; ".join(f"group {c.partition}: {c.reason}" for c in result.conflicts)
            raise CompactionConflictError(
                f"compaction of {self.table_name} planned at snapshot {self.planned_snapshot_id} conflicts: {reasons}; "
                "nothing of the conflicting group(s) was committed and their new files were deleted",
                result=result,
            )
        return result

    def run(self, *, stop: Callable[[], bool] | None = None) -> CompactionResult:
        """Rewrite and commit, re-planning conflicting groups; never raises on a conflict.

        With `partial_progress`, each unit of work (a group, or small groups rewritten together)
        is committed as soon as it is rewritten. Groups that conflict are planned again from the
        current snapshot (only their partitions) up to `max_conflict_retries` times, then reported
        in `skipped` with Iceberg's reason. `stop` (partial progress only) is asked before every
        unit but the first: once it returns True, the groups left are reported as deferred and
        nothing else is started.
        """
        if self.options.partial_progress:
            started = False
            for unit in self.units:
                left = [i for i in unit if i not in self._finished]
                if not left:
                    continue
                if started and stop is not None and stop():
                    self._defer_rest("stopped (time budget spent or maintenance stopping)")
                    break
                started = True
                staged = [i for i in left if i in self._staged]
                staged += self._rewrite_unit([i for i in left if i not in self._staged])
                if staged:
                    self._commit_groups(sorted(staged))
            self._rewritten = True
        else:
            if not self._rewritten:
                self.rewrite()
            self._commit_pending()
        result = self.result()
        attempts = 0
        while result.conflicts and attempts < self.options.max_conflict_retries and not (stop and stop()):
            attempts += 1
            n = len(result.conflicts)
            log.info("compaction of %s: re-planning %d conflicting group(s) (retry %d)", self.table_name, n, attempts)
            partitions = frozenset(self._conflicted)
            retry = CompactionJob(self.spark, self.table_name, self.options, only_partitions=partitions)
            retry.progress = self.progress
            result = result.then(retry._run_once())
            self._conflicted = retry._conflicted
        return result

    def _defer_rest(self, why: str) -> None:
        for index in range(len(self.plan.groups)):
            if index not in self._finished:
                self._delete_outputs(index)
                self._skip(index, "deferred", f"deferred to a later run: {why}")

    def _run_once(self) -> CompactionResult:
        self.rewrite()
        self._commit_pending()
        return self.result()

    def abort(self) -> int:
        """Delete the new files of every group not committed; returns how many were deleted."""
        deleted = 0
        for index in sorted(self._staged):
            if index not in self._finished:
                deleted += self._delete_outputs(index)
                self._skip(index, "aborted", "aborted before commit: its new files were deleted")
        self._rewritten = True
        return deleted

    def result(self) -> CompactionResult:
        """What this job has committed and skipped so far."""
        return CompactionResult(
            table=self.table_name,
            planned_snapshot_id=self.planned_snapshot_id,
            data_sequence_number=self.planned_sequence_number if self.options.use_starting_sequence_number else None,
            committed=tuple(self._committed),
            skipped=tuple(self._skipped),
            snapshot_ids=tuple(self._snapshot_ids),
        )

    def _commit_pending(self) -> None:
        pending = [i for i in sorted(self._staged) if i not in self._finished]
        if not pending:
            return
        if self.options.partial_progress:
            for unit in self.units:
                ready = [i for i in unit if i in pending]
                if ready:
                    self._commit_groups(ready)
        else:
            self._commit_groups(pending)

    def _commit_groups(self, indices: list[int]) -> None:
        try:
            self._commit_or_skip(indices)
        finally:
            labels = self.plan.groups[indices[0]].label if len(indices) == 1 else f"{len(indices)} groups at once"
            settled = sum(1 for i in range(len(self.plan.groups)) if i in self._finished)
            self._notify("commit groups", settled, labels)

    def _commit_or_skip(self, indices: list[int]) -> None:
        if self.planned_snapshot_id is None:  # an empty table has no groups
            return
        carrying = self._may_carry()
        attempts = self.options.carry_attempts if carrying else 1
        for attempt in range(1, attempts + 1):
            if self._attempt_commit(indices, attempt, carrying=carrying, last=attempt == attempts):
                return

    def _may_carry(self) -> bool:
        """Carry DVs committed meanwhile? On format v3 with the starting sequence number only:
        the commit is then validated from a later snapshot, and only the planned sequence number
        makes an equality delete committed in between still apply to the new files."""
        if not self.options.carry_attempts or not self.options.use_starting_sequence_number:
            return False
        return format_version(self.table) >= 3

    def _carrier(self, ready: list[int]) -> VectorCarrier:
        """The carrier of these groups (the same one across attempts: it walks on from where it was)."""
        key = tuple(ready)
        if key not in self._carriers:
            assert self.planned_snapshot_id is not None
            inputs = {f.path: self._files.tasks[f.path] for i in ready for f in self._staged[i].group.files}
            outputs = [o for i in ready for o in self._outputs[i]]
            self._carriers = {key: VectorCarrier(self.spark, self.table, self.planned_snapshot_id, inputs, outputs)}
        return self._carriers[key]

    def _attempt_commit(self, indices: list[int], attempt: int, *, carrying: bool, last: bool) -> bool:
        """One commit attempt; True when the groups are settled (committed, skipped, conflicting),
        False when it lost a race to a DV and may carry again."""
        crash_point("compaction_before_commit", attempt)
        self.table.refresh()
        assert self.planned_snapshot_id is not None
        try:
            changes = self._files.changes_since(self.planned_snapshot_id, with_deletes=self.options.remove_deletes)
        except SnapshotGoneError as exc:
            for index in indices:  # nothing can be validated against a snapshot that is gone
                self._conflict(index, f"the planned {exc}")
            return True
        ready = []
        conflicted = False
        for index in indices:
            if index in self._finished:
                continue
            paths = [f.path for f in self._staged[index].group.files]
            gone = [p for p in paths if p in changes.removed_data]
            by = sorted({changes.removed_data[p] for p in gone})
            if gone and len(gone) == len(paths):
                self._delete_outputs(index)
                self._skip(
                    index,
                    "already_rewritten",
                    f"its {len(paths)} input file(s) were already replaced by snapshot(s) {by}: nothing committed, "
                    "its new files were deleted",
                )
            elif gone:
                conflicted = True
                self._conflict(
                    index,
                    f"Cannot commit, missing data files: {len(gone)} of its {len(paths)} input file(s) were "
                    f"removed by snapshot(s) {by}, e.g. {gone[0]}",
                )
            else:
                ready.append(index)
        if not ready:
            return True
        if conflicted:
            for index in ready:  # an atomic commit lands every group or none
                self._conflict(index, "not committed: another group of this atomic compaction conflicted")
            return True
        carrier = self._carrier(ready) if carrying else None
        carried = None
        if carrier is not None:
            try:
                carried = carrier.stage()
            except (CannotCarry, SnapshotGoneError) as exc:
                log.info("compaction of %s cannot carry the DVs committed meanwhile: %s", self.table_name, exc)
                carrier = None
            if carried is not None:
                crash_point("compaction_carried_dvs_written", attempt)
        return self._commit_ready(ready, changes, carried, carrier, retry=not last)

    def _commit_ready(
        self,
        ready: list[int],
        changes: SnapshotChanges,
        carried: CarriedVectors | None = None,
        carrier: VectorCarrier | None = None,
        *,
        retry: bool = False,
    ) -> bool:
        """Commit the ready groups (with the carried DVs); True when settled, False when the commit
        lost a race that carrying again may win (`retry`; the attempt's Puffin file deleted)."""
        groups = [self._staged[i].group for i in ready]
        replaced = frozenset(f.path for g in groups for f in g.files)
        doomed = self._removable(groups, replaced, changes) if self.options.remove_deletes else []
        commit_id = str(uuid.uuid4())
        # Carrying reads the inputs' DVs at a later snapshot: Iceberg validates from there that no
        # DV landed on an input since (data conflicts since the plan are checked above).
        validate_from = carried.read_at if carried is not None else self.planned_snapshot_id
        rewrite = self.table.newRewrite().validateFromSnapshot(validate_from)
        if self.options.use_starting_sequence_number:
            rewrite.dataSequenceNumber(self.planned_sequence_number)
        for index in ready:
            for f in self._staged[index].group.files:
                rewrite.deleteFile(self._files.tasks[f.path].file())
            for new_file in self._outputs[index]:
                rewrite.addFile(new_file)
        for d in doomed:
            rewrite.deleteFile(self._files.delete_files[d.path])
        if carried is not None:
            for vector in carried.removed:
                rewrite.deleteFile(vector)
            for vector in carried.added:
                rewrite.addFile(vector)
            rewrite.set(SUMMARY_CARRIED_ROWS, str(carried.rows))
        rewrite.set(SUMMARY_OPERATION, "compaction")
        rewrite.set(SUMMARY_PLANNED_SNAPSHOT, str(self.planned_snapshot_id))
        rewrite.set(SUMMARY_COMMIT_ID, commit_id)
        try:
            rewrite.commit()
        except Exception as exc:
            kind = java_exception_class(exc)
            if carrier is not None and kind and kind not in UNKNOWN:
                carrier.discard(carried)  # the outcome is known: this attempt's DVs are in no snapshot
                if retry and kind in CONFLICTS:
                    log.info(
                        "compaction of %s lost a race (%s); carrying the DVs again",
                        self.table_name,
                        short_message(java_message(exc)),
                    )
                    return False
            self._commit_failed(ready, exc)
            return True
        crash_point("compaction_committed", 0)
        found = self._files.find_snapshot(SUMMARY_COMMIT_ID, commit_id)
        snapshot_id = found if found is not None else -1
        self._snapshot_ids.append(snapshot_id)
        self._committed.extend(committed_groups([self._staged[i] for i in ready], snapshot_id, doomed))
        self._finished.update(ready)
        added = sum(len(self._staged[i].output_paths) for i in ready)
        moved = f", {carried.rows} row(s) deleted meanwhile carried onto them" if carried and carried.rows else ""
        log.info(
            f"compaction of {self.table_name} committed snapshot {snapshot_id}: {len(ready)} group(s), "
            f"{len(replaced)} file(s) -> {added}, {len(doomed)} delete file(s) dropped{moved}"
        )
        return True

    def _commit_failed(self, ready: list[int], exc: Exception) -> None:
        kind = java_exception_class(exc)
        if kind in UNKNOWN or not kind:
            log.debug("compaction commit state unknown", exc_info=True)
            raise CommitStateUnknownError(
                f"compaction commit of {self.table_name}: state unknown ({java_message(exc)}); its new files were "
                "kept; check the table's snapshots before deleting them"
            ) from exc
        if kind in CONFLICTS:
            reason = short_message(java_message(exc))
            log.info("compaction of %s conflicts: %s", self.table_name, reason)
            for index in ready:
                self._conflict(index, reason)
            return
        for index in ready:
            self._delete_outputs(index)
            self._finished.add(index)
        log.debug("compaction commit failed", exc_info=True)
        raise CommitFailedError(
            f"compaction commit of {self.table_name} failed: {java_message(exc)}; its new files were deleted"
        ) from exc

    def _removable(self, groups: list[Any], replaced: frozenset[str], changes: SnapshotChanges) -> list[DeleteRef]:
        """Delete files of these groups that no data file left live after the commit needs."""
        candidates = {d.path: d for g in groups for d in g.delete_files if d.path not in changes.removed_deletes}
        if not candidates:
            return []
        live = [f for f in self._listing if f.path not in changes.removed_data] + changes.added_data
        return removable_deletes(candidates.values(), live, replaced)

    # bookkeeping

    def _skip(self, index: int, kind: SkipKind, reason: str) -> None:
        group = self.plan.groups[index]
        self._skipped.append(SkippedGroup(group.label, len(group.files), group.input_bytes, kind, reason))
        self._finished.add(index)

    def _conflict(self, index: int, reason: str) -> None:
        self._delete_outputs(index)
        self._conflicted.add(self.plan.groups[index].partition)
        self._skip(index, "conflict", reason)

    def _delete_outputs(self, index: int) -> int:
        outputs = self._outputs.pop(index, [])
        delete_staged(self.table, outputs)
        return len(outputs)


def compaction(
    spark: SparkSession,
    table: str,
    *,
    progress: ProgressCallback | None = None,
    scanned: Scanned | None = None,
    **options: Any,
) -> CompactionJob:
    """Plan a compaction of `table` at its current snapshot; nothing is written yet.

    Options (all keyword, validated at once, a ConfigError names the bad one):
    `target_file_size` (bytes or "128MB"; default the table's write.target-file-size-bytes),
    `min_input_files` (5), `min_file_size` / `max_file_size` (75% / 180% of the target),
    `delete_file_threshold` (a file with at least this many delete files applying is rewritten
    even alone; default off), `equality_delete_file_threshold` (the same, counting equality-delete
    files only; default off), `partition_filter` (SQL predicate), `partial_progress` (False),
    `max_groups` / `max_bytes` (bounds on one run), `max_group_bytes` (100GB),
    `use_starting_sequence_number` (True), `remove_deletes` (True: drop delete files that
    applied only to rewritten files, in the same commit), `max_conflict_retries` (1, for run()),
    `group_order` ("newest": newest partitions first; "worst": most deletes and files first),
    `carry_attempts` (5: on format v3, commit attempts that carry the DVs committed meanwhile on
    the input files onto the new files; 0 never carries, and such a DV makes the group conflict),
    `vector_deleted_share` (a file whose deletion vector marks at least this share of its rows is
    rewritten, even alone; default off), `vector_file_rows` (every file with a deletion vector of a
    partition where such files hold at least this many rows is rewritten; default off),
    `combine_groups_bytes` (64MB: groups that each write one file are rewritten in one Spark job,
    and with `partial_progress` committed together, up to this many input bytes and 100
    partitions at once; 0 rewrites and commits each group alone), `driver_rewrite_bytes` (32MB:
    a unit reading at most this much is rewritten with Arrow on the driver; 0: always Spark).
    `progress` receives a ProgressEvent per group rewritten and per group committed. `scanned` is
    a scan of the table already made (snapshot id, its TableFiles, their `scan`), used when that
    snapshot is still the current one.

    Example::

        job = compaction(spark, "lake.db.events", min_input_files=2, target_file_size="128MB")
        job.rewrite()
        result = job.commit()
    """
    jtable = load_table(spark, table)
    default_target = int(table_property(jtable, "write.target-file-size-bytes", str(DEFAULT_TARGET_FILE_SIZE)))
    checked = CompactionOptions.from_kwargs(options, default_target=default_target)
    return CompactionJob(spark, table, checked, progress=progress, scanned=scanned)


def compact(
    spark: SparkSession,
    table: str,
    *,
    progress: ProgressCallback | None = None,
    stop: Callable[[], bool] | None = None,
    scanned: Scanned | None = None,
    **options: Any,
) -> CompactionResult:
    """Plan, rewrite and commit in one call (`compaction(...).run()`); never raises on a conflict.

    Conflicting groups are re-planned and retried, then reported in `result.skipped`. Safe to
    run in a loop beside the stream: the stream's commits never fail because of it.
    """
    return compaction(spark, table, progress=progress, scanned=scanned, **options).run(stop=stop)
