"""Deletion vectors committed beside a compaction, carried onto its new files (issue 45 item 2).

A compaction planned at snapshot S rewrites its input files with the deletes of S applied. A DV
the stream commits meanwhile on one of those inputs marks rows the new files still hold, and
Iceberg refuses the rewrite ("found new position delete for replaced data file") without carrying
the DV over (apache/iceberg#17754). Beside a stream that marks most files every second, every
rewrite would lose that race. So at commit the compaction carries them itself, by row lineage
(format v3): the rewrite keeps each row's `_row_id` in its output files, so

1. for each input file F whose DV changed since S (found by walking the snapshots since S), the
   positions newly marked are F's DV now minus its deletes at S; their row ids are F's `_row_id`
   column at those positions (null, or no such column: F's `first_row_id` + position);
2. the outputs' `_row_id` columns give each such row its output file and position;
3. one DV per output file touched is written (one Puffin file, `write_vectors`, the writer the
   stream uses) and added to the same RewriteFiles, F's current DV removed with F, and the
   commit validated from the snapshot the DVs were read at (S'): a DV committed after S' makes
   Iceberg refuse the commit, and the compaction reads again and carries again.

The outputs keep S's data sequence number; the carried DVs get the commit's, so they apply to
the outputs. Rows an equality delete removed at S are in no output, so a row id found in none is
already gone and nothing is carried for it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from icetide.errors import SnapshotGoneError
from icetide.executor.file_metrics import FIELD_ID_KEY
from icetide.filesystems import filesystem_for
from icetide.maintenance.inventory import SNAPSHOT_WALK_LIMIT
from icetide.spark.py4j_collections import java_iter
from icetide.write.vectors import PlannedVector, earlier_positions, is_vector, write_vectors

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

ROW_ID_FIELD_ID = 2147483540  # Iceberg's MetadataColumns.ROW_ID (format v3 row lineage)


def _same_blob(a: Any, b: Any) -> bool:
    """Are two Java DeleteFiles the same DV (one Puffin file holds many, at different offsets)?"""
    return str(a.location()) == str(b.location()) and a.contentOffset() == b.contentOffset()


class CannotCarry(Exception):
    """The DVs committed meanwhile cannot be carried (an output file has no `_row_id` column)."""


@dataclass(frozen=True)
class CarriedVectors:
    """One commit attempt's carried DVs: what the RewriteFiles adds and removes beside its files."""

    read_at: int  # the snapshot the inputs' DVs were read at: the commit is validated from it
    location: str | None  # the Puffin file, None when no carried row is in an output
    added: tuple[Any, ...]  # Java DeleteFiles (DVs of output files)
    removed: tuple[Any, ...]  # the inputs' DVs committed since the planned snapshot
    rows: int  # row positions carried


