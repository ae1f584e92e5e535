"""One task of the sync fast path (pipeline/sync/fast_path.py), on an executor: read a share of the
batch's Kafka ranges with librdkafka (or its landing files, line by line as the Spark path reads
them: sources/files.py `json_lines`), decode every Debezium event in Python
(decode/debezium/rows.py), route it to its table, skip what that table already holds, and write
each table's rows as data and equality-delete files with the table's own writer config. Only
file metadata, dead letters, counts and, for tables that do not exist yet, sample messages go
back to the driver; a record only the Spark path takes sends the whole batch there (`not_here`,
with the reason).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Generator, Iterator, Mapping
from contextlib import closing
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from icetide.config.pipeline import table_name_placeholders
from icetide.config.secrets import redacted_repr
from icetide.decode.avro.decoder import messages_for
from icetide.decode.avro.schema_registry import HEADER_BYTES, MAGIC_BYTE
from icetide.decode.debezium.event_runs import MIN_RUN, EventRun, NotColumnar
from icetide.decode.debezium.json_runs import JsonRuns
from icetide.decode.debezium.message import EnvelopeReader
from icetide.decode.debezium.rows import Conversions, NotHere, TableRows, source_order
from icetide.decode.json.block import BadRecord
from icetide.decode.limits import spark_text
from icetide.decode.route import identifier_part
from icetide.decode.spark_compat.connect_text import field_text
from icetide.errors import ExecutorSourceError, SourceAccessError, SourceError, WriteError, one_line
from icetide.executor.kafka_ahead import ReadAhead
from icetide.executor.kafka_blocks import BlockReader, no_cycle_collection
from icetide.executor.writer import WriterConfig, write_changes
from icetide.pipeline.batch_path import FallbackReason
from icetide.pipeline.staged import Fallback
from icetide.sources.files import LINES_PER_FILE, json_lines
from icetide.sources.kafka_reader import OffsetRange
from icetide.spark.worker_imports import keep_zip_directories
from icetide.table.spec import PartitionTransform
from icetide.write.keys import distinct_keys

if TYPE_CHECKING:
    from icetide.decode.avro.decoder import AvroSettings

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
    elsewhere: dict[str, Fallback]  # existing tables the fast path cannot write -> why
    op_mode: str
    conversions: Conversions
    limits: Any
    evolving: bool
    avro: AvroSettings | None = None  # format: debezium-avro | avro: how to read the records
    files: bool = False  # the batch's items are landing files (paths), not Kafka offset ranges
    ahead: ReadAhead | None = None  # read past the ranges until the trigger time (executor/kafka_ahead.py)
    key_check: bool = False  # a table's partitions are cut over tasks: each share returns its distinct keys

    __repr__ = redacted_repr


@dataclass
class TableShare:
    """What a task did for one table."""

    files: list[dict[str, Any]] = field(default_factory=list)
    records: int = 0  # events routed to the table (those it already holds included)
    bad: int = 0  # its dead letters (one per change the Spark path would refuse)
    feeds: set[tuple[str, int]] = field(default_factory=set)  # topic-partitions its events came from
    unknown_fields: dict[str, int] = field(default_factory=dict)
    keys: pa.Table | None = None  # with `key_check`: the distinct keys of the share's changes


@dataclass
class SyncTaskResult:
    """One task: each table's share, or why the batch is for the Spark path, or new tables' samples."""

    tables: dict[str, TableShare] = field(default_factory=dict)
    bad: list[BadRecord] = field(default_factory=list)  # the dead letters of every table
    not_here: Fallback | None = None  # why the batch is for the Spark path
    new_tables: dict[str, list[tuple[bytes | None, bytes]]] = field(default_factory=dict)
    records: int = 0
    decode_seconds: float = 0.0
    write_seconds: float = 0.0
    wrote: bool = False  # it failed after writing files it cannot name: delete the batch's by prefix
    records_as_columns: int = 0  # records read a run at a time (decode/debezium/event_runs.py)
    reached: list[OffsetRange] = field(default_factory=list)  # with `ahead`: the ranges read
    wait_seconds: float = 0.0  # decoding waited for records (with `ahead`: for them to arrive)


class LineMessage:
    """A landing file's line, as the task reads a Kafka message: no key, the line's UTF-8 bytes
    as its value, and as its offset the order it arrived in within the batch (the file's place in
    the plan and the line: sources/files.py LINES_PER_FILE, as the Spark path orders it)."""

    __slots__ = ("_arrival", "_value", "line")

    def __init__(self, value: bytes, line: int, place: int) -> None:
        self._value = value
        self.line = line
        self._arrival = place * LINES_PER_FILE + line

    def key(self) -> None:
        return None

    def value(self) -> bytes:
        return self._value

    def offset(self) -> int:
        return self._arrival


Feed = tuple[str, int]  # (topic, partition), or (landing file, 0)


Block = tuple[Feed, Callable[[Any], str], list[Any]]  # feed, a message's source position, messages


def kafka_blocks(config: SyncTaskConfig, ranges: list[OffsetRange], result: SyncTaskResult) -> Generator[Block]:
    """The ranges' blocks (with `config.ahead`, read on past them: `result.reached` says how far);
    a message's position is "topic/partition@offset", as decode/frames.py `source_position` gives it."""
    with BlockReader(config.consumer_settings, config.read_timeout, ranges, join=False, ahead=config.ahead) as reader:
        try:
            for block in reader.blocks():
                topic, partition_text = block.where.rstrip("@").rsplit("/", 1)
                yield (topic, int(partition_text)), partial(_kafka_position, block.where), block.messages
            result.reached = reader.reached
        finally:
            result.wait_seconds = reader.wait_seconds


