"""The executor side of the Kafka source: read planned offset ranges into Arrow batches.

Runs inside Spark's Python workers through `mapInArrow`, one consumer per task, assigned (never
subscribed: no consumer group, no committed offsets) at the range's start.
"""

from __future__ import annotations

import logging
import operator
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa

from icetide.errors import ConfigError, ExecutorSourceError
from icetide.sources.head_split import HEAD_ID_SUFFIX, HEAD_SUFFIX, HeadSplitter, JsonHeadSplit
from icetide.spark.worker_imports import keep_zip_directories

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OffsetRange:
    """Records `start` (inclusive) to `end` (exclusive) of one topic partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def count(self) -> int:
        """Offsets covered (records, unless compaction or transaction markers left gaps)."""
        return max(0, self.end - self.start)


RECORD_ARROW_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
    ]
)
# With a JsonHeadSplit: the value's head split off (icetide.sources.head_split).
SPLIT_RECORD_ARROW_SCHEMA = RECORD_ARROW_SCHEMA.append(pa.field("value" + HEAD_ID_SUFFIX, pa.int64())).append(
    pa.field("value" + HEAD_SUFFIX, pa.string())
)

# With a ValueTranscoder: why each value could not be transcoded (null: it was).
VALUE_ERROR_COLUMN = "value_error"


class ValueTranscoder(Protocol):
    """Rewrites a block of records' keys and values where they are read (e.g. Avro to the JSON
    converter's messages: icetide.decode.avro.decoder); picklable, it runs in the read task."""

    def transcode_block(
        self, keys: Sequence[bytes | None], values: Sequence[bytes | None]
    ) -> tuple[list[bytes | None], list[bytes | None], list[str | None]]: ...


# librdkafka error codes (confluent_kafka.KafkaError), copied so this module imports without it.
PARTITION_EOF = -191
AUTO_OFFSET_RESET = -140
OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PART = 3
TRANSPORT = -195  # a broker connection failed or dropped
ALL_BROKERS_DOWN = -187
# Messages' error(): None or a KafkaError, which is always true (and must not be compared with
# None: KafkaError.__eq__ raises TypeError for it).
_ERROR = operator.methodcaller("error")


LIBRDKAFKA_QUEUED_MIN_MESSAGES = 100_000  # librdkafka's default


def confluent_kafka_module() -> Any:
    """The confluent_kafka module; ConfigError with the install line when it is missing."""
    try:
        import confluent_kafka
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ConfigError("Kafka support not installed: pip install 'icetide[kafka]'") from exc
    return confluent_kafka


class ConsumerLike(Protocol):
    """The part of confluent_kafka.Consumer a range reader uses."""

    def assign(self, partitions: list[Any]) -> None: ...
    def consume(self, num_messages: int = ..., timeout: float = ...) -> list[Any]: ...
    def get_watermark_offsets(self, partition: Any, timeout: float = ..., cached: bool = ...) -> Any: ...
    def close(self) -> None: ...


