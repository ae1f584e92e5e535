"""The stateful changelog stage: events of a streaming DataFrame -> INSERT / UPSERT / DELETE per key.

Built from Spark's native streaming operators over the state store (RocksDB):

    events -> withWatermark(order_by, watermark) -> dropDuplicatesWithinWatermark(dedup_by)
           -> groupBy(key [, TTL window]).agg(merge engine)   (update mode)
           -> foreachBatch: choose each key's op, enrich, write through the upsert sink

A key seen for the first time is an INSERT (no equality delete). A known key is an UPSERT only
when its merged row changed in this micro-batch; a key whose events changed nothing is not
written at all. A key whose latest event is a DELETE is deleted. Replays are safe: the sink
commits each Spark batch id once, so a batch re-run after a crash between the table commit and
Spark's checkpoint commit is a no-op (see docs/stateful.md).
"""

from __future__ import annotations

import json
import logging
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from icetide.errors import ConfigError, SchemaError
from icetide.faults import crash_point
from icetide.sink.sink import UpsertSink
from icetide.spark.jars import spark_line
from icetide.spark.state_store import PROVIDER_CLASS, provider_loaded, state_store_provider
from icetide.stateful.enrich import Enrichment
from icetide.stateful.merge import (
    BATCH_TIME,
    FIRST_SEEN,
    LAST_DELETE,
    LAST_SEEN,
    MergeSpec,
    aggregations,
    changed_at,
    delete_arrived_at,
    last_op,
    merged_columns,
)
from icetide.write.batch import BatchResult
from icetide.write.collapse import DELETE, INSERT, OP_COLUMN, UPSERT

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)

STATE_WINDOW = "_icetide_state_window"
PROVIDER_KEY = "spark.sql.streaming.stateStore.providerClass"
CHECK_NEW_KEYS_PROPERTY = "icetide.stateful.check-new-keys."
EXISTS = "_icetide_exists"
CONTENT_HASH, CONTENT_HASH2 = "_icetide_event_hash", "_icetide_event_hash2"
# Columns of a raw table that are not event content: never part of the default dedup columns.
POSITION_COLUMNS = ("_source_position",)


@dataclass(frozen=True)
class StageOptions:
    """How the stage merges, deduplicates and forgets."""

    merge: MergeSpec = field(default_factory=MergeSpec)
    watermark_seconds: float = 600.0  # how late an event may arrive; later ones are dropped by Spark
    ttl_seconds: float | None = None  # state lives per key per TTL window of event time
    dedup_by: tuple[str, ...] | None = None  # None: the event's whole content
    dedup: bool | None = None  # None (auto): only when the merge counts repeats (sum, count) or dedup_by is set
    enrich: tuple[Enrichment, ...] = ()
    check_new_keys: bool = False  # verify a first-seen key against the table before an INSERT

    def deduplicates(self) -> bool:
        """Whether the stage keeps a state store of seen events. Every merge function except sum and
        count ignores an event delivered again (equal events keep the earliest batch), so by
        default only a merge that counts pays for it."""
        if self.dedup is not None:
            return self.dedup
        return bool(self.dedup_by) or self.merge.counts_duplicates()


def _interval(seconds: float) -> str:
    return f"{int(seconds * 1000)} milliseconds"


