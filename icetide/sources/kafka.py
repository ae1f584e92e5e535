"""Kafka as a batch source: the driver plans offset ranges, executors read them with librdkafka.

Spark's own Kafka source needs a jar no reachable registry serves, so icetide reads Kafka itself
with confluent-kafka. The position (next offset per partition) lives in the Iceberg table, committed
with the data; icetide never commits offsets to Kafka and never joins a consumer group.

Example::

    source = KafkaSource(KafkaSourceConfig(bootstrap_servers="broker:9092", topic="ads"))
    ranges, position = source.plan(last_position, max_records=100_000)
    df = source.read(spark, ranges)   # topic, partition, offset, timestamp, key, value

End offsets. The high watermark a broker reports through ListOffsets can lag what it has stored
(Tansu reports the base offset of the last record batch + 1). `plan` therefore never trusts it
for a partition it is about to drain: it fetches from there until librdkafka signals the end of
the partition (PARTITION_EOF, raised from the Fetch response's high watermark) and ends the range
there. Every planned offset has been seen to exist, so readers never wait for records that are not
there, and the position returned by `plan` is exactly what `read` delivers.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from icetide.errors import ConfigError, DataLossError, SourceError
from icetide.secrets import redacted_repr
from icetide.sources.head_split import HEAD_ID_SUFFIX, HEAD_SUFFIX, JsonHeadSplit
from icetide.sources.kafka_reader import (
    ALL_BROKERS_DOWN,
    AUTO_OFFSET_RESET,
    OFFSET_OUT_OF_RANGE,
    PARTITION_EOF,
    TRANSPORT,
    UNKNOWN_TOPIC_OR_PART,
    VALUE_ERROR_COLUMN,
    OffsetRange,
    ValueTranscoder,
    confluent_kafka_module,
    read_ranges_task,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

EARLIEST, LATEST = "earliest", "latest"
# How long a fetch probe keeps reading a partition after its first record while waiting for the
# end-of-partition event. Under steady production that event comes only once the probe has caught
# up, which took 0.3-1.0 s a batch at 10k events/s (docs/design.md, "Probing a moving end").
PROBE_CHASE_SECONDS = 0.05
DEFAULT_GROUP_ID = "icetide"
# Settings icetide owns: offsets are never committed, ends are detected by EOF events, and a read
# below the log start is reported (then skipped explicitly) rather than silently reset.
FORCED_CONSUMER_SETTINGS = {
    "enable.auto.commit": "false",
    "enable.auto.offset.store": "false",
    "enable.partition.eof": "true",
    "auto.offset.reset": "error",
}
# Defaults for the executors' range readers, below the user's `consumer` settings: a range is read
# from start to end in one go, so fetch in bulk (librdkafka's defaults, 1 MiB per partition and
# fetch, suit a consumer that keeps up with a live stream). Measured on bench/ingest.py: the
# decoding thread waited about 5x less for Kafka and a task's read took about 10% less CPU.
# fetch.wait.max.ms stays librdkafka's 500: with 10, a loaded Tansu answered with (nearly) empty
# fetches and batches stalled for minutes in bench/soak.py; a range read costs the same with both
# (docs/design.md, "Range readers' fetch wait").
READER_DEFAULTS = {
    "fetch.max.bytes": str(64 << 20),
    "max.partition.fetch.bytes": str(16 << 20),
    "queued.min.messages": "500000",
    "fetch.wait.max.ms": "500",
}
RECORD_DDL = "topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, key BINARY, value BINARY"
SPLIT_RECORD_DDL = f"{RECORD_DDL}, value{HEAD_ID_SUFFIX} BIGINT, value{HEAD_SUFFIX} STRING"
RANGE_DDL = "topic STRING, partition INT, start BIGINT, end BIGINT"
POSITION_COLUMNS = ["topic", "partition", "offset"]  # for decode's source_position: "ads/0@1234"


_CONFIG_KEYS = (
    "bootstrap_servers",
    "topic",
    "topics",
    "topic_pattern",
    "starting_offsets",
    "consumer",
    "read_timeout_seconds",
    "metadata_timeout_seconds",
    "probe_timeout_seconds",
)


def parse_starting_offsets(value: str, *, key: str = "starting_offsets") -> str | int:
    """`earliest`, `latest`, or the epoch milliseconds of an ISO-8601 timestamp / epoch-millis string.

    A timestamp without a zone is UTC. Raises ConfigError naming `key` for anything else.
    """
    text = str(value).strip()
    if text.lower() in (EARLIEST, LATEST):
        return text.lower()
    if re.fullmatch(r"\d+", text):
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(
            f"{key}: {value!r} is not 'earliest', 'latest', an ISO-8601 timestamp or epoch milliseconds"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


@dataclass(frozen=True)
class KafkaSourceConfig:
    """Where to read and how long to wait; validated on construction.

    `consumer` holds extra librdkafka settings passed through unchanged (security.protocol, sasl.*,
    ssl.*, client.id, fetch sizes...), except the few icetide owns (FORCED_CONSUMER_SETTINGS).
    `starting_offsets` applies only to a new pipeline (no position yet).
    """

    bootstrap_servers: str
    topic: str = ""  # one topic; or `topics`, or `topic_pattern` (exactly one of the three)
    starting_offsets: str = EARLIEST
    consumer: Mapping[str, str] = field(default_factory=dict)
    read_timeout_seconds: float = 60.0  # a range read making no progress this long fails
    metadata_timeout_seconds: float = 10.0  # each metadata / watermark request on the driver
    probe_timeout_seconds: float = 5.0  # fetching to the true end of the partitions a batch drains
    topics: tuple[str, ...] = ()  # several topics (icetide.sources.kafka_topics)
    topic_pattern: str | None = None  # every topic whose whole name matches; new ones are picked up

    __repr__ = redacted_repr  # sasl.password and the like show as ***

    def __post_init__(self) -> None:
        _check_fields(
            {name: getattr(self, name) for name in _CONFIG_KEYS},
            "source.kafka",
        )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, prefix: str = "source.kafka") -> KafkaSourceConfig:
        """Build from a config block (e.g. YAML `source.kafka`); errors name the offending key.

        Unknown keys are errors. `consumer` values may be strings, numbers or booleans; they are
        passed to librdkafka as strings.
        """
        if not isinstance(d, Mapping):
            raise ConfigError(f"{prefix}: must be a mapping")
        for name in d:
            if name not in _CONFIG_KEYS:
                raise ConfigError(f"{prefix}.{name}: unknown key; expected one of {', '.join(_CONFIG_KEYS)}")
        consumer = d.get("consumer") or {}
        if not isinstance(consumer, Mapping):
            raise ConfigError(f"{prefix}.consumer: must be a mapping of librdkafka settings")
        settings: dict[str, str] = {}
        for name, value in consumer.items():
            if isinstance(value, bool):
                settings[str(name)] = "true" if value else "false"
            elif isinstance(value, str | int | float):
                settings[str(name)] = str(value)
            else:
                raise ConfigError(f"{prefix}.consumer.{name}: must be a string, number or boolean")
        topics = d.get("topics")
        if topics is not None and (
            isinstance(topics, str)
            or not isinstance(topics, list | tuple)
            or not all(isinstance(t, str) for t in topics)
        ):
            raise ConfigError(f"{prefix}.topics: expected a list of topic names")
        pattern = d.get("topic_pattern")
        if pattern is not None and not isinstance(pattern, str):
            raise ConfigError(f"{prefix}.topic_pattern: expected a regular expression (a string)")
        values: dict[str, Any] = {
            "bootstrap_servers": d.get("bootstrap_servers"),
            "topic": d.get("topic") if d.get("topic") is not None else "",
            "topics": tuple(topics) if topics is not None else (),
            "topic_pattern": pattern,
            "starting_offsets": str(d.get("starting_offsets", EARLIEST)),
            "consumer": settings,
        }
        for name in ("read_timeout_seconds", "metadata_timeout_seconds", "probe_timeout_seconds"):
            values[name] = d.get(name, getattr(cls, name))
        _check_fields(values, prefix)
        return cls(**values)

    def consumer_settings(self, **overrides: str) -> dict[str, str]:
        """librdkafka settings for an assign-only consumer: user settings, then icetide's own."""
        return self._settings({}, overrides)

    def reader_settings(self) -> dict[str, str]:
        """Settings for the executors' range readers: READER_DEFAULTS (bulk fetches) under the
        user's settings, then icetide's own."""
        return self._settings(READER_DEFAULTS, {})

    def _settings(self, defaults: Mapping[str, str], overrides: Mapping[str, str]) -> dict[str, str]:
        settings = {"bootstrap.servers": self.bootstrap_servers, "group.id": DEFAULT_GROUP_ID}
        settings.update(defaults)
        settings.update(self.consumer)
        settings.update(overrides)
        settings.update(FORCED_CONSUMER_SETTINGS)
        return settings


