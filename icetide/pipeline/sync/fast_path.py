"""The sync fast path: every table of a batch read, decoded and written in one Spark job.

The Spark path of a pipeline of many tables (pipeline/sync/runner.py) builds and runs a plan per table:
about 2 core-seconds per table and batch beyond the rows (docs/design.md, "Many tables"). Here
each Spark task (executor/sync_task.py) reads a share of the batch's Kafka ranges with librdkafka, decodes every
Debezium event in Python (decode/debezium/rows.py), routes it to its table, skips what that
table already holds, and writes each table's rows as data and equality-delete files with the
table's own writer config (collapse by key, partition values computed in pyarrow). The driver
gets back file metadata only and commits each table, several at a time.

All changes of one key must reach one task (the equality deletes of one commit do not apply
to that commit's own data files), so a task reads whole topics: topics that feed a common table
are read by the same task. With `write_parallelism` above 1, a backlog is the exception: a table
with at least two tasks' worth of records (MIN_TASK_RECORDS each) is cut by whole Kafka
partitions, as Debezium keys every change of a row to one partition, and each task returns the
distinct keys it wrote. A key found in two tasks writes the batch again with whole topics, and
every later batch too (`whole_topics`). A table found fed by two tasks in a batch that cut no
topic sends the batch to the Spark path.

A record the decoder makes a dead letter, as the Spark decoder would, comes back to the driver
(payload, error, source position), which commits it to the dead-letter table before the tables.
Anything the decoder does not take exactly as the Spark decoder would (a truncate, a schema
change to apply, a column type or partition transform it does not produce, a dead letter whose
error it cannot word as the Spark path does, or that only its source block could route) sends
the whole batch to the Spark path, which owns those cases; the files written so far are deleted.
A batch that routes records to tables that do not exist yet returns samples of their messages:
the runner creates the tables and runs the fast path again.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from icetide.commit.committer import WrittenFile
from icetide.decode.debezium.rows import Conversions, NotHere, TableRows
from icetide.errors import IcetideError, one_line
from icetide.executor.kafka_ahead import ReadAhead
from icetide.executor.sync_task import (
    SOURCE_ORDER,
    SyncTable,
    SyncTaskConfig,
    SyncTaskResult,
    TableShare,
    run_tasks,
)
from icetide.executor.task_shares import split_partitions
from icetide.pipeline.batch_path import FallbackReason
from icetide.pipeline.json_fast import MIN_TASK_RECORDS
from icetide.pipeline.read_ahead import AheadOfTrigger, ReadAheadStopped, collect_ahead
from icetide.pipeline.spark_path import avro_transcoding, payload_limits
from icetide.pipeline.staged import Fallback, NewTables, StagedBatch
from icetide.sink.sink import UpsertSink
from icetide.sources.base import raise_source_error_in
from icetide.sources.kafka_reader import OffsetRange
from icetide.write.keys import keys_meet
from icetide.write.transforms import computable

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from icetide.config.pipeline import PipelineConfig

log = logging.getLogger(__name__)


def task_groups(
    ranges: list[OffsetRange], feeding: dict[str, set[str]], tasks: int, *, cut_from: int | None = None
) -> list[list[OffsetRange]]:
    """The batch's ranges cut into at most `tasks` groups, never splitting a topic nor topics that
    feed a common table (`feeding`: table -> its topics): largest first, each to the lightest group.

    With `cut_from`, such a component of at least twice that many records is first cut by whole
    partitions into a piece per `cut_from` records (at most `tasks`): its tables' keys must then
    be checked not to meet (`SyncFastPath.write`)."""
    parent: dict[str, str] = {}

    def root(t: str) -> str:
        while parent.setdefault(t, t) != t:
            t = parent[t]
        return t

    for topics in feeding.values():
        first, *rest = sorted(topics) or [""]
        for t in rest:
            parent[root(t)] = root(first)
    components: dict[str, list[OffsetRange]] = {}
    for r in ranges:
        components.setdefault(root(r.topic), []).append(r)
    pieces: list[list[OffsetRange]] = []
    for component in components.values():
        cuts = min(tasks, sum(r.count for r in component) // cut_from) if cut_from else 1
        pieces.extend(split_partitions(component, cuts) if cuts > 1 else [component])
    ordered = sorted(pieces, key=lambda rs: -sum(r.count for r in rs))
    groups: list[list[OffsetRange]] = [[] for _ in range(max(1, min(tasks, len(ordered))))]
    loads = [0] * len(groups)
    for component in ordered:
        i = min(range(len(groups)), key=lambda g: (loads[g], len(groups[g])))  # empty ranges (read ahead) spread too
        groups[i].extend(component)
        loads[i] += sum(r.count for r in component)
    return [g for g in groups if g]


def _cuts_a_topic(groups: list[Any]) -> bool:
    """Do the tasks' groups share a topic (a backlog cut by partitions, `task_groups`)?"""
    seen: dict[str, int] = {}
    for i, group in enumerate(groups):
        for r in group:
            if isinstance(r, OffsetRange) and seen.setdefault(r.topic, i) != i:
                return True
    return False