class ChangelogStage:
    """Keyed state between a stream of events and an Iceberg table.

    Example::

        stage = icetide.ChangelogStage(spark, "lake.ads.stats", pipeline_id="stats", order_by="event_time",
                                       options=StageOptions(merge=MergeSpec("aggregate", {"clicks": "sum"})))
        query = stage.start(events, checkpoint="chk/stats", interval_seconds=5)
    """

    def __init__(
        self,
        spark: SparkSession,
        table: str,
        *,
        pipeline_id: str,
        order_by: str,
        options: StageOptions | None = None,
        distribution: str = "dynamic",
        target_file_size: int | None = None,
    ) -> None:
        self.spark = spark
        self.table = table
        self.pipeline_id = pipeline_id
        self.order_by = order_by
        self.options = options or StageOptions()
        table_types = {f.name: f.dataType for f in spark.table(table).schema.fields}
        self.sink = UpsertSink(
            spark,
            table,
            pipeline_id=pipeline_id,
            order_by=order_by if order_by in table_types else None,
            changelog=True,
            distribution=distribution,
            target_file_size=target_file_size,
        )
        self.key = list(self.sink.key)
        self.table_types = table_types
        self.values: list[str] = []
        self.last_result: BatchResult | None = None
        self.on_result: Callable[[int, BatchResult], None] | None = None  # after each committed batch
        self.check_new_keys = (
            self.options.check_new_keys or self.options.ttl_seconds is not None or self._unknown_rows()
        )

    def _unknown_rows(self) -> bool:
        """Whether the table may hold rows this stage's state has never seen: it did once (recorded
        in a table property), or it holds rows before the pipeline's first commit."""
        jtable = self.sink.table
        if jtable.properties().get(CHECK_NEW_KEYS_PROPERTY + self.pipeline_id) == "true":
            return True
        snapshot = jtable.currentSnapshot()
        if self.sink.last_committed() is not None or snapshot is None:
            return False
        records = snapshot.summary().get("total-records")
        return records is None or int(records) > 0

    # -- the streaming plan -------------------------------------------------------------------

    def changes(self, events: DataFrame) -> DataFrame:
        """The keyed state's updates: one row per key that got events in a micro-batch (update mode)."""
        from pyspark.sql import functions as F
        from pyspark.sql import types as T

        self._check_events(events)
        o = self.options
        order = F.col(f"`{self.order_by}`")
        if not isinstance(events.schema[self.order_by].dataType, T.TimestampType):
            raise SchemaError(f"order_by: {self.order_by} must be a TIMESTAMP column for the stateful stage")
        op = F.col(OP_COLUMN) if OP_COLUMN in events.columns else F.lit(UPSERT)
        watermarked = events.withWatermark(self.order_by, _interval(o.watermark_seconds))
        if not o.deduplicates():
            deduplicated = watermarked  # repeats change nothing, or never happen: one state store fewer
        elif o.dedup_by:
            deduplicated = watermarked.dropDuplicatesWithinWatermark(list(o.dedup_by))
        else:
            # The state holds an event's identity until the watermark passes it: two hashes of its
            # content (96 bits) instead of the whole row keep that state small (docs/stateful.md).
            content = [F.col(f"`{c}`") for c in events.columns if c not in POSITION_COLUMNS]
            hashed = watermarked.withColumn(CONTENT_HASH, F.xxhash64(*content))
            deduplicated = hashed.withColumn(CONTENT_HASH2, F.hash(*content)).dropDuplicatesWithinWatermark(
                [CONTENT_HASH, CONTENT_HASH2]
            )
        staged = deduplicated.withColumn(BATCH_TIME, F.current_timestamp())
        groups: list[Column] = [F.col(f"`{k}`") for k in self.key]
        if o.ttl_seconds is not None:
            groups.append(F.window(order, _interval(o.ttl_seconds)).alias(STATE_WINDOW))
        return staged.groupBy(*groups).agg(*aggregations(o.merge, self.values, order, op))

    def _check_events(self, events: DataFrame) -> None:
        columns = events.columns
        for k in [*self.key, self.order_by]:
            if k not in columns:
                raise SchemaError(f"stateful stage: the events have no column {k} (columns: {', '.join(columns)})")
        for c in self.options.dedup_by or ():
            if c not in columns:
                raise ConfigError(f"dedup_by: {c} is not a column of the events")
        enriched = {c for e in self.options.enrich for c in e.outputs}
        self.values = [c for c in columns if c in self.table_types and c not in self.key and c not in enriched]
        self.options.merge.check_columns(self.values)

    # -- one micro-batch ----------------------------------------------------------------------

    def emit(self, updates: DataFrame, batch_id: int) -> BatchResult | None:
        """The foreachBatch step: each updated key's op, enrichment, and one sink commit per batch id."""
        from pyspark import StorageLevel

        state = self.sink.last_committed()
        if state is not None and batch_id <= state.batch_id:
            log.info("stateful batch %s of %s already committed: skipped", batch_id, self.pipeline_id)
            # The state must still move to this batch: Spark 4.1 fails a batch whose foreachBatch left
            # a state partition uncommitted (STATE_STORE_COMMIT_VALIDATION_FAILED), and the replayed
            # events rebuild the same state the committed batch had. A no-op write runs every partition.
            updates.write.format("noop").mode("overwrite").save()
            return None
        rows = self._with_ops(updates).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            # count, not isEmpty: isEmpty computes the first partition alone (its state task on
            # one core), the sink's first pass the others later; count runs them all at once.
            if rows.count() == 0:
                return None
            checked = self._inserts_checked(rows) if self.check_new_keys else rows
            out = self._enriched(checked)
            cached = not self.options.enrich and not self.check_new_keys
            result = self.sink.write(out, batch_id=batch_id, input_cached=cached)
        finally:
            rows.unpersist()
        # The table is ahead of Spark's checkpoint at both: `after_commit` as on every path's commit,
        # `state_after_commit` for a crash meant for this stage alone.
        crash_point("after_commit", batch_id)
        crash_point("state_after_commit", batch_id)
        self.last_result = result
        if self.on_result is not None:
            self.on_result(batch_id, result)
        return result

    def _emit_batch(self, updates: DataFrame, batch_id: int) -> None:
        self.emit(updates, batch_id)

    def _with_ops(self, updates: DataFrame) -> DataFrame:
        from pyspark.sql import functions as F

        now = F.col(LAST_SEEN)
        is_new = F.col(FIRST_SEEN) == now
        latest_op, latest_at = last_op()
        deleted = latest_op == F.lit(DELETE)
        delete_now = deleted & (latest_at == now)
        op = (
            F.when(delete_now & is_new, F.lit(DELETE if self.check_new_keys else None))
            .when(delete_now, F.lit(DELETE))
            .when(deleted, F.lit(None))
            .when(is_new, F.lit(INSERT))
            # A key deleted before, whose latest event is from now: written again even if its
            # merged values equal those before the delete (aggregates other than last and
            # last_non_null keep them).
            .when(F.col(LAST_DELETE).isNotNull() & (latest_at == now), F.lit(UPSERT))
            # A DELETE that arrived now, ordered before the key's latest event: the merge restarts
            # after it, so the row is rewritten (last and last_non_null values before it are gone).
            .when(F.lit(self.options.merge.engine != "last") & (delete_arrived_at() == now), F.lit(UPSERT))
            .when(changed_at(self.options.merge, self.values) == now, F.lit(UPSERT))
        )
        return updates.select(
            *[F.col(f"`{k}`") for k in self.key],
            *merged_columns(self.options.merge, self.values),
            op.alias(OP_COLUMN),
        ).where(F.col(OP_COLUMN).isNotNull())

    def _inserts_checked(self, rows: DataFrame) -> DataFrame:
        """INSERTs whose key the table already holds (evicted state, rows from before the stage)
        become UPSERTs: a first-seen key never duplicates a row."""
        from pyspark.sql import functions as F

        fresh = rows.where(F.col(OP_COLUMN) == F.lit(INSERT))
        bounds = fresh.agg(
            *[F.min(f"`{k}`").alias(f"lo{i}") for i, k in enumerate(self.key)],
            *[F.max(f"`{k}`").alias(f"hi{i}") for i, k in enumerate(self.key)],
        ).first()
        if bounds is None or bounds["lo0"] is None:
            return rows
        jtable = self.sink.table
        jtable.refresh()  # the snapshot current now: a cached table object may lag other commits
        snapshot = jtable.currentSnapshot()
        if snapshot is None:
            return rows
        existing = (
            self.spark.read.format("iceberg")
            .option("versionAsOf", str(snapshot.snapshotId()))
            .load(self.table)
            .select(*[F.col(f"`{k}`") for k in self.key])
        )
        for i, k in enumerate(self.key):  # file and partition pruning on the new keys' range
            existing = existing.where(F.col(f"`{k}`").between(bounds[f"lo{i}"], bounds[f"hi{i}"]))
        existing = existing.withColumn(EXISTS, F.lit(True)).dropDuplicates(self.key)
        joined = rows.join(existing, self.key, "left")
        op = F.when((F.col(OP_COLUMN) == F.lit(INSERT)) & F.col(EXISTS).isNotNull(), F.lit(UPSERT)).otherwise(
            F.col(OP_COLUMN)
        )
        return joined.select(*[F.col(f"`{c}`") for c in rows.columns if c != OP_COLUMN], op.alias(OP_COLUMN))

    def _enriched(self, rows: DataFrame) -> DataFrame:
        from pyspark.sql import functions as F

        for enrichment in self.options.enrich:
            rows = enrichment.apply(rows)
        columns = [c for c in self.table_types if c in rows.columns]
        return rows.select(*[F.col(f"`{c}`").cast(self.table_types[c]).alias(c) for c in columns], F.col(OP_COLUMN))

    # -- running it ---------------------------------------------------------------------------

    def start(
        self,
        events: DataFrame,
        *,
        checkpoint: str,
        interval_seconds: float | None = None,
        available_now: bool = False,
        query_name: str | None = None,
    ) -> StreamingQuery:
        """Start the streaming query (RocksDB state, update mode, the sink per batch)."""
        self._check_checkpoint(checkpoint)
        if self.check_new_keys:
            self._remember_check_new_keys()
        writer = (
            self.changes(events)
            .writeStream.outputMode("update")
            .foreachBatch(self._emit_batch)
            .option("checkpointLocation", checkpoint)
        )
        if query_name:
            writer = writer.queryName(query_name)
        if available_now:
            writer = writer.trigger(availableNow=True)
        elif interval_seconds:
            writer = writer.trigger(processingTime=_interval(interval_seconds))
        with session_conf(self.spark, self.query_conf()):
            return writer.start()

    def query_conf(self) -> dict[str, str]:
        """The session settings the stage's query starts with. Spark copies the session's settings
        when a query starts, so they are set around `start` only and other queries keep theirs."""
        return {
            # A checkpoint keeps the provider it was started with; this only chooses for new ones.
            PROVIDER_KEY: state_store_provider(self.spark),
            # Commit each batch's state as a changelog, snapshots in the background (Spark 3.5).
            "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
            # Counting the store's rows costs a read before every write (~25% of a micro-batch, measured).
            "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows": "false",
            # A micro-batch without new events only evicts expired state (update mode emits nothing
            # then); the next batch with events evicts it as well, so skip the empty run (measured
            # 0.7-1.1 s per 100k-event batch, see docs/stateful.md).
            "spark.sql.streaming.noDataMicroBatches.enabled": "false",
        }

    def _check_checkpoint(self, checkpoint: str) -> None:
        """A new (empty) checkpoint for a pipeline the table already holds batches of would restart
        Spark's batch ids at 0, below the committed ones: every batch would be skipped. Refuse it.
        A checkpoint started on icetide's state provider needs it again (Spark keeps the first)."""
        recorded = _recorded_conf(self.spark, checkpoint)
        if recorded and recorded.get(PROVIDER_KEY) == PROVIDER_CLASS and not provider_loaded(self.spark):
            if spark_line(self.spark.version) != "3.5":
                raise ConfigError(
                    f"checkpoint {checkpoint} keeps its state with icetide's RocksDB provider, which exists for Spark "
                    f"3.5 only (Spark {self.spark.version} keeps the state loaded itself): resume it on Spark 3.5, "
                    "or start the stage on a new checkpoint"
                )
            raise ConfigError(
                f"checkpoint {checkpoint} keeps its state with icetide's RocksDB provider, which this Spark session "
                "cannot load: start the session with icetide.spark_session on a machine with javac (a JDK)"
            )
        state = self.sink.last_committed()
        if state is None or recorded is not None:
            return
        raise ConfigError(
            f"checkpoint {checkpoint} is empty, but {self.table} already holds batch {state.batch_id} of pipeline "
            f"{self.pipeline_id}: restore the checkpoint, or use a new pipeline id (new keys are then checked "
            "against the table)"
        )

    def _remember_check_new_keys(self) -> None:
        self.sink.table.updateProperties().set(CHECK_NEW_KEYS_PROPERTY + self.pipeline_id, "true").commit()