def _check_topics(values: Mapping[str, Any], prefix: str) -> None:
    """Exactly one of topic, topics and topic_pattern; each well formed."""
    topic, topics, pattern = values.get("topic"), values.get("topics") or (), values.get("topic_pattern")
    given = [
        n for n, v in (("topic", topic), ("topics", topics), ("topic_pattern", pattern)) if v not in (None, "", ())
    ]
    if not given:
        raise ConfigError(f"{prefix}.topic: required (or topics: [...], or topic_pattern: <regex>)")
    if len(given) > 1:
        raise ConfigError(f"{prefix}.{given[1]}: give exactly one of topic, topics and topic_pattern")
    if topic not in (None, "") and not isinstance(topic, str):
        raise ConfigError(f"{prefix}.topic: must be a string, got {topic!r}")
    if topic not in (None, "") and not str(topic).strip():
        raise ConfigError(f"{prefix}.topic: required")
    for t in topics:
        if not isinstance(t, str) or not re.fullmatch(r"[A-Za-z0-9._-]{1,249}", t):
            raise ConfigError(f"{prefix}.topics: {t!r} is not a Kafka topic name")
    if len(set(topics)) != len(topics):
        raise ConfigError(f"{prefix}.topics: a topic is listed twice")
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigError(f"{prefix}.topic_pattern: {pattern!r} is not a regular expression ({exc})") from None


