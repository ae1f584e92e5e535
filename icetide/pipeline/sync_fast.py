"""The sync fast path: every table of a batch read, decoded and written in one Spark job.

The Spark path of a pipeline of many tables (pipeline/sync.py) builds and runs a plan per table:
about 2 core-seconds per table and batch beyond the rows (docs/design.md, "Many tables"). Here
each Spark task reads a share of the batch's Kafka ranges with librdkafka, decodes every
Debezium event in Python (decode/debezium_arrow.py), routes it to its table, skips what that
table already holds, and writes each table's rows as data and equality-delete files with the
table's own writer config (collapse by key, partition values computed in pyarrow). The driver
gets back file metadata only and commits each table, several at a time.

All changes to one table must reach one task (the equality deletes of one commit do not apply
to that commit's own data files), so a task reads whole topics: topics that feed a common table
are read by the same task. A table found fed by two tasks sends the batch to the Spark path.

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
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from icetide.config import table_name_placeholders
from icetide.decode.arrow_json_block import BadRecord
from icetide.decode.avro import messages_for
from icetide.decode.avro_runs import MIN_RUN, NotColumnar
from icetide.decode.connect_values import field_text
from icetide.decode.debezium_arrow import Conversions, NotHere, TableRows, source_order
from icetide.decode.debezium_message import EnvelopeReader
from icetide.decode.limits import spark_text
from icetide.decode.route import identifier_part
from icetide.decode.schema_registry import HEADER_BYTES, MAGIC_BYTE
from icetide.errors import IcetideError, SourceError, one_line
from icetide.pipeline.adapter import avro_transcoding, payload_limits
from icetide.pipeline.fast_append import BlockReader, no_cycle_collection
from icetide.pipeline.staging import Fallback
from icetide.secrets import redacted_repr
from icetide.sink.changelog import ARRIVAL_COLUMN
from icetide.sink.committer import WrittenFile
from icetide.sink.sink import UpsertSink
from icetide.sink.transforms import arrow_partition_values, computable
from icetide.sink.writer import WriteError, WriterConfig, write_task
from icetide.sources.base import SourceAccessError, raise_source_error_in
from icetide.sources.kafka_reader import OffsetRange
from icetide.spark.worker_imports import keep_zip_directories
from icetide.table.spec import PartitionTransform

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from icetide.config import PipelineConfig
    from icetide.decode.avro import AvroSettings

log = logging.getLogger(__name__)

SOURCE_ORDER = "_source_order"
SAMPLE_MESSAGES = 20  # messages of a new table returned to the driver, to create the table from


@dataclass(frozen=True)
class SyncTable:
    """One table's part of the tasks' configuration; plain picklable values."""

    writer: WriterConfig  # its batch id is the batch's
    partitions: tuple[tuple[str, PartitionTransform | None], ...]  # batch column, transform: current and earlier specs
    held: dict[tuple[str, int], int] = field(default_factory=dict)  # offsets below these are in the table


@dataclass(frozen=True)
class SyncTaskConfig:
    """What every task of a batch needs."""

    consumer_settings: dict[str, str]
    read_timeout: float
    template: str
    tables: dict[str, SyncTable]
    elsewhere: dict[str, str]  # existing tables the fast path cannot write -> why
    op_mode: str
    conversions: Conversions
    limits: Any
    evolving: bool
    avro: AvroSettings | None = None  # format: debezium-avro | avro: how to read the records

    __repr__ = redacted_repr


@dataclass
class TableShare:
    """What a task did for one table."""

    files: list[dict[str, Any]] = field(default_factory=list)
    records: int = 0  # events routed to the table (those it already holds included)
    bad: int = 0  # its dead letters (one per change the Spark path would refuse)
    feeds: set[tuple[str, int]] = field(default_factory=set)  # topic-partitions its events came from
    unknown_fields: dict[str, int] = field(default_factory=dict)


@dataclass
class SyncTaskResult:
    """One task: each table's share, or why the batch is for the Spark path, or new tables' samples."""

    tables: dict[str, TableShare] = field(default_factory=dict)
    bad: list[BadRecord] = field(default_factory=list)  # the dead letters of every table
    not_here: str | None = None
    new_tables: dict[str, list[tuple[bytes | None, bytes]]] = field(default_factory=dict)
    records: int = 0
    decode_seconds: float = 0.0
    write_seconds: float = 0.0
    wrote: bool = False  # it failed after writing files it cannot name: delete the batch's by prefix
    records_as_columns: int = 0  # records read a run at a time (decode/avro_runs.py)


def route_of(template: str, needed: tuple[str, ...], topic: str, source: Mapping[str, Any]) -> str:
    """The table an event goes to (decode/route.py, in Python); NotHere when the source block lacks a field."""
    values = {"topic": topic}
    for name in needed:
        if name != "topic":
            value = source.get(name)
            if value is None:
                raise NotHere(f"an event whose source block has no {name} (a dead letter on the Spark path)")
            values[name] = field_text(value, name)  # as the Spark path's source struct holds it
    return template.format(**{k: identifier_part(v) for k, v in values.items()})


@dataclass
class _Destination:
    """Where a block's events for one table go, resolved once per block and table, not per message."""

    share: TableShare
    rows: TableRows | None  # None: a table to create, whose messages are sampled
    held: int = -1  # offsets of the block's partition below this are in the table
    by_source: bool = False  # its collapse orders by the events' source order


