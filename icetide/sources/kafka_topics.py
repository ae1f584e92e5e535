"""Several Kafka topics as one source: a `topics` list or a `topic_pattern`, each topic planned
from its own position.

Each topic is planned by its own KafkaSource (its own driver consumer), in a few threads at
once: librdkafka releases the GIL, so the watermark requests and end-of-partition probes of 50
topics overlap instead of queueing. The topics are listed again at every plan, so a topic that
matches the pattern (or a listed topic created late) is picked up by the next batch.

Example::

    topics = KafkaTopics(KafkaSourceConfig(bootstrap_servers="broker:9092", topic_pattern=r"db1\\.inventory\\..*"))
    plan = topics.plan({"db1.inventory.orders": {"0": 120}}, max_records=100_000)
    df = topics.read(spark, plan.ranges)   # topic, partition, offset, timestamp, key, value
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from icetide.errors import SourceError
from icetide.sources.kafka import DataLoss, KafkaSource, KafkaSourceConfig, allocate
from icetide.sources.kafka_reader import OffsetRange, ValueTranscoder, confluent_kafka_module

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

PLANNER_THREADS = 8
TopicPosition = dict[str, int]  # partition (as a string) -> next offset


@dataclass
class TopicsPlan:
    """One batch over several topics: the ranges, and per topic where they start and end."""

    ranges: list[OffsetRange] = field(default_factory=list)
    starts: dict[str, TopicPosition] = field(default_factory=dict)  # topic -> partition -> first offset
    ends: dict[str, TopicPosition] = field(default_factory=dict)  # topic -> partition -> next offset after
    losses: list[DataLoss] = field(default_factory=list)
    full: bool = False  # some topic got all the budget it was given: it may hold more

    @property
    def records(self) -> int:
        """Offsets planned in total."""
        return sum(r.count for r in self.ranges)

    def topics_read(self) -> set[str]:
        """Topics the batch reads at least one offset of."""
        return {r.topic for r in self.ranges if r.end > r.start}

    def reset_partitions(self) -> set[tuple[str, str]]:
        """(topic, partition as a string) of the partitions found reset (a range lost "from..?": the
        topic was recreated or the broker lost its log). The batch reads their new log from its
        start; no position on the old log holds any of it, and a position there goes back."""
        return {(loss.topic, str(loss.partition)) for loss in self.losses if loss.to_offset is None}


class KafkaTopics:
    """Plans and reads the topics a `topics` list or `topic_pattern` names; never commits to Kafka."""

    def __init__(self, config: KafkaSourceConfig) -> None:
        self.config = config
        self._pattern = re.compile(config.topic_pattern) if config.topic_pattern else None
        self._sources: dict[str, KafkaSource] = {}
        self._lock = threading.Lock()
        # The topic lister: one consumer, used by the run's thread and an overlapped commit's (lag).
        self._lister_lock = threading.Lock()
        self._lister: Any | None = None

    def source(self, topic: str) -> KafkaSource:
        """The single-topic source of `topic` (one driver consumer each, kept between batches)."""
        with self._lock:
            if topic not in self._sources:
                single = dataclasses.replace(self.config, topic=topic, topics=(), topic_pattern=None)
                self._sources[topic] = KafkaSource(single)
            return self._sources[topic]

    def topics(self) -> list[str]:
        """The topics to read now: the listed ones (`topics`, or the one `topic`) that exist, or every
        topic the pattern matches."""
        present = self.present()
        if self._pattern is not None:
            return sorted(t for t in present if self._pattern.fullmatch(t))
        listed = self.config.topics or ((self.config.topic,) if self.config.topic else ())  # `topic`: a list of one
        missing = [t for t in listed if t not in present]
        if missing:
            log.debug("topics not on the broker yet: %s", ", ".join(missing))
        return [t for t in listed if t in present]

    def present(self) -> set[str]:
        """Every topic on the broker that has partitions."""
        with self._lister_lock:
            if self._lister is None:
                try:
                    self._lister = confluent_kafka_module().Consumer(self.config.consumer_settings())
                except Exception as exc:
                    raise SourceError(
                        f"kafka {self.config.bootstrap_servers}: cannot create a consumer: {exc}"
                    ) from exc
            try:
                metadata = self._lister.list_topics(timeout=self.config.metadata_timeout_seconds)
            except Exception as exc:
                self._drop_lister()
                raise SourceError(f"kafka {self.config.bootstrap_servers}: cannot list topics: {exc}") from exc
        return {name for name, info in metadata.topics.items() if info.error is None and info.partitions}

    def plan(
        self,
        positions: Mapping[str, Mapping[str, int] | None],
        max_records: int,
        *,
        topics: Iterable[str] | None = None,
        skip_losses: bool = False,
    ) -> TopicsPlan:
        """The next batch over `topics` (default: `self.topics()`), at most about `max_records` offsets.

        `positions[topic]` is where that topic resumes (partition -> next offset; a partition it
        lacks starts at its earliest offset); None or absent starts it at `starting_offsets`. The
        budget is shared over the topics by their reported backlog (max-min fair), and what
        that leaves is shared equally, since a broker's reported end can lag (module docstring
        of icetide.sources.kafka). With more topics than `max_records`, some wait for a later
        batch. With `skip_losses`, records lost before being read are returned in `losses`
        instead of raising DataLossError.
        """
        names = sorted(self.topics() if topics is None else topics)
        out = TopicsPlan()
        if not names:
            return out
        with ThreadPoolExecutor(max_workers=min(PLANNER_THREADS, len(names))) as pool:
            lags = dict(
                zip(names, pool.map(lambda t: self.source(t).lag(_position(positions.get(t))), names), strict=True)
            )
            budgets = allocate({t: lags[t] for t in names}, max_records)
            # A broker's reported end can lag what it holds (some do), so what the backlogs leave of
            # the budget is shared by every topic: the plans' fetches find the true ends.
            spare = max(0, max_records - sum(budgets.values()))
            for i, t in enumerate(names):
                budgets[t] += spare // len(names) + (1 if i < spare % len(names) else 0)

            def plan_one(topic: str) -> tuple[list[OffsetRange], dict[str, int], list[DataLoss]]:
                losses: list[DataLoss] | None = [] if skip_losses else None
                ranges, end = self.source(topic).plan(_position(positions.get(topic)), budgets[topic], losses=losses)
                return ranges, end, losses or []

            names = [t for t in names if budgets[t] > 0]  # more topics than max_records: the rest wait
            planned = list(pool.map(plan_one, names))
        for topic, (ranges, end, losses) in zip(names, planned, strict=True):
            out.ranges.extend(ranges)
            out.ends[topic] = end
            starts = dict(end)
            for r in ranges:
                starts[str(r.partition)] = r.start
            out.starts[topic] = starts
            out.losses.extend(losses)
            out.full |= sum(r.count for r in ranges) >= budgets[topic]
        return out

    def lag_by_partition(self, positions: Mapping[str, Mapping[str, int] | None]) -> dict[str, int]:
        """Records not yet planned, per `topic/partition`, for the topics in `positions`."""
        names = sorted(positions)
        if not names:
            return {}
        with ThreadPoolExecutor(max_workers=min(PLANNER_THREADS, len(names))) as pool:
            lags = list(pool.map(lambda t: self.source(t).lag_by_partition(_position(positions.get(t)) or {}), names))
        return {f"{t}/{p}": n for t, lag in zip(names, lags, strict=True) for p, n in sorted(lag.items())}

    def read(
        self, spark: SparkSession, ranges: Iterable[OffsetRange], *, transcode: ValueTranscoder | None = None
    ) -> DataFrame:
        """A lazy DataFrame of the records in `ranges` of any of the topics (KafkaSource.read)."""
        return KafkaSource(dataclasses.replace(self.config, topic="-", topics=(), topic_pattern=None)).read(
            spark, ranges, transcode=transcode
        )

    def close(self) -> None:
        """Close every driver consumer; later calls open new ones."""
        with self._lock:
            sources = list(self._sources.values())
        for s in sources:
            s.close()
        with self._lister_lock:
            self._drop_lister()

    def _drop_lister(self) -> None:
        """Close the topic lister (the caller holds `_lister_lock`); the next listing opens another."""
        lister, self._lister = self._lister, None
        if lister is not None:
            try:
                lister.close()
            except Exception:  # pragma: no cover - closing must not hide the real error
                log.debug("closing the topic lister failed", exc_info=True)


def _position(position: Mapping[str, int] | None) -> dict[str, int] | None:
    return dict(position) if position is not None else None
