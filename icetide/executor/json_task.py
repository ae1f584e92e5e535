"""The JSON fast path's task, on an executor (pipeline/json_fast.py drives it): read a share of a
batch's Kafka ranges or landing files, decode them, write the files, return their metadata.

Rows never cross into the JVM: a task returns only its files' Iceberg metadata (WRITTEN_FILE_SCHEMA
dicts), its bad records and, for upserts in several tasks, its distinct keys.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Generator, Iterable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from icetide.config.secrets import redacted_repr
from icetide.decode.json.block import BadRecord, DecodedBlock
from icetide.decode.json.records import ArrowJsonDecoder
from icetide.errors import ExecutorSourceError
from icetide.executor.kafka_ahead import ReadAhead
from icetide.executor.kafka_blocks import BlockReader, no_cycle_collection
from icetide.executor.writer import WriterConfig, with_partition_values, write_appends, write_changes
from icetide.faults import crash_point
from icetide.sources.files import json_lines
from icetide.sources.kafka_reader import OffsetRange
from icetide.spark.worker_imports import keep_zip_directories
from icetide.table.spec import PartitionTransform
from icetide.write.keys import distinct_keys


@dataclass(frozen=True)
class JsonTaskConfig:
    """Everything an append task needs; plain picklable values computed on the driver."""

    consumer_settings: dict[str, str]
    read_timeout: float
    decoder: ArrowJsonDecoder
    writer: WriterConfig
    partitions: tuple[tuple[str, PartitionTransform | None], ...]  # (batch column, transform), spec order
    upsert: bool = False  # mode upsert: changes collapsed by key, data and equality-delete files
    reads_files: bool = False  # a task's work is landing files (paths), not Kafka offset ranges
    key_check: bool = False  # upserts in more than one task: each returns its distinct keys
    ahead: ReadAhead | None = None  # read past the ranges until the trigger time (executor/kafka_ahead.py)

    __repr__ = redacted_repr  # the consumer's sasl.password and the like show as ***


@dataclass
class JsonTaskResult:
    """What one task did: its files (WRITTEN_FILE_SCHEMA dicts), bad records and timings.

    Timings: `read_seconds` is the reader thread's CPU time (librdkafka consume, Message objects,
    joining payloads), `wait_seconds` how long decoding waited for a block, `decode_seconds` the
    decoding thread's CPU time, `write_seconds` the wall time of partitioning and writing, and
    `cpu_seconds` the whole process's CPU time during the task (librdkafka's own threads too).
    """

    files: list[dict[str, Any]] = field(default_factory=list)
    bad: list[BadRecord] = field(default_factory=list)
    records: int = 0
    changes: bool = False  # a record carries an `_op` other than INSERT: nothing was written
    keys: pa.Table | None = None  # with `key_check`: the distinct keys of the task's changes
    unknown_fields: dict[str, int] = field(default_factory=dict)  # keys that are no column -> records
    nested_as_text: int = 0  # objects and arrays kept as JSON text in STRING columns (json: nested_as_text)
    reached: list[OffsetRange] = field(default_factory=list)  # with `ahead`: the ranges read
    read_seconds: float = 0.0
    wait_seconds: float = 0.0
    decode_seconds: float = 0.0
    write_seconds: float = 0.0
    cpu_seconds: float = 0.0
    started_at: float = 0.0  # time.time() on the executor, for the debug log's task timeline
    finished_at: float = 0.0

    def timings(self) -> tuple[float, ...]:
        """(read cpu, wait, decode cpu, write, task cpu) seconds, rounded for a log line."""
        times = (self.read_seconds, self.wait_seconds, self.decode_seconds, self.write_seconds, self.cpu_seconds)
        return tuple(round(t, 2) for t in times)


def summed_counts(counts: Iterable[dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in counts:
        for name, n in c.items():
            out[name] = out.get(name, 0) + n
    return out


def fast_json_task(config: JsonTaskConfig, work: list[OffsetRange] | list[str], tag: str) -> JsonTaskResult:
    """Read, decode and write one task's Kafka ranges or landing files (on an executor)."""
    result = JsonTaskResult(started_at=time.time())
    cpu_started = time.process_time()
    tables: list[pa.Table] = []
    blocks = _file_blocks(config, work, result) if config.reads_files else _kafka_blocks(config, work, result)
    try:
        for decoded in blocks:
            result.records += decoded.rows.num_rows + len(decoded.bad)
            result.bad.extend(decoded.bad)
            for name, count in decoded.unknown_fields.items():
                result.unknown_fields[name] = result.unknown_fields.get(name, 0) + count
            result.nested_as_text += decoded.nested_as_text
            if decoded.changes and not config.upsert:
                result.changes = True
                return result
            if decoded.rows.num_rows:
                tables.append(decoded.with_ops() if config.upsert else decoded.rows)
    finally:
        blocks.close()
    writing = time.perf_counter()
    if tables:
        table = pa.concat_tables(tables)
        if config.upsert:
            if config.key_check:
                result.keys = distinct_keys(table, config.writer.key)
            result.files = write_changes(table, config.writer, config.partitions, tag)
        else:
            result.files = write_appends(with_partition_values(table, config.partitions), config.writer, tag)
    result.write_seconds = time.perf_counter() - writing
    result.cpu_seconds = time.process_time() - cpu_started
    result.finished_at = time.time()
    return result