def _kafka_position(where: str, message: Any) -> str:
    return f"{where}{message.offset()}"


def _file_position(path: str, message: LineMessage) -> str:
    return f"{path}:{message.line}"


def file_blocks(paths: list[str]) -> Generator[Block]:
    """The files' lines, in plan order, a message's position "path:line"; a file that cannot be
    read fails the task with a SourceError naming it (the batch is read again)."""
    for place, path in enumerate(paths):
        lines = json_lines(path)
        while True:
            try:
                batch = next(lines, None)
            except OSError as exc:
                raise ExecutorSourceError(f"{path}: cannot read: {exc}") from exc
            if batch is None:
                break
            values = batch.column("value").cast(pa.binary()).to_pylist()
            numbers = batch.column("line").to_pylist()
            messages = [LineMessage(v, n, place) for v, n in zip(values, numbers, strict=True)]
            yield (path, 0), partial(_file_position, path), messages


def route_of(template: str, needed: tuple[str, ...], topic: str, source: Mapping[str, Any]) -> str:
    """The table an event goes to (decode/route.py, in Python); NotHere when the source block lacks a field."""
    values = {"topic": topic}
    for name in needed:
        if name != "topic":
            value = source.get(name)
            if value is None:
                raise NotHere(f"an event whose source block has no {name} (a dead letter on the Spark path)")
            values[name] = field_text(value)  # as the Spark path's source struct holds it
    return template.format(**{k: identifier_part(v) for k, v in values.items()})


@dataclass
class _Destination:
    """Where a block's events for one table go, resolved once per block and table, not per message."""

    share: TableShare
    rows: TableRows | None  # None: a table to create, whose messages are sampled
    held: int = -1  # offsets of the block's partition below this are in the table
    by_source: bool = False  # its collapse orders by the events' source order