def _check_fields(values: Mapping[str, Any], prefix: str) -> None:
    _check_topics(values, prefix)
    for name in ("bootstrap_servers",):
        value = values.get(name)
        if value is None or (isinstance(value, str) and not value.strip()):
            raise ConfigError(f"{prefix}.{name}: required")
        if not isinstance(value, str):
            raise ConfigError(f"{prefix}.{name}: must be a string, got {value!r}")
    parse_starting_offsets(values["starting_offsets"], key=f"{prefix}.starting_offsets")
    consumer = values["consumer"]
    if not isinstance(consumer, Mapping):
        raise ConfigError(f"{prefix}.consumer: must be a mapping of librdkafka settings")
    for name, value in consumer.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise ConfigError(f"{prefix}.consumer.{name}: settings must be strings, got {value!r}")
        if name in FORCED_CONSUMER_SETTINGS and value != FORCED_CONSUMER_SETTINGS[name]:
            raise ConfigError(f"{prefix}.consumer.{name}: icetide requires {FORCED_CONSUMER_SETTINGS[name]!r}")
    for name in ("read_timeout_seconds", "metadata_timeout_seconds", "probe_timeout_seconds"):
        value = values[name]
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ConfigError(f"{prefix}.{name}: must be a positive number of seconds, got {value!r}")


_Share = TypeVar("_Share", int, str)  # what a budget is shared over: partitions, or topics


def allocate(available: Mapping[_Share, int], budget: int, *, rotation: int = 0) -> dict[_Share, int]:
    """Split `budget` records across partitions fairly (max-min fair, i.e. water-filling).

    Every partition gets min(its backlog, an equal share), the unused share is spread again over
    the partitions with backlog left. A remainder smaller than the number of such partitions goes
    one record each, starting at index `rotation` (so a tiny budget does not always favour
    partition 0). The result never exceeds a partition's backlog, and sums to min(budget, total).
    """
    result = {p: 0 for p in available}
    remaining = {p: n for p, n in available.items() if n > 0}
    left = max(0, budget)
    while left > 0 and remaining:
        share = left // len(remaining)
        if share == 0:
            order = sorted(remaining)
            for i in range(left):
                result[order[(rotation + i) % len(order)]] += 1
            break
        for p in sorted(remaining):
            take = min(share, remaining[p])
            result[p] += take
            remaining[p] -= take
            left -= take
            if remaining[p] == 0:
                del remaining[p]
    return result


def parse_position(position: Mapping[str, int] | None) -> dict[int, int] | None:
    """A committed position ({"partition": next offset}) as ints; ConfigError if malformed."""
    if position is None:
        return None
    if not isinstance(position, Mapping):
        raise ConfigError(f"kafka position: expected a mapping of partition to offset, got {position!r}")
    parsed: dict[int, int] = {}
    for name, offset in position.items():
        if not re.fullmatch(r"\d+", str(name)) or isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ConfigError(f"kafka position: bad entry {name!r}: {offset!r}")
        parsed[int(name)] = offset
    return parsed


