"""Kafka as a batch source: the driver plans offset ranges, executors read them with librdkafka.

Spark's own Kafka source needs a jar no reachable registry serves, so icetide reads Kafka itself
with confluent-kafka. The position (next offset per partition) lives in the Iceberg table, committed
with the data; icetide never commits offsets to Kafka and never joins a consumer group.

Example::

    source = KafkaSource(KafkaSourceConfig(bootstrap_servers="broker:9092", topic="ads"))
    ranges, position = source.plan(last_position, max_records=100_000)
    df = source.read(spark, ranges)   # topic, partition, offset, timestamp, key, value

End offsets. The high watermark a broker reports through ListOffsets can lag what it has stored
(some Kafka-protocol brokers report the base offset of the last record batch + 1). `plan`
therefore never trusts it for a partition it is about to drain: it fetches from there until
librdkafka signals the end of the partition (PARTITION_EOF, raised from the Fetch response's high
watermark) and ends the range there. Every planned offset has been seen to exist, so readers never
wait for records that are not there, and the position returned by `plan` is exactly what `read`
delivers.

Committed records only. Consumers read with isolation.level=read_committed (kafka_config), so
both ends, ListOffsets' and the EOF event's, are the last stable offset: a transaction still open
waits for its outcome, aborted records are never delivered, and the offsets no record is delivered
for (transaction markers, aborted records, a compacted topic's gaps) lie inside ranges and are
stepped over by the readers, never counted as lost or bad records.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

from icetide.errors import ConfigError, DataLossError, SourceError
from icetide.sources.head_split import JsonHeadSplit
from icetide.sources.kafka_config import (
    EARLIEST,
    LATEST,
    READER_DEFAULTS,
    KafkaSourceConfig,
    parse_starting_offsets,
)
from icetide.sources.kafka_frame import read_ranges
from icetide.sources.kafka_plan import DataLoss, allocate, parse_position
from icetide.sources.kafka_reader import (
    ALL_BROKERS_DOWN,
    AUTO_OFFSET_RESET,
    OFFSET_OUT_OF_RANGE,
    PARTITION_EOF,
    TRANSPORT,
    UNKNOWN_TOPIC_OR_PART,
    OffsetRange,
    ValueTranscoder,
    confluent_kafka_module,
)
from icetide.sources.kafka_time import scan_to_time

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# The source's settings, planning's pure parts and the Spark read have their own modules (kafka_config,
# kafka_plan, kafka_frame); the names callers import are importable from here too.
__all__ = [
    "PROBE_CHASE_SECONDS",
    "READER_DEFAULTS",
    "DataLoss",
    "KafkaSource",
    "KafkaSourceConfig",
    "OffsetRange",
    "allocate",
    "parse_starting_offsets",
]

log = logging.getLogger(__name__)

# How long a fetch probe keeps reading a partition after its first record while waiting for the
# end-of-partition event. Under steady production that event comes only once the probe has caught
# up, which took 0.3-1.0 s a batch at 10k events/s (docs/design.md, "Probing a moving end").
PROBE_CHASE_SECONDS = 0.05


class KafkaSource:
    """Plans offset ranges on the driver and reads them on executors; never commits to Kafka."""

    def __init__(self, config: KafkaSourceConfig) -> None:
        self.config = config
        self._start = parse_starting_offsets(config.starting_offsets)
        self._consumer: Any | None = None  # the driver's, kept between plans and lag checks
        self._consumer_lock = threading.Lock()
        # The driver consumer's client-level errors (librdkafka's error_cb, served by poll), as
        # (monotonic time, code, text): a fetch probe that hears nothing asks whether it was
        # because the brokers are unreachable.
        self._broker_errors: list[tuple[float, int, str]] = []

    def close(self) -> None:
        """Close the driver's consumer; a later call opens a new one."""
        with self._consumer_lock:
            self._close_consumer()

    def _close_consumer(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            try:
                consumer.close()
            except Exception:  # pragma: no cover - closing must not hide the real error
                log.debug("closing the driver consumer failed", exc_info=True)

    # -- driver side -------------------------------------------------------------------------

    def plan(
        self, position: Mapping[str, int] | None, max_records: int, *, losses: list[DataLoss] | None = None
    ) -> tuple[list[OffsetRange], dict[str, int]]:
        """The next batch's ranges and the position right after them.

        `position` maps partition (as a string) to the next offset to read; None starts a new
        pipeline at `starting_offsets`. A partition missing from a non-None position was added
        after the pipeline started and is read from its earliest offset. The ranges hold at most
        `max_records` offsets in total, shared max-min fairly across partitions, and end only at
        offsets seen to exist (see the module docstring), so reading them yields exactly the
        records between `position` and the returned position. Records lost before being read
        (offsets below the log start, deleted by retention; or a position beyond the partition's
        end, after the topic was recreated or the broker lost its log) raise DataLossError; when
        the caller passes a `losses` list instead, each loss is appended to it and the plan goes
        on from the partition's log start. The returned position covers every current
        partition (also those with nothing to read) plus any partition of `position` the topic no
        longer reports; commit it with the batch, or keep it in memory for an empty first batch
        (otherwise a `latest` or timestamp start is resolved again).
        """
        if max_records < 1:
            raise ConfigError(f"max_records: must be at least 1, got {max_records}")
        current = parse_position(position)
        with self._driver_consumer() as consumer:
            partitions = self._partitions(consumer)
            marks = {p: self._watermarks(consumer, p) for p in partitions}
            starts = self._starts(consumer, partitions, marks, current)
            if current is not None:
                self._check_loss(consumer, partitions, marks, starts, current, losses)
            ends = {p: max(marks[p][1], starts[p]) for p in partitions}
            rotation = sum(starts.values())
            shares = allocate({p: ends[p] - starts[p] for p in partitions}, max_records, rotation=rotation)
            # Partitions this batch would drain: their end comes from a fetch, not from ListOffsets.
            draining = {p: ends[p] for p in partitions if shares[p] == ends[p] - starts[p]}
            if draining:
                enough = {p: starts[p] + max_records for p in draining}
                # An end short of the true one only leaves records to the next batch: chase briefly.
                probed = self._fetch_ends(consumer, draining, enough, chase=PROBE_CHASE_SECONDS)
                for p, end in probed.items():
                    ends[p] = max(end, starts[p])
                shares = allocate({p: ends[p] - starts[p] for p in partitions}, max_records, rotation=rotation)
        ranges = [
            OffsetRange(self.config.topic, p, starts[p], starts[p] + shares[p]) for p in partitions if shares[p] > 0
        ]
        new_position = {str(p): starts[p] + shares[p] for p in partitions}
        for p, offset in (current or {}).items():
            if p not in marks:
                log.warning(
                    "%s/%d: partition no longer reported by the broker; keeping its position", self.config.topic, p
                )
                new_position[str(p)] = offset
        log.debug("planned %s -> %s", ranges, new_position)
        return ranges, new_position

    def _check_loss(
        self,
        consumer: Any,
        partitions: list[int],
        marks: Mapping[int, tuple[int, int]],
        starts: dict[int, int],
        current: Mapping[int, int],
        losses: list[DataLoss] | None,
    ) -> None:
        """Find records lost before being read; raise, or record them and move `starts` on."""
        topic = self.config.topic
        found: list[DataLoss] = []
        for p in partitions:
            if p not in current:
                continue  # a new partition starts at its log start anyway
            low, high = marks[p]
            if starts[p] < low:
                found.append(
                    DataLoss(topic, p, starts[p], low, f"offsets {starts[p]}..{low - 1} were deleted (retention)")
                )
                starts[p] = low
            elif starts[p] > high:
                end = self._end_before(consumer, p, starts[p], low)
                if end is not None:
                    found.append(
                        DataLoss(
                            topic,
                            p,
                            starts[p],
                            None,
                            f"the partition ends at offset {end}, before the pipeline's position {starts[p]} (topic "
                            f"recreated or broker log lost); what it held from offset {starts[p]} on is lost; reading "
                            f"it again from offset {low}",
                        )
                    )
                    starts[p] = low
        if not found:
            return
        if losses is None:
            raise DataLossError(
                f"kafka data loss on {found[0].where()}: {found[0].reason}"
                + (f" (and {len(found) - 1} more partition(s))" if len(found) > 1 else "")
                + "; set on_data_loss: skip to record lost ranges in the dead-letter table and go on"
            )
        for loss in found:
            log.warning("kafka data loss on %s: %s; recorded and skipped", loss.where(), loss.reason)
        losses.extend(found)

    def _end_before(self, consumer: Any, p: int, start: int, low: int) -> int | None:
        """The partition's end when it is below `start` (records the position counts as read are
        gone), else None. ListOffsets may lag (on some brokers), so fetches decide: the record just before
        `start` exists (no loss); a real Kafka answers a fetch past the end with OFFSET_OUT_OF_RANGE;
        a lagging broker may answer nothing, and then a fetch from the log start finds the true end. A probe
        that learns nothing within probe_timeout_seconds counts as no loss."""
        silent: set[int] = set()
        end = self._fetch_ends(consumer, {p: max(start - 1, low)}, {p: start}, silent=silent)[p]
        if end >= start:
            return None
        if p not in silent:
            return end
        silent.clear()
        end = self._fetch_ends(consumer, {p: low}, {p: start}, silent=silent)[p]
        if p in silent:
            log.warning(
                "%s/%d: the position %d is past the reported end and no fetch confirmed it in %ss; going on",
                self.config.topic,
                p,
                start,
                self.config.probe_timeout_seconds,
            )
            return None
        return end if end < start else None

    def lag(self, position: Mapping[str, int] | None) -> int:
        """Records between `position` and the high watermarks the broker reports (for metrics).

        None or a missing partition counts from the earliest offset. Uses ListOffsets only, so it
        can under-report by what a lagging broker has not published in its watermark yet.
        """
        return sum(self.lag_by_partition(position).values())

    def lag_by_partition(self, position: Mapping[str, int] | None) -> dict[int, int]:
        """`lag`, per partition of the topic."""
        current = parse_position(position) or {}
        with self._driver_consumer() as consumer:
            out = {}
            for p in self._partitions(consumer):
                low, high = self._watermarks(consumer, p)
                out[p] = max(0, high - max(current.get(p, low), low))
        return out

    def partitions(self) -> list[int]:
        """The topic's partition numbers, as the broker's metadata reports them now."""
        with self._driver_consumer() as consumer:
            return self._partitions(consumer)

    @contextlib.contextmanager
    def _driver_consumer(self) -> Iterator[Any]:
        """The driver's consumer, one at a time. It is kept between calls: a fresh one connects
        and fetches metadata first (about 40 ms a call on 127.0.0.1, several calls a batch). After
        an error it is closed, so the next call starts from a clean consumer."""
        with self._consumer_lock:
            if self._consumer is None:
                settings: dict[str, Any] = self.config.consumer_settings(**{"fetch.wait.max.ms": "50"})
                settings["error_cb"] = self._on_broker_error
                try:
                    self._consumer = confluent_kafka_module().Consumer(settings)
                except Exception as exc:
                    where = f"kafka {self.config.bootstrap_servers}"
                    raise SourceError(f"{where}: cannot create a consumer: {exc}") from exc
            try:
                yield self._consumer
            except BaseException:
                self._close_consumer()
                raise

    def _on_broker_error(self, error: Any) -> None:
        if error.code() in (TRANSPORT, ALL_BROKERS_DOWN):
            del self._broker_errors[:-20]
            self._broker_errors.append((time.monotonic(), error.code(), error.str()))

    def _unreachable_since(self, started: float, *, codes: tuple[int, ...]) -> str | None:
        """The latest broker error of `codes` reported at or after `started`, else None."""
        for at, code, text in reversed(self._broker_errors):
            if at < started:
                return None
            if code in codes:
                return text
        return None

    def _partitions(self, consumer: Any) -> list[int]:
        topic = self.config.topic
        try:
            metadata = consumer.list_topics(topic, timeout=self.config.metadata_timeout_seconds)
        except Exception as exc:
            raise SourceError(f"kafka {self.config.bootstrap_servers}: no metadata for topic {topic!r}: {exc}") from exc
        info = metadata.topics.get(topic)
        if info is None or (info.error is not None and info.error.code() == UNKNOWN_TOPIC_OR_PART):
            raise SourceError(f"kafka topic {topic!r} does not exist on {self.config.bootstrap_servers}")
        if info.error is not None:
            raise SourceError(f"kafka topic {topic!r}: {info.error}")
        if not info.partitions:
            raise SourceError(f"kafka topic {topic!r} has no partitions")
        return sorted(info.partitions)

    def low_watermark(self, consumer: Any, partition: int) -> int:
        return self._watermarks(consumer, partition)[0]

    def _watermarks(self, consumer: Any, partition: int) -> tuple[int, int]:
        tp = confluent_kafka_module().TopicPartition(self.config.topic, partition)
        try:
            marks = consumer.get_watermark_offsets(tp, timeout=self.config.metadata_timeout_seconds, cached=False)
        except Exception as exc:
            raise SourceError(f"{self.config.topic}/{partition}: cannot list offsets: {exc}") from exc
        if marks is None:
            raise SourceError(f"{self.config.topic}/{partition}: listing offsets timed out")
        low, high = marks
        return int(low), int(high)

    def _starts(
        self,
        consumer: Any,
        partitions: list[int],
        marks: Mapping[int, tuple[int, int]],
        current: Mapping[int, int] | None,
    ) -> dict[int, int]:
        if current is not None:
            starts = {}
            for p in partitions:
                if p in current:
                    starts[p] = current[p]
                else:
                    log.info("%s/%d: new partition; reading it from its earliest offset", self.config.topic, p)
                    starts[p] = marks[p][0]
            return starts
        if self._start == EARLIEST:
            return {p: marks[p][0] for p in partitions}
        if self._start == LATEST:
            return self._fetch_ends(consumer, {p: marks[p][1] for p in partitions})
        assert isinstance(self._start, int)
        return self._offsets_for_time(consumer, partitions, self._start)

    def _fetch_ends(
        self,
        consumer: Any,
        froms: Mapping[int, int],
        enough: Mapping[int, int] | None = None,
        *,
        silent: set[int] | None = None,
        chase: float | None = None,
    ) -> dict[int, int]:
        """Per partition, the end offset the broker's Fetch responses report, fetching from `froms`.

        Records past `froms` are fetched and dropped: at most the tail a lagging ListOffsets hides,
        and never past `enough[p]` (a partition busy enough to reach it needs no exact end, which
        bounds the work against a topic that never goes quiet), and with `chase`, for at most that
        many seconds after a partition's first record (under steady production the end moves on
        as fast as the probe reads). Only callers that may end short of the true end pass `chase`:
        the plan (the rest is the next batch's), never the data-loss check, where an end found too
        early would report records as lost. Without an EOF or a record within
        probe_timeout_seconds, the end is one past the last offset seen (or `froms`). Every offset
        below a returned end was seen to exist or lies below the broker's own high watermark.
        Partitions that ended by the timeout are added to `silent`.
        """
        kafka = confluent_kafka_module()
        topic = self.config.topic
        seen = dict(froms)
        ends: dict[int, int] = {}
        chased: dict[int, float] = {}  # partition -> when the probe gave up chasing its end
        paused: list[Any] = []
        consumer.assign([kafka.TopicPartition(topic, p, offset) for p, offset in froms.items()])
        started = time.monotonic()
        deadline = started + self.config.probe_timeout_seconds
        try:
            while len(ends) < len(froms):
                now = time.monotonic()
                for p in [p for p, until in chased.items() if p not in ends and until <= now]:
                    ends[p] = seen[p]
                    paused.append(kafka.TopicPartition(topic, p))
                    consumer.pause(paused[-1:])
                if len(ends) == len(froms):
                    break
                left = min([deadline] + [u for p, u in chased.items() if p not in ends]) - now
                if now >= deadline:
                    break
                message = consumer.poll(max(0.0, min(left, 0.2)))
                down = self._unreachable_since(started, codes=(ALL_BROKERS_DOWN,))
                if down is not None:  # silence would prove nothing: fail, and let supervision retry
                    raise SourceError(f"kafka {self.config.bootstrap_servers}: {down} while probing {topic}")
                if message is None:
                    continue
                p, error = message.partition(), message.error()
                if p not in froms or p in ends:
                    continue
                if error is None:
                    seen[p] = max(seen[p], message.offset() + 1)
                    if chase is not None:
                        chased.setdefault(p, time.monotonic() + chase)
                    if enough is not None and p in enough and seen[p] >= enough[p]:
                        ends[p] = seen[p]
                        paused.append(kafka.TopicPartition(topic, p))
                        consumer.pause(paused[-1:])
                elif error.code() == PARTITION_EOF:
                    ends[p] = max(message.offset(), seen[p]) if message.offset() >= froms[p] else message.offset()
                elif error.code() in (OFFSET_OUT_OF_RANGE, AUTO_OFFSET_RESET):
                    ends[p] = self._watermarks(consumer, p)[1]
                elif not error.retriable() and error.code() != UNKNOWN_TOPIC_OR_PART:
                    raise SourceError(f"{topic}/{p}@{seen[p]}: {error.str()}")
        finally:
            if paused:  # librdkafka keeps a partition paused across assignments
                consumer.resume(paused)
            consumer.unassign()
        unreachable = self._unreachable_since(started, codes=(TRANSPORT, ALL_BROKERS_DOWN))
        if len(ends) < len(froms) and unreachable is not None:
            raise SourceError(
                f"kafka {self.config.bootstrap_servers}: no fetch answered {topic} within "
                f"{self.config.probe_timeout_seconds:g}s; the broker connection failed: {unreachable}"
            )
        for p in froms:
            if p not in ends:
                log.debug("%s/%d: no end-of-partition event within the probe timeout; ending at %d", topic, p, seen[p])
                ends[p] = seen[p]
                if silent is not None:
                    silent.add(p)
        return ends

    def _offsets_for_time(self, consumer: Any, partitions: list[int], timestamp_ms: int) -> dict[int, int]:
        """Per partition, the first offset whose record timestamp is >= `timestamp_ms` (else the end).

        Asks the broker (ListOffsets by time), then checks its answer by reading from it and
        scanning forward to the first record at or after the timestamp. Some Kafka-protocol brokers
        answer the earliest offset for any timestamp; the scan keeps the result exact anyway.
        """
        kafka = confluent_kafka_module()
        topic = self.config.topic
        try:
            answers = consumer.offsets_for_times(
                [kafka.TopicPartition(topic, p, timestamp_ms) for p in partitions],
                timeout=self.config.metadata_timeout_seconds,
            )
        except Exception as exc:
            raise SourceError(f"{topic}: cannot look up offsets for timestamp {timestamp_ms}: {exc}") from exc
        froms: dict[int, int] = {}
        past_end: list[int] = []
        for tp in answers:
            if tp.error is not None:
                raise SourceError(f"{topic}/{tp.partition}: offsets for timestamp {timestamp_ms}: {tp.error}")
            if tp.offset < 0:
                past_end.append(tp.partition)
            else:
                froms[tp.partition] = tp.offset
        starts = self._fetch_ends(consumer, {p: self._watermarks(consumer, p)[1] for p in past_end}) if past_end else {}
        if froms:
            low = partial(self.low_watermark, consumer)  # asked only for a partition whose answer is gone
            starts.update(scan_to_time(consumer, self.config, froms, timestamp_ms, low))
        return starts

    # -- executor side -----------------------------------------------------------------------

    def read(
        self,
        spark: SparkSession,
        ranges: Iterable[OffsetRange],
        *,
        split: JsonHeadSplit | None = None,
        transcode: ValueTranscoder | None = None,
    ) -> DataFrame:
        """A lazy DataFrame of the records in `ranges`, one Spark partition per range, read with
        this source's settings: icetide.sources.kafka_frame.read_ranges (its columns, and what a
        task does when records are gone or do not come)."""
        return read_ranges(spark, self.config, ranges, split=split, transcode=transcode)
