"""Offsets that hold no record a reader gets: transactions and compaction, on Apache Kafka.

A transactional producer writes a commit or abort marker after each transaction's records (a
control record, at an offset of its own), and the records of an aborted transaction stay in the
log. icetide reads committed records only (isolation.level=read_committed, on every path): no row
and no dead letter comes from an aborted transaction or from one still open, and neither the
markers nor the aborted records are counted as lost or bad. A compacted topic keeps the last
record of each key: the offsets compaction removed are no data loss, and a keyed upsert table of
the compacted log equals the table of the whole log.

The records are the JSON events of tests/test_runner_kafka.py (made up there), checked against
its reference model. Batches are small (max_records) so that batch ends fall on markers, aborted
records and compacted gaps.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from icetide.config.pipeline import PipelineConfig
from icetide.pipeline.batch_path import BatchPath
from icetide.pipeline.table_runner import Runner
from tests.kafka_broker import create_topic, produce, produce_transactions, transactional_producer
from tests.model import table_rows
from tests.test_runner_kafka import COLUMNS, KEY, doc, events, model_of


def _records(start: int, count: int, *, bad_every: int = 0) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(p, k, v) for p, k, v, _ in events(start, count, bad_every=bad_every)]


def _bad(value: bytes | None) -> bool:
    return value is not None and b"not a time" in value


def _positions(topic: str, records: list[tuple[int, int, bytes | None, bytes | None]]) -> list[str]:
    return sorted(f"{topic}/{p}@{offset}" for p, offset, _, value in records if _bad(value))


def _as_events(records: list[tuple[int, int, bytes | None, bytes | None]]) -> list[tuple[int, bytes, bytes, None]]:
    """Committed records in offset order per partition, in the shape model_of takes."""
    ordered = sorted(records, key=lambda r: (r[0], r[1]))
    return [(p, key or b"", value or b"", None) for p, _, key, value in ordered]


@pytest.mark.parametrize("fast_path", ["auto", "off"])
def test_aborted_and_open_transactions_never_land(spark: Any, kafka_broker: str, fast_path: str) -> None:
    """Committed and aborted transactions interleaved over 3 partitions, bad records in both, then a
    transaction left open: a run lands exactly the committed records (rows and dead letters at their
    offsets), counts no marker or aborted record, and waits for the open transaction, which lands
    once committed. On the fast path (json_fast) and on the Spark path."""
    topic = create_topic(kafka_broker, 3, prefix="tx")
    committed = produce_transactions(
        kafka_broker,
        topic,
        [
            (True, _records(0, 12, bad_every=7)),
            (False, _records(100, 9, bad_every=4)),  # values and bad records that must never show
            (True, _records(12, 6)),
            (False, _records(200, 5, bad_every=2)),
            (False, _records(300, 4)),
            (True, _records(18, 9, bad_every=5)),
        ],
    )
    pending = transactional_producer(kafka_broker)
    later = produce_transactions(kafka_broker, topic, [(True, _records(27, 6))], producer=pending)
    pending.begin_transaction()
    for p, key, value in _records(400, 6, bad_every=3):  # open: sent, neither committed nor aborted
        pending.produce(topic, key=key, value=value, partition=p)
    assert pending.flush(30) == 0
    committed += later
    name = f"tx_{fast_path}"
    budget = 12 if fast_path == "auto" else 20  # a Spark-path batch costs more; its ranges cross gaps all the same
    config = PipelineConfig.from_dict(
        {**doc(name, kafka_broker, topic), "trigger": {"max_records": budget}, "fast_path": fast_path}
    )
    path = BatchPath.JSON_FAST if fast_path == "auto" else BatchPath.SPARK

    summary = Runner(config, spark).run(once=True, handle_signals=False)
    assert {b.path for b in summary.batches} == {path}
    assert sum(b.records_in for b in summary.batches) == len(committed)
    assert sum(b.bad_records for b in summary.batches) == len(_positions(topic, committed))
    assert sum(b.lost_ranges for b in summary.batches) == 0
    assert table_rows(spark, config.table.name, COLUMNS, KEY) == model_of(_as_events(committed))
    dead = spark.table(config.dead_letter).collect()
    assert sorted(r["source_position"] for r in dead) == _positions(topic, committed)

    # The open transaction commits: its records land, once, after everything before them.
    pending.commit_transaction(30)
    opened = _records(400, 6, bad_every=3)
    summary = Runner(config, spark).run(once=True, handle_signals=False)
    assert sum(b.records_in for b in summary.batches) == len(opened)
    assert sum(b.lost_ranges for b in summary.batches) == 0
    whole = _as_events(committed) + [(p, k or b"", v or b"", None) for p, k, v in opened]
    assert table_rows(spark, config.table.name, COLUMNS, KEY) == model_of(whole)
    dead = spark.table(config.dead_letter).collect()
    assert len(dead) == len(_positions(topic, committed)) + sum(_bad(v) for _, _, v in opened)
    assert all(r["payload"] is not None for r in dead)  # no lost range among them


def _compacted_offsets(bootstrap: str, topic: str) -> tuple[list[int], int]:
    """The offsets a reader gets from partition 0 of `topic`, and the partition's end."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compacted", "enable.partition.eof": True})
    try:
        end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)[1]
        consumer.assign([TopicPartition(topic, 0, 0)])
        offsets: list[int] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                if message.error().code() == -191:  # the end of the partition
                    return offsets, end
                continue
            offsets.append(message.offset())
        raise AssertionError(f"{topic}: no end of partition within 30 s")
    finally:
        consumer.close()


