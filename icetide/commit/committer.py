"""The driver side of the sink: one atomic, idempotent Iceberg commit per batch.

The rule is the Flink committer's (seeds 000 and 002): every commit carries the pipeline id,
its batch id and the source position reached; a batch at or below the pipeline's last committed
one is a no-op, checked on fresh metadata before every attempt and enforced inside Iceberg's
own retries by a conflict validation. The pipeline's state is kept twice: in the snapshot
summary (history) and in a table property set in the same transaction, which survives later
commits by other writers and snapshot expiry (Iceberg issue 5846).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from icetide.commit.failures import CONFLICTS, UNKNOWN
from icetide.commit.pipeline_state import PipelineState, read_pipeline_state, state_property
from icetide.errors import (
    CommitConflictError,
    CommitFailedError,
    CommitStateUnknownError,
    ConfigError,
    SchemaError,
)
from icetide.faults import crash_point, fault_point
from icetide.spark.py4j_collections import java_iter, java_strings
from icetide.table.delete_modes import table_deletes
from icetide.table.iceberg import (
    iceberg_catalog,
    java_exception_class,
    java_message,
    jvm,
    live_spec_ids,
    load_table,
    split_name,
)
from icetide.write.evolution import SchemaChange, apply_in_transaction
from icetide.write.stream_vectors import DELETE_MODES, IndexSeconds, StagedVectors, StreamVectors

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

SUMMARY_PIPELINE = "icetide.pipeline-id"
SUMMARY_BATCH = "icetide.batch-id"
SUMMARY_POSITION = "icetide.source-position"

# Iceberg's own commit.retry.* properties, with Iceberg's defaults.
COMMIT_NUM_RETRIES, COMMIT_NUM_RETRIES_DEFAULT = "commit.retry.num-retries", 4
COMMIT_MIN_WAIT_MS, COMMIT_MIN_WAIT_MS_DEFAULT = "commit.retry.min-wait-ms", 100
COMMIT_MAX_WAIT_MS, COMMIT_MAX_WAIT_MS_DEFAULT = "commit.retry.max-wait-ms", 60_000
COMMIT_TOTAL_TIMEOUT_MS, COMMIT_TOTAL_TIMEOUT_MS_DEFAULT = "commit.retry.total-timeout-ms", 1_800_000
# icetide's own retry loop, when a table turns Iceberg's internal retries off (commit.retry.num-retries
# = 0): then a batch of data files only commits as an `append` snapshot, which Iceberg's streaming
# source reads (a RowDelta is an `overwrite`). Iceberg would re-apply an append blindly on retry, so
# only with its retries off can an append not land twice; icetide's loop re-checks the batch first.
ICETIDE_NUM_RETRIES = "icetide.commit.retry.num-retries"
APPEND_TABLE_PROPERTIES = {COMMIT_NUM_RETRIES: "0", ICETIDE_NUM_RETRIES: str(COMMIT_NUM_RETRIES_DEFAULT)}

# Resolving an unknown outcome: how often, and how far apart, the committed batch is read again.
RESOLVE_READS = 3
RESOLVE_WAIT_SECONDS = 0.5


@dataclass(frozen=True)
class WrittenFile:
    """One file a writer task wrote, as the driver receives it."""

    content: str  # "data" or "equality_deletes"
    path: str
    partition: tuple[str | None, ...]
    record_count: int
    file_size: int
    writer: str = ""  # host:pid of the executor process that wrote it
    metadata_json: str = ""  # Iceberg content-file JSON, metrics included, computed by the writer

    @classmethod
    def from_row(cls, r: Any) -> WrittenFile:
        """From a writer task's row of WRITTEN_FILE_SCHEMA (a dict or a Spark Row)."""
        return cls(
            r["content"],
            r["path"],
            tuple(r["partition"]),
            int(r["record_count"]),
            int(r["file_size"]),
            r["writer"],
            r["metadata_json"],
        )