def sync_task(config: SyncTaskConfig, ranges: list[OffsetRange], tag: str) -> SyncTaskResult:
    """Read, decode, route and write one task's ranges (on an executor)."""
    result = SyncTaskResult()
    read = EnvelopeReader(config.limits).read
    avro = messages_for(config.avro) if config.avro is not None else None
    template, evolving = config.template, config.evolving
    needed = table_name_placeholders(template)
    by_topic = set(needed) <= {"topic"}  # the route needs no source field: one table per block
    rows: dict[str, TableRows] = {}
    records = 0  # tombstones too, as the Spark path counts a batch's records
    started = time.thread_time()

    def one(message: Any, destinations: dict[str, _Destination], fixed: str | None, feed: tuple[str, int]) -> None:
        value = message.value()
        if avro is not None:
            envelope = avro.envelope(message.key(), value)
        elif value is None:
            return
        else:
            envelope = read(value)
        if envelope is None:
            return
        if envelope.error is not None and fixed is None:  # no source block to route it by
            raise NotHere(f"a dead letter routed by its source block ({envelope.error})")
        name = fixed if fixed is not None else route_of(template, needed, feed[0], envelope.source)
        to = destinations.get(name)
        if to is None:
            to = destinations[name] = _destination(config, result, rows, name, feed)
        to.share.records += 1
        if to.rows is None:
            samples = result.new_tables[name]
            key = message.key()
            if key is not None and len(samples) < SAMPLE_MESSAGES:  # a table is made from a keyed one
                if avro is not None:  # as the JSON converter's messages: what the table is made from
                    key, value = avro.key_message(key), avro.message(key, value)
                if key is not None and value is not None:
                    samples.append((key, value))
            return
        offset = message.offset()
        if offset < to.held:
            return
        order = source_order(envelope.source, envelope.ts_ms, offset) if to.by_source else ""
        errors = to.rows.add(envelope, order, evolving=evolving)
        if errors:
            payload = avro.message(message.key(), value) if avro is not None else value
            text = spark_text(payload) if payload is not None else None  # U+FFFD as the Spark path puts them
            where = f"{feed[0]}/{feed[1]}@{offset}"  # as decode/json.py `source_position`
            result.bad.extend(BadRecord(text, error, where) for error in errors)
            to.share.bad += len(errors)

    def run(
        messages: list[Any], values: list[bytes], destinations: dict[str, _Destination], feed: tuple[str, int]
    ) -> bool:
        """A run of Avro records of one schema id, read as columns, routed to the one table all of
        them go to; False: read it record by record."""
        assert avro is not None
        try:
            decoded = avro.read_run(values)
            name = route_of(template, needed, feed[0], decoded.source_fields(needed))
            to = destinations.get(name)
            if to is None:
                to = destinations[name] = _destination(config, result, rows, name, feed)
            if to.rows is None:  # a table to create: the run's first keyed records are its samples
                samples = result.new_tables[name]
                for message, value in zip(messages, values, strict=True):
                    key = message.key()
                    if len(samples) >= SAMPLE_MESSAGES:
                        break
                    if key is not None:
                        key_message, message_text = avro.key_message(key), avro.message(key, value)
                        if key_message is not None and message_text is not None:
                            samples.append((key_message, message_text))
                to.share.records += len(messages)
                return True
            offsets = np.fromiter((m.offset() for m in messages), np.int64, len(messages))
            decoded.add_to(to.rows, offsets, held=to.held, by_source=to.by_source, evolving=evolving)
        except (NotColumnar, NotHere) as exc:
            log.debug("%d Avro records read one by one: %s", len(messages), exc)
            return False
        to.share.records += len(messages)
        result.records_as_columns += len(messages)
        return True

    try:
        with BlockReader(config, ranges, join=False) as reader:  # type: ignore[arg-type]
            for block in reader.blocks():
                topic, partition_text = block.where.rstrip("@").rsplit("/", 1)
                feed = (topic, int(partition_text))
                destinations: dict[str, _Destination] = {}
                fixed = route_of(template, needed, topic, {}) if by_topic else None
                messages = block.messages
                records += len(messages)
                start = 0
                while start < len(messages):
                    end, events, values = (
                        _avro_run(messages, start, skip_tombstones=avro.settings.envelope)
                        if avro is not None
                        else (start, [], [])
                    )
                    if len(values) >= MIN_RUN and run(events, values, destinations, feed):
                        start = end
                        continue
                    for message in messages[start : max(end, start + 1)]:
                        one(message, destinations, fixed, feed)
                    start = max(end, start + 1)
    except NotHere as exc:
        return SyncTaskResult(not_here=str(exc), records=records)
    except (SourceError, SourceAccessError):
        raise  # the source's failure (the schema registry's too), as on the Spark path
    except Exception as exc:  # a record the decoder did not foresee: the Spark path reads the batch
        return SyncTaskResult(not_here=f"the fast decoder failed: {one_line(exc)}", records=records)
    result.records = records
    result.decode_seconds = time.thread_time() - started
    if result.new_tables:
        return result
    writing = time.perf_counter()
    try:
        for name, collected in rows.items():
            share = result.tables[name]
            share.unknown_fields = collected.unknown
            share.files = _write_table(collected.table(), config.tables[name], tag)
    except (NotHere, WriteError, ValueError, TypeError, pa.ArrowException) as exc:
        # Files already written are found again by their batch prefix and deleted by the driver.
        return SyncTaskResult(not_here=f"writing failed: {one_line(exc)}", records=records, wrote=True)
    result.write_seconds = time.perf_counter() - writing
    return result


