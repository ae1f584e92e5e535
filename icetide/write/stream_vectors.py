"""`deletes="vectors"`: the stream commits deletion vectors for the rows a batch replaces.

The writers work as for `deletes="equality"`: data files, plus equality-delete files holding the
batch's keys. At commit the keys are read back from those files (cost follows the batch), looked
up in the table's key index (`key_index.py`), and the rows found are marked in deletion vectors,
one per data file, merged with the file's earlier DV, which the same commit removes. The commit
carries the data files and the DVs; the equality-delete files are never committed and are
deleted once the batch has landed. So no equality delete reaches a snapshot.

Exactly once as before: the committer's batch check runs first, on every attempt; the DVs are
staged per attempt on the snapshot the attempt builds on (the index caught up to it), and that
attempt's Puffin file is deleted when it loses a race or fails, kept when its outcome is unknown.
The index is only a cache of the table: after an unknown outcome it is dropped, and a new process
(after a crash) starts from the newest persisted copy of it that is still at an ancestor of the
table's snapshot (`key_index_copy.py`, written every few batches after the batch landed) and
catches up from there, or builds it again from the table when no copy is usable. The indexes of
one process are bounded (`key_index_memory.py`): a table whose index was dropped to stay within
the bound gets it back the same way, from the copy it wrote when dropping it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from icetide.errors import ConfigError
from icetide.faults import crash_point
from icetide.table.iceberg import format_version, key_field_ids
from icetide.write.key_index import IndexOutOfDate, KeyIndex, index_form, spark_form
from icetide.write.key_index_copy import COPY_EVERY_BATCHES_DEFAULT, copy_every_batches, load_copy, write_copy
from icetide.write.key_index_memory import KeyIndexMemory, process_key_indexes
from icetide.write.keys import read_by_field_id
from icetide.write.vectors import plan_vector, write_vectors

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

DELETE_MODES = ("equality", "vectors")


@dataclass(frozen=True)
class StagedVectors:
    """One attempt's DVs: what the RowDelta adds, removes and must find still live."""

    location: str | None  # the Puffin file, None when the batch replaces no row
    added: tuple[Any, ...]  # Java DeleteFiles (DVs)
    removed: tuple[Any, ...]  # the earlier DVs they merged
    referenced: tuple[str, ...]  # data files the DVs mark
    positions: tuple[np.ndarray, ...] = ()  # the positions each DV marks, in the order of `referenced`


@dataclass(frozen=True)
class IndexSeconds:
    """Where one batch's time in the key index went (`deletes="vectors"`)."""

    find: float = 0.0  # finding the rows the batch replaces: its keys read back and looked up
    follow: float = 0.0  # the index built, or following commits: the batch's own and any other writer's


