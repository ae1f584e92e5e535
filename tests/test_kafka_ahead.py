"""The reader of a task that reads ahead of its trigger (executor/kafka_ahead.py, through
executor/kafka_blocks.py's BlockReader), over a real broker (Apache Kafka): before the trigger
time its partitions are read past their planned ranges; after it, each is read to its planned end
and no further, so a batch that is behind does not grow while its slowest partition catches up.
The records are numbered payloads produced here; only their offsets matter."""

from __future__ import annotations

import time

from icetide.executor.kafka_ahead import ReadAhead
from icetide.executor.kafka_blocks import BlockReader
from icetide.sources.kafka_config import KafkaSourceConfig
from icetide.sources.kafka_reader import OffsetRange
from tests.kafka_broker import create_topic, produce


def _fill(bootstrap: str, counts: dict[int, int]) -> str:
    topic = create_topic(bootstrap, partitions=len(counts))
    produce(bootstrap, topic, [(p, None, b'{"n": %d}' % i, None) for p, n in counts.items() for i in range(n)])
    return topic


def _read(bootstrap: str, ranges: list[OffsetRange], ahead: ReadAhead) -> tuple[dict[int, int], dict[int, int]]:
    """(partition -> end reached, partition -> records yielded)."""
    settings = KafkaSourceConfig(bootstrap_servers=bootstrap, topic=ranges[0].topic).reader_settings()
    yielded: dict[int, int] = {}
    with BlockReader(settings, 30.0, ranges, join=False, ahead=ahead) as reader:
        for block in reader.blocks():
            p = int(block.where.rstrip("@").rsplit("/", 1)[1])
            offsets = [m.offset() for m in block.messages]
            assert offsets == sorted(offsets) and offsets[0] >= yielded.get(p, 0)
            yielded[p] = yielded.get(p, 0) + len(offsets)
    return {r.partition: r.end for r in reader.reached}, yielded


def test_past_the_trigger_each_partition_is_read_to_its_planned_end(kafka_broker: str) -> None:
    """Partition 0 planned whole (40,000 records, slow to read), partition 1 planned to offset 10
    of 2,010: with the trigger time already passed, partition 1 is read to offset 10 exactly while
    partition 0 is still being read, and partition 0 to its end."""
    topic = _fill(kafka_broker, {0: 40_000, 1: 2_010})
    ranges = [OffsetRange(topic, 0, 0, 40_000), OffsetRange(topic, 1, 0, 10)]
    reached, yielded = _read(kafka_broker, ranges, ReadAhead(until=time.time() - 1, spare=1_000_000))
    assert reached == {0: 40_000, 1: 10}
    assert yielded == {0: 40_000, 1: 10}


def test_before_the_trigger_partitions_are_read_past_their_plan(kafka_broker: str) -> None:
    """The same plan with the trigger 3 s on: what the partitions hold beyond their ranges is read
    too (up to the spare records)."""
    topic = _fill(kafka_broker, {0: 4_000, 1: 2_010})
    ranges = [OffsetRange(topic, 0, 0, 4_000), OffsetRange(topic, 1, 0, 10)]
    started = time.time()
    reached, yielded = _read(kafka_broker, ranges, ReadAhead(until=started + 3, spare=1_000_000))
    assert time.time() - started >= 3 - 0.5  # read until the trigger time
    assert reached == {0: 4_000, 1: 2_010}
    assert yielded == reached


def test_the_spare_caps_a_read_ahead(kafka_broker: str) -> None:
    """At most the planned records plus `spare` are read, however long before the trigger."""
    topic = _fill(kafka_broker, {0: 5_000})
    ranges = [OffsetRange(topic, 0, 0, 100)]
    started = time.time()
    reached, _ = _read(kafka_broker, ranges, ReadAhead(until=started + 30, spare=400))
    assert time.time() - started < 20  # the cap ended it, not the trigger
    assert reached[0] == 500


def test_topics_of_one_partition_each_are_read_each_under_its_own_topic(kafka_broker: str) -> None:
    """A database sync reads many topics of one partition each, all numbered 0 (as Debezium's
    connectors make them): one consume call returns records of several of them, and each record
    is yielded under its own topic at its own offset. Before the fix a call's records were all
    filed under the first one's topic (the partition numbers matched), so the other topics'
    records were decoded as that topic's and their ends were wrong."""
    counts = {create_topic(kafka_broker, partitions=1): n for n in (3_000, 2_000, 1_000)}
    for topic, n in counts.items():
        produce(kafka_broker, topic, [(0, None, b'{"t": "%s", "n": %d}' % (topic.encode(), i), None) for i in range(n)])
    ranges = [OffsetRange(topic, 0, 0, n) for topic, n in counts.items()]
    settings = KafkaSourceConfig(bootstrap_servers=kafka_broker, topic=ranges[0].topic).reader_settings()
    yielded: dict[str, list[int]] = {topic: [] for topic in counts}
    with BlockReader(settings, 30.0, ranges, join=False, ahead=ReadAhead(until=time.time() - 1, spare=0)) as reader:
        for block in reader.blocks():
            topic = block.where.rstrip("@").rsplit("/", 1)[0]
            for m in block.messages:
                assert m.topic() == topic, (m.topic(), topic)
                yielded[topic].append(m.offset())
    assert {t: offsets for t, offsets in yielded.items()} == {t: list(range(n)) for t, n in counts.items()}
    assert {r.topic: (r.start, r.end) for r in reader.reached} == {t: (0, n) for t, n in counts.items()}
