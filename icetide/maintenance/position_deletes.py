"""Fold equality deletes by converting them into position deletes, safely beside the stream.

An equality delete makes every reader of every older data file of its partition (of every
partition, for an unpartitioned spec) load its keys and probe each row. A position delete
names a file and a row number: readers of that one file skip those rows, nothing else. The
conversion, in separable steps:

    job = equality_delete_conversion(spark, "lake.db.events")  # plans at the current snapshot
    job.write()     # finds the deleted rows' positions, writes position-delete files, commits nothing
    job.commit()    # one RowDelta: adds them, removes the equality-delete files they replace

Planning takes Iceberg's own scan of the snapshot: each data file's task lists the equality
deletes that apply to it (a smaller data sequence number, the same partition or a global
delete, overlapping key bounds). For each such data file the key columns are read with their
row positions and checked against the keys of the deletes that apply; matching positions go
into one position-delete file per data file (`file_path`, `pos`; field ids 2147483546 and
2147483545), referencing that file. Every data file an equality delete applies to is
processed, so the delete is fully covered and removed in the same commit.

The commit is validated from the planned snapshot: `validateDataFilesExist` over every data
file processed, with `validateDeletedFiles`, fails it if a compaction or any other commit
removed one of them meanwhile (a compaction's output carries the planned rows under an older
sequence number, so the equality delete might still be needed for it), and removing an
equality-delete file that is already gone fails too. New data or deletes the stream commits
meanwhile need no check: an equality delete never applies to newer data, and the stream's
deletes are left as they are. A conflict deletes the new files and reports the reason; the
next run plans again. The stream's own commit may lose one race against this commit (it is
a `delete` snapshot that adds delete files) and retries, as it does for any writer.

Reading happens on the driver with pyarrow, key columns only. Equality deletes on float or
nested columns, or holding nulls, are left for compaction (`fold_deletes="rewrite"`).

On format v3 the positions go into deletion vectors instead (`icetide.write.vectors`):
one per data file, merged with the file's earlier DV (or position deletes from before an upgrade),
which the same commit removes. A DV that another commit added to one of the data files
meanwhile makes Iceberg reject the commit (one DV per file), and the next run plans again.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from icetide.commit.failures import CONFLICTS, UNKNOWN, short_message
from icetide.errors import CommitFailedError, CommitStateUnknownError, ConfigError
from icetide.executor.file_metrics import FIELD_ID_KEY
from icetide.filesystems import filesystem_for, make_parent
from icetide.maintenance.compaction import SUMMARY_COMMIT_ID, SUMMARY_OPERATION, SUMMARY_PLANNED_SNAPSHOT
from icetide.maintenance.deletes import applies
from icetide.maintenance.equality_match import convertible, deleted_positions, sorted_unique
from icetide.maintenance.inventory import TableFiles
from icetide.maintenance.planning import DataFileRef, DeleteRef, partition_label
from icetide.maintenance.progress import ProgressCallback, notify
from icetide.spark.py4j_collections import java_list
from icetide.table.iceberg import format_version, java_exception_class, java_message, jvm, load_table
from icetide.write.keys import read_by_field_id
from icetide.write.vectors import PlannedVector, plan_vector, write_vectors

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

DELETE_FILE_PATH_ID = 2147483546  # Iceberg's reserved field ids of a position-delete file
DELETE_FILE_POS_ID = 2147483545
POSITION_DELETE_SCHEMA = pa.schema(
    [
        pa.field("file_path", pa.string(), nullable=False, metadata={FIELD_ID_KEY: str(DELETE_FILE_PATH_ID)}),
        pa.field("pos", pa.int64(), nullable=False, metadata={FIELD_ID_KEY: str(DELETE_FILE_POS_ID)}),
    ]
)


# ---------------------------------------------------------------- pure: positions


def position_delete_table(data_file_path: str, positions: pa.Array) -> pa.Table:
    """A position-delete file's rows for one data file, in the order Iceberg requires."""
    return pa.table(
        [pa.array([data_file_path] * len(positions), pa.string()), positions.cast(pa.int64())],
        schema=POSITION_DELETE_SCHEMA,
    )


# ---------------------------------------------------------------- the job (Spark driver, py4j)


@dataclass(frozen=True)
class DeleteConversionResult:
    """What one conversion committed, or why it committed nothing."""

    table: str
    planned_snapshot_id: int | None
    snapshot_id: int | None = None  # the conversion's commit; None: nothing committed
    equality_files_removed: int = 0
    equality_rows_removed: int = 0  # records of the equality-delete files removed
    position_files_added: int = 0  # on v3: deletion vectors
    positions_added: int = 0  # on v3: every position of the new DVs, earlier ones merged in included
    data_files_scanned: int = 0
    left: tuple[str, ...] = ()  # equality-delete files not converted, each "path: why"
    conflict: str | None = None  # Iceberg's reason, when the commit was rejected
    unused_equality_files_removed: int = 0  # equality deletes that applied to no data file, dropped
    vectors: bool = False  # format v3: positions went into deletion vectors
    earlier_deletes_replaced: int = 0  # v3: earlier DVs / file-scoped position deletes merged and removed

    @property
    def committed(self) -> bool:
        """Did the conversion land?"""
        return self.snapshot_id is not None


