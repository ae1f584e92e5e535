"""Sync a whole database: one pipeline, many Debezium topics, one Iceberg table per source table.

Each batch: list the matching topics (new ones are picked up here), plan them from the lowest
position of the tables each partition feeds (icetide.pipeline.sync.state). Then the batch runs on
the fast path when it can (icetide.pipeline.sync.fast_path: one Spark job reads, decodes, routes and
writes every table), else on the Spark path (icetide.pipeline.sync.spark_path: a plan per table, with
dead letters, truncates and schema changes). On both, the registry of tables (and the batch's bad
records, from every table) go to the one dead-letter table first; then the tables commit, several
at a time, each with its own source position. A table fed by a topic the batch read but that got
no record is committed too (a metadata-only commit), so its position keeps up and the next plan
does not read that topic again.

In a continuous run a fast-path batch reads ahead of its trigger (`trigger.read_ahead`): planned
at its start, its tasks read on until the trigger time and the plan's ends are extended to what
they reached (`stage_ahead`; docs/runner.md, "Reading ahead").

A SIGKILL anywhere leaves every table equal to its source after a restart: a table that
committed skips the records it holds, one that did not reads them again.

With Debezium's transaction metadata (`debezium.provide.transaction.metadata`), each batch is cut
to whole source transactions and every table commits every batch, the same batch id; a batch some
table did not commit is read again to the same ends under the same id (pipeline/sync/transactions.py)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from icetide.config.pipeline import AVRO_FORMATS, PipelineConfig
from icetide.errors import ConfigError, SourceError
from icetide.faults import crash_point
from icetide.ops.prometheus import PipelineMetrics, TableCounts, pipeline_metrics
from icetide.pipeline.batch_path import BatchPath, FallbackReason
from icetide.pipeline.batches import BatchMetrics, SyncBatchMetrics, batch_metrics, commit_tables, warn_unknown_fields
from icetide.pipeline.overlap import InFlight
from icetide.pipeline.provision import create_config_table, pipeline_session
from icetide.pipeline.read_ahead import AheadOfTrigger, ReadAheadStopped
from icetide.pipeline.staged import (
    DATA_LOSSES,
    Fallback,
    NewTables,
    StagedBatch,
    batch_place,
    failures_named,
)
from icetide.pipeline.steps import BatchPipeline, Timings
from icetide.pipeline.sync.dead_letters import SyncDeadLetters
from icetide.pipeline.sync.fast_path import SyncFastPath
from icetide.pipeline.sync.spark_path import TABLE_THREADS, TableBatch, run_spark_batch
from icetide.pipeline.sync.state import Position, SyncState, skipped_below
from icetide.pipeline.sync.status import read_sync_state
from icetide.pipeline.sync.transactions import TransactionGate, replay
from icetide.pipeline.table_from_stream import create_from_definition, definition_from_messages
from icetide.sink.sink import UpsertSink
from icetide.sources.kafka import KafkaSourceConfig
from icetide.sources.kafka_reader import OffsetRange
from icetide.sources.kafka_topics import KafkaTopics, TopicsPlan
from icetide.table.create import table_exists
from icetide.write.batch import BatchResult
from icetide.write.key_index_memory import process_key_indexes

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


class SyncRunner(BatchPipeline[TopicsPlan]):
    """Runs a pipeline whose records go to many tables (`table.name` a template, or several topics)."""

    def __init__(self, config: PipelineConfig, spark: SparkSession | None = None) -> None:
        super().__init__()
        if not config.routes_tables:
            raise ConfigError("table.name: SyncRunner runs pipelines with a table-name template or several topics")
        assert config.dead_letter is not None  # checked at load
        self.config = config
        self.spark = spark = spark or pipeline_session(config)
        kafka = KafkaSourceConfig.from_dict(config.source["kafka"])
        self.topics = KafkaTopics(kafka)
        txn_topic = config.debezium.transaction_topic
        self.transactions = (
            TransactionGate(self.topics, kafka.reader_settings(), kafka.read_timeout_seconds, txn_topic)
            if txn_topic is not None
            else None
        )
        self.fast: SyncFastPath | None = None
        not_fast = self._not_fast = SyncFastPath.applies(config)
        if not_fast is None:
            self.fast = SyncFastPath(spark, config, kafka.reader_settings(), kafka.read_timeout_seconds)
        else:
            log.debug("sync fast path not used: %s", not_fast.detail)
        self.dead_letters = SyncDeadLetters(spark, config)
        # deletes: vectors keeps one key index per table: the process holds at most this much of them
        process_key_indexes().set_limit(config.table.key_index_memory)
        self.sinks: dict[str, UpsertSink] = {}
        self.state = SyncState()
        self._unfed: dict[str, dict[str, int]] = {}  # topics with no position yet, resolved once per process
        self._after_flight: SyncState | None = None  # the state once the batch in flight commits
        self._planned_from = self.state  # the state the batch being staged was planned from
        self._fell_back = False  # the last batch ran on the Spark path (the next one does not read ahead)
        # Prometheus: the pipeline's series (source lag, restarts, unroutable records, labelled
        # with its dead-letter table) and one set per table, made as tables appear.
        self.prometheus = pipeline_metrics(
            config.metrics, pipeline=config.pipeline, table=config.dead_letter, source="kafka"
        )
        self._table_metrics: dict[str, PipelineMetrics] = {}
        self.load_state()

    # -- state -------------------------------------------------------------------------------

    def load_state(self) -> SyncState:
        """Read where every table stands from the tables themselves (after a start or a failure)."""
        self.state = read_sync_state(self.spark, self.config, lambda name: self.sink_for(name).last_committed())
        self.state.whole_transactions = self.transactions is not None
        return self.state

    def sink_for(self, name: str) -> UpsertSink:
        if name not in self.sinks:
            c = self.config
            self.sinks[name] = UpsertSink(
                self.spark,
                name,
                pipeline_id=c.pipeline,
                changelog=c.changelog or c.mode == "append",
                keep_inserts=c.mode == "append",
                distribution=c.distribution,
                write_parallelism=c.write_parallelism,
                target_file_size=c.table_config(name).target_file_size,
                schema_evolution=c.schema_evolution,
                deletes=c.table_config(name).deletes,
            )
        return self.sinks[name]

    def table_names(self) -> list[str]:
        """Every table the pipeline has fed (registered in its dead-letter table)."""
        return sorted(self.state.tables)

    # -- one batch ---------------------------------------------------------------------------

    def data_topics(self) -> list[str]:
        """The topics that match now, but the connector's transaction topic."""
        txn = self.transactions.topic if self.transactions is not None else None
        return [t for t in self.topics.topics() if t != txn]

    def plan(self, state: SyncState | None = None, *, max_records: int | None = None) -> TopicsPlan:
        """The next batch over the topics that match now, from where `state` (default: what the
        tables hold) leaves each topic, of at most `max_records` (default: the trigger's)."""
        state = self.state if state is None else state
        topics = self.data_topics()
        resume: dict[str, dict[str, int] | None] = {}
        for t in topics:
            position = state.resume_position(t)
            if position is None:
                # A topic first seen after the pipeline started is read from its beginning, as a
                # new partition is; starting_offsets applies to the topics of a new pipeline.
                position = self._unfed.get(t, {} if state.started else None)
            resume[t] = position
        plan = self.topics.plan(
            resume,
            max_records or self.config.trigger.max_records,
            topics=topics,
            skip_losses=self.config.on_data_loss == "skip",
        )
        for t in topics:
            if resume[t] is None and t in plan.starts:
                self._unfed[t] = dict(plan.starts[t])
        return plan

    def plan_next(self, flight: InFlight | None) -> tuple[int, TopicsPlan]:
        ahead = self._after_flight if flight is not None and self._after_flight else self.state
        self._planned_from = ahead
        if self.transactions is None:
            return ahead.next_batch_id(), self.plan(ahead)
        unfinished = ahead.unfinished_batch()
        if unfinished is not None:
            again = replay(self.plan(ahead), ahead.dead_letter_position, self.transactions.topic)
            if again.topics_read():
                log.info("batch %s is read again for the tables that did not commit it", unfinished)
                return unfinished, again
            self._catch_up(unfinished, ahead)
        return ahead.next_batch_id(), self._whole_transactions_plan(ahead)

    def _whole_transactions_plan(self, state: SyncState) -> TopicsPlan:
        """The next plan cut to whole source transactions; when a transaction is bigger than the
        batch (the cut leaves nothing), planned again with twice the records, up to 64 times."""
        assert self.transactions is not None
        floor = state.dead_letter_position.get(self.transactions.topic)
        budget = self.config.trigger.max_records
        while True:
            plan = self.plan(state, max_records=budget)
            cut = self.transactions.cut(plan, floor)
            if cut.topics_read() or not plan.full or budget >= 64 * self.config.trigger.max_records:
                return cut
            budget *= 2

    def _catch_up(self, batch_id: int, state: SyncState) -> None:
        """Commit batch `batch_id` (metadata only) to each table that did not commit it and has
        nothing of it to read again: every table then stands at the same batch."""
        for name, table in sorted(state.tables.items()):
            if table.batch_id < batch_id and table_exists(self.spark, name):
                position = table.effective()
                self.sink_for(name).commit_files(batch_id, [], position)
                table.batch_id, table.position = batch_id, position

    def plan_is_full(self, plan: TopicsPlan) -> bool:
        return plan.full

    def plan_is_empty(self, batch_id: int, plan: TopicsPlan) -> bool:
        return not plan.topics_read() and not plan.losses

    def stage(self, batch_id: int, plan: TopicsPlan) -> StagedBatch | Fallback:
        if self.fast is None:
            assert self._not_fast is not None
            return self._not_fast
        out = self._write_fast(batch_id, plan, self._planned_from)
        self._fell_back = isinstance(out, Fallback)
        if isinstance(out, Fallback):
            log.info("batch %s runs on the Spark path: %s", batch_id, out.detail)
        return out

    def reads_ahead(self) -> bool:
        """Kafka on the fast path, `trigger.read_ahead` on (the default), batches not cut to whole
        source transactions (their ends are the transactions')."""
        return (
            self.config.trigger.read_ahead
            and self.fast is not None
            and self.config.source_kind == "kafka"
            and self.transactions is None
            and not self._fell_back  # a table the fast path cannot write: the Spark path runs the plan alone
        )

    def stage_ahead(
        self, batch_id: int, plan: TopicsPlan, until: float
    ) -> tuple[TopicsPlan, StagedBatch | Fallback] | None:
        """The batch's tasks read every partition the plan stands on, past the plan, until the
        trigger time; the plan extended to what they read (docs/runner.md, "Reading ahead")."""
        if plan.losses:  # the Spark path records them
            return plan, self.stage(batch_id, plan)
        planned = {(r.topic, r.partition): r for r in plan.ranges}
        ranges = [
            planned.get((topic, int(p)), OffsetRange(topic, int(p), offset, offset))
            for topic, ends in sorted(plan.ends.items())
            for p, offset in sorted(ends.items(), key=lambda kv: int(kv[0]))
        ]
        ahead = AheadOfTrigger(until, self._stop)
        if not ranges:  # no topic to read yet
            return plan, ahead.wait_empty()
        try:
            staged = self._write_fast(batch_id, plan, self._planned_from, ahead, ranges)
        except ReadAheadStopped:
            log.info("batch %s stopped while reading ahead; nothing committed", batch_id)
            return None
        self._fell_back = isinstance(staged, Fallback)
        if isinstance(staged, Fallback):
            log.info("batch %s runs on the Spark path: %s", batch_id, staged.detail)
            return plan, staged
        if staged.read_to is None:
            return plan, staged  # written again without reading ahead (new tables): the plan alone
        ends = {t: dict(e) for t, e in plan.ends.items()}
        for r in staged.read_to:
            partition = ends[r.topic]
            partition[str(r.partition)] = max(partition.get(str(r.partition), r.end), r.end)
        read = [r for r in staged.read_to if r.count > 0]
        full = plan.full or sum(r.count for r in read) >= self.config.trigger.max_records
        return dataclasses.replace(plan, ranges=read, ends=ends, full=full), staged

    def discard(self, batch_id: int) -> None:
        assert self.fast is not None
        self.fast.discard(batch_id, list(self.sinks.values()))

    def overlap_position(self, batch_id: int, plan: TopicsPlan, staged: StagedBatch) -> dict[str, Any] | None:
        # A batch that is due to commit no table (only messages no table takes, its dead letters
        # committed) has nothing to overlap.
        if not self.state.due(plan.topics_read(), set(staged.records)):
            return None
        read, fed = plan.topics_read(), set(staged.records)
        self._after_flight = self.state.after_batch(batch_id, plan.ends, read=read, fed=fed)
        return plan.ends

    def run_spark_path(self, batch_id: int, plan: TopicsPlan, timings: Timings, fallback: Fallback) -> SyncBatchMetrics:
        return run_spark_batch(self, batch_id, plan, timings.plan_seconds, timings.started, fallback)

    def create_table(self, name: str, samples: Callable[[], list[tuple[Any, Any]]]) -> None:
        """Create table `name` from the pipeline's `table.schema`, else from the schema and key of
        the first of its messages (key, value) that carry both."""
        t = self.config.table_config(name).created_for(self.config.mode)
        if t.schema is not None:
            create_config_table(self.spark, t)
        else:
            create_from_definition(self.spark, t, definition_from_messages(samples()))
        self.sink_for(name)

    # -- the fast path ---------------------------------------------------------------------

    def commit_dead_letters(self, batch_id: int, plan: TopicsPlan, out: StagedBatch) -> StagedBatch:
        """Register the fast path's tables and commit its dead letters (those not held already),
        before any table; `out` with only those."""
        assert self.fast is not None
        held = self.dead_letters.held(self.state, plan)
        bad = [b for b in out.bad if not held.holds(b.source_position)]
        fast = self.fast

        def register() -> bool:
            changed = False
            for name, topics in sorted(out.feeds.items()):
                changed |= self.state.register(name, {t: plan.starts[t] for t in topics})
            return changed

        warn_unknown_fields(batch_id, out.unknown_fields)
        self.dead_letters.commit(
            self.state,
            batch_id,
            plan,
            len(bad),
            out.records_in,
            lambda: bad[0].error,
            lambda: [(b.payload, b.error, b.source_position) for b in bad],
            register,
            discard=lambda: fast.delete_files(out.files, self.sinks, reason="the batch has too many bad records"),
        )
        return dataclasses.replace(out, bad=bad)

    def commit_staged(self, batch_id: int, plan: TopicsPlan, out: StagedBatch, timings: Timings) -> SyncBatchMetrics:
        """Commit the fast path's tables, each with its position; the batch's metrics."""
        path = self.fast_path()
        results = commit_tables(
            batch_id,
            lambda: self.commit_each(
                batch_id,
                plan,
                set(out.records),
                lambda n, p: out.commit_table(n, self.sink_for(n), batch_id, p, batch_path=path),
            ),
        )
        source_lag = self.lag()
        shares = {
            name: TableBatch(name, records=n, bad_count=out.bad_counts.get(name, 0)) for name, n in out.records.items()
        }
        self.record_metrics(results, shares, unrouted=0)
        return batch_metrics(
            SyncBatchMetrics,
            self.config.pipeline,
            batch_id,
            results,
            records_in=out.records_in,
            bad_records=len(out.bad),
            read_decode_seconds=max(0.0, timings.read_seconds - out.write_seconds - out.waited_seconds),
            source_lag=source_lag,
            unknown_fields=out.unknown_fields,
            source_plan_seconds=timings.plan_seconds,
            created_tables=out.created_tables,
            path=path,
            records_as_columns=out.records_as_columns,
        )

    def fast_path(self) -> BatchPath:
        """The fast path this pipeline's batches take when they can."""
        return BatchPath.SYNC_AVRO_FAST if self.config.format in AVRO_FORMATS else BatchPath.SYNC_FAST

    def _write_fast(
        self,
        batch_id: int,
        plan: TopicsPlan,
        state: SyncState,
        ahead: AheadOfTrigger | None = None,
        ranges: list[OffsetRange] | None = None,
    ) -> StagedBatch | Fallback:
        """The batch's files, written by the fast path (tables it routes to that do not exist yet
        created first, from its messages, and named in `created_tables`); or why it is for the
        Spark path. `state`: where the tables stand once the batch in flight (if any) commits.
        With `ahead`, the tasks read `ranges` (every partition the plan stands on) and on past
        them; the run after creating tables reads the plan alone."""
        created: list[str] = []
        if plan.losses:
            return DATA_LOSSES
        out = self._tasks(batch_id, plan, state, created, ahead, ranges)
        if isinstance(out, NewTables):
            refused = self._create_tables(out, created)
            if refused is not None:
                return refused
            out = self._tasks(batch_id, plan, state, created)  # the tables it routes to exist now
        if isinstance(out, NewTables):
            return out.fallback()
        return dataclasses.replace(out, created_tables=tuple(created)) if isinstance(out, StagedBatch) else out

    def _tasks(
        self,
        batch_id: int,
        plan: TopicsPlan,
        state: SyncState,
        created: list[str],
        ahead: AheadOfTrigger | None = None,
        ranges: list[OffsetRange] | None = None,
    ) -> StagedBatch | Fallback | NewTables:
        """One run of the fast path's tasks over the batch, into the tables that exist."""
        assert self.fast is not None
        names = set(state.tables) | set(self.sinks)  # tables created this batch are not registered yet
        sinks = {n: self.sink_for(n) for n in sorted(names) if n in self.sinks or table_exists(self.spark, n)}
        held = {
            n: skipped_below(s.effective(), plan.starts, s.topics(), reset=plan.reset_partitions())
            for n, s in state.tables.items()
            if n in sinks
        }
        feeding = {n: s.topics() for n, s in state.tables.items()}
        read = plan.topics_read()
        batch_tables = {n for n, topics in feeding.items() if topics & read} | set(created)
        with failures_named(batch_place(self.config.pipeline, sorted(batch_tables))):
            items = plan.ranges if ahead is None or ranges is None else ranges
            return self.fast.write(batch_id, items, sinks, feeding, held, ahead=ahead)

    def _create_tables(self, new: NewTables, created: list[str]) -> Fallback | None:
        """Create the tables a batch routes to that do not exist yet, from their samples (appended
        to `created`); or why the Spark path must create them."""
        for name, samples in sorted(new.samples.items()):
            if name in self.sinks or table_exists(self.spark, name):
                self.sink_for(name)
            elif not samples and self.config.table_config(name).schema is None:
                # The Spark path looks further (and says so when no message can make the table).
                return Fallback(FallbackReason.NEW_TABLES, f"no keyed message of new table {name} among the samples")
            else:
                try:
                    self.create_table(name, lambda samples=samples: samples)  # type: ignore[misc]
                except SourceError as exc:  # no schema among the few samples: the Spark path reads more
                    return Fallback(FallbackReason.NEW_TABLES, f"new table {name}: {exc}")
                created.append(name)
        return None

    def commit_each(
        self, batch_id: int, plan: TopicsPlan, fed: set[str], write: Callable[[str, Position], BatchResult]
    ) -> dict[str, BatchResult]:
        """Commit every table the batch feeds (`fed`: tables with records; also every table fed by a
        topic the batch read), several at a time, each with its own position: `write(table, position)`,
        which on a partition found reset is the new log's, below the old one."""
        due = self.state.due(plan.topics_read(), fed)

        def commit(name: str) -> tuple[str, BatchResult]:
            state = self.state.tables[name]
            position = state.after(plan.ends, reset=plan.reset_partitions())
            result = write(name, position)
            crash_point("after_table_commit", batch_id)
            state.batch_id = max(state.batch_id, batch_id)
            state.position = position
            state.committed_at = datetime.now(UTC).isoformat()
            return name, result

        if not due:
            return {}
        with ThreadPoolExecutor(max_workers=min(TABLE_THREADS, len(due))) as pool:
            return dict(pool.map(commit, due))

    def record_metrics(self, results: dict[str, Any], decoded: dict[str, TableBatch], unrouted: int) -> None:
        """The batch in the Prometheus series: each table's counts, the lag, unroutable records."""
        if self.prometheus is None:
            return
        for name, result in results.items():
            if name not in self._table_metrics:
                self._table_metrics[name] = PipelineMetrics(self.config.pipeline, name, source="kafka")
            d = decoded.get(name)
            counts = TableCounts(
                committed=result.committed,
                records_in=d.records if d is not None else 0,
                rows_written=result.rows_written,
                bad_records=d.bad_count if d is not None else 0,
                commit_seconds=result.commit_seconds,
                commit_attempts=result.commit_attempts,
            )
            self._table_metrics[name].record_batch(counts)
        if unrouted > 0:
            self.prometheus.record_bad(unrouted)
        if self._partition_lag is not None:
            self.prometheus.record_lag(self._partition_lag)

    def lag(self) -> int:
        """Records not yet in every table they feed (-1 when the source cannot say)."""
        return self.measure_lag(self.lag_by_partition)

    def lag_by_partition(self) -> dict[str, int]:
        """Records not yet in every table they feed, per `topic/partition`."""
        topics = self.data_topics()
        return self.topics.lag_by_partition({t: self.state.resume_position(t) or {} for t in topics})

    # -- the loop's steps (pipeline/loop.py) -------------------------------------------------

    def remove_abandoned_files(self) -> int:
        """Delete the files of batches that never committed, in every table and the dead-letter table."""
        removed = 0
        for name in self.table_names():
            if table_exists(self.spark, name):
                removed += self.sink_for(name).remove_abandoned_files()
        return removed + self.dead_letters.table.remove_abandoned_files()

    def reload(self) -> None:
        """Read where every table stands again."""
        self.load_state()

    def close(self) -> None:
        """Close the topics' connections."""
        self.topics.close()

    def last_committed_batch(self) -> int | None:
        """The last batch id any table or the dead-letter table committed."""
        return self.state.next_batch_id() - 1

    def last_committed_at(self) -> str | None:
        """The latest commit time among the pipeline's tables."""
        times = [s.committed_at for s in self.state.tables.values() if s.committed_at]
        return max(times) if times else None

    def maintained_tables(self) -> list[str]:
        """Every table the pipeline has fed, and its dead-letter table."""
        return [*self.table_names(), self.dead_letters.table.name]

    def observe(self, metrics: BatchMetrics) -> None:
        """How the batch ran, in the pipeline's series (labelled with its dead-letter table); each
        table's series were recorded with its commit (`record_metrics`)."""
        if self.prometheus is not None:
            self.prometheus.record_path(metrics)


__all__ = ["Position", "SyncBatchMetrics", "SyncRunner"]
