"""The micro-batch runner: plan, read, decode, dead-letter, upsert; the table is the checkpoint.

Each batch: read the pipeline's last committed batch and source position from the table, plan
the next batch from that position, read it on the executors, decode it (bad records to the
dead-letter table, committed first), and commit the good rows with the position reached. A
restart anywhere resumes exactly where the last commit ended; the files of a batch that never
committed are deleted when the runner starts.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Any

from icetide.config.pipeline import AVRO_FORMATS, PipelineConfig
from icetide.errors import ConfigError, IcetideError
from icetide.ops.prometheus import pipeline_metrics
from icetide.pipeline.batch_path import BatchPath, FallbackReason
from icetide.pipeline.batches import BatchMetrics, RunSummary, batch_metrics, commit_tables, warn_unknown_fields
from icetide.pipeline.json_fast import JsonFastPath
from icetide.pipeline.overlap import InFlight
from icetide.pipeline.provision import create_config_table, pipeline_session
from icetide.pipeline.read_ahead import AheadOfTrigger, ReadAheadStopped
from icetide.pipeline.spark_path import PlannedBatch, SourceAdapter
from icetide.pipeline.staged import (
    DATA_LOSSES,
    Fallback,
    NewTables,
    StagedBatch,
    batch_place,
    failures_named,
)
from icetide.pipeline.steps import BatchPipeline, Timings
from icetide.pipeline.sync.fast_path import SyncFastPath
from icetide.pipeline.table_dead_letters import TableDeadLetters, lost_rows
from icetide.pipeline.table_from_stream import ensure_table_from_stream
from icetide.sink.sink import UpsertSink
from icetide.sources.base import raise_source_error_in
from icetide.table.iceberg import spark_schema
from icetide.write.key_index_memory import process_key_indexes

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


class Runner(BatchPipeline[PlannedBatch]):
    """Runs one pipeline config against its table until stopped (or once through the backlog)."""

    def __init__(self, config: PipelineConfig, spark: SparkSession | None = None) -> None:
        super().__init__()
        if config.routes_tables:
            raise ConfigError(
                "table.name: this pipeline routes to many tables; run it with icetide.pipeline.sync.runner.SyncRunner "
                "(icetide.run and `icetide run` do)"
            )
        self.config = config
        self.spark = spark = spark or pipeline_session(config)
        t = config.table
        self.source = SourceAdapter(config)
        if t.schema is None:
            ensure_table_from_stream(spark, config, self.source)
        else:
            create_config_table(spark, t.created_for(config.mode))
        self.sink = UpsertSink(
            spark,
            t.name,
            pipeline_id=config.pipeline,
            order_by=config.order_by,
            changelog=config.changelog or config.mode == "append",
            keep_inserts=config.mode == "append",  # every record is a row, as on the fast path
            distribution=config.distribution,
            write_parallelism=config.write_parallelism,
            target_file_size=t.target_file_size,
            schema_evolution=config.schema_evolution,
            deletes=t.deletes,
        )
        process_key_indexes().set_limit(t.key_index_memory)  # deletes: vectors (one table: its index stays)
        self.schema = spark_schema(spark, self.sink.table)
        self.dead_letters = TableDeadLetters(spark, config, self.source)
        # The fast path: JSON appends and upserts (json_fast.py), or Debezium changes through the sync
        # fast path with one fixed route (pipeline/sync/fast_path.py); else why every batch runs on the Spark path.
        self.fast: JsonFastPath | None = None
        self.changes: SyncFastPath | None = None
        self.no_fast: Fallback | None = None
        if config.reads_debezium:
            self.no_fast = SyncFastPath.applies(config)
            if self.no_fast is None:
                if self.source.kind == "kafka":
                    kafka = self.source.kafka.config
                    self.changes = SyncFastPath(spark, config, kafka.reader_settings(), kafka.read_timeout_seconds)
                else:  # landing files: the tasks read them, no consumer
                    self.changes = SyncFastPath(spark, config, {}, 0.0)
        else:
            self.no_fast = JsonFastPath.applies(config)
            if self.no_fast is None:
                self.fast = JsonFastPath(spark, config, self.sink, self.source)
        if self.no_fast is not None:
            log.debug("fast path not used: %s", self.no_fast.detail)
        self._first_position: dict[str, Any] | None = None
        self.prometheus = pipeline_metrics(
            config.metrics, pipeline=config.pipeline, table=t.name, source=config.source_kind
        )

    def plan_next(self, flight: InFlight | None) -> tuple[int, PlannedBatch]:
        """The next batch id, one more than the table's and the dead-letter table's, and its plan
        from the table's position (or the batch in flight's), less what the dead-letter table
        holds already (docs/design.md, "Pipeline state")."""
        if flight is not None:
            # It starts where the batch being committed ends; after a restart, that batch may
            # have stopped short of the dead letters a crash left behind.
            batch_id, plan = flight.batch_id + 1, self.source.plan(flight.position)
        else:
            state = self.sink.last_committed()
            dead_batch = self.dead_letters.read_last()
            batch_id = 1 + max(state.batch_id if state is not None else 0, dead_batch)
            # Before the first commit, an empty plan's position is kept in memory: a `latest` or
            # timestamp start resolved again later would skip what arrived in between.
            position = state.source_position if state is not None else self._first_position
            plan = self.source.plan(position)
        return batch_id, self.dead_letters.held(batch_id, plan)

    def plan_is_full(self, plan: PlannedBatch) -> bool:
        return plan.records_planned >= self.source.batch_limit

    def plan_is_empty(self, batch_id: int, plan: PlannedBatch) -> bool:
        if plan.items or plan.losses:
            return False
        if batch_id == 1:
            self._first_position = plan.position
        return True

    def discard(self, batch_id: int) -> None:
        self.sink.remove_batch_files(batch_id)

    def overlap_position(self, batch_id: int, plan: PlannedBatch, staged: StagedBatch) -> dict[str, Any] | None:
        return plan.position

    def run_spark_path(self, batch_id: int, plan: PlannedBatch, timings: Timings, fallback: Fallback) -> BatchMetrics:
        """The batch decoded in Spark and written by the sink, committed before returning."""
        started = time.monotonic()
        # The table's schema as of now: schema evolution (ours, or another writer's) changes it.
        self.schema = spark_schema(self.spark, self.sink.table)
        raw = self.source.read(self.spark, plan, self.schema)
        kept: list[Any] = []
        try:
            decoded = self.source.decode(raw, self.schema, list(self.sink.key), kept)
            good, bad = decoded.good, plan.held.keep_new(decoded.bad)
            bad_count = bad.count()  # materializes the decoded cache: the source is read once
            # Every source record, as the fast path and the sync runner count them (max_bad_fraction)
            records_in = decoded.records if decoded.records is not None else good.count() + bad_count
            read_seconds = time.monotonic() - started
            self.dead_letters.commit_frame(batch_id, plan, bad, bad_count, records_in)
            written = self.sink.stage(good, batch_id=batch_id, input_cached=True, order_by=decoded.order_by)
            result = commit_tables(
                batch_id,
                lambda: self.sink.commit_written(
                    written,
                    plan.position,
                    truncate=decoded.truncated,
                    batch_path=BatchPath.SPARK,
                    fallback=fallback.reason,
                ),
            )
        except IcetideError:
            raise
        except Exception as exc:
            raise_source_error_in(exc)
            raise
        finally:
            for frame in kept:
                frame.unpersist()
        return batch_metrics(
            BatchMetrics,
            self.config.pipeline,
            batch_id,
            {self.sink.table_name: result},
            records_in=records_in,
            bad_records=bad_count,
            read_decode_seconds=read_seconds,
            source_lag=self.measure_lag(lambda: self.source.lag_by_partition(plan.position)),
            truncated=decoded.truncated and result.committed,
            unknown_fields=decoded.unknown_fields,
            lost_ranges=len(lost_rows(plan)),
            source_plan_seconds=timings.plan_seconds,
            path=BatchPath.SPARK,
            fallback=fallback.reason,
            fallback_detail=fallback.detail,
            nested_as_text=decoded.nested_as_text,
        )

    def stage(self, batch_id: int, plan: PlannedBatch) -> StagedBatch | Fallback:
        """The batch's files written by the fast path; or why it runs on the Spark path."""
        from icetide.sources.kafka import OffsetRange

        if not plan.items:
            return Fallback(FallbackReason.DATA_LOSSES, "data losses only")
        if self.fast is None and self.changes is None:
            assert self.no_fast is not None
            return self.no_fast
        ranges = [OffsetRange(**r) for r in plan.items] if self.source.kind == "kafka" else []
        items = ranges if self.source.kind == "kafka" else list(plan.items)  # Kafka ranges, or landing files
        if self.fast is not None:
            return self.fast.unavailable() or self.fast.write(batch_id, items)
        assert self.changes is not None
        if plan.losses:
            return DATA_LOSSES
        name = self.sink.table_name
        table = self.changes.table(self.sink)
        if isinstance(table, Fallback):
            return table
        with failures_named(batch_place(self.config.pipeline, [name])):
            out = self.changes.write(batch_id, items, {name: self.sink}, {name: {r.topic for r in ranges}}, {})
        if isinstance(out, NewTables):  # (its one route's table exists: the runner made it)
            out = out.fallback()
        if isinstance(out, Fallback):
            log.info("batch %s runs on the Spark path: %s", batch_id, out.detail)
            return out
        prefix = f"{name}."  # the metrics line of one table names its fields alone
        unknown = {k.removeprefix(prefix): n for k, n in out.unknown_fields.items()}
        return dataclasses.replace(out, unknown_fields=unknown)

    def reads_ahead(self) -> bool:
        """JSON from Kafka on the fast path, `trigger.read_ahead` on (the default)."""
        return (
            self.config.trigger.read_ahead
            and self.fast is not None
            and self.fast.kafka is not None
            and self.fast.unavailable() is None
        )

    def stage_ahead(
        self, batch_id: int, plan: PlannedBatch, until: float
    ) -> tuple[PlannedBatch, StagedBatch | Fallback] | None:
        """The batch's tasks read every partition of the plan's position, past the plan, until the
        trigger time; the plan extended to what they read (docs/runner.md, "Reading ahead")."""
        from icetide.sources.kafka import OffsetRange

        assert self.fast is not None
        topic = self.source.kafka.config.topic
        planned = {(r["topic"], r["partition"]): OffsetRange(**r) for r in plan.items}
        ranges = [
            planned.get((topic, int(p)), OffsetRange(topic, int(p), offset, offset))
            for p, offset in sorted(plan.position.items(), key=lambda kv: int(kv[0]))
        ]
        ahead = AheadOfTrigger(until, self._stop)
        if not ranges:  # no partition to read (none reported yet)
            return plan, ahead.wait_empty()
        try:
            staged = self.fast.write(batch_id, ranges, ahead=ahead)
        except ReadAheadStopped:
            log.info("batch %s stopped while reading ahead; nothing committed", batch_id)
            return None
        if isinstance(staged, Fallback) or staged.read_to is None:
            return plan, staged  # the Spark path, or a batch written again, runs the plan alone
        read = [r for r in staged.read_to if r.count > 0]
        extended = dataclasses.replace(
            plan,
            items=[dataclasses.asdict(r) for r in read],
            position={**plan.position, **{str(r.partition): r.end for r in staged.read_to}},
            records_planned=sum(r.count for r in read),
        )
        return extended, staged

    def commit_dead_letters(self, batch_id: int, plan: PlannedBatch, out: StagedBatch) -> StagedBatch:
        warn_unknown_fields(batch_id, out.unknown_fields)
        bad = self.dead_letters.commit_records(
            batch_id, plan, out.bad, out.records_in, lambda: self.sink.remove_batch_files(batch_id)
        )
        return dataclasses.replace(out, bad=bad)

    def commit_staged(self, batch_id: int, plan: PlannedBatch, out: StagedBatch, timings: Timings) -> BatchMetrics:
        name = self.sink.table_name
        path = self.fast_path()
        result = commit_tables(
            batch_id, lambda: out.commit_table(name, self.sink, batch_id, plan.position, batch_path=path)
        )
        return batch_metrics(
            BatchMetrics,
            self.config.pipeline,
            batch_id,
            {name: result},
            records_in=out.records_in,
            bad_records=len(out.bad),
            read_decode_seconds=out.read_decode_seconds,
            source_lag=self.measure_lag(lambda: self.source.lag_by_partition(plan.position)),
            lost_ranges=len(lost_rows(plan)),
            source_plan_seconds=timings.plan_seconds,
            unknown_fields=out.unknown_fields,
            path=path,
            records_as_columns=out.records_as_columns,
            nested_as_text=out.nested_as_text,
        )

    def fast_path(self) -> BatchPath:
        """The fast path this pipeline's batches take when they can."""
        if self.changes is None:
            return BatchPath.JSON_FAST
        return BatchPath.AVRO_FAST if self.config.format in AVRO_FORMATS else BatchPath.DEBEZIUM_FAST

    # -- the loop's steps (pipeline/loop.py) -------------------------------------------------

    def remove_abandoned_files(self) -> int:
        """Delete the files of batches (and dead letters) that never committed; how many."""
        return self.sink.remove_abandoned_files() + self.dead_letters.remove_abandoned_files()

    def reload(self) -> None:
        """Nothing to read again: every batch starts from the table's last commit."""

    def close(self) -> None:
        """Close the source's connections."""
        self.source.close()

    def last_committed_batch(self) -> int | None:
        """The pipeline's last committed batch id on its table."""
        state = self.sink.last_committed()
        return state.batch_id if state is not None else None

    def last_committed_at(self) -> str | None:
        """When the pipeline last committed to its table."""
        state = self.sink.last_committed()
        return state.committed_at if state is not None else None

    def maintained_tables(self) -> list[str]:
        """The one table maintenance keeps (a two-stage pipeline's target, not its raw table)."""
        return [self.config.maintained_table]

    def observe(self, metrics: BatchMetrics) -> None:
        """The batch, how it ran and the source's lag per partition in the Prometheus series."""
        if self.prometheus is not None:
            self.prometheus.record_batch(metrics, self._partition_lag)
            self.prometheus.record_path(metrics)


__all__ = ["BatchMetrics", "RunSummary", "Runner"]
