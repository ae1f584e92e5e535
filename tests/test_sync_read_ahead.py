"""Reading ahead of the trigger in a database sync (docs/runner.md, "Reading ahead"), over a real
broker (Apache Kafka): a sync fast-path batch reads the change events arriving until its trigger
time into every table exactly once, through a stop and through kill -9.

The change events are tests/test_db_sync.py's: the MySQL `orders` and `customers` messages of
debezium-server-iceberg's test resources (schema, source block, key schema), with rows of their
own, produced while the runner runs.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from icetide.config.pipeline import PipelineConfig
from icetide.pipeline.sync.runner import SyncRunner
from tests.commands import run_cli, warehouse_reader
from tests.kafka_broker import produce
from tests.test_db_sync import (
    Record,
    _create,
    changes,
    inventory_streams,
    model_of,
    pipeline_doc,
    rows_of,
    same,
    unique,
)
from tests.test_read_ahead import batches_with_plans, stop_while_reading_ahead

KEYS = {"orders": "order_number", "customers": "id"}
# A record that names no table (its source block has no `table`): a dead letter, once
NO_TABLE = (0, None, json.dumps({"payload": {"op": "c", "after": {"id": 1}, "source": {"db": "inventory"}}}).encode())


class ChangeFeed:
    """Sends the next `per_send` change events of each table every `every` seconds on a thread,
    counting what it sent; with `bad_every`, every so many sends one record that names no table
    goes to the orders topic too."""

    def __init__(self, bootstrap: str, prefix: str, *, count: int = 600, per_send: int = 2, every: float = 0.2) -> None:
        streams = {t: s for t, s in inventory_streams().items() if t in KEYS}
        self.bootstrap, self.per_send, self.every = bootstrap, per_send, every
        self.topics = {t: f"{prefix}.inventory.{t}" for t in streams}
        self.planned = {t: changes(s, seed=20 + i, count=count) for i, (t, s) in enumerate(sorted(streams.items()))}
        self.sent: dict[str, list[Record]] = {t: [] for t in streams}
        self.bad_every = 0
        self.bad_sent = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        for topic in self.topics.values():
            _create(bootstrap, topic)

    def total(self) -> int:
        return sum(len(r) for r in self.sent.values())

    def _run(self) -> None:
        sends = 0
        while not self._done.wait(self.every):
            sends += 1
            for t, topic in self.topics.items():
                more = self.planned[t][len(self.sent[t]) : len(self.sent[t]) + self.per_send]
                if self.bad_every and t == "orders" and sends % self.bad_every == 0:
                    more = [*more, (*NO_TABLE, None)]
                    self.bad_sent += 1
                self.sent[t].extend(more)  # counted before it is sent: a plan never sees more than `sent`
                produce(self.bootstrap, topic, more)

    def __enter__(self) -> ChangeFeed:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()


def test_a_sync_batch_holds_what_arrived_after_its_plan_until_its_trigger(
    spark: Any, kafka_broker: str, warehouse: str
) -> None:
    """Each batch is planned at its start and read until its trigger time: it holds change events
    sent after it was planned. The topics' plan is wrapped (it still plans) to count what the
    producer had sent when each batch was planned; after 4 batches and a run of what came after
    the stop, each table equals its model, and every batch came from the fast path."""
    prefix, namespace = f"db{unique()}", f"ahead{unique()}"
    feed = ChangeFeed(kafka_broker, prefix)
    config = PipelineConfig.from_dict(
        pipeline_doc("sync_ahead", kafka_broker, prefix, namespace, trigger={"interval": "2s"})
    )
    assert config.trigger.read_ahead  # the default
    runner = SyncRunner(config, spark)
    with feed:
        batches = batches_with_plans(runner, runner.topics, feed.total)
    read = 0
    for i, (sent_at_plan, metrics) in enumerate(batches):
        read += metrics.records_in
        assert metrics.path == "sync_fast", (metrics.batch_id, metrics.path, metrics.fallback_detail)
        # The first batch creates the tables (then runs its plan alone); the later ones read ahead:
        # by each of them, more than had been sent when it was planned.
        assert i == 0 or read > sent_at_plan, [(s, m.records_in) for s, m in batches]
    rest = SyncRunner(config, spark).run(once=True, handle_signals=False)
    assert read + sum(b.records_in for b in rest.batches) == feed.total()
    reader = warehouse_reader(spark, "lake", warehouse)
    for t in KEYS:
        assert same(rows_of(reader, f"lake.{namespace}.{t}", KEYS[t]), model_of(feed.sent[t])), t


def test_a_backlog_over_many_one_partition_topics_reads_ahead_into_every_table_once(
    spark: Any, kafka_broker: str, warehouse: str
) -> None:
    """Three topics of one partition each (partition 0, as Debezium's connectors make them) with
    a backlog when a batch that reads ahead starts: one consume call returns records of several of
    them, and every record lands in its own table once (the reader filed a call's records under
    its first record's topic before 1ab72f1, and a topic's end could move past what it holds).
    After the batch more changes come to every topic; each table then equals its model."""
    prefix, namespace = f"db{unique()}", f"ahmany{unique()}"
    streams = inventory_streams()
    keys = {"orders": "order_number", "customers": "id", "products": "id"}
    sizes = {"customers": 150, "orders": 900, "products": 450}  # ends apart: a misfiled end shows
    records = {t: changes(s, seed=40 + i, count=sizes[t] + 100) for i, (t, s) in enumerate(sorted(streams.items()))}
    topics = {t: f"{prefix}.inventory.{t}" for t in streams}
    for t in streams:
        _create(kafka_broker, topics[t])
        produce(kafka_broker, topics[t], records[t][:20])
    config = PipelineConfig.from_dict(
        pipeline_doc("sync_ahead_many", kafka_broker, prefix, namespace, trigger={"interval": "2s"})
    )
    first = SyncRunner(config, spark)
    assert first.run_batch() is not None  # creates the tables (a batch without a trigger time)
    first.close()
    for t in streams:
        produce(kafka_broker, topics[t], records[t][20 : sizes[t]])
    runner = SyncRunner(config, spark)
    [(_, metrics)] = batches_with_plans(runner, runner.topics, lambda: 0, count=1)
    assert metrics.path == "sync_fast", (metrics.path, metrics.fallback_detail)
    for t in streams:  # after the batch: what a position moved past its topic's end would skip
        produce(kafka_broker, topics[t], records[t][sizes[t] :])
    SyncRunner(config, spark).run(once=True, handle_signals=False)
    reader = warehouse_reader(spark, "lake", warehouse)
    for t in streams:
        assert same(rows_of(reader, f"lake.{namespace}.{t}", keys[t]), model_of(records[t])), t


def test_a_stop_while_a_sync_batch_reads_ahead_cancels_it_and_loses_nothing(
    spark: Any, kafka_broker: str, warehouse: str
) -> None:
    """With a 30 s interval, a sync runner whose tables exist is stopped 3 s into a batch that
    reads ahead: the run ends well before the trigger time and nothing of that batch is
    committed; the next run reads those events again, once."""
    prefix, namespace = f"db{unique()}", f"ahstop{unique()}"
    feed = ChangeFeed(kafka_broker, prefix)
    config = PipelineConfig.from_dict(
        pipeline_doc("sync_ahead_stop", kafka_broker, prefix, namespace, trigger={"interval": "30s"})
    )
    with feed:
        time.sleep(1.0)
        first = SyncRunner(config, spark)
        assert first.run_batch() is not None  # creates the tables (a batch without a trigger time)
        first.close()
        stop_while_reading_ahead(SyncRunner(config, spark))
    rest = SyncRunner(config, spark).run(once=True, handle_signals=False)
    assert rest.abandoned_files_removed == 0  # the stopped batch deleted its own files
    reader = warehouse_reader(spark, "lake", warehouse)
    for t in KEYS:
        assert same(rows_of(reader, f"lake.{namespace}.{t}", KEYS[t]), model_of(feed.sent[t])), t


@pytest.mark.guarantee
def test_kill_9_of_a_sync_reading_ahead_between_its_tables_commits(
    spark: Any, kafka_broker: str, tmp_path: Path
) -> None:
    """`icetide run` of a database sync (no --once: batches read ahead) while a producer sends,
    with records that name no table among the orders: killed -9 after a batch's dead letters
    committed (no table yet), then, restarted, after the first of its tables committed (the
    other not), then after a batch wrote its files. Each batch read again reads to another end
    than the one killed. After the producer stops, a run of what is left: every table equals its
    source, and the dead-letter table holds each bad record once."""
    prefix, namespace = f"db{unique()}", f"ahkill{unique()}"
    feed = ChangeFeed(kafka_broker, prefix)
    feed.bad_every = 5
    warehouse = tmp_path / "wh"
    doc = pipeline_doc("sync_ahead_kill", kafka_broker, prefix, namespace, warehouse=str(warehouse))
    doc["trigger"] = {"interval": "1s"}
    config_path = tmp_path / "pipeline.yaml"
    config_path.write_text(yaml.safe_dump(doc))
    with feed:
        for point in ("after_dead_letter", "after_table_commit", "after_write"):
            crashed = run_cli("run", str(config_path), env={"ICETIDE_CRASH_AT": point}, timeout=300)
            assert crashed.returncode == -signal.SIGKILL, (point, crashed.returncode, crashed.stderr[-2000:])
    done = run_cli("run", str(config_path), "--once", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    other = warehouse_reader(spark, "ahkillcheck", warehouse)
    for t in KEYS:
        assert same(rows_of(other, f"ahkillcheck.{namespace}.{t}", KEYS[t]), model_of(feed.sent[t])), t
    dead = [r["source_position"] for r in other.table(f"ahkillcheck.{namespace}.dead_letter").collect()]
    assert len(dead) == len(set(dead)) == feed.bad_sent