def _row_ids(location: str, positions: np.ndarray, first_row_id: int | None) -> np.ndarray:
    """The `_row_id` of the rows of a data file at `positions` (sorted), int64: the materialized
    column where present and not null, else `first_row_id + position`."""
    fs, path = filesystem_for(location)
    with fs.open_input_file(path) as handle:
        parquet = pq.ParquetFile(handle)
        names = [
            f.name
            for f in parquet.schema_arrow
            if f.metadata and f.metadata.get(FIELD_ID_KEY) == str(ROW_ID_FIELD_ID).encode()
        ]
        column = parquet.read(columns=names).column(0) if names else None
    inherited = None if first_row_id is None else positions.astype(np.int64) + int(first_row_id)
    if column is None:
        if inherited is None:
            raise CannotCarry(f"{location} has no _row_id column and no first_row_id")
        return inherited
    taken = column.take(pa.array(positions, pa.int64()))
    if taken.null_count == 0:
        return np.asarray(taken.to_numpy(zero_copy_only=False), dtype=np.int64)
    if inherited is None:
        raise CannotCarry(f"{location} has null _row_id values and no first_row_id")
    values = np.asarray(taken.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    nulls = np.asarray(taken.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    return np.where(nulls, inherited, values)


class VectorCarrier:
    """Carries the DVs committed on a compaction's input files since it was planned onto its
    output files; one per commit of a set of groups, asked again on every attempt."""

    def __init__(
        self,
        spark: SparkSession,
        jtable: Any,
        planned_snapshot_id: int,
        inputs: dict[str, Any],
        outputs: list[Any],
    ) -> None:
        """`inputs`: input path -> its FileScanTask planned at `planned_snapshot_id` (the deletes
        that applied then); `outputs`: the staged Java DataFiles of the same groups."""
        self.spark = spark
        self.table = jtable
        self.planned_snapshot_id = planned_snapshot_id
        self.inputs = inputs
        self.outputs = outputs
        self._walked_to = planned_snapshot_id
        self._current: dict[str, Any] = {}  # input path -> its DV committed since the plan
        self._at_plan: dict[str, np.ndarray] = {}  # input path -> positions its deletes marked at the plan
        self._output_rows: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # sorted ids, file, pos

    def stage(self) -> CarriedVectors | None:
        """The DVs carrying what was committed on the inputs since the plan, at the table's
        current snapshot (the caller refreshed it), written to a Puffin file, not committed;
        None when no input has a new DV. Raises SnapshotGoneError when the snapshot walked to
        last is no longer an ancestor, CannotCarry when an output has no row lineage."""
        current = self.table.currentSnapshot()
        read_at = int(current.snapshotId())
        self._walk(current)
        if not self._current:
            return None
        by_output: dict[int, list[np.ndarray]] = {}
        carried = 0
        for path, vector in sorted(self._current.items()):
            new = np.setdiff1d(earlier_positions(vector, path), self._planned_positions(path), assume_unique=True)
            if not len(new):
                continue
            data_file = self.inputs[path].file()
            first = data_file.firstRowId()
            ids = _row_ids(path, new, None if first is None else int(first))
            for out, positions in self._locate(ids).items():
                by_output.setdefault(out, []).append(positions)
                carried += len(positions)
        planned = [
            PlannedVector(self.outputs[out], np.unique(np.concatenate(parts)), ())
            for out, parts in sorted(by_output.items())
        ]
        written = write_vectors(self.spark, self.table, planned)
        return CarriedVectors(
            read_at=read_at,
            location=None if written is None else written.location,
            added=() if written is None else written.delete_files,
            removed=tuple(self._current.values()),
            rows=carried,
        )

    def discard(self, carried: CarriedVectors | None) -> None:
        """Delete an attempt's Puffin file that was not committed (the outcome is known)."""
        if carried is not None and carried.location is not None:
            try:
                self.table.io().deleteFile(carried.location)
            except Exception:
                log.debug("could not delete %s", carried.location, exc_info=True)

    def _walk(self, current: Any) -> None:
        """Follow the DVs of the inputs through the snapshots after the last one walked."""
        chain = []
        snapshot = current
        while snapshot is not None and int(snapshot.snapshotId()) != self._walked_to:
            chain.append(snapshot)
            if len(chain) > SNAPSHOT_WALK_LIMIT:
                snapshot = None
                break
            parent = snapshot.parentId()
            snapshot = self.table.snapshot(parent) if parent is not None else None
        if snapshot is None:
            raise SnapshotGoneError(f"snapshot {self._walked_to} is no longer an ancestor of the current one")
        io = self.table.io()
        for s in reversed(chain):
            for d in java_iter(s.removedDeleteFiles(io)):
                referenced = d.referencedDataFile()
                known = self._current.get(str(referenced)) if referenced is not None else None
                if known is not None and _same_blob(known, d):
                    del self._current[str(referenced)]
            for d in java_iter(s.addedDeleteFiles(io)):
                referenced = d.referencedDataFile()
                if referenced is not None and str(referenced) in self.inputs and is_vector(d):
                    self._current[str(referenced)] = d.copy()
        self._walked_to = int(current.snapshotId())

    def _planned_positions(self, path: str) -> np.ndarray:
        """The positions of an input file its position deletes marked at the plan (the rewrite
        left those rows out already)."""
        known = self._at_plan.get(path)
        if known is None:
            marked = [
                earlier_positions(d, path)
                for d in java_iter(self.inputs[path].deletes())
                if d.content().toString() == "POSITION_DELETES"
            ]
            known = np.unique(np.concatenate(marked)) if marked else np.zeros(0, np.int64)
            self._at_plan[path] = known
        return known

    def _locate(self, row_ids: np.ndarray) -> dict[int, np.ndarray]:
        """output index -> sorted positions of the rows with these ids; ids in no output are left out."""
        ids, files, positions = self._output_index()
        at = np.searchsorted(ids, row_ids)
        found = at < len(ids)
        found[found] = ids[at[found]] == row_ids[found]
        at = at[found]
        out: dict[int, np.ndarray] = {}
        for f in np.unique(files[at]).tolist():
            out[int(f)] = np.sort(positions[at[files[at] == f]])
        return out

    def _output_index(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every output row's `_row_id`, sorted, with its output index and position (read once)."""
        if self._output_rows is None:
            ids, files, positions = [], [], []
            for i, f in enumerate(self.outputs):
                location = str(f.location())
                n = int(f.recordCount())
                every = np.arange(n, dtype=np.int64)
                first = f.firstRowId()
                column = _row_ids(location, every, None if first is None else int(first))
                ids.append(column)
                files.append(np.full(n, i, np.int64))
                positions.append(every)
            all_ids = np.concatenate(ids) if ids else np.zeros(0, np.int64)
            order = np.argsort(all_ids, kind="stable")
            self._output_rows = (
                all_ids[order],
                (np.concatenate(files) if files else np.zeros(0, np.int64))[order],
                (np.concatenate(positions) if positions else np.zeros(0, np.int64))[order],
            )
        return self._output_rows