def _avro_run(messages: Any, start: int, *, skip_tombstones: bool) -> tuple[int, list[Any], list[bytes]]:
    """(end, events, values) of the run of wire-format Avro values of one schema id from `start`:
    the messages up to `end`, those of them that carry a value, and their values (end == start:
    the message there is not one). Tombstones are in the run when `skip_tombstones` (Debezium's,
    which follow a delete and change nothing), else they end it (`avro`'s delete a key)."""
    events: list[Any] = []
    values: list[bytes] = []
    head = None
    end = start
    for message in messages[start:]:
        value = message.value()
        if value is None and skip_tombstones:
            end += 1
            continue
        if value is None or len(value) < HEADER_BYTES or value[0] != MAGIC_BYTE:
            break
        if head is None:
            head = value[:HEADER_BYTES]
        elif value[:HEADER_BYTES] != head:
            break
        events.append(message)
        values.append(value)
        end += 1
    return end, events, values


def _destination(
    config: SyncTaskConfig, result: SyncTaskResult, rows: dict[str, TableRows], name: str, feed: tuple[str, int]
) -> _Destination:
    """Table `name`'s share, rows and held offset for a block from topic-partition `feed`; NotHere
    for a table the fast path cannot write."""
    share = result.tables.get(name)
    if share is None:
        share = result.tables[name] = TableShare()
    share.feeds.add(feed)
    table = config.tables.get(name)
    if table is None:
        if name in config.elsewhere:
            raise NotHere(f"table {name}: {config.elsewhere[name]}")
        result.new_tables.setdefault(name, [])
        return _Destination(share, None)
    collected = rows.get(name)
    if collected is None:
        w = table.writer
        collected = rows[name] = TableRows(w.table_schema, w.key, config.op_mode, config.conversions)
    return _Destination(share, collected, table.held.get(feed, -1), _orders_by_source(table))


