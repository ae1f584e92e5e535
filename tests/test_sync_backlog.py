"""With `write_parallelism: 2`, a database sync's backlog of one table drains in several tasks
(docs/design.md, "One task per table, except a backlog"), over a real broker (Apache Kafka): a
table with at least two tasks' worth of change events is cut by whole Kafka partitions, and a key
found in two tasks writes the batch again with whole topics.

The change events are tests/test_db_sync.py's: the MySQL `orders` and `customers` messages of
debezium-server-iceberg's test resources (schema, source block, key schema), with rows of their
own. Keyed messages go where librdkafka's partitioner puts their key, as Debezium's go where
Kafka Connect's puts theirs: every change of a row in one partition.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from icetide.config.pipeline import PipelineConfig
from icetide.pipeline.sync import fast_path
from icetide.pipeline.sync.runner import SyncRunner
from icetide.sources.kafka_reader import OffsetRange
from tests.commands import warehouse_reader
from tests.kafka_broker import create_topic
from tests.test_db_sync import Record, changes, inventory_streams, model_of, pipeline_doc, rows_of, same, unique

KEYS = {"orders": "order_number", "customers": "id"}
CUT_FROM = 40  # records per task in these tests (MIN_TASK_RECORDS is 25,000)


def produce_placed(bootstrap: str, topic: str, records: list[Record], *, keyed: bool) -> list[tuple[int, int]]:
    """Produce the records, each where the producer's partitioner puts its key (`keyed`) or to
    the partitions in turn (a producer that does not key its messages); each one's partition and
    offset, in order."""
    from confluent_kafka import Producer

    placed: list[tuple[int, int]] = [(-1, -1)] * len(records)
    failures: list[str] = []

    def delivered(i: int) -> Any:
        def report(error: Any, message: Any) -> None:
            if error is not None:
                failures.append(str(error))
            else:
                placed[i] = (message.partition(), message.offset())

        return report

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})
    for i, (_, key, value, _) in enumerate(records):
        partition = -1 if keyed else i % 4  # -1: the partitioner's choice by the key
        producer.produce(topic, key=key, value=value, partition=partition, on_delivery=delivered(i))
    assert producer.flush(20) == 0 and not failures, failures[:3]
    return placed


def held_model(records: list[Record], placed: list[tuple[int, int]], held: dict[str, int]) -> dict[int, Any]:
    """The model of the records below each partition's held offset (a key's changes all in one
    partition, so the partitions' order between them does not matter)."""
    below = [r for r, (p, offset) in zip(records, placed, strict=True) if offset < held.get(str(p), 0)]
    return model_of(below)


def cut_config(name: str, bootstrap: str, prefix: str, namespace: str, *, max_records: int) -> PipelineConfig:
    """test_db_sync's pipeline with `write_parallelism: 2` (a backlog may be cut) and a 1 s trigger."""
    doc = pipeline_doc(name, bootstrap, prefix, namespace, trigger={"interval": "1s", "max_records": max_records})
    return PipelineConfig.from_dict({**doc, "write_parallelism": 2})


def with_task_counts(runner: SyncRunner) -> list[int]:
    """How many tasks each of the runner's fast-path jobs ran, as they run."""
    fast = runner.fast
    assert fast is not None
    counts: list[int] = []
    run = fast._run_tasks

    def counted(groups: list[Any], config: Any, ahead: Any) -> Any:
        counts.append(len(groups))
        return run(groups, config, ahead)

    fast._run_tasks = counted  # type: ignore[method-assign]
    return counts