def _kafka_blocks(config: JsonTaskConfig, ranges: list[Any], result: JsonTaskResult) -> Generator[DecodedBlock]:
    """The task's Kafka ranges, decoded a block at a time (executor/kafka_blocks.py)."""
    decoder = config.decoder
    with BlockReader(config.consumer_settings, config.read_timeout, ranges, ahead=config.ahead) as reader:
        try:
            for block in reader.blocks():
                decoding = time.thread_time()
                messages, where = block.messages, block.where

                def position(i: int, messages: list[Any] = messages, where: str = where) -> str:
                    return f"{where}{messages[i].offset()}"

                def values(messages: list[Any] = messages) -> list[Any]:
                    return [m.value() for m in messages]

                if block.joined is None:
                    decoded = decoder.decode(values(), position)
                else:
                    decoded = decoder.decode_joined(block.joined, len(messages), values, position)
                result.decode_seconds += time.thread_time() - decoding
                yield decoded
            result.reached = reader.reached
        finally:
            result.read_seconds = reader.cpu_seconds
            result.wait_seconds = reader.wait_seconds


def _file_blocks(config: JsonTaskConfig, paths: list[Any], result: JsonTaskResult) -> Generator[DecodedBlock]:
    """The task's landing files, in order, decoded a chunk of lines at a time; the lines and their
    positions ("file:line") are the Spark path's (sources/files.py `json_lines`)."""
    for path in paths:
        lines = json_lines(path)
        while True:
            reading = time.thread_time()
            try:
                batch = next(lines, None)
            except OSError as exc:
                raise ExecutorSourceError(f"{path}: cannot read: {exc}") from exc
            result.read_seconds += time.thread_time() - reading
            if batch is None:
                break
            decoding = time.thread_time()
            numbers = batch.column("line").to_pylist()
            values = batch.column("value").cast(pa.binary()).to_pylist()

            def position(i: int, path: str = path, numbers: list[int] = numbers) -> str:
                return f"{path}:{numbers[i]}"

            decoded = config.decoder.decode(values, position)
            result.decode_seconds += time.thread_time() - decoding
            yield decoded


def run_json_tasks(config: JsonTaskConfig, items: Any) -> Any:
    """The body of one Spark partition of the fast path: its (index, work) items, one task each."""
    from pyspark import TaskContext

    keep_zip_directories()
    ctx = TaskContext.get()
    for index, ranges in items:
        attempt = ctx.attemptNumber() if ctx else 0
        with no_cycle_collection():
            result = fast_json_task(config, ranges, f"t{index:05d}-a{attempt}-{uuid.uuid4().hex[:8]}")
        if attempt == 0:  # a rerun elsewhere goes through
            crash_point("task_files_written", config.writer.batch_id)  # its files are in storage, unreported
        yield result