def _orders_by_source(table: SyncTable) -> bool:
    """Does the table's collapse order by the events' source order?"""
    return table.writer.order_by == SOURCE_ORDER


def _write_table(changes: pa.Table, table: SyncTable, tag: str) -> list[dict[str, Any]]:
    """Collapse one table's changes and write its data and equality-delete files."""
    if changes.num_rows == 0:
        return []
    changes = changes.append_column(ARRIVAL_COLUMN, pa.array(np.arange(changes.num_rows, dtype=np.int64)))
    for column, transform in table.partitions:
        source = changes[transform.column] if transform is not None else changes.column(0)
        changes = changes.append_column(column, arrow_partition_values(source, transform))
    out = write_task(iter(changes.to_batches()), table.writer, tag)
    names = out.schema.names
    return [dict(zip(names, row, strict=True)) for row in zip(*out.to_pydict().values(), strict=True)]


def _run_partition(config: SyncTaskConfig, items: Any) -> Iterator[SyncTaskResult]:
    from pyspark import TaskContext

    keep_zip_directories()
    ctx = TaskContext.get()
    for index, ranges in items:
        attempt = ctx.attemptNumber() if ctx else 0
        with no_cycle_collection():
            yield sync_task(config, ranges, f"t{index:05d}-a{attempt}-{uuid.uuid4().hex[:8]}")


def task_groups(ranges: list[OffsetRange], feeding: dict[str, set[str]], tasks: int) -> list[list[OffsetRange]]:
    """The batch's ranges cut into at most `tasks` groups, never splitting a topic nor topics that
    feed a common table (`feeding`: table -> its topics): largest first, each to the lightest group."""
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
    ordered = sorted(components.values(), key=lambda rs: -sum(r.count for r in rs))
    groups: list[list[OffsetRange]] = [[] for _ in range(max(1, min(tasks, len(ordered))))]
    loads = [0] * len(groups)
    for component in ordered:
        i = loads.index(min(loads))
        groups[i].extend(component)
        loads[i] += sum(r.count for r in component)
    return [g for g in groups if g]


