"""The append fast path: Kafka JSON records to Iceberg data files in one pass per Spark task.

For `mode: append`, a Kafka source and `format: json`, each Spark task reads its share of the
batch's offset ranges with librdkafka, decodes the payloads with pyarrow (decode/arrow_json.py),
computes the partition values in pyarrow (sink/transforms.py) and writes the data files right
there with the sink's rolling writer. Rows never cross into the JVM; a task returns only its
files' Iceberg metadata and its bad records. The driver then commits exactly as the runner's
Spark path does: dead letters first (with the plan), then the data with the batch id and the
position. Files are named like the sink's (`icetide-<pipeline>-b<batch>-...`), so an abandoned
batch's files are found and deleted on restart.

The runner keeps the Spark path (decode in the JVM, UpsertSink) when `fast_path: off`, for
column types the pyarrow decoder does not produce, for partition transforms pyarrow does not
compute (bucket), and for a batch whose records carry an `_op` other than INSERT (the tasks
then write nothing of it and the batch is run again on the Spark path).
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from icetide.decode.arrow_json import ArrowJsonDecoder, BadRecord, unsupported_columns
from icetide.errors import IcetideError, one_line
from icetide.sink.committer import WrittenFile
from icetide.sink.sink import PARTITION_COLUMN_PREFIX, UpsertSink
from icetide.sink.transforms import arrow_partition_values, computable
from icetide.sink.writer import WriterConfig, write_appends
from icetide.sources.base import ExecutorSourceError, source_error_in
from icetide.sources.kafka_reader import OffsetRange, RangeReader, _kafka
from icetide.table.iceberg import partition_fields
from icetide.table.spec import PartitionTransform

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from icetide.config import PipelineConfig
    from icetide.sources.kafka import KafkaSource

log = logging.getLogger(__name__)

MIN_TASK_RECORDS = 25_000  # below this a second task costs more (consumer, worker) than it saves
BLOCK_RECORDS = 50_000  # records decoded per pyarrow call


@dataclass(frozen=True)
class AppendTaskConfig:
    """Everything an append task needs; plain picklable values computed on the driver."""

    consumer_settings: dict[str, str]
    read_timeout: float
    decoder: ArrowJsonDecoder
    writer: WriterConfig
    partitions: tuple[tuple[str, PartitionTransform | None], ...]  # (batch column, transform), spec order


@dataclass
class AppendTaskResult:
    """What one task did: its files (WRITTEN_FILE_SCHEMA dicts), bad records and timings."""

    files: list[dict[str, Any]] = field(default_factory=list)
    bad: list[BadRecord] = field(default_factory=list)
    records: int = 0
    changes: bool = False  # a record carries an `_op` other than INSERT: nothing was written
    read_seconds: float = 0.0
    decode_seconds: float = 0.0
    write_seconds: float = 0.0


def split_ranges(ranges: list[OffsetRange], tasks: int) -> list[list[OffsetRange]]:
    """Cut the ranges into at most `tasks` groups of about equal offset counts, in order."""
    total = sum(r.count for r in ranges)
    share = max(1, math.ceil(total / max(1, tasks)))
    groups: list[list[OffsetRange]] = [[]]
    room = share
    for r in ranges:
        start = r.start
        while start < r.end:
            if room == 0:
                groups.append([])
                room = share
            take = min(room, r.end - start)
            groups[-1].append(OffsetRange(r.topic, r.partition, start, start + take))
            start += take
            room -= take
    return [g for g in groups if g]


def append_task(config: AppendTaskConfig, ranges: list[OffsetRange], tag: str) -> AppendTaskResult:
    """Read, decode and write one task's ranges (on an executor)."""
    kafka = _kafka()
    result = AppendTaskResult()
    tables: list[pa.Table] = []
    for r in ranges:
        try:  # a consumer per range: it never sees another partition's prefetched records
            consumer = kafka.Consumer(dict(config.consumer_settings))
        except Exception as exc:
            raise ExecutorSourceError(f"{r.topic}/{r.partition}@{r.start}: cannot create a consumer: {exc}") from exc
        try:
            reader = RangeReader(
                consumer,
                r,
                read_timeout=config.read_timeout,
                batch_rows=BLOCK_RECORDS,
                topic_partition=kafka.TopicPartition,
            )
            where = f"{r.topic}/{r.partition}@"
            started = time.perf_counter()
            for block in reader.message_blocks():
                decoding = time.perf_counter()
                result.read_seconds += decoding - started
                values = [m.value() for m in block]
                decoded = config.decoder.decode(values, lambda i, b=block, w=where: f"{w}{b[i].offset()}")  # type: ignore[misc]
                result.records += decoded.rows.num_rows + len(decoded.bad)
                result.bad.extend(decoded.bad)
                if decoded.changes:
                    result.changes = True
                    return result
                if decoded.rows.num_rows:
                    tables.append(decoded.rows)
                started = time.perf_counter()
                result.decode_seconds += started - decoding
            result.read_seconds += time.perf_counter() - started
        finally:
            consumer.close()
    writing = time.perf_counter()
    if tables:
        table = pa.concat_tables(tables)
        for name, transform in config.partitions:
            source = table[transform.column] if transform is not None else table.column(0)
            table = table.append_column(name, arrow_partition_values(source, transform))
        result.files = write_appends(table, config.writer, tag)
    result.write_seconds = time.perf_counter() - writing
    return result


def _run_partition(config: AppendTaskConfig, items: Any) -> Any:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    for index, ranges in items:
        attempt = ctx.attemptNumber() if ctx else 0
        yield append_task(config, ranges, f"t{index:05d}-a{attempt}-{uuid.uuid4().hex[:8]}")