def sync_task(config: SyncTaskConfig, items: list[OffsetRange] | list[str], tag: str) -> SyncTaskResult:
    """Read, decode, route and write one task's Kafka ranges or landing files (on an executor)."""
    result = SyncTaskResult()
    envelopes = EnvelopeReader(config.limits)
    read = envelopes.read
    runs = JsonRuns(envelopes, config.limits)
    avro = messages_for(config.avro) if config.avro is not None else None
    template, evolving = config.template, config.evolving
    needed = table_name_placeholders(template)
    by_topic = set(needed) <= {"topic"}  # the route needs no source field: one table per block
    rows: dict[str, TableRows] = {}
    records = 0  # tombstones too, as the Spark path counts a batch's records
    started = time.thread_time()

    def one(
        message: Any, destinations: dict[str, _Destination], fixed: str | None, feed: Feed, at: Callable[[Any], str]
    ) -> None:
        value = message.value()
        if avro is not None:
            envelope = avro.envelope(message.key(), value)
        elif value is None:
            return
        elif fixed is None:
            envelope = read(value)
        else:
            envelope = read_fixed(value)
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
            result.bad.extend(BadRecord(text, error, at(message)) for error in errors)
            to.share.bad += len(errors)

    def read_fixed(value: bytes) -> Any:
        """A message whose table is known without its source block (one table, or a route by
        topic): what the quick read leaves to the Spark path (text that is not JSON, a wrapper in
        another layout) is read here as the Spark path's tasks read it (decode/debezium/task.py:
        the same reader, `final`), a dead letter saying why or its event."""
        try:
            return read(value)
        except NotHere:
            envelopes.final = True
            try:
                return read(value)
            finally:
                envelopes.final = False

    def sample(message: Any) -> tuple[bytes, bytes] | None:
        """A keyed message of a table to create, as the JSON converter's (key, value), or None."""
        key, value = message.key(), message.value()
        if key is not None and avro is not None:  # what the table is made from
            key, value = avro.key_message(key), avro.message(key, value)
        return (key, value) if key is not None and value is not None else None

    def run(
        messages: list[Any],
        parse: Callable[[], EventRun],
        check: Callable[[pa.Schema], None],
        destinations: dict[str, _Destination],
        feed: Feed,
    ) -> bool:
        """A run of events of one schema, read as columns by `parse`, routed to the one table all
        of them go to, whose columns `check` takes; False: read its messages one by one."""
        try:
            decoded = parse()
            name = route_of(template, needed, feed[0], decoded.source_fields(needed))
            to = destinations.get(name)
            if to is None:
                to = destinations[name] = _destination(config, result, rows, name, feed)
            if to.rows is None:  # a table to create: the run's first keyed messages are its samples
                samples = result.new_tables[name]
                for message in messages:
                    if len(samples) >= SAMPLE_MESSAGES:
                        break
                    pair = sample(message)
                    if pair is not None:
                        samples.append(pair)
                to.share.records += len(messages)
                return True
            check(to.rows.schema)
            offsets = np.fromiter((m.offset() for m in messages), np.int64, len(messages))
            decoded.add_to(to.rows, offsets, held=to.held, by_source=to.by_source, evolving=evolving)
        except (NotColumnar, NotHere) as exc:
            log.debug("%d messages read one by one: %s", len(messages), exc)
            return False
        to.share.records += len(messages)
        result.records_as_columns += len(messages)
        return True

    try:
        blocks = file_blocks(items) if config.files else kafka_blocks(config, items, result)  # type: ignore[arg-type]
        with closing(blocks):  # the Kafka reader's threads end here, also on an error
            for feed, at, messages in blocks:
                destinations: dict[str, _Destination] = {}
                fixed = route_of(template, needed, feed[0], {}) if by_topic else None
                records += len(messages)
                start = 0
                while start < len(messages):
                    if avro is not None:
                        end, events, values = _avro_run(messages, start, skip_tombstones=avro.settings.envelope)
                        taken = len(values) >= MIN_RUN and run(
                            events, partial(avro.read_run, values), _any_columns, destinations, feed
                        )
                    else:
                        end, events, bodies, head = runs.run(messages, start)
                        taken = len(bodies) >= MIN_RUN and run(
                            events, partial(runs.read, head, bodies), partial(runs.check, head), destinations, feed
                        )
                    if taken:
                        start = end
                        continue
                    for message in messages[start : max(end, start + 1)]:
                        one(message, destinations, fixed, feed, at)
                    start = max(end, start + 1)
    except NotHere as exc:  # a table the fast path cannot write names its own reason
        not_here = result.not_here or Fallback(FallbackReason.RECORD_FOR_SPARK, str(exc))
        return SyncTaskResult(not_here=not_here, records=records)
    except (SourceError, SourceAccessError):
        raise  # the source's failure (the schema registry's too), as on the Spark path
    except Exception as exc:  # a record the decoder did not foresee: the Spark path reads the batch
        failed = Fallback(FallbackReason.DECODER_FAILED, f"the fast decoder failed: {one_line(exc)}")
        return SyncTaskResult(not_here=failed, records=records)
    result.records = records
    result.decode_seconds = time.thread_time() - started
    if result.new_tables:
        return result
    writing = time.perf_counter()
    try:
        for name, collected in rows.items():
            share = result.tables[name]
            share.unknown_fields = collected.unknown
            table = config.tables[name]
            changes = collected.table()
            if config.key_check:
                share.keys = distinct_keys(changes, table.writer.key)
            share.files = write_changes(changes, table.writer, table.partitions, tag)
    except (NotHere, WriteError, ValueError, TypeError, pa.ArrowException) as exc:
        # Files already written are found again by their batch prefix and deleted by the driver.
        failed = Fallback(FallbackReason.WRITE_FAILED, f"writing failed: {one_line(exc)}")
        return SyncTaskResult(not_here=failed, records=records, wrote=True)
    result.write_seconds = time.perf_counter() - writing
    return result


def _any_columns(columns: pa.Schema) -> None:
    """An Avro run's events convert into any table's columns (decode/debezium/event_runs.py says which not)."""


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
    config: SyncTaskConfig, result: SyncTaskResult, rows: dict[str, TableRows], name: str, feed: Feed
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
            table_fallback = config.elsewhere[name]
            result.not_here = Fallback(table_fallback.reason, f"table {name}: {table_fallback.detail}")
            raise NotHere(result.not_here.detail)
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


def run_tasks(config: SyncTaskConfig, items: Any) -> Iterator[SyncTaskResult]:
    from pyspark import TaskContext

    keep_zip_directories()
    ctx = TaskContext.get()
    for index, share in items:
        attempt = ctx.attemptNumber() if ctx else 0
        with no_cycle_collection():
            yield sync_task(config, share, f"t{index:05d}-a{attempt}-{uuid.uuid4().hex[:8]}")