@dataclass(frozen=True)
class SyncFastBatch:
    """What the fast path wrote for a batch, nothing committed: per table its files and counts."""

    files: dict[str, list[WrittenFile]]
    records: dict[str, int]
    feeds: dict[str, set[str]]  # table -> topics its events came from
    bad: list[BadRecord]  # the dead letters of every table, none committed
    bad_counts: dict[str, int]  # table -> its dead letters
    records_in: int
    unknown_fields: dict[str, int]  # "table.field" -> records
    read_decode_seconds: float
    write_seconds: float
    records_as_columns: int = 0  # records read a run at a time (decode/avro_runs.py)


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

    @staticmethod
    def applies(config: PipelineConfig) -> Fallback | None:
        """Why the pipeline's config rules the fast path out, or None."""
        if config.fast_path == "off":
            return Fallback("fast_path: off")
        if not config.reads_debezium:
            return Fallback(f"format: {config.format}")
        if config.source_kind != "kafka":
            return Fallback(f"source: {config.source_kind}")
        if config.capture_source:
            return Fallback("stage 1 of a two-stage pipeline (records keep their source position and op)")
        if config.order_by == "_source_ts":
            return Fallback("order_by: _source_ts")
        return None

    def table(self, sink: UpsertSink) -> SyncTable | Fallback:
        """The table's writer part (batch id 0), or why the fast path cannot write it; cached per
        table schema, spec and writer properties."""
        version = sink.writer_config_version()
        cached = self._tables.get(sink.table_name)
        if cached is None or cached[0] != version:
            try:
                built: SyncTable | Fallback = self._build(sink)
            except (IcetideError, NotHere) as exc:
                built = Fallback(one_line(exc))
            if isinstance(built, Fallback):
                log.info("sync fast path off for %s: %s", sink.table_name, built.reason)
            cached = self._tables[sink.table_name] = (version, built)
        return cached[1]

    def _build(self, sink: UpsertSink) -> SyncTable | Fallback:
        c = self.config
        plan = sink.plan_writers(0)
        order_by = c.order_by or SOURCE_ORDER
        writer = dataclasses.replace(
            plan.writer,
            order_by=order_by,
            changelog=c.changelog or c.mode == "append",
            keep_inserts=c.mode == "append",
        )
        schema = writer.table_schema
        if order_by != SOURCE_ORDER and order_by not in schema.names:
            return Fallback(f"order_by {order_by} is not a column")
        TableRows(schema, writer.key, c.mode, self.conversions)  # NotHere for a column type it does not produce
        for _, transform in plan.partitions:
            source = schema.field(transform.column).type if transform is not None else pa.null()
            if not computable(transform, source):
                return Fallback(f"partition transform {transform} is computed in the JVM")
        return SyncTable(writer=writer, partitions=plan.partitions)

    def write(
        self,
        batch_id: int,
        ranges: list[OffsetRange],
        sinks: dict[str, UpsertSink],
        feeding: dict[str, set[str]],
        held: dict[str, dict[tuple[str, int], int]],
    ) -> SyncFastBatch | Fallback:
        """Run the batch's tasks over its offset `ranges`; files written, nothing committed.

        `sinks`: the pipeline's existing tables; `feeding`: table -> the topics that feed it;
        `held`: table -> offsets below which it already holds its records."""
        tables: dict[str, SyncTable] = {}
        elsewhere: dict[str, str] = {}
        for name, sink in sinks.items():
            built = self.table(sink)
            if isinstance(built, Fallback):
                elsewhere[name] = built.reason
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
        )
        ranges = [r for r in ranges if r.end > r.start]
        parallelism = c.write_parallelism or self.spark.sparkContext.defaultParallelism
        groups = task_groups(ranges, feeding, parallelism)
        started = time.monotonic()
        try:
            rdd = self.spark.sparkContext.parallelize(list(enumerate(groups)), max(1, len(groups)))
            results: list[SyncTaskResult] = rdd.mapPartitions(lambda items: _run_partition(config, items)).collect()
        except Exception as exc:
            self.discard(batch_id, sinks.values())
            raise_source_error_in(exc)
            log.debug("sync tasks of batch %s failed", batch_id, exc_info=True)
            raise IcetideError(f"writing batch {batch_id} failed: {one_line(exc)}; nothing was committed") from exc
        elapsed = time.monotonic() - started
        written = [(name, f) for r in results for name, share in r.tables.items() for f in share.files]
        reason = next((r.not_here for r in results if r.not_here), None)
        new_tables: dict[str, list[tuple[bytes | None, bytes]]] = {}
        for r in results:
            for name, samples in r.new_tables.items():
                new_tables.setdefault(name, []).extend(samples)
        fed_by: dict[str, int] = {}
        for i, r in enumerate(results):
            for name in r.tables:
                if fed_by.setdefault(name, i) != i:
                    reason = reason or f"table {name} was fed by two tasks (its topics changed)"
        if reason is not None or new_tables:
            self._delete(written, sinks)
            if any(r.wrote for r in results):
                self.discard(batch_id, sinks.values())
            return Fallback(reason or f"new tables: {', '.join(sorted(new_tables))}", new_tables if not reason else {})
        files: dict[str, list[WrittenFile]] = {}
        for name, f in written:
            files.setdefault(name, []).append(WrittenFile.from_row(f))
        shares = [(name, share) for r in results for name, share in r.tables.items()]
        write_seconds = max((r.write_seconds for r in results), default=0.0)
        return SyncFastBatch(
            files=files,
            records={name: share.records for name, share in shares},
            bad=[b for r in results for b in r.bad],
            bad_counts={name: share.bad for name, share in shares},
            feeds={name: {t for t, _ in share.feeds} for name, share in shares},
            records_in=sum(r.records for r in results),
            unknown_fields={f"{name}.{k}": v for name, share in shares for k, v in share.unknown_fields.items()},
            read_decode_seconds=max(0.0, elapsed - write_seconds),
            write_seconds=write_seconds,
            records_as_columns=sum(r.records_as_columns for r in results),
        )

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
                sinks[name].committer.delete_files(written, reason=reason)

    @staticmethod
    def discard(batch_id: int, sinks: Any) -> None:
        """Delete whatever the batch's tasks wrote to any of `sinks`' tables."""
        for sink in sinks:
            sink.remove_batch_files(batch_id)