def _keys_of(name: str, results: list[SyncTaskResult]) -> list[pa.Table]:
    """The distinct keys each task wrote to table `name`."""
    return [k for r in results if name in r.tables for k in [r.tables[name].keys] if k is not None]


def merged_shares(results: list[SyncTaskResult]) -> dict[str, TableShare]:
    """Each table's shares of the batch's tasks as one: a table cut by partitions has several."""
    merged: dict[str, TableShare] = {}
    for r in results:
        for name, share in r.tables.items():
            into = merged.setdefault(name, TableShare())
            into.files.extend(share.files)
            into.records += share.records
            into.bad += share.bad
            into.feeds |= share.feeds
            for k, v in share.unknown_fields.items():
                into.unknown_fields[k] = into.unknown_fields.get(k, 0) + v
    return merged


class SyncFastPath:
    """Drives the fast path for a pipeline of many tables."""

    def __init__(
        self, spark: SparkSession, config: PipelineConfig, consumer_settings: dict[str, str], read_timeout: float
    ) -> None:
        self.spark = spark
        self.config = config
        self.consumer_settings = consumer_settings
        self.read_timeout = read_timeout
        tz = spark.conf.get("spark.sql.session.timeZone") or "UTC"
        s = config.debezium
        self.conversions = Conversions(
            time_zone=tz, decimal_handling_mode=s.decimal_handling_mode, time_precision_mode=s.time_precision_mode
        )
        # name -> (writer config version, the table or why the fast path cannot write it)
        self._tables: dict[str, tuple[Any, SyncTable | Fallback]] = {}
        self.whole_topics = False  # a key met in two tasks' shares of a table: no topic is cut again

    @staticmethod
    def applies(config: PipelineConfig) -> Fallback | None:
        """Why the pipeline's config rules the fast path out, or None."""
        if config.fast_path == "off":
            return Fallback(FallbackReason.FAST_PATH_OFF, "fast_path: off")
        if not config.reads_debezium:
            return Fallback(FallbackReason.FORMAT, f"format: {config.format}")
        if config.source_kind == "files" and config.format != "debezium":  # (refused at load)
            return Fallback(FallbackReason.FORMAT, f"format: {config.format} from landing files")
        if config.source_kind not in ("kafka", "files"):
            return Fallback(FallbackReason.SOURCE, f"source: {config.source_kind}")
        if config.capture_source:
            return Fallback(
                FallbackReason.TWO_STAGE, "stage 1 of a two-stage pipeline (records keep their source position and op)"
            )
        if config.order_by == "_source_ts":
            return Fallback(FallbackReason.ORDER_BY_SOURCE_TS, "order_by: _source_ts")
        return None

    def table(self, sink: UpsertSink) -> SyncTable | Fallback:
        """The table's writer part (batch id 0), or why the fast path cannot write it; cached per
        table schema, spec and writer properties."""
        version = sink.writer_config_version()
        cached = self._tables.get(sink.table_name)
        if cached is None or cached[0] != version:
            built = self._build(sink)
            if isinstance(built, Fallback):
                log.info("sync fast path off for %s: %s", sink.table_name, built.detail)
            cached = self._tables[sink.table_name] = (version, built)
        return cached[1]

    def _build(self, sink: UpsertSink) -> SyncTable | Fallback:
        c = self.config
        order_by = c.order_by or SOURCE_ORDER
        try:
            plan = sink.plan_writers(
                0, order_by=order_by, changelog=c.changelog or c.mode == "append", keep_inserts=c.mode == "append"
            )
        except IcetideError as exc:  # a spec the key does not serve: the Spark path says so
            return Fallback(FallbackReason.PARTITION_SPEC, one_line(exc))
        writer = plan.writer
        schema = writer.table_schema
        if order_by != SOURCE_ORDER and order_by not in schema.names:
            return Fallback(FallbackReason.ORDER_BY_COLUMN, f"order_by {order_by} is not a column")
        try:
            TableRows(schema, writer.key, c.mode, self.conversions)
        except NotHere as exc:  # a column type the decoder does not produce
            return Fallback(FallbackReason.COLUMN_TYPES, one_line(exc))
        for _, transform in plan.partitions:
            source = schema.field(transform.column).type if transform is not None else pa.null()
            if not computable(transform, source):
                return Fallback(
                    FallbackReason.PARTITION_TRANSFORM, f"partition transform {transform} is computed in the JVM"
                )
        return SyncTable(writer=writer, partitions=plan.partitions)

    def write(
        self,
        batch_id: int,
        items: list[OffsetRange] | list[str],
        sinks: dict[str, UpsertSink],
        feeding: dict[str, set[str]],
        held: dict[str, dict[tuple[str, int], int]],
        *,
        ahead: AheadOfTrigger | None = None,
    ) -> StagedBatch | Fallback | NewTables:
        """Run the batch's tasks over its offset ranges (or landing files, all in one task: every
        change of a key must reach the task that writes its table); files written, nothing
        committed; or, when it routes records to tables that do not exist yet, nothing written and
        their samples.

        `sinks`: the pipeline's existing tables; `feeding`: table -> the topics that feed it;
        `held`: table -> offsets below which it already holds its records.

        With `ahead` (`items` holds a range for every partition the plan stands on, empty or not),
        the tasks read past the ranges until the trigger time, and the staged batch's `read_to`
        holds the ranges read; ReadAheadStopped when the run is asked to stop first."""
        tables: dict[str, SyncTable] = {}
        elsewhere: dict[str, Fallback] = {}
        for name, sink in sinks.items():
            built = self.table(sink)
            if isinstance(built, Fallback):
                elsewhere[name] = built
            else:
                writer = dataclasses.replace(built.writer, batch_id=batch_id)
                tables[name] = dataclasses.replace(built, writer=writer, held=held.get(name, {}))
        c = self.config
        config = SyncTaskConfig(
            consumer_settings=self.consumer_settings,
            read_timeout=self.read_timeout,
            template=c.table.name,
            tables=tables,
            elsewhere=elsewhere,
            op_mode=c.mode,
            conversions=self.conversions,
            limits=payload_limits(c),
            evolving=c.schema_evolution,
            avro=avro_transcoding(c),
            files=c.source_kind == "files",
        )
        groups: list[Any]
        parallelism = c.write_parallelism or self.spark.sparkContext.defaultParallelism
        # A table's topic cut by partitions only when write_parallelism asks for it: on 2 cores a
        # second task drained a backlog no faster, at 0.77x the rows per core (docs/design.md).
        cut = not self.whole_topics and (c.write_parallelism or 1) > 1
        cut_from = MIN_TASK_RECORDS if cut else None
        if config.files:
            groups = [list(items)] if items else []
        elif ahead is not None:
            # Every partition, empty ones too; a task per MIN_TASK_RECORDS planned: each holds an
            # executor slot until the trigger, one the maintenance beside the stream can use else.
            ranges = [r for r in items if isinstance(r, OffsetRange)]
            planned = ahead.planned(ranges)
            tasks = max(1, min(parallelism, planned // MIN_TASK_RECORDS))
            groups = task_groups(ranges, feeding, tasks, cut_from=cut_from)
            spare = ahead.spare(c.trigger.max_records, planned, len(groups))
            config = dataclasses.replace(config, ahead=ReadAhead(ahead.until, spare))
        else:
            ranges = [r for r in items if isinstance(r, OffsetRange) and r.end > r.start]
            groups = task_groups(ranges, feeding, parallelism, cut_from=cut_from)
        config = dataclasses.replace(config, key_check=_cuts_a_topic(groups))
        started = time.monotonic()
        try:
            results = self._run_tasks(groups, config, ahead)
        except Exception as exc:
            self.discard(batch_id, sinks.values())
            if ahead is not None and ahead.stop.is_set():
                raise ReadAheadStopped(f"batch {batch_id} stopped while reading ahead; nothing was committed") from exc
            raise_source_error_in(exc)
            log.debug("sync tasks of batch %s failed", batch_id, exc_info=True)
            raise IcetideError(f"writing batch {batch_id} failed: {one_line(exc)}; nothing was committed") from exc
        elapsed = time.monotonic() - started
        written = [(name, f) for r in results for name, share in r.tables.items() for f in share.files]
        reason = next((r.not_here for r in results if r.not_here is not None), None)
        new_tables: dict[str, list[tuple[bytes | None, bytes]]] = {}
        for r in results:
            for name, samples in r.new_tables.items():
                new_tables.setdefault(name, []).extend(samples)
        tasks_of = Counter(name for r in results for name in r.tables)
        fed_by_two = [name for name, tasks in tasks_of.items() if tasks > 1]
        if fed_by_two and not config.key_check:
            reason = reason or Fallback(
                FallbackReason.TABLE_FED_BY_TWO_TASKS,
                f"table {fed_by_two[0]} was fed by two tasks (its topics changed)",
            )
        if reason is not None or new_tables:
            self._delete(written, sinks)
            if any(r.wrote for r in results):
                self.discard(batch_id, sinks.values())
            return reason if reason is not None else NewTables(new_tables)
        met = [name for name in fed_by_two if keys_meet(_keys_of(name, results))]
        if met:
            # Two tasks each wrote a change of one key (a producer that does not key its messages by
            # the row's key): both rows would stay. Written again with whole topics.
            self._delete(written, sinks)
            self.whole_topics = True
            log.info(
                "batch %s: a key of %s came in two Kafka partitions; each topic is read by one task from now on",
                batch_id,
                met[0],
            )
            return self.write(batch_id, items, sinks, feeding, held)
        files: dict[str, list[WrittenFile]] = {}
        for name, f in written:
            files.setdefault(name, []).append(WrittenFile.from_row(f))
        shares = merged_shares(results)
        write_seconds = max((r.write_seconds for r in results), default=0.0)
        read_to = tuple(range_ for r in results for range_ in r.reached) if ahead is not None else None
        waited = min((r.wait_seconds for r in results), default=0.0) if ahead is not None else 0.0
        return StagedBatch(
            files=files,
            records={name: share.records for name, share in shares.items()},
            bad=[b for r in results for b in r.bad],
            bad_counts={name: share.bad for name, share in shares.items()},
            feeds={name: {t for t, _ in share.feeds} for name, share in shares.items()},
            records_in=sum(r.records for r in results),
            unknown_fields={
                f"{name}.{k}": v for name, share in shares.items() for k, v in share.unknown_fields.items()
            },
            read_decode_seconds=max(0.0, elapsed - write_seconds - waited),
            write_seconds=write_seconds,
            records_as_columns=sum(r.records_as_columns for r in results),
            read_to=read_to,
            waited_seconds=waited,
        )

    def _run_tasks(
        self, groups: list[Any], config: SyncTaskConfig, ahead: AheadOfTrigger | None
    ) -> list[SyncTaskResult]:
        """The batch's Spark job, one task per group; a job reading ahead is cancelled when the
        run is asked to stop."""
        if ahead is not None:
            return collect_ahead(
                self.spark, groups, lambda items: run_tasks(config, items), f"pipeline {self.config.pipeline}", ahead
            )
        rdd = self.spark.sparkContext.parallelize(list(enumerate(groups)), max(1, len(groups)))
        return rdd.mapPartitions(lambda items: run_tasks(config, items)).collect()  # type: ignore[no-any-return]

    @staticmethod
    def _delete(written: list[tuple[str, dict[str, Any]]], sinks: dict[str, UpsertSink]) -> None:
        by_table: dict[str, list[WrittenFile]] = {}
        for name, f in written:
            by_table.setdefault(name, []).append(WrittenFile.from_row(f))
        SyncFastPath.delete_files(by_table, sinks, reason="the batch runs on the Spark path")

    @staticmethod
    def delete_files(files: dict[str, list[WrittenFile]], sinks: Mapping[str, UpsertSink], *, reason: str) -> None:
        """Delete files the batch wrote (table -> its files), none of them committed."""
        for name, written in files.items():
            if written:
                sinks[name].delete_files(written, reason=reason)

    @staticmethod
    def discard(batch_id: int, sinks: Any) -> None:
        """Delete whatever the batch's tasks wrote to any of `sinks`' tables."""
        for sink in sinks:
            sink.remove_batch_files(batch_id)