def test_a_backlog_of_one_table_drains_in_two_tasks_and_every_batch_equals_the_model(
    spark: Any, kafka_broker: str, warehouse: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """600 orders changes in a 4-partition topic and 60 customers changes in one partition, read
    in batches of up to 150: the orders' share of each batch is cut over both tasks by whole
    partitions (the customers go with the lighter piece), and after every batch each table equals
    the model of what it holds, with no key twice."""
    monkeypatch.setattr(fast_path, "MIN_TASK_RECORDS", CUT_FROM)
    prefix, namespace = f"db{unique()}", f"backlog{unique()}"
    streams = inventory_streams()
    records = {"orders": changes(streams["orders"], seed=31, count=600)}
    records["customers"] = changes(streams["customers"], seed=32, count=60)
    topics = {t: f"{prefix}.inventory.{t}" for t in KEYS}
    placed = {}
    for t, partitions in (("orders", 4), ("customers", 1)):
        create_topic(kafka_broker, partitions, name=topics[t])
        placed[t] = produce_placed(kafka_broker, topics[t], records[t], keyed=True)
    assert len({p for p, _ in placed["orders"]}) == 4  # the keys spread over every partition
    config = cut_config("backlog", kafka_broker, prefix, namespace, max_records=150)
    runner = SyncRunner(config, spark)
    assert runner.run_batch() is not None  # the first batch creates the tables
    tasks = with_task_counts(runner)
    reader = warehouse_reader(spark, "lake", warehouse)  # uncached: sees every commit at once
    while (metrics := runner.run_batch()) is not None:
        assert metrics.path == "sync_fast", (metrics.batch_id, metrics.path, metrics.fallback_detail)
        for t, key in KEYS.items():
            name = f"lake.{namespace}.{t}"
            held = runner.state.tables[name].position.get(topics[t], {})
            assert same(rows_of(reader, name, key), held_model(records[t], placed[t], held)), (t, metrics.batch_id)
    assert tasks.count(2) >= 3, tasks  # the full batches ran in two tasks
    assert runner.fast is not None and not runner.fast.whole_topics
    for t, key in KEYS.items():
        assert same(rows_of(reader, f"lake.{namespace}.{t}", key), model_of(records[t])), t
    runner.close()


def test_a_key_in_two_partitions_writes_the_batch_again_with_whole_topics(
    spark: Any, kafka_broker: str, warehouse: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A producer that does not key its messages puts a row's changes in several partitions: the
    batch cut over two tasks finds a key in both, deletes its files and is written again with the
    topic in one task, as is every later batch; the table equals the model (the collapse orders a
    key's changes by their binlog position), with no key twice."""
    monkeypatch.setattr(fast_path, "MIN_TASK_RECORDS", CUT_FROM)
    prefix, namespace = f"db{unique()}", f"unkeyed{unique()}"
    records = changes(inventory_streams()["orders"], seed=33, count=500)
    topic = f"{prefix}.inventory.orders"
    create_topic(kafka_broker, 4, name=topic)
    config = cut_config("unkeyed", kafka_broker, prefix, namespace, max_records=100_000)
    produce_placed(kafka_broker, topic, records[:20], keyed=False)
    runner = SyncRunner(config, spark)
    assert runner.run_batch() is not None  # creates the table (20 records: one task)
    tasks = with_task_counts(runner)
    produce_placed(kafka_broker, topic, records[20:400], keyed=False)
    with caplog.at_level(logging.INFO, logger=fast_path.__name__):
        metrics = runner.run_batch()
    assert metrics is not None and metrics.path == "sync_fast", metrics
    assert tasks == [2, 1], tasks  # cut, a key met, written again in one task
    assert runner.fast is not None and runner.fast.whole_topics
    assert any("came in two Kafka partitions" in r.getMessage() for r in caplog.records)
    produce_placed(kafka_broker, topic, records[400:], keyed=False)
    assert runner.run_batch() is not None
    assert tasks == [2, 1, 1], tasks  # 100 records, no longer cut
    reader = warehouse_reader(spark, "lake", warehouse)
    assert same(rows_of(reader, f"lake.{namespace}.orders", "order_number"), model_of(records))
    runner.close()
    rest = SyncRunner(config, spark).run(once=True, handle_signals=False)
    assert rest.abandoned_files_removed == 0  # the cut attempt deleted its own files


def test_task_groups_cut_a_topic_by_whole_partitions_only_when_asked() -> None:
    """Without `cut_from` a topic, and the topics that feed a common table, stay in one group;
    with it, a topic of two tasks' worth is cut by whole partitions, the largest first."""
    feeding = {"a": {"orders"}, "b": {"customers", "addresses"}}
    ranges = [OffsetRange("orders", p, 0, n) for p, n in enumerate([30, 30, 20, 10])]
    ranges += [OffsetRange("customers", 0, 0, 5), OffsetRange("addresses", 0, 0, 5)]
    whole = fast_path.task_groups(ranges, feeding, 2)
    assert sorted(sorted({r.topic for r in g}) for g in whole) == [["addresses", "customers"], ["orders"]]
    cut = fast_path.task_groups(ranges, feeding, 2, cut_from=40)
    assert sorted(sorted((r.topic, r.partition) for r in g) for g in cut) == [
        [("addresses", 0), ("customers", 0), ("orders", 1), ("orders", 3)],
        [("orders", 0), ("orders", 2)],
    ]
    assert fast_path.task_groups(ranges, feeding, 2, cut_from=50) == whole  # 90 records: one task's worth