@contextmanager
def session_conf(spark: SparkSession, settings: dict[str, str]) -> Iterator[None]:
    """Set `settings` on the session for the duration of the block, then restore the old values."""
    before: dict[str, str | None] = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in before.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


def _recorded_conf(spark: SparkSession, checkpoint: str) -> dict[str, str] | None:
    """The session settings Spark recorded in the checkpoint's newest offsets file; None for a new
    checkpoint."""
    lines = _checkpoint_log(spark, checkpoint, "offsets")
    if lines is None:
        return None
    metadata = json.loads(lines[1]) if len(lines) > 1 and lines[1].startswith("{") else {}
    return {str(k): str(v) for k, v in metadata.get("conf", {}).items()}


def committed_source_offsets(spark: SparkSession, checkpoint: str) -> list[str] | None:
    """The end offsets (one JSON line per source) of the newest batch that Spark's checkpoint
    records as committed: everything up to them has been through the stage and its sink. None
    before the first committed batch."""
    commits = _checkpoint_batches(spark, checkpoint, "commits")
    if not commits:
        return None
    lines = _checkpoint_log(spark, checkpoint, "offsets", batch=max(commits))
    return lines[2:] if lines is not None else None


def _checkpoint_batches(spark: SparkSession, checkpoint: str, log_name: str) -> list[int]:
    jvm: Any = spark._jvm  # type: ignore[attr-defined]
    folder = jvm.org.apache.hadoop.fs.Path(checkpoint.rstrip("/") + "/" + log_name)
    fs = folder.getFileSystem(spark._jsc.hadoopConfiguration())  # type: ignore[attr-defined]
    if not fs.exists(folder):
        return []
    return [int(n) for n in (f.getPath().getName() for f in fs.listStatus(folder)) if n.isdigit()]


def _checkpoint_log(
    spark: SparkSession, checkpoint: str, log_name: str, *, batch: int | None = None
) -> list[str] | None:
    """The lines of `batch` (None: the newest) in one of the checkpoint's logs; None if absent."""
    if batch is None:
        batches = _checkpoint_batches(spark, checkpoint, log_name)
        if not batches:
            return None
        batch = max(batches)
    jvm: Any = spark._jvm  # type: ignore[attr-defined]
    path = jvm.org.apache.hadoop.fs.Path(checkpoint.rstrip("/") + f"/{log_name}/{batch}")
    fs = path.getFileSystem(spark._jsc.hadoopConfiguration())  # type: ignore[attr-defined]
    if not fs.exists(path):
        return None
    stream = fs.open(path)
    try:
        return str(jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")).splitlines()
    finally:
        stream.close()