@dataclass(frozen=True)
class DataLoss:
    """Records of one partition lost before the pipeline read them: offsets [from_offset, to_offset);
    `to_offset` None when unknown (the partition was reset below the pipeline's position)."""

    topic: str
    partition: int
    from_offset: int
    to_offset: int | None
    reason: str

    def where(self) -> str:
        """'topic/partition@from..to' (to exclusive, '?' when unknown): the dead-letter row's position."""
        to = "?" if self.to_offset is None else str(self.to_offset)
        return f"{self.topic}/{self.partition}@{self.from_offset}..{to}"

    def to_json(self) -> dict[str, Any]:
        """JSON-able form, recorded with the batch's plan."""
        return {"source_position": self.where(), "error": f"data loss: {self.reason}"}


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
        gone), else None. ListOffsets may lag (Tansu), so fetches decide: the record just before
        `start` exists (no loss); a real Kafka answers a fetch past the end with OFFSET_OUT_OF_RANGE;
        Tansu answers nothing, and then a fetch from the log start finds the true end. A probe
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
        can under-report by what a lagging broker (Tansu) has not published in its watermark yet.
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
        scanning forward to the first record at or after the timestamp. Some brokers (Tansu 0.6)
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
            starts.update(self._scan_to_time(consumer, froms, timestamp_ms))
        return starts

    def _scan_to_time(self, consumer: Any, froms: Mapping[int, int], timestamp_ms: int) -> dict[int, int]:
        kafka = confluent_kafka_module()
        topic = self.config.topic
        found: dict[int, int] = {}
        paused: list[Any] = []
        position = dict(froms)
        consumer.assign([kafka.TopicPartition(topic, p, offset) for p, offset in froms.items()])
        idle_deadline = time.monotonic() + self.config.read_timeout_seconds
        try:
            while len(found) < len(froms):
                if time.monotonic() > idle_deadline:
                    p = min(set(froms) - set(found))
                    raise SourceError(
                        f"{topic}/{p}@{position[p]}: no progress for {self.config.read_timeout_seconds}s "
                        f"while looking for the first record at or after timestamp {timestamp_ms}"
                    )
                message = consumer.poll(0.2)
                if message is None:
                    continue
                p, error = message.partition(), message.error()
                if p not in froms or p in found:
                    continue
                idle_deadline = time.monotonic() + self.config.read_timeout_seconds
                if error is None:
                    position[p] = message.offset() + 1
                    if message.timestamp()[1] >= timestamp_ms:
                        found[p] = message.offset()
                        paused.append(kafka.TopicPartition(topic, p))
                        consumer.pause(paused[-1:])
                elif error.code() == PARTITION_EOF:
                    found[p] = max(message.offset(), froms[p])
                elif error.code() in (OFFSET_OUT_OF_RANGE, AUTO_OFFSET_RESET):
                    found[p] = self._watermarks(consumer, p)[0]
                elif not error.retriable():
                    raise SourceError(f"{topic}/{p}@{position[p]}: {error.str()}")
        finally:
            if paused:  # librdkafka keeps a partition paused across assignments
                consumer.resume(paused)
            consumer.unassign()
        for p, offset in found.items():
            if offset > froms[p]:
                log.info(
                    "%s/%d: the broker answered offset %d for timestamp %d; scanning found %d",
                    topic,
                    p,
                    froms[p],
                    timestamp_ms,
                    offset,
                )
        return found

    # -- executor side -----------------------------------------------------------------------

    def read(
        self,
        spark: SparkSession,
        ranges: Iterable[OffsetRange],
        *,
        split: JsonHeadSplit | None = None,
        transcode: ValueTranscoder | None = None,
    ) -> DataFrame:
        """A lazy DataFrame of the records in `ranges`, one Spark partition per range.

        Columns: topic string, partition int, offset bigint, timestamp timestamp (null when the
        record has none), key binary, value binary; within a Spark partition in offset order.
        With `split`, the values' heads are split off where they are read, and two more columns
        say how (value_head_id bigint, value_head string: icetide.sources.head_split). With
        `transcode`, keys and values are rewritten first, and `value_error` string says why a
        value could not be (icetide.decode.avro).
        Each task opens its own consumer, assigns the range's start and reads up to its end;
        offsets deleted by retention are skipped (logged on the executor). A task that makes no
        progress for read_timeout_seconds fails with a SourceError naming topic/partition@offset
        (recover it on the driver with `icetide.sources.base.source_error_in`). Every action on the
        DataFrame reads Kafka again: persist it if it is used more than once.
        """
        todo = [(r.topic, r.partition, r.start, r.end) for r in ranges if r.end > r.start]
        ddl = RECORD_DDL if split is None else SPLIT_RECORD_DDL
        if transcode is not None:
            ddl += f", {VALUE_ERROR_COLUMN} STRING"
        if not todo:
            return spark.createDataFrame([], ddl)
        frame = spark.createDataFrame(spark.sparkContext.parallelize(todo, len(todo)), RANGE_DDL)
        task = functools.partial(
            read_ranges_task,
            self.config.reader_settings(),
            self.config.read_timeout_seconds,
            split=split,
            transcode=transcode,
        )
        return frame.mapInArrow(task, ddl)