class RangeReader:
    """Reads one offset range from an assigned consumer into Arrow record batches.

    Guarantees: every record with start <= offset < end that the broker still holds is yielded
    once, in offset order; nothing outside the range is. Offsets below the log start (deleted by
    retention since the batch was planned) raise ExecutorSourceError, so a plan made again from
    the table reports the loss. Ends at the last offset of the range, or at an EOF
    event at or past the end (gaps left by compaction or transaction markers); raises
    ExecutorSourceError after `read_timeout` seconds without progress.
    """

    def __init__(
        self,
        consumer: ConsumerLike,
        offset_range: OffsetRange,
        *,
        read_timeout: float,
        batch_rows: int = 10_000,
        poll_timeout: float = 0.2,
        topic_partition: Callable[[str, int, int], Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
        split: JsonHeadSplit | None = None,
        transcode: ValueTranscoder | None = None,
    ) -> None:
        self.consumer = consumer
        self._transcode = transcode
        self.range = offset_range
        self.read_timeout = read_timeout
        self.batch_rows = batch_rows
        self.poll_timeout = poll_timeout
        self._tp = topic_partition or (lambda t, p, o: confluent_kafka_module().TopicPartition(t, p, o))
        self._clock = clock
        self._splitter = HeadSplitter(split) if split is not None else None

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Record batches of at most batch_rows rows, in RECORD_ARROW_SCHEMA (SPLIT_RECORD_ARROW_SCHEMA
        with a split: the value's head split off as icetide.sources.head_split says)."""
        for messages in self.message_blocks():
            stamps = []
            for message in messages:
                kind, stamp = message.timestamp()
                stamps.append(stamp * 1000 if kind != 0 and stamp >= 0 else None)
            yield self._batch(
                [m.offset() for m in messages], stamps, [m.key() for m in messages], [m.value() for m in messages]
            )

    def message_blocks(self) -> Iterator[list[Any]]:
        """The range's messages, in offset order, in lists of at most batch_rows."""
        r = self.range
        where = f"{r.topic}/{r.partition}"
        next_offset = r.start
        self.consumer.assign([self._tp(r.topic, r.partition, r.start)])
        block: list[Any] = []
        deadline = self._clock() + self.read_timeout
        while next_offset < r.end:
            if self._clock() > deadline:
                raise ExecutorSourceError(
                    f"{where}@{next_offset}: no records for {self.read_timeout:g}s while reading offsets "
                    f"[{r.start}, {r.end}); is the broker reachable and the data still there?"
                )
            wanted = min(self.batch_rows - len(block), r.end - next_offset)
            messages = self.consumer.consume(num_messages=max(1, wanted), timeout=self.poll_timeout)
            if (
                messages
                and messages[0].offset() >= next_offset
                and messages[-1].offset() < r.end
                and not any(map(_ERROR, messages))
            ):  # the common case, checked in bulk and in C: in order (one partition), in range, no events
                block.extend(messages)
                next_offset = messages[-1].offset() + 1
                deadline = self._clock() + self.read_timeout
                messages = []
            for message in messages:
                error = message.error()
                if error is not None:
                    code = error.code()
                    if code == PARTITION_EOF:
                        if message.offset() >= r.end:
                            next_offset = r.end
                            break
                        continue
                    if code in (OFFSET_OUT_OF_RANGE, AUTO_OFFSET_RESET):
                        next_offset = self._skip_deleted(next_offset)
                        deadline = self._clock() + self.read_timeout
                        break
                    if error.retriable():
                        log.debug("%s@%d: retriable error %s", where, next_offset, error.str())
                        continue
                    raise ExecutorSourceError(f"{where}@{next_offset}: {error.str()}")
                offset = message.offset()
                if offset < next_offset:
                    continue
                if offset >= r.end:
                    next_offset = r.end
                    break
                block.append(message)
                next_offset = offset + 1
                deadline = self._clock() + self.read_timeout
            if len(block) >= self.batch_rows:
                yield block
                block = []
        if block:
            yield block

    def _skip_deleted(self, next_offset: int) -> int:
        r = self.range
        try:
            marks = self.consumer.get_watermark_offsets(
                self._tp(r.topic, r.partition, -1), timeout=min(self.read_timeout, 10.0), cached=False
            )
        except Exception as exc:
            raise ExecutorSourceError(f"{r.topic}/{r.partition}@{next_offset}: offset out of range: {exc}") from exc
        low = int(marks[0]) if marks else -1
        if low <= next_offset:
            raise ExecutorSourceError(
                f"{r.topic}/{r.partition}@{next_offset}: offset out of range (log start {low}); "
                "was the topic truncated or recreated?"
            )
        # Never skipped here, where nobody would hear of it: the batch fails (a transient
        # SourceError), and planning it again from the table reports the loss (on_data_loss).
        raise ExecutorSourceError(
            f"{r.topic}/{r.partition}@{next_offset}: offsets {next_offset}..{min(low, r.end) - 1} were deleted "
            f"(retention) after this batch was planned; planning it again reports the loss"
        )

    def _batch(
        self, offsets: list[int], stamps: list[int | None], keys: list[bytes | None], values: list[bytes | None]
    ) -> pa.RecordBatch:
        n = len(offsets)
        errors: list[pa.Array] = []
        if self._transcode is not None:
            keys, values, error_texts = self._transcode.transcode_block(keys, values)
            errors.append(pa.array(error_texts, pa.string()))
        columns = [
            pa.array([self.range.topic] * n, pa.string()),
            pa.array([self.range.partition] * n, pa.int32()),
            pa.array(offsets, pa.int64()),
            pa.array(stamps, pa.timestamp("us", tz="UTC")),
            pa.array(keys, pa.binary()),
        ]
        if self._splitter is None:
            arrays, schema = [*columns, pa.array(values, pa.binary())], RECORD_ARROW_SCHEMA
        else:
            arrays, schema = [*columns, *self._splitter.arrays(values)], SPLIT_RECORD_ARROW_SCHEMA
        if errors:
            schema = schema.append(pa.field(VALUE_ERROR_COLUMN, pa.string()))
        return pa.RecordBatch.from_arrays([*arrays, *errors], schema=schema)


def range_settings(settings: Mapping[str, str], offset_range: OffsetRange) -> dict[str, str]:
    """One range reader's consumer settings. librdkafka keeps fetching until `queued.min.messages`
    are queued past the position, and the reader closes its consumer at the range's end, so a
    prefetch longer than the range is read from the broker for nothing (250k-record batches, 2
    runs each way: the broker used 0.79 core-seconds per million rows instead of 0.96)."""
    out = dict(settings)
    queued = int(out.get("queued.min.messages", LIBRDKAFKA_QUEUED_MIN_MESSAGES))
    out["queued.min.messages"] = str(max(1, min(queued, offset_range.end - offset_range.start)))
    return out


def range_consumer(kafka: Any, settings: Mapping[str, str], offset_range: OffsetRange) -> Any:
    """A consumer of its own for one range (so it never sees another partition's prefetched
    records); ExecutorSourceError naming the range when it cannot be made."""
    try:
        return kafka.Consumer(range_settings(settings, offset_range))
    except Exception as exc:
        where = f"{offset_range.topic}/{offset_range.partition}@{offset_range.start}"
        raise ExecutorSourceError(f"{where}: cannot create a consumer: {exc}") from exc


def read_ranges_task(
    settings: Mapping[str, str],
    read_timeout: float,
    batches: Iterable[pa.RecordBatch],
    split: JsonHeadSplit | None = None,
    transcode: ValueTranscoder | None = None,
) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: read every range (rows of RANGE_DDL) of this Spark partition, in order,
    the records transcoded with `transcode`, then the values' heads split off with `split`."""
    keep_zip_directories()
    kafka = confluent_kafka_module()
    for ranges in batches:
        for row in ranges.to_pylist():
            offset_range = OffsetRange(row["topic"], row["partition"], row["start"], row["end"])
            consumer = range_consumer(kafka, settings, offset_range)
            try:
                reader = RangeReader(
                    consumer,
                    offset_range,
                    read_timeout=read_timeout,
                    topic_partition=kafka.TopicPartition,
                    split=split,
                    transcode=transcode,
                )
                yield from reader.batches()
            finally:
                consumer.close()