@dataclass(frozen=True)
class CommitOutcome:
    """What one call to Committer.commit did."""

    committed: bool
    snapshot_id: int | None
    attempts: int
    reason: str = ""
    refresh_seconds: float = 0.0  # reading the table's state before the first attempt


class Committer:
    """Commits a batch's files to one table for one pipeline, exactly once."""

    def __init__(self, spark: SparkSession, table_name: str, pipeline_id: str, *, deletes: str | None = None) -> None:
        self.spark = spark
        self.table_name = table_name
        self.pipeline_id = pipeline_id
        self.table = load_table(spark, table_name)
        if deletes is None:  # the table's own mode: what it was created with, equality if unmarked
            deletes = table_deletes(self.table.properties())
        if deletes not in DELETE_MODES:
            raise ConfigError(f"deletes: {deletes!r} is not one of {', '.join(DELETE_MODES)}")
        self.deletes = deletes
        # deletes="vectors": the batch's equality deletes become DVs at commit (write/stream_vectors.py)
        self.vectors = StreamVectors(spark, table_name) if deletes == "vectors" else None
        if self.vectors is not None:
            self.vectors.check_table(table_name, self.table)
        self._keys: Any = None  # vectors: the batch's keys
        self._staged: StagedVectors | None = None  # vectors: the current attempt's DVs
        self._index_seconds = IndexSeconds()

    def last_committed(self) -> PipelineState | None:
        """The pipeline's last committed batch, read from fresh table metadata."""
        self.table.refresh()
        return read_pipeline_state(self.table, self.pipeline_id)

    def files_of_batch(self, batch_id: int, *, walk_limit: int = 1_000) -> set[str] | None:
        """The names (not paths) of the files this pipeline's commit of `batch_id` added, data and
        delete files; None when no snapshot within `walk_limit` of the current one is that commit
        (expired, or many commits ago)."""
        io = self.table.io()
        snapshot = self.table.currentSnapshot()
        for _ in range(walk_limit):
            if snapshot is None:
                return None
            summary = snapshot.summary()
            if summary.get(SUMMARY_PIPELINE) == self.pipeline_id and summary.get(SUMMARY_BATCH) == str(batch_id):
                added = [*java_iter(snapshot.addedDataFiles(io)), *java_iter(snapshot.addedDeleteFiles(io))]
                return {str(f.location()).rsplit("/", 1)[-1] for f in added}
            parent = snapshot.parentId()
            snapshot = self.table.snapshot(parent) if parent is not None else None
        return None

    def index_seconds(self) -> IndexSeconds:
        """deletes="vectors": the key index's time in the last `commit` call (zero otherwise)."""
        return self._index_seconds

    def _retry_settings(self) -> tuple[int, float, float, float]:
        props = self.table.properties()

        def num(key: str, default: int) -> int:
            value = props.get(key)
            return int(value) if value is not None else default

        return (
            num(ICETIDE_NUM_RETRIES, num(COMMIT_NUM_RETRIES, COMMIT_NUM_RETRIES_DEFAULT)),
            num(COMMIT_MIN_WAIT_MS, COMMIT_MIN_WAIT_MS_DEFAULT) / 1000,
            num(COMMIT_MAX_WAIT_MS, COMMIT_MAX_WAIT_MS_DEFAULT) / 1000,
            num(COMMIT_TOTAL_TIMEOUT_MS, COMMIT_TOTAL_TIMEOUT_MS_DEFAULT) / 1000,
        )

    def _content_files(self, files: Sequence[WrittenFile]) -> tuple[list[Any], list[Any]]:
        """DataFiles and DeleteFiles from the writers' JSON: two JVM calls a file, no footer reads."""
        j = jvm(self.spark)
        specs = self.table.specs()
        parser = j.org.apache.iceberg.ContentFileParser
        nodes = j.org.apache.iceberg.util.JsonUtil.mapper().readTree(
            "[" + ",".join(f.metadata_json for f in files) + "]"
        )
        data: list[Any] = []
        deletes: list[Any] = []
        for i, f in enumerate(files):
            content_file = parser.fromJson(nodes.get(i), specs)
            (data if f.content == "data" else deletes).append(content_file)
        return data, deletes

    def commit(
        self,
        batch_id: int,
        files: Sequence[WrittenFile],
        source_position: Any = None,
        *,
        truncate: bool = False,
        schema_change: SchemaChange | None = None,
        registry: dict[str, Any] | None = None,
        batch_path: str | None = None,
        fallback: str | None = None,
    ) -> CommitOutcome:
        """Commit the batch's files atomically, once; a repeated or older batch id commits nothing.

        The pipeline's state (PipelineState: `source_position`, a dead-letter table's `registry`,
        and how a pipeline ran the batch, `batch_path` and `fallback`) lands in the same commit.

        With `truncate`, the same transaction first removes every row committed before (a source's
        TRUNCATE), so the table holds only this batch's rows: exactly once, like the batch itself.
        A `schema_change` is applied in the same transaction, before the data, and re-checked on
        every attempt: it must still give the new columns the field ids the files were written with.

        Only the catalog commit call decides the outcome; nothing after it (refresh, snapshot
        lookup) can fail the batch. When the call fails other than by a conflict, the pipeline's
        committed batch (which lands atomically with the data) is read again: committed means
        success; not committed means retry (state unknown) or a definite failure; a state that
        cannot be read stays unknown.

        Raises CommitConflictError after the retry budget (files deleted), CommitFailedError on a
        definite rejection (files deleted), CommitStateUnknownError when the outcome cannot be
        learnt (nothing deleted).
        """
        if self.vectors is not None:
            self.vectors.take_seconds()  # what came before this call is not this batch's
        try:
            recorded = PipelineState(
                self.pipeline_id, batch_id, source_position, "", registry, batch_path=batch_path, fallback=fallback
            )
            return self._commit(batch_id, files, recorded, truncate, schema_change)
        finally:
            if self.vectors is not None:
                self._index_seconds = self.vectors.take_seconds()

    def _commit(
        self,
        batch_id: int,
        files: Sequence[WrittenFile],
        recorded: PipelineState,
        truncate: bool,
        schema_change: SchemaChange | None,
    ) -> CommitOutcome:
        retries, min_wait, max_wait, total_timeout = self._retry_settings()
        started = time.monotonic()
        data: list[Any] | None = None
        deletes: list[Any] = []
        last_error = ""
        refresh_seconds = 0.0
        for attempt in range(1, retries + 2):
            refreshing = time.monotonic()
            try:
                self.table.refresh()
            except Exception as exc:
                log.debug("refresh before commit failed", exc_info=True)
                raise self._unknown(batch_id, "cannot read the table before committing", exc) from exc
            # One metadata for both the committed batch and the snapshot the commit validates from:
            # the Java table may be shared (the catalog's cache), and another thread's commit
            # through it could otherwise move its current snapshot past a batch read as missing.
            base = self.table.operations().current()
            state = read_pipeline_state(base, self.pipeline_id)
            refresh_seconds += time.monotonic() - refreshing if attempt == 1 else 0.0
            if state is not None and batch_id <= state.batch_id:
                if attempt > 1:
                    # Committed while this call was retrying: the files in hand may be the ones
                    # that landed, so none is deleted (orphan removal finds any left over).
                    log.warning("batch %s was committed while its commit was being retried; files kept", batch_id)
                    return CommitOutcome(False, None, attempt, f"batch {batch_id} committed during the retries")
                self.delete_files(files, reason=f"batch {batch_id} is already committed")
                reason = f"batch {batch_id} <= last committed {state.batch_id}"
                return CommitOutcome(False, None, attempt, reason, refresh_seconds)
            if data is None:
                if self.vectors is not None:  # the keys go into DVs; the equality deletes are never committed
                    data, _ = self._content_files([f for f in files if f.content == "data"])
                    self._keys = self.vectors.batch_keys(self.table, [f.path for f in files if f.content != "data"])
                    deletes = []
                else:
                    data, deletes = self._content_files(files)
            try:
                snapshot_id = self._attempt(
                    batch_id, base.currentSnapshot(), data, deletes, recorded, truncate, schema_change
                )
                self._forget_cached_table()
                self._vectors_landed(batch_id, files, snapshot_id)
                return CommitOutcome(True, snapshot_id, attempt, refresh_seconds=refresh_seconds)
            except Exception as exc:
                if java_exception_class(exc) in CONFLICTS:
                    self._discard_staged()
                    last_error = java_message(exc)
                    log.info("commit of batch %s lost a race (attempt %s): %s", batch_id, attempt, last_error)
                elif self._resolve_vectors(batch_id, files, exc):
                    self._forget_cached_table()
                    self._vectors_landed(batch_id, files)
                    reason = "confirmed by re-reading the committed batch"
                    return CommitOutcome(True, None, attempt, reason, refresh_seconds)
                else:
                    self._discard_staged()
                    last_error = f"state unknown, then found not committed ({java_message(exc)})"
                    log.info("commit of batch %s: %s; retrying (attempt %s)", batch_id, last_error, attempt)
            wait = min(max_wait, min_wait * 2 ** (attempt - 1)) * (0.5 + random.random() / 2)
            if time.monotonic() - started + wait > total_timeout:
                break
            time.sleep(wait)
        self.delete_files(files, reason="the commit kept conflicting")
        raise CommitConflictError(
            f"commit of batch {batch_id} to {self.table_name} failed {retries + 1} times; last: {last_error}"
        )

    def _resolve_vectors(self, batch_id: int, files: Sequence[WrittenFile], exc: Exception) -> bool:
        """`_resolve`, keeping the attempt's DVs when the outcome stays unknown and deleting them
        when the commit definitely failed."""
        try:
            return self._resolve(batch_id, files, exc)
        except CommitStateUnknownError:
            if self.vectors is not None:
                self.vectors.forget()
            raise
        except CommitFailedError:
            self._discard_staged()
            raise

    def _vectors_landed(self, batch_id: int, files: Sequence[WrittenFile], snapshot_id: int | None = None) -> None:
        """deletes="vectors", after the batch landed (in `snapshot_id`, when known): the index
        follows it, and the equality-delete files the DVs replaced (never committed) are deleted."""
        if self.vectors is None:
            return
        crash_point("vectors_committed", batch_id)
        staged, self._staged = self._staged, None
        self.vectors.landed(self.table, batch_id, snapshot_id, staged)
        replaced = [f for f in files if f.content != "data"]
        self.delete_files(replaced, reason=f"batch {batch_id} committed deletion vectors instead")

    def _discard_staged(self) -> None:
        if self.vectors is not None:
            self.vectors.discard(self.table, self._staged)
            self._staged = None

    def _forget_cached_table(self) -> None:
        """Make readers in this Spark session see the commit. They get the table through the
        catalog's cache (Iceberg's CachingCatalog), whose entry is another Java object than this
        committer's once it expired (30 s without access) or was collected; a commit through
        this one never updates that one, so `spark.table(...)` would stay on an old snapshot for
        as long as it is read. Dropping the entry makes the next read load the table again."""
        try:
            catalog, identifier = split_name(self.table_name)
            ident = jvm(self.spark).org.apache.iceberg.catalog.TableIdentifier.parse(identifier)
            iceberg_catalog(self.spark, catalog).invalidateTable(ident)
        except Exception:  # readers then see the commit when the cache entry expires
            log.debug("could not drop %s from the catalog's cache", self.table_name, exc_info=True)

    def _resolve(self, batch_id: int, files: Sequence[WrittenFile], exc: Exception) -> bool:
        """After a commit call failed other than by a conflict: True if the batch landed anyway;
        False if it did not and the commit may be tried again (the state was unknown). Raises
        CommitFailedError (files deleted) on a definite failure that did not land, and
        CommitStateUnknownError (nothing deleted) when the table cannot tell."""
        kind = java_exception_class(exc)
        log.debug("commit call of batch %s failed (%s)", batch_id, kind or type(exc).__name__, exc_info=True)
        landed = self._batch_landed(batch_id)
        if landed is None:
            raise self._unknown(batch_id, java_message(exc), exc) from exc
        if landed:
            log.info("batch %s: the commit call failed (%s) but the batch landed", batch_id, java_message(exc))
            return True
        if kind in UNKNOWN or isinstance(exc, CommitStateUnknownError):
            return False
        self.delete_files(files, reason="the commit failed")
        raise CommitFailedError(f"commit of batch {batch_id} to {self.table_name} failed: {java_message(exc)}") from exc

    def _batch_landed(self, batch_id: int, *, reads: int = RESOLVE_READS) -> bool | None:
        """Did `batch_id` land? Re-reads the pipeline's committed batch (committed atomically with
        the data); None when the table cannot be read after `reads` tries."""
        for read in range(reads):
            try:
                self.table.refresh()
                fault_point("resolve_read")
                state = read_pipeline_state(self.table, self.pipeline_id)
                return state is not None and state.batch_id >= batch_id
            except Exception:
                log.debug("re-reading the committed batch failed (read %s of %s)", read + 1, reads, exc_info=True)
                if read + 1 < reads:
                    time.sleep(RESOLVE_WAIT_SECONDS * 2**read)
        return None

    def _unknown(self, batch_id: int, reason: str, exc: BaseException) -> CommitStateUnknownError:
        return CommitStateUnknownError(
            f"commit of batch {batch_id} of pipeline {self.pipeline_id!r} to {self.table_name}: state unknown "
            f"({reason}; {java_message(exc)}); no file was deleted; the pipeline's last committed batch decides "
            "on restart"
        )

    def _attempt(
        self,
        batch_id: int,
        current: Any,
        data: list[Any],
        deletes: list[Any],
        recorded: PipelineState,
        truncate: bool = False,
        schema_change: SchemaChange | None = None,
    ) -> int:
        j = jvm(self.spark)
        table = self.table
        txn = table.newTransaction()
        if schema_change:  # the columns first, so no snapshot holds files without their columns
            apply_in_transaction(self.spark, txn, schema_change, batch_id=batch_id)
        if deletes:
            self._check_deletes_reach_every_spec(batch_id, deletes)
        if truncate and current is not None:
            # Its own snapshot, before the batch's: the batch's rows get a higher sequence number.
            txn.newDelete().deleteFromRowFilter(j.org.apache.iceberg.expressions.Expressions.alwaysTrue()).commit()
        staged = None
        if self.vectors is not None and not (truncate and current is not None):  # a truncate replaces every row
            staged = self._staged = self.vectors.stage(table, self._keys, batch_id)
        if not deletes and not (staged and staged.added) and table.properties().get(COMMIT_NUM_RETRIES) == "0":
            delta = txn.newAppend()
            for f in data:
                delta.appendFile(f)
            return self._finish(txn, delta, recorded)
        delta = txn.newRowDelta()
        # Any data or deletes another writer adds while this commit is in flight (inside Iceberg's
        # own retries too) fail validation, so the batch check above runs again on fresh metadata.
        # On an empty table there is no snapshot to start from: all history is validated.
        if current is not None:
            delta.validateFromSnapshot(current.snapshotId())
        delta.conflictDetectionFilter(j.org.apache.iceberg.expressions.Expressions.alwaysTrue())
        delta.validateNoConflictingDataFiles()
        delta.validateNoConflictingDeleteFiles()
        for f in data:
            delta.addRows(f)
        for f in deletes:
            delta.addDeletes(f)
        if staged is not None and staged.added:
            # One DV per data file: the earlier one goes, and the files it marks must still be live.
            referenced = j.java.util.ArrayList()
            for path in staged.referenced:
                referenced.add(path)
            delta.validateDataFilesExist(referenced)
            for f in staged.added:
                delta.addDeletes(f)
            for f in staged.removed:
                delta.removeDeletes(f)
        return self._finish(txn, delta, recorded)

    def _check_deletes_reach_every_spec(self, batch_id: int, deletes: list[Any]) -> None:
        """Refuse a commit whose equality deletes miss a partition spec that has live data files.

        Iceberg applies an equality delete only within its own spec (globally from an
        unpartitioned one). The sink writes deletes under every live spec it saw; this re-checks
        on the metadata the commit builds on, in case another writer changed the layout meanwhile.
        """
        specs = self.table.specs()
        if specs.size() == 1:
            return  # one spec ever: the deletes are under it, and so is every data file
        covered = {int(d.specId()) for d in deletes}
        if any(specs.get(s).fields().isEmpty() for s in covered):
            return  # an unpartitioned spec's deletes apply to every data file
        missing = live_spec_ids(self.table) - covered
        if missing:
            raise SchemaError(
                f"batch {batch_id}: data files of partition spec(s) {sorted(missing)} became live while the batch "
                "was written, and its deletes would not reach them; nothing was committed, write the batch again"
            )

    def _finish(self, txn: Any, delta: Any, recorded: PipelineState) -> int:
        """Summary and pipeline-state property (`recorded`, stamped with the time now), committed
        as one transaction; the new snapshot id."""
        batch_id = recorded.batch_id
        position_text = json.dumps(recorded.source_position, sort_keys=True)
        delta.set(SUMMARY_PIPELINE, self.pipeline_id)
        delta.set(SUMMARY_BATCH, str(batch_id))
        delta.set(SUMMARY_POSITION, position_text)
        delta.commit()
        state = dataclasses.replace(recorded, committed_at=datetime.now(UTC).isoformat())
        txn.updateProperties().set(state_property(self.pipeline_id), state.to_json()).commit()
        fault_point("before_commit_call")
        txn.commitTransaction()  # the one call that decides the outcome
        fault_point("commit_call_landed")
        try:  # the batch committed: nothing from here on may fail it
            fault_point("after_commit_call")
            snapshot = txn.table().currentSnapshot()  # what this commit wrote, whoever shares the table
            return int(snapshot.snapshotId()) if snapshot is not None else -1
        except Exception:
            log.warning("batch %s committed; reading its snapshot id failed", batch_id, exc_info=True)
            return -1

    def delete_files(self, files: Sequence[WrittenFile], *, reason: str) -> None:
        """Delete `files` of a batch known not to be committed; `reason`, logged, says how that is known.

        Never raises: a file that cannot be deleted is left for orphan removal. Not for a batch whose
        commit outcome is unknown, whose files may be live in the table.
        """
        if not files:
            return
        log.info("deleting %d file(s) of an uncommitted batch: %s", len(files), reason)
        io = self.table.io()
        if len(files) > 1 and bulk_deletes(self.spark, io):
            try:  # one JVM call (on S3 one request per batch of files), not one a file
                io.deleteFiles(java_strings(self.spark, [f.path for f in files]))
                return
            except Exception:  # some were not deleted (Iceberg names how many): try each again
                log.debug("could not delete some of %d files in bulk; one at a time", len(files), exc_info=True)
        for f in files:
            try:
                io.deleteFile(f.path)
            except Exception:
                log.debug("could not delete %s", f.path, exc_info=True)


def bulk_deletes(spark: SparkSession, io: Any) -> bool:
    """Does this Java FileIO delete many files in one call (Iceberg's SupportsBulkOperations)?"""
    from py4j.java_gateway import is_instance_of

    return bool(is_instance_of(spark.sparkContext._gateway, io, "org.apache.iceberg.io.SupportsBulkOperations"))
