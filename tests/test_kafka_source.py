"""KafkaSource: planning, reading and resuming against a real broker (Apache Kafka)."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest

from icetide.errors import ConfigError, SourceError
from icetide.sources.base import source_error_in
from icetide.sources.kafka import (
    READER_DEFAULTS,
    KafkaSource,
    KafkaSourceConfig,
    OffsetRange,
    allocate,
    parse_starting_offsets,
)
from icetide.sources.kafka_reader import RangeReader, range_settings
from tests.kafka_broker import create_topic, produce

T0 = 1_700_000_000_000  # a fixed epoch-millis base for record timestamps


def source(bootstrap: str, topic: str, **kwargs: Any) -> KafkaSource:
    return KafkaSource(KafkaSourceConfig(bootstrap_servers=bootstrap, topic=topic, **kwargs))


def read_values(spark: Any, src: KafkaSource, ranges: list[OffsetRange]) -> list[tuple[int, int, bytes]]:
    rows = src.read(spark, ranges).select("partition", "offset", "value").collect()
    return [(r["partition"], r["offset"], bytes(r["value"])) for r in rows]


def value(partition: int, i: int) -> bytes:
    return f"p{partition}-{i}".encode()


# -- pure logic ---------------------------------------------------------------------------------


def test_config_from_dict_names_the_bad_key() -> None:
    ok = KafkaSourceConfig.from_dict(
        {
            "bootstrap_servers": "b:9092",
            "topic": "ads",
            "starting_offsets": "2024-05-01T00:00:00Z",
            "consumer": {"client.id": "me", "fetch.min.bytes": 1, "check.crcs": True},
        }
    )
    assert ok.consumer == {"client.id": "me", "fetch.min.bytes": "1", "check.crcs": "true"}
    settings = ok.consumer_settings()
    assert settings["enable.auto.commit"] == "false" and settings["client.id"] == "me"
    assert "queued.min.messages" not in settings  # the driver's consumer keeps librdkafka's defaults
    # Range readers fetch in bulk by default; the user's settings still win over those defaults.
    reader = KafkaSourceConfig.from_dict(
        {"bootstrap_servers": "b:9092", "topic": "ads", "consumer": {"max.partition.fetch.bytes": 4096}}
    ).reader_settings()
    assert reader["max.partition.fetch.bytes"] == "4096"
    assert reader["fetch.max.bytes"] == READER_DEFAULTS["fetch.max.bytes"]
    assert reader["enable.partition.eof"] == "true"
    # Each range reader prefetches no further than its range: its consumer closes at the end.
    short = range_settings(reader, OffsetRange("ads", 0, 1_000, 63_500))
    assert short["queued.min.messages"] == "62500" and short["max.partition.fetch.bytes"] == "4096"
    assert range_settings(reader, OffsetRange("ads", 0, 0, 10**7))["queued.min.messages"] == "500000"
    assert range_settings({}, OffsetRange("ads", 0, 5, 5))["queued.min.messages"] == "1"
    cases = [
        ({"bootstrap_servers": "b:9092"}, "source.kafka.topic: required"),
        ({"topic": "ads"}, "source.kafka.bootstrap_servers: required"),
        ({"bootstrap_servers": "b", "topic": "ads", "starting_offsets": "yesterday"}, "source.kafka.starting_offsets"),
        (
            {"bootstrap_servers": "b", "topic": "ads", "tpoic": "x"},
            r"source\.kafka\.tpoic: unknown key \(allowed: bootstrap_servers, .*topic, topic_pattern",
        ),
        ({"bootstrap_servers": "b", "topic": "ads", "consumer": {"enable.auto.commit": "true"}}, "enable.auto.commit"),
        ({"bootstrap_servers": "b", "topic": "ads", "read_timeout_seconds": 0}, "read_timeout_seconds"),
        ({"bootstrap_servers": "b", "topic": "ads", "consumer": {"x": [1]}}, "source.kafka.consumer.x"),
    ]
    for block, message in cases:
        with pytest.raises(ConfigError, match=message):
            KafkaSourceConfig.from_dict(block)
    with pytest.raises(ConfigError, match=r"^src\.topic: required"):
        KafkaSourceConfig.from_dict({"bootstrap_servers": "b"}, prefix="src")
    with pytest.raises(ConfigError, match=r"source\.kafka\.topic: required"):
        KafkaSourceConfig(bootstrap_servers="b", topic=" ")


def test_parse_starting_offsets() -> None:
    assert parse_starting_offsets("EARLIEST") == "earliest"
    assert parse_starting_offsets("latest") == "latest"
    assert parse_starting_offsets("1700000000000") == T0
    assert parse_starting_offsets("2023-11-14T22:13:20Z") == T0
    assert parse_starting_offsets("2023-11-14T23:13:20+01:00") == T0
    assert parse_starting_offsets("2023-11-14 22:13:20") == T0  # no zone means UTC


def test_allocate_is_max_min_fair_and_bounded() -> None:
    assert allocate({0: 100, 1: 10, 2: 50}, 60) == {0: 25, 1: 10, 2: 25}
    assert allocate({0: 100, 1: 10, 2: 50}, 1000) == {0: 100, 1: 10, 2: 50}
    assert allocate({0: 5, 1: 0}, 3) == {0: 3, 1: 0}
    # A budget smaller than the partitions with backlog rotates instead of starving the last one.
    picked = Counter()
    for rotation in range(6):
        shares = allocate({0: 9, 1: 9, 2: 9}, 2, rotation=rotation)
        assert sum(shares.values()) == 2
        picked.update(p for p, n in shares.items() if n)
    assert picked == {0: 4, 1: 4, 2: 4}
    for available, budget in [({0: 7, 1: 3, 2: 11, 3: 0}, 13), ({i: i * 3 for i in range(9)}, 40)]:
        shares = allocate(available, budget)
        assert sum(shares.values()) == min(budget, sum(available.values()))
        assert all(0 <= shares[p] <= available[p] for p in available)
        # max-min fair: a partition got less than another only if it had nothing more to give
        for p in available:
            for q in available:
                if shares[p] + 1 < shares[q]:
                    assert shares[p] == available[p]


@dataclass
class FakeError:
    code_: int
    retriable_: bool = False

    def code(self) -> int:
        return self.code_

    def retriable(self) -> bool:
        return self.retriable_

    def str(self) -> str:
        return f"error {self.code_}"


@dataclass
class FakeMessage:
    offset_: int
    error_: FakeError | None = None

    def error(self) -> FakeError | None:
        return self.error_

    def offset(self) -> int:
        return self.offset_

    def partition(self) -> int:
        return 0

    def timestamp(self) -> tuple[int, int]:
        return (1, T0 + self.offset_)

    def key(self) -> bytes | None:
        return None

    def value(self) -> bytes | None:
        return b"v%d" % self.offset_


class FakeConsumer:
    """A partition whose log starts at `low` and ends at `high`; serves 3 records per consume."""

    def __init__(self, low: int, high: int, *, eof: bool = True, missing: frozenset[int] = frozenset()) -> None:
        self.low, self.high, self.eof, self.missing = low, high, eof, missing
        self.at = 0
        self.eof_sent = False

    def assign(self, partitions: list[Any]) -> None:
        self.at = partitions[0][2]
        self.eof_sent = False

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Any]:
        if self.at < self.low or self.at > self.high:
            return [FakeMessage(self.at, FakeError(-140))]
        out: list[Any] = []
        while self.at < self.high and len(out) < min(3, num_messages):
            if self.at not in self.missing:
                out.append(FakeMessage(self.at))
            self.at += 1
        if self.at >= self.high and self.eof and not self.eof_sent:
            self.eof_sent = True
            out.append(FakeMessage(self.at, FakeError(-191)))
        return out

    def get_watermark_offsets(self, partition: Any, timeout: float = -1, cached: bool = False) -> Any:
        return (self.low, self.high)

    def close(self) -> None:
        pass


def fake_read(consumer: FakeConsumer, start: int, end: int, **kwargs: Any) -> list[int]:
    reader = RangeReader(
        consumer,
        OffsetRange("ads", 0, start, end),
        read_timeout=kwargs.pop("read_timeout", 5.0),
        batch_rows=4,
        topic_partition=lambda t, p, o: (t, p, o),
        **kwargs,
    )
    batches = list(reader.batches())
    assert all(b.num_rows <= 4 for b in batches)
    return [o for b in batches for o in b.column("offset").to_pylist()]


def test_range_reader_reads_exactly_the_range() -> None:
    assert fake_read(FakeConsumer(0, 20), 3, 11) == list(range(3, 11))
    # records deleted by retention after the plan fail the read (the next plan reports the loss)
    with pytest.raises(SourceError, match=r"ads/0@2: offsets 2\.\.5 were deleted \(retention\)"):
        fake_read(FakeConsumer(6, 20), 2, 10)
    with pytest.raises(SourceError, match=r"ads/0@2: offsets 2\.\.9 were deleted"):
        fake_read(FakeConsumer(15, 20), 2, 10)
    # a gap at the end of the range (a transaction marker): the EOF event ends the read
    assert fake_read(FakeConsumer(0, 10, missing=frozenset({9})), 5, 10) == [5, 6, 7, 8]


def test_range_reader_fails_instead_of_hanging() -> None:
    ticks = iter(range(1000))
    with pytest.raises(SourceError, match=r"ads/0@10: no records for 5s while reading offsets \[5, 14\)"):
        fake_read(FakeConsumer(0, 10, eof=False), 5, 14, clock=lambda: float(next(ticks)))
    # an offset above the log end is not retention: it is an error, not a silent reset
    with pytest.raises(SourceError, match="ads/0@30: offset out of range"):
        fake_read(FakeConsumer(0, 10), 30, 40)


# -- against Apache Kafka ---------------------------------------------------------------------------


def test_unknown_topic_is_a_source_error(kafka_broker: str) -> None:
    with pytest.raises(SourceError, match="does not exist"):
        source(kafka_broker, "no-such-topic", metadata_timeout_seconds=5).plan(None, 10)


def test_read_returns_typed_records(kafka_broker: str, spark: Any) -> None:
    topic = create_topic(kafka_broker, 2)
    produce(kafka_broker, topic, [(0, b"k0", b"v0", T0), (1, None, b"v1", T0 + 1), (1, b"k2", None, T0 + 2)])
    src = source(kafka_broker, topic)
    ranges, position = src.plan(None, 100)
    assert position == {"0": 1, "1": 2}
    df = src.read(spark, ranges)
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("topic", "string"),
        ("partition", "int"),
        ("offset", "bigint"),
        ("timestamp", "timestamp"),
        ("key", "binary"),
        ("value", "binary"),
    ]
    assert df.rdd.getNumPartitions() == len(ranges) == 2
    rows = sorted(
        (r.topic, r.partition, r.offset, int(r.timestamp.timestamp() * 1000), r.key, r.value) for r in df.collect()
    )
    assert rows == [
        (topic, 0, 0, T0, b"k0", b"v0"),
        (topic, 1, 0, T0 + 1, None, b"v1"),
        (topic, 1, 1, T0 + 2, b"k2", None),
    ]
    assert src.read(spark, []).count() == 0


def test_batches_are_bounded_fair_and_resume_exactly(kafka_broker: str, spark: Any) -> None:
    topic = create_topic(kafka_broker, 3)
    counts = {0: 120, 1: 15, 2: 60}
    produce(kafka_broker, topic, [(p, None, value(p, i), None) for p, n in counts.items() for i in range(n)])
    src = source(kafka_broker, topic)

    ranges, position = src.plan(None, 60)
    assert {r.partition: r.count for r in ranges} == {0: 23, 1: 15, 2: 22} or {
        r.partition: r.count for r in ranges
    } == {0: 22, 1: 15, 2: 23}
    assert position == {str(r.partition): r.end for r in ranges}
    got = read_values(spark, src, ranges)
    assert len(got) == 60

    # a restart: a fresh source object resumes from the committed position, while more data arrives
    produce(kafka_broker, topic, [(1, None, value(1, i), None) for i in range(15, 45)])
    counts[1] = 45
    src = source(kafka_broker, topic)
    batches = 1
    while True:
        ranges, new_position = src.plan(position, 60)
        if not ranges:
            assert new_position == position
            break
        assert sum(r.count for r in ranges) <= 60
        assert all(r.start == position[str(r.partition)] for r in ranges)
        got += read_values(spark, src, ranges)
        position = new_position
        batches += 1
    assert batches == 4  # 240 records, 60 per batch
    assert position == {str(p): n for p, n in counts.items()}
    assert len(got) == len({(p, o) for p, o, _ in got})  # no duplicates
    assert sorted((p, v) for p, _, v in got) == sorted((p, value(p, i)) for p, n in counts.items() for i in range(n))
    assert all(v == value(p, o) for p, o, v in got)  # offsets line up with the records produced


def test_new_partition_is_read_from_earliest(kafka_broker: str, spark: Any) -> None:
    # Partition 2 is added (CreatePartitions) after the pipeline started: the committed position
    # does not know it yet.
    from confluent_kafka.admin import AdminClient, NewPartitions

    topic = create_topic(kafka_broker, 2)
    produce(kafka_broker, topic, [(p, None, value(p, i), None) for p in range(2) for i in range(5)])
    admin = AdminClient({"bootstrap.servers": kafka_broker})
    for future in admin.create_partitions([NewPartitions(topic, 3)]).values():
        future.result(timeout=20)
    produce(kafka_broker, topic, [(2, None, value(2, i), None) for i in range(5)])
    src = source(kafka_broker, topic)
    ranges, position = src.plan({"0": 5, "1": 2, "9": 4}, 100)
    assert {(r.partition, r.start, r.end) for r in ranges} == {(1, 2, 5), (2, 0, 5)}
    assert position == {"0": 5, "1": 5, "2": 5, "9": 4}  # a partition the broker no longer reports is kept
    assert sorted(v for _, _, v in read_values(spark, src, ranges)) == sorted(
        [value(1, i) for i in range(2, 5)] + [value(2, i) for i in range(5)]
    )
    with pytest.raises(ConfigError, match="kafka position"):
        src.plan({"zero": 1}, 10)


def test_starting_offsets_latest_and_timestamp(kafka_broker: str, spark: Any) -> None:
    topic = create_topic(kafka_broker, 2)
    produce(kafka_broker, topic, [(p, None, value(p, i), T0 + i * 1000) for p in range(2) for i in range(10)])

    latest = source(kafka_broker, topic, starting_offsets="latest")
    ranges, position = latest.plan(None, 100)
    assert ranges == [] and position == {"0": 10, "1": 10}
    produce(kafka_broker, topic, [(0, None, value(0, 10), T0 + 10_000)])
    ranges, position = latest.plan(position, 100)
    assert [v for _, _, v in read_values(spark, latest, ranges)] == [value(0, 10)]

    # the first record at or after the timestamp, per partition (ListOffsets by time; the scan checks it)
    for start in ("2023-11-14T22:13:26.500Z", str(T0 + 6500)):
        at_time = source(kafka_broker, topic, starting_offsets=start)
        ranges, position = at_time.plan(None, 100)
        assert {(r.partition, r.start, r.end) for r in ranges} == {(0, 7, 11), (1, 7, 10)}
    assert sorted(v for _, _, v in read_values(spark, at_time, ranges)) == sorted(
        [value(0, i) for i in range(7, 11)] + [value(1, i) for i in range(7, 10)]
    )
    future = source(kafka_broker, topic, starting_offsets=str(T0 + 10**9))
    ranges, position = future.plan(None, 100)
    assert ranges == [] and position == {"0": 11, "1": 10}


def test_lagging_high_watermark_does_not_lose_the_tail(kafka_broker: str, spark: Any) -> None:
    from confluent_kafka import Consumer, TopicPartition

    topic = create_topic(kafka_broker, 1)
    produce(kafka_broker, topic, [(0, None, value(0, i), None) for i in range(50)])  # one producer batch
    consumer = Consumer({"bootstrap.servers": kafka_broker, "group.id": "probe"})
    _, reported = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
    consumer.close()
    # Apache Kafka reports 50; some Kafka-protocol brokers report the last batch's base offset + 1
    # here, i.e. 1: the plan must not depend on it.
    assert reported <= 50

    src = source(kafka_broker, topic)
    ranges, position = src.plan(None, 1000)
    assert [(r.start, r.end) for r in ranges] == [(0, 50)] and position == {"0": 50}
    assert [v for _, _, v in read_values(spark, src, ranges)] == [value(0, i) for i in range(50)]
    # resuming from inside the unreported tail (or, where nothing lags, from 7 before the end), in small batches
    resume = min(reported, 50 - 7)
    ranges, position = src.plan({"0": resume}, 7)
    assert [(r.start, r.end) for r in ranges] == [(resume, resume + 7)]
    # the lag metric reads ListOffsets only and may under-report on such a broker
    assert 0 <= src.lag({"0": 0}) <= 50


def test_plan_under_steady_production_ends_at_records_it_saw(kafka_broker: str, spark: Any) -> None:
    """A partition being written all the time never quite reaches its end: the plan's probe stops
    chasing it shortly after its first record (PROBE_CHASE_SECONDS) instead of waiting for an
    end-of-partition event, and still ends the range at an offset seen to exist. (At 10k events/s
    the chase took 0.3-1.0 s of every batch's plan.)"""
    import threading

    topic = create_topic(kafka_broker, 1)
    produce(kafka_broker, topic, [(0, None, value(0, i), None) for i in range(20)])
    stop = threading.Event()

    def keep_producing() -> None:
        i = 20
        while not stop.is_set():
            produce(kafka_broker, topic, [(0, None, value(0, i + j), None) for j in range(50)])
            i += 50

    producer = threading.Thread(target=keep_producing)
    producer.start()
    src = source(kafka_broker, topic, probe_timeout_seconds=30)
    try:
        time.sleep(1)
        position: dict[str, int] | None = None
        for _ in range(3):
            started = time.monotonic()
            ranges, position = src.plan(position, 1_000_000)
            assert time.monotonic() - started < 5
            assert ranges and ranges[0].end > ranges[0].start
            read = read_values(spark, src, ranges)  # every planned offset exists: no read timeout
            assert [o for _, o, _ in read] == list(range(ranges[0].start, ranges[0].end))
            assert [v for _, _, v in read] == [value(0, o) for _, o, _ in read]
    finally:
        stop.set()
        producer.join()
        src.close()


def test_the_data_loss_probe_reads_to_the_true_end(kafka_broker: str) -> None:
    """Only the plan may stop chasing an end early: the data-loss check's probe from the log start
    must reach the true end, or records that exist would be reported lost (and, with
    on_data_loss: skip, read again)."""
    topic = create_topic(kafka_broker, 1)
    produce(kafka_broker, topic, [(0, None, value(0, i), None) for i in range(20_000)])
    src = source(kafka_broker, topic)
    try:
        with src._driver_consumer() as consumer:
            assert src._fetch_ends(consumer, {0: 0}, {0: 20_000}) == {0: 20_000}
            short = src._fetch_ends(consumer, {0: 0}, {0: 20_000}, chase=0.0)[0]
            assert 0 < short <= 20_000  # the plan's chase ends at a record it saw, perhaps sooner
    finally:
        src.close()


def test_lag_counts_unread_records(kafka_broker: str) -> None:
    topic = create_topic(kafka_broker, 2)
    produce(kafka_broker, topic, [(p, None, b"x", None) for p in range(2) for _ in range(4)], batched=False)
    src = source(kafka_broker, topic)
    assert src.lag(None) == 8
    assert src.lag({"0": 3, "1": 4}) == 1
    assert src.lag_by_partition({"0": 3, "1": 4}) == {0: 1, 1: 0}  # what the Prometheus gauge shows


def test_unreadable_range_fails_with_its_position(kafka_broker: str, spark: Any) -> None:
    topic = create_topic(kafka_broker, 1)
    produce(kafka_broker, topic, [(0, None, b"x", None)], batched=False)
    src = source(kafka_broker, topic, read_timeout_seconds=1.5)
    started = time.monotonic()
    with pytest.raises(Exception) as caught:
        src.read(spark, [OffsetRange(topic, 0, 0, 5)]).collect()
    assert time.monotonic() - started < 60
    error = source_error_in(caught.value)
    assert error is not None
    assert f"{topic}/0@1: no records for 1.5s" in str(error)