@dataclass(frozen=True)
class FastBatch:
    """What the fast path did for one batch, before anything is committed."""

    files: list[WrittenFile]
    bad: list[BadRecord]
    records_in: int
    changes: bool
    read_decode_seconds: float
    write_seconds: float


class FastAppend:
    """Drives the fast path for one pipeline: decides if a batch can take it, runs its tasks."""

    def __init__(self, spark: SparkSession, config: PipelineConfig, sink: UpsertSink, kafka: KafkaSource) -> None:
        self.spark = spark
        self.config = config
        self.sink = sink
        self.kafka = kafka
        self.time_zone = spark.conf.get("spark.sql.session.timeZone") or "UTC"
        self._checked: tuple[Any, str | None] | None = None

    @staticmethod
    def applies(config: PipelineConfig) -> str | None:
        """Why the pipeline's config rules the fast path out, or None."""
        if config.fast_path == "off":
            return "fast_path: off"
        if config.capture_source:
            return "stage 1 of a two-stage pipeline (records keep their source position and op)"
        if config.mode != "append":
            return f"mode: {config.mode}"
        if config.source_kind != "kafka":
            return f"source: {config.source_kind}"
        if config.format != "json":
            return f"format: {config.format}"
        return None

    def unavailable(self) -> str | None:
        """Why the table (as last refreshed) rules the fast path out, or None; checked per schema/spec."""
        jtable = self.sink.committer.table
        version = (int(jtable.schema().schemaId()), int(jtable.spec().specId()))
        if self._checked is not None and self._checked[0] == version:
            return self._checked[1]
        reason = self._check(jtable)
        if reason:
            log.info("append fast path off for %s: %s", self.sink.table_name, reason)
        self._checked = (version, reason)
        return reason

    def _check(self, jtable: Any) -> str | None:
        from zoneinfo import ZoneInfo

        schema = self.sink.writer_config(0, ()).table_schema
        missing = unsupported_columns(schema)
        if missing:
            return f"column types the pyarrow decoder does not produce: {', '.join(missing)}"
        try:
            ZoneInfo(self.time_zone)
        except (ValueError, KeyError):
            return f"session time zone {self.time_zone!r} is not a zone name"
        for pf in partition_fields(jtable):
            source = schema.field(pf.transform.column).type if pf.transform else pa.null()
            if not computable(pf.transform, source):
                return f"partition field {pf.name} ({pf.transform}) is computed in the JVM"
        return None

    def task_config(self, batch_id: int) -> AppendTaskConfig:
        """The tasks' configuration for `batch_id`, from the table's current metadata."""
        fields = partition_fields(self.sink.committer.table)
        names = tuple(f"{PARTITION_COLUMN_PREFIX}{i}" for i in range(len(fields)))
        writer = self.sink.writer_config(batch_id, names)
        source = self.kafka.config
        return AppendTaskConfig(
            consumer_settings=source.consumer_settings(),
            read_timeout=source.read_timeout_seconds,
            decoder=ArrowJsonDecoder(writer.table_schema, writer.key, time_zone=self.time_zone),
            writer=writer,
            partitions=tuple((n, pf.transform) for n, pf in zip(names, fields, strict=True)),
        )

    def tasks_for(self, records: int) -> int:
        """How many tasks a batch of `records` runs in: Spark's parallelism, if there is enough to share."""
        parallelism = self.config.write_parallelism or self.spark.sparkContext.defaultParallelism
        return max(1, min(parallelism, records // MIN_TASK_RECORDS))

    def write(self, batch_id: int, ranges: list[OffsetRange]) -> FastBatch:
        """Run the batch's tasks; files written, nothing committed. Failed tasks' files are deleted."""
        config = self.task_config(batch_id)
        groups = split_ranges([r for r in ranges if r.count > 0], self.tasks_for(sum(r.count for r in ranges)))
        started = time.monotonic()
        try:
            rdd = self.spark.sparkContext.parallelize(list(enumerate(groups)), max(1, len(groups)))
            results: list[AppendTaskResult] = rdd.mapPartitions(lambda items: _run_partition(config, items)).collect()
        except Exception as exc:
            self.discard(batch_id)
            source_error = source_error_in(exc)
            if source_error is not None:
                raise source_error from exc
            log.debug("append tasks of batch %s failed", batch_id, exc_info=True)
            raise IcetideError(
                f"writing batch {batch_id} to {self.sink.table_name} failed: {one_line(exc)}; nothing was committed"
            ) from exc
        elapsed = time.monotonic() - started
        log.debug(
            "batch %s: %d task(s) in %.2fs; per task read/decode/write s: %s",
            batch_id,
            len(results),
            elapsed,
            [(round(r.read_seconds, 2), round(r.decode_seconds, 2), round(r.write_seconds, 2)) for r in results],
        )
        files = [
            WrittenFile(
                f["content"],
                f["path"],
                tuple(f["partition"]),
                int(f["record_count"]),
                int(f["file_size"]),
                f["writer"],
                f["metadata_json"],
            )
            for r in results
            for f in r.files
        ]
        write_seconds = max((r.write_seconds for r in results), default=0.0)
        return FastBatch(
            files=files,
            bad=[b for r in results for b in r.bad],
            records_in=sum(r.records for r in results),
            changes=any(r.changes for r in results),
            read_decode_seconds=max(0.0, elapsed - write_seconds),
            write_seconds=write_seconds,
        )

    def discard(self, batch_id: int) -> None:
        """Delete what the batch's tasks wrote (it will not be committed from these files)."""
        self.sink.remove_batch_files(batch_id)