def test_a_compacted_topic_has_gaps_that_are_no_data_loss(spark: Any, kafka_broker: str) -> None:
    """Six rounds of updates to the same 8 keys, each round stamped an hour after the one before, in
    a topic with cleanup.policy=compact and segments of at most a minute of record time: every round
    starts a segment, and the log cleaner (which looks every 200 ms on the test broker) keeps the last
    record per key of the closed segments. The run reads what is left: no lost range, no bad record,
    and the table equals the model of every record produced (last write per key)."""
    keys = 8
    start_ms = int(time.time() * 1000) - 10 * 3600 * 1000
    topic = create_topic(
        kafka_broker,
        1,
        prefix="compacted",
        config={"cleanup.policy": "compact", "segment.ms": "60000", "min.cleanable.dirty.ratio": "0.01"},
    )
    produced: list[tuple[int, bytes, bytes, int | None]] = []
    for round_ in range(6):
        stamp = start_ms + round_ * 3600 * 1000
        for k in range(keys):
            value = {"event_id": f"e{k}", "event_time": "2026-01-01T00:00:00", "ad_id": f"ad{k}", "clicks": round_}
            produced.append((0, f"k{k}".encode(), json.dumps(value).encode(), stamp))
        produce(kafka_broker, topic, produced[-keys:])
    deadline = time.monotonic() + 60
    while True:  # wait on the cleaner: at most 8 records a closed segment, plus the active one's 8
        offsets, end = _compacted_offsets(kafka_broker, topic)
        if len(offsets) <= 2 * keys:
            break
        assert time.monotonic() < deadline, f"the cleaner left {len(offsets)} of {end} records after 60 s"
        time.sleep(0.2)
    assert end == len(produced) and offsets[-keys:] == list(range(end - keys, end))  # the gaps are below

    config = PipelineConfig.from_dict({**doc("compacted", kafka_broker, topic), "trigger": {"max_records": 6}})
    summary = Runner(config, spark).run(once=True, handle_signals=False)
    assert sum(b.records_in for b in summary.batches) == len(offsets)
    assert sum(b.lost_ranges for b in summary.batches) == 0
    assert sum(b.bad_records for b in summary.batches) == 0
    assert table_rows(spark, config.table.name, COLUMNS, KEY) == model_of([(p, k, v, None) for p, k, v, _ in produced])
    assert spark.table(config.dead_letter).count() == 0


def test_reading_uncommitted_records_is_refused() -> None:
    """read_committed is icetide's, like the offset settings: a consumer setting cannot turn it off."""
    from icetide.errors import ConfigError
    from icetide.sources.kafka_config import KafkaSourceConfig

    block = {"bootstrap_servers": "127.0.0.1:9", "topic": "t", "consumer": {"isolation.level": "read_uncommitted"}}
    with pytest.raises(
        ConfigError, match=r"source\.kafka\.consumer\.isolation\.level: icetide requires 'read_committed'"
    ):
        KafkaSourceConfig.from_dict(block)
    assert (
        KafkaSourceConfig.from_dict({**block, "consumer": {}}).reader_settings()["isolation.level"] == "read_committed"
    )