class StreamVectors:
    """The DV side of one committer in `deletes="vectors"` mode."""

    def __init__(self, spark: SparkSession, table_name: str, memory: KeyIndexMemory | None = None) -> None:
        self.spark = spark
        self.table_name = table_name
        self.index: KeyIndex | None = None
        # The process's bound on its key indexes may drop this one between batches (`drop_index`).
        self.memory = memory or process_key_indexes()
        self.lock = threading.Lock()  # held while `index` changes
        self._jtable: Any = None  # the table the index last followed (to write a copy when dropping it)
        self._copied_at: int | None = None  # the snapshot of the newest copy written or loaded
        self._dropped = False  # the bound dropped the index: getting it back is a reload
        self.copy_every = COPY_EVERY_BATCHES_DEFAULT  # batches between two copies of the index, 0: never
        self._since_copy = 0  # batches the index followed since it was built, loaded or copied
        self._find_seconds = 0.0  # since the last `take_seconds`
        self._follow_seconds = 0.0

    def take_seconds(self) -> IndexSeconds:
        """The index's time since the last call (the batch's, all its attempts), and start again."""
        taken = IndexSeconds(self._find_seconds, self._follow_seconds)
        self._find_seconds = self._follow_seconds = 0.0
        return taken

    def check_table(self, table_name: str, jtable: Any) -> None:
        """Refuse a table that cannot take DVs (format v2) or whose key the index cannot hold;
        read how often the index is copied (ConfigError naming the property if it is bad)."""
        version = format_version(jtable)
        if version < 3:
            raise ConfigError(
                f"deletes: vectors needs a format v3 table; {table_name} is v{version} "
                f"(icetide maintain --upgrade-v3 {table_name})"
            )
        schema = jtable.schema()
        for field_id in key_field_ids(jtable):
            spark_form(schema.findField(field_id))
        self.copy_every = copy_every_batches(table_name, jtable)

    def batch_keys(self, jtable: Any, equality_delete_paths: Sequence[str]) -> pa.Table:
        """The batch's keys, read back from its (uncommitted) equality-delete files."""
        started = time.monotonic()
        ids = key_field_ids(jtable)
        tables = [index_form(read_by_field_id(path, ids)) for path in equality_delete_paths]
        keys = pa.concat_tables(tables) if tables else pa.table({f"f{i}": pa.array([], pa.int64()) for i in ids})
        self._find_seconds += time.monotonic() - started
        return keys

    def stage(self, jtable: Any, keys: pa.Table, batch_id: int) -> StagedVectors:
        """The DVs replacing the live rows of `keys`, on the table's current snapshot; written,
        not committed."""
        index = self._caught_up(jtable)
        crash_point("after_index_catch_up", batch_id)
        started = time.monotonic()
        located = index.locate(keys)
        self._find_seconds += time.monotonic() - started
        planned = []
        for path, positions in located.items():
            earlier = [index.vectors[path]] if path in index.vectors else []
            known = index.vector_positions.get(path) if earlier else None
            vector = plan_vector(index.data_files[path], earlier, positions, None if known is None else [known])
            if vector is not None:
                planned.append(vector)
        written = write_vectors(self.spark, jtable, planned)
        crash_point("after_dv_write", batch_id)
        if written is None:
            return StagedVectors(None, (), (), ())
        return StagedVectors(
            written.location,
            written.delete_files,
            tuple(d for p in planned for d in p.replaces),
            tuple(str(p.data_file.location()) for p in planned),
            tuple(p.positions for p in planned),
        )

    def landed(
        self, jtable: Any, batch_id: int, snapshot_id: int | None = None, staged: StagedVectors | None = None
    ) -> None:
        """After the batch committed: the index follows it (reads its new data files' keys; the
        DVs `staged` for it, committed in `snapshot_id`, are not read back), and every
        `copy_every` batches a copy of it is written (a failure there is only logged)."""
        own = None
        if snapshot_id is not None and snapshot_id >= 0 and staged is not None and staged.positions:
            own = (snapshot_id, dict(zip(staged.referenced, staged.positions, strict=True)))
        try:
            self._caught_up(jtable, own)
        except Exception:  # the batch is committed; the next one builds the index again
            log.warning("the key index of %s could not follow batch %s; it is rebuilt", self.table_name, batch_id)
            log.debug("key index catch-up", exc_info=True)
            self.forget()
        crash_point("after_index_update", batch_id)
        index = self.index
        if index is None:
            return
        self._since_copy += 1
        if self.copy_every and self._since_copy >= self.copy_every:
            self._since_copy = 0  # a failed copy is tried again `copy_every` batches later
            try:
                write_copy(jtable, index)
                self._copied_at = index.snapshot_id
            except Exception as exc:  # only a cache: the batch stands, a restart builds the index
                log.warning("could not write a copy of the key index of %s: %s", self.table_name, exc)
                log.debug("key index copy", exc_info=True)
        self.memory.trim(keep=self)  # tables that committed beside this one may have passed the bound

    def forget(self) -> None:
        """Drop the index (an outcome is unknown): the next batch builds it from the table."""
        with self.lock:
            self.index = None
            self.memory.release(self)

    def drop_index(self) -> bool:
        """Drop the index from memory for the process's bound (the caller holds `lock`), after
        writing a copy at its snapshot unless one is there already (or copies are off); True when
        it wrote one. The next batch loads the copy and catches up, as a restart does."""
        index, self.index = self.index, None
        if index is None:
            return False
        self._dropped = True
        if not self.copy_every or self._jtable is None or index.snapshot_id in (None, self._copied_at):
            return False
        try:
            write_copy(self._jtable, index)
        except Exception as exc:  # the next batch builds the index from the table instead
            log.warning("could not write a copy of the key index of %s before dropping it: %s", self.table_name, exc)
            log.debug("key index copy", exc_info=True)
            return False
        self._copied_at = index.snapshot_id
        self._since_copy = 0
        return True

    def discard(self, jtable: Any, staged: StagedVectors | None) -> None:
        """Delete an attempt's Puffin file that will not be committed."""
        if staged is not None and staged.location is not None:
            try:
                jtable.io().deleteFile(staged.location)
            except Exception:
                log.debug("could not delete %s", staged.location, exc_info=True)

    def _caught_up(self, jtable: Any, own: tuple[int, dict[str, np.ndarray]] | None = None) -> KeyIndex:
        with self.lock:  # the bound does not drop the index while it changes
            started = time.monotonic()
            try:
                index = self._follow(jtable, own)
            finally:
                self._follow_seconds += time.monotonic() - started
            self._jtable = jtable
            self.memory.hold(self, index.nbytes())
            return index

    def _follow(self, jtable: Any, own: tuple[int, dict[str, np.ndarray]] | None = None) -> KeyIndex:
        if self.index is not None:
            try:
                self.index.catch_up(self.spark, jtable, own)
                return self.index
            except IndexOutOfDate as exc:  # a copy is older still: it could not follow either
                log.info("key index of %s: %s; building it again", self.table_name, exc)
        else:
            self.index = self._from_copy(jtable)
            if self._dropped:
                self._dropped = False
                self.memory.reloaded(from_copy=self.index is not None)
            if self.index is not None:
                return self.index
        self.index = KeyIndex.build(self.spark, self.table_name, jtable)
        self._since_copy = 0
        return self.index

    def _from_copy(self, jtable: Any) -> KeyIndex | None:
        """The index from its newest usable copy, caught up to the table; None to build it."""
        index = load_copy(self.table_name, jtable)
        if index is None:
            return None
        copied_at = index.snapshot_id
        try:
            followed = index.catch_up(self.spark, jtable)
        except Exception as exc:  # IndexOutOfDate, or a file it needs is gone: build instead
            log.info("the key index copy of %s at snapshot %s cannot catch up (%s)", self.table_name, copied_at, exc)
            log.debug("key index copy catch-up", exc_info=True)
            return None
        log.info("key index of %s: copy at snapshot %s caught up %d snapshot(s)", self.table_name, copied_at, followed)
        self._since_copy = 0
        self._copied_at = copied_at
        return index