@dataclass
class _Staged:
    data_file: DataFileRef
    path: str  # the new position-delete file (v3: the Puffin file holding its DV)
    records: int
    java: Any  # its DeleteFile
    replaces: tuple[Any, ...] = ()  # v3: earlier DeleteFiles of the data file the DV merged


class EqualityDeleteConversion:
    """One conversion of one table, planned at construction; then `write()` and `commit()`.

    Not thread-safe: one job belongs to one thread; the stream and other jobs may commit to
    the table concurrently.
    """

    def __init__(
        self,
        spark: SparkSession,
        table_name: str,
        *,
        max_delete_files: int | None = None,
        progress: ProgressCallback | None = None,
    ) -> None:
        if max_delete_files is not None and (isinstance(max_delete_files, bool) or max_delete_files < 1):
            raise ConfigError(f"max_delete_files: must be an integer of at least 1, got {max_delete_files!r}")
        self.spark = spark
        self.table_name = table_name
        self.progress = progress
        self.table = load_table(spark, table_name)
        self.table.refresh()
        self.vectors = format_version(self.table) >= 3
        snapshot = self.table.currentSnapshot()
        self.planned_snapshot_id: int | None = int(snapshot.snapshotId()) if snapshot is not None else None
        self._files = TableFiles(spark, table_name, self.table)
        self._keys: dict[str, pa.Table] = {}  # equality-delete path -> its keys, canonical
        self._equality_ids: dict[str, tuple[int, ...]] = {}
        self._staged: list[_Staged] = []
        self._written = False
        self._finished = False
        self.chosen: tuple[DeleteRef, ...] = ()
        self.unused: tuple[DeleteRef, ...] = ()  # equality deletes that apply to no data file: dropped
        self.data_files: tuple[DataFileRef, ...] = ()  # every data file a chosen delete applies to
        self.left: list[str] = []
        if self.planned_snapshot_id is not None:
            self._plan(max_delete_files)
        log.info(
            "conversion of %s planned at snapshot %s: %d equality-delete file(s) over %d data file(s), %d left",
            table_name,
            self.planned_snapshot_id,
            len(self.chosen),
            len(self.data_files),
            len(self.left),
        )

    def _plan(self, max_delete_files: int | None) -> None:
        assert self.planned_snapshot_id is not None
        files = self._files.scan(self.planned_snapshot_id)
        candidates: dict[str, DeleteRef] = {}
        newest: dict[str, int] = {}  # delete path -> newest sequence number of a file it applies to
        disputed: set[str] = set()
        for f in files:
            for d in f.deletes:
                if d.kind == "equality":
                    candidates.setdefault(d.path, d)
                    newest[d.path] = max(newest.get(d.path, 0), f.sequence_number, d.sequence_number)
                    if not applies(d, f.sequence_number, f.partition):
                        disputed.add(d.path)  # Iceberg's reader applies it where our rule would not
        # Newest partitions first, as compaction: the deletes of the partitions written last.
        ordered = sorted(candidates.values(), key=lambda d: (-newest[d.path], partition_label(d.scope or (0, ""))))
        chosen: list[DeleteRef] = []
        for d in ordered:
            if d.path in disputed:
                self.left.append(f"{d.path}: Iceberg applies it beyond its sequence and partition rule; left as is")
                continue
            if max_delete_files is not None and len(chosen) >= max_delete_files:
                self.left.append(f"{d.path}: deferred to a later run: max_delete_files={max_delete_files} reached")
                continue
            why = self._read_keys(d)
            if why is not None:
                self.left.append(f"{d.path}: {why}")
                continue
            chosen.append(d)
        # Equality deletes no data file's task lists (older data of their partition, overlapping key
        # bounds) change no row now and never will: newer data is out of their reach, and a
        # compaction's output keeps its input's bounds. They go in the same commit.
        self.unused = tuple(
            d for d in self._files.live_deletes(self.planned_snapshot_id, equality_only=True) if d.path not in newest
        )
        chosen_paths = {d.path for d in chosen}
        self.chosen = tuple(chosen)
        self.data_files = tuple(f for f in files if any(d.path in chosen_paths for d in f.deletes))
        kept = chosen_paths | {d.path for d in self.unused}
        if self.vectors:  # each data file's earlier DV or position deletes, merged into its new DV
            kept |= {d.path for f in self.data_files for d in f.deletes if d.kind == "position"}
        self._files.keep_only((f.path for f in self.data_files), kept)

    def _read_keys(self, delete: DeleteRef) -> str | None:
        java = self._files.delete_files[delete.path]
        ids = tuple(int(i) for i in java_list(java.equalityFieldIds()))
        try:
            keys = read_by_field_id(delete.path, ids)
        except ConfigError as exc:
            return str(exc)
        why = convertible(keys)
        if why is None:
            self._keys[delete.path] = keys
            self._equality_ids[delete.path] = ids
        return why

    # writing

    def write(self) -> int:
        """Find the deleted rows' positions and write one position-delete file per data file that
        has any; commits nothing (the files are invisible until `commit()`). Returns the number
        of position-delete files written."""
        if self._written:
            raise ConfigError("write: this conversion was already written; plan a new one")
        chosen = {d.path: d for d in self.chosen}
        vectors: list[PlannedVector] = []
        for n, f in enumerate(self.data_files, start=1):
            applying = [chosen[d.path] for d in f.deletes if d.path in chosen]  # as Iceberg's reader applies them
            by_ids: dict[tuple[int, ...], list[pa.Table]] = {}
            for d in applying:
                by_ids.setdefault(self._equality_ids[d.path], []).append(self._keys[d.path])
            positions: list[pa.Array] = []
            for ids, keys in by_ids.items():
                positions.append(deleted_positions(read_by_field_id(f.path, ids), keys))
            merged = sorted_unique(pa.concat_arrays(positions)) if positions else pa.array([], pa.int64())
            if self.vectors:
                earlier = [self._files.delete_files[d.path] for d in f.deletes if d.kind == "position"]
                planned = plan_vector(self._files.tasks[f.path].file(), earlier, merged.to_numpy(zero_copy_only=False))
                if planned is not None:
                    vectors.append(planned)
            elif len(merged):
                self._staged.append(self._write_positions(f, merged))
            notify(self.progress, self.table_name, "scan data files", n, len(self.data_files), f.label)
        if vectors:
            self._stage_vectors(vectors)
        self._written = True
        return len(self._staged)

    def _stage_vectors(self, vectors: list[PlannedVector]) -> None:
        written = write_vectors(self.spark, self.table, vectors)
        assert written is not None
        by_path = {f.path: f for f in self.data_files}
        for planned, java in zip(vectors, written.delete_files, strict=True):
            ref = by_path[str(planned.data_file.location())]
            self._staged.append(_Staged(ref, written.location, len(planned.positions), java, planned.replaces))

    def _write_positions(self, f: DataFileRef, positions: pa.Array) -> _Staged:  # type: ignore[type-arg]
        j = jvm(self.spark)
        data_file = self._files.tasks[f.path].file()
        spec = self.table.specs().get(int(data_file.specId()))
        name = f"icetide-posdel-{uuid.uuid4().hex}-00001.parquet"
        location = str(self.table.locationProvider().newDataLocation(spec, data_file.partition(), name))
        fs, path = filesystem_for(location)
        make_parent(fs, path)
        with fs.open_output_stream(path) as sink:
            pq.write_table(position_delete_table(f.path, positions), sink)
        size = fs.get_file_info(path).size
        # Full metrics for `file_path` and `pos`; Iceberg 1.12 dropped the (Table) overload, which
        # only added modes for the deprecated `row` column these files do not have.
        metrics = j.org.apache.iceberg.parquet.ParquetUtil.fileMetrics(
            self.table.io().newInputFile(location), j.org.apache.iceberg.MetricsConfig.forPositionDelete()
        )
        java = (
            j.org.apache.iceberg.FileMetadata.deleteFileBuilder(spec)
            .ofPositionDeletes()
            .withPath(location)
            .withFormat("PARQUET")
            .withFileSizeInBytes(size)
            .withPartition(data_file.partition())
            .withMetrics(metrics)
            .withReferencedDataFile(f.path)
            .build()
        )
        return _Staged(f, location, len(positions), java)

    # committing

    def commit(self) -> DeleteConversionResult:
        """Add the position deletes and remove the equality deletes they replace, in one RowDelta
        validated from the planned snapshot. Guarantees: the table's rows are the same before and
        after; on a conflict nothing lands, the new files are deleted and `conflict` says why.
        CommitStateUnknownError (nothing deleted) and CommitFailedError pass through."""
        if not self._written:
            raise ConfigError("commit: call write() before commit()")
        if self._finished:
            raise ConfigError("commit: this conversion was already committed or aborted; plan a new one")
        self._finished = True
        if not self.chosen and not self.unused:
            return self._result()
        j = jvm(self.spark)
        self.table.refresh()
        commit_id = str(uuid.uuid4())
        referenced = j.java.util.ArrayList()
        for f in self.data_files:
            referenced.add(f.path)
        delta = (
            self.table.newRowDelta()
            .validateFromSnapshot(self.planned_snapshot_id)
            .validateDataFilesExist(referenced)
            .validateDeletedFiles()
        )
        for staged in self._staged:
            delta.addDeletes(staged.java)
            for earlier in staged.replaces:
                delta.removeDeletes(earlier)
        for d in (*self.chosen, *self.unused):
            delta.removeDeletes(self._files.delete_files[d.path])
        delta.set(SUMMARY_OPERATION, "fold-deletes")
        delta.set(SUMMARY_PLANNED_SNAPSHOT, str(self.planned_snapshot_id))
        delta.set(SUMMARY_COMMIT_ID, commit_id)
        try:
            delta.commit()
        except Exception as exc:
            return self._commit_failed(exc)
        snapshot_id = self._files.find_snapshot(SUMMARY_COMMIT_ID, commit_id)
        result = self._result(snapshot_id if snapshot_id is not None else -1)
        log.info(
            "conversion of %s committed snapshot %s: %d equality-delete file(s) -> %d position-delete file(s), "
            "%d position(s)",
            self.table_name,
            result.snapshot_id,
            result.equality_files_removed,
            result.position_files_added,
            result.positions_added,
        )
        return result

    def abort(self) -> int:
        """Delete the written position-delete files of a conversion that will not commit."""
        self._finished = True
        self._written = True
        return self._delete_staged()

    def _commit_failed(self, exc: Exception) -> DeleteConversionResult:
        kind = java_exception_class(exc)
        if kind in UNKNOWN or not kind:
            log.debug("conversion commit state unknown", exc_info=True)
            raise CommitStateUnknownError(
                f"delete conversion of {self.table_name}: commit state unknown ({java_message(exc)}); its "
                "position-delete files were kept; check the table's snapshots before deleting them"
            ) from exc
        self._delete_staged()
        if kind in CONFLICTS:
            reason = short_message(java_message(exc))
            log.info("conversion of %s conflicts: %s", self.table_name, reason)
            return DeleteConversionResult(
                self.table_name,
                self.planned_snapshot_id,
                data_files_scanned=len(self.data_files),
                left=tuple(self.left),
                conflict=reason,
            )
        log.debug("conversion commit failed", exc_info=True)
        raise CommitFailedError(
            f"delete conversion of {self.table_name} failed: {java_message(exc)}; its new files were deleted"
        ) from exc

    def _delete_staged(self) -> int:
        io = self.table.io()
        for path in dict.fromkeys(s.path for s in self._staged):  # v3: many DVs share one file
            try:
                io.deleteFile(path)
            except Exception:
                log.debug("could not delete %s", path, exc_info=True)
        count, self._staged = len(self._staged), []
        return count

    def _result(self, snapshot_id: int | None = None) -> DeleteConversionResult:
        return DeleteConversionResult(
            table=self.table_name,
            planned_snapshot_id=self.planned_snapshot_id,
            snapshot_id=snapshot_id,
            equality_files_removed=len(self.chosen) if snapshot_id is not None else 0,
            equality_rows_removed=sum(d.record_count for d in self.chosen) if snapshot_id is not None else 0,
            unused_equality_files_removed=len(self.unused) if snapshot_id is not None else 0,
            position_files_added=len(self._staged),
            positions_added=sum(s.records for s in self._staged),
            data_files_scanned=len(self.data_files),
            left=tuple(self.left),
            vectors=self.vectors,
            earlier_deletes_replaced=sum(len(s.replaces) for s in self._staged) if snapshot_id is not None else 0,
        )


def equality_delete_conversion(
    spark: SparkSession,
    table: str,
    *,
    max_delete_files: int | None = None,
    progress: ProgressCallback | None = None,
) -> EqualityDeleteConversion:
    """Plan converting `table`'s equality deletes into position deletes at its current snapshot.

    `max_delete_files` bounds one run (newest partitions' deletes first); `progress` receives
    one event per data file scanned. Nothing is written until `write()`.

    Example::

        job = equality_delete_conversion(spark, "lake.db.events")
        job.write()
        result = job.commit()
    """
    return EqualityDeleteConversion(spark, table, max_delete_files=max_delete_files, progress=progress)


def convert_equality_deletes(
    spark: SparkSession,
    table: str,
    *,
    max_delete_files: int | None = None,
    progress: ProgressCallback | None = None,
) -> DeleteConversionResult:
    """Plan, write and commit a conversion in one call; never raises on a conflict.

    Guarantees: the table reads the same rows after as before; equality-delete files that
    were converted are gone and position-delete files take their place; a commit that
    conflicts with a concurrent one lands nothing and says why in `result.conflict`.
    """
    job = equality_delete_conversion(spark, table, max_delete_files=max_delete_files, progress=progress)
    job.write()
    return job.commit()
