"""Supervision and source data loss, with a real broker (Apache Kafka) stopped and started again.

The tests share the session's broker (tests/kafka_broker.py; each xdist worker has its own) and
restart it for real: the process stops and starts again on the same ports with its log on disk,
and `restart` returns once the broker serves every partition again. Lost records are lost as on a
user's broker: retention deletes a segment the pipeline had not read yet, or a topic is deleted and
created again holding fewer records than the table's position.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import test_db_sync as db
from tests.commands import ROOT, run_cli, warehouse_reader
from tests.kafka_broker import KafkaBroker, create_topic, produce
from tests.model import table_rows
from tests.test_runner_kafka import COLUMNS, KEY, doc, events, model_of

DAY_MS = 24 * 3600 * 1000


def _recreate(bootstrap: str, topic: str, partitions: int) -> None:
    """Delete `topic` and create it again, empty: what the table's position counted is gone."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics([topic], operation_timeout=30).values():
        future.result(timeout=30)
    deadline = time.monotonic() + 30
    while True:  # deletion is asynchronous: the name is free once creating it succeeds
        try:
            create_topic(bootstrap, partitions, name=topic)
            return
        except Exception as exc:
            if "already exists" not in str(exc) and "marked for deletion" not in str(exc).lower():
                raise
            assert time.monotonic() < deadline, f"{topic} still exists 30 s after its deletion"
            time.sleep(0.1)


def _set_topic_config(bootstrap: str, topic: str, settings: dict[str, str]) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in settings.items()]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=20)


def _low_watermark(bootstrap: str, topic: str, partition: int) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)[0])
    finally:
        consumer.close()


def _lines(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def _run_once(config: dict[str, Any], spark: Any) -> list[Any]:
    """`icetide run --once` of `config` in the test's Spark (whose warehouse the config names): a
    run whose outcome needs no command line starts no driver JVM. Its batches."""
    from icetide.config.pipeline import PipelineConfig
    from icetide.pipeline.entry import runner_for

    batches: list[Any] = []
    runner_for(PipelineConfig.from_dict(config), spark).run(once=True, on_batch=batches.append, handle_signals=False)
    return batches


def _wait(what: str, check: Any, proc: subprocess.Popen[bytes], timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert proc.poll() is None, f"the runner exited ({proc.returncode}) while waiting for {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def test_runner_rides_out_a_broker_restart(spark: Any, kafka_server: KafkaBroker, tmp_path: Path) -> None:
    """The runner keeps going through a restart of the broker (stopped, started again with its
    log): it backs off while the broker is down and reads on from the table's position after."""
    broker = kafka_server
    topic = create_topic(broker.bootstrap, 3, prefix="supervised")
    first, second = events(0, 90), events(90, 60)
    produce(broker.bootstrap, topic, first)
    warehouse = tmp_path / "warehouse"
    config = doc("ksup", broker.bootstrap, topic, warehouse=str(warehouse))
    config["source"]["kafka"].update(metadata_timeout_seconds=2, probe_timeout_seconds=30, read_timeout_seconds=30)
    config["restart"] = {"max_attempts": 30, "backoff": "4s", "max_backoff": "4s"}
    config_path = tmp_path / "pipeline.yaml"
    config_path.write_text(yaml.safe_dump(config))
    out = tmp_path / "stdout.jsonl"
    err = tmp_path / "stderr.log"
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        runner = subprocess.Popen(
            [sys.executable, "-m", "icetide.cli", "-v", "run", str(config_path)],
            cwd=ROOT,
            stdout=stdout,
            stderr=stderr,
        )
    try:

        def records_in() -> int:
            return sum(line["records_in"] for line in _lines(out) if "batch_id" in line)

        def restarts() -> list[dict[str, Any]]:
            return [line for line in _lines(out) if line.get("event") == "restart"]

        _wait("the first records", lambda: records_in() == 90, runner)
        broker.stop()
        _wait("a restart while the broker is down", lambda: len(restarts()) >= 1, runner, timeout=60)
        broker.start()  # the same log: the records the table holds are still there, at their offsets
        produce(broker.bootstrap, topic, second)
        _wait("the records produced after the restart", lambda: records_in() == 150, runner)
        runner.send_signal(signal.SIGTERM)
        assert runner.wait(timeout=120) == 0
    except AssertionError:
        lines = err.read_text(errors="replace").splitlines()
        print("\n".join(line for line in lines if "icetide" in line or "Error" in line)[-8000:])
        raise
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
    events_seen = restarts()
    assert [e["attempt"] for e in events_seen] == list(range(1, len(events_seen) + 1))
    assert all(e["error_type"] == "SourceError" and e["pipeline"] == "ksup" for e in events_seen)
    assert all(e["backoff_seconds"] == 4.0 and e["max_attempts"] == 30 for e in events_seen)
    other = warehouse_reader(spark, "ksupcheck", warehouse)
    assert table_rows(other, "ksupcheck.kafka.ksup", COLUMNS, KEY) == model_of(first + second)


def test_a_probe_fails_fast_when_the_broker_goes_away(kafka_server: KafkaBroker) -> None:
    """The fetch probe behind data-loss checks treats silence as 'no loss'; with the broker gone,
    silence proves nothing, and the probe fails at once (not after probe_timeout_seconds) so that
    supervision backs off and retries. (CI once waited 2 x 30 s here before giving up.)"""
    from icetide.errors import SourceError
    from icetide.sources.kafka import KafkaSource, KafkaSourceConfig

    broker = kafka_server
    topic = create_topic(broker.bootstrap, 1, prefix="probed")
    produce(broker.bootstrap, topic, [(0, r[1], r[2], None) for r in events(0, 5)])
    source = KafkaSource(KafkaSourceConfig(bootstrap_servers=broker.bootstrap, topic=topic, probe_timeout_seconds=60))
    try:
        with source._driver_consumer() as consumer:
            assert source._fetch_ends(consumer, {0: 2}) == {0: 5}
            broker.stop()
            started = time.monotonic()
            with pytest.raises(SourceError, match=r"brokers are down|connection failed"):
                source._fetch_ends(consumer, {0: 2})
        assert time.monotonic() - started < 30
    finally:
        source.close()
        broker.start()  # the session's other tests need it; a no-op when it runs


def test_data_loss_stops_by_default_and_skip_records_the_range(
    spark: Any, kafka_broker: str, tmp_path: Path, warehouse: str
) -> None:
    """Retention deletes a segment holding records the pipeline has not read: the run stops with
    the lost range named, and with `on_data_loss: skip` records it in the dead-letter table once.

    The topic's segments hold at most an hour of record time (segment.ms): records stamped three
    days ago fill the first segment, the pipeline reads 30 of them, 10 more arrive, then records
    stamped now roll a new segment. Retention is then cut to a day (retention.ms, as an operator
    would): the broker deletes the first segment, so the log starts at offset 40 while the table's
    position is 30."""
    old_ms = int(time.time() * 1000) - 3 * DAY_MS
    topic = create_topic(kafka_broker, 1, prefix="lossy", config={"segment.ms": str(DAY_MS // 24)})
    before = [(0, r[1], r[2], old_ms) for r in events(0, 30, bad_every=7)]  # dead letters up to offset 30
    unread = [(0, r[1], r[2], old_ms) for r in events(100, 10)]  # offsets 30..39, deleted unread
    produce(kafka_broker, topic, before)
    config = doc("kloss", kafka_broker, topic, warehouse=str(warehouse))
    config["source"]["kafka"]["probe_timeout_seconds"] = 10  # a loaded machine can be slow to fetch
    config["restart"] = {"max_attempts": 3, "backoff": "1s"}
    config_path = tmp_path / "pipeline.yaml"
    config_path.write_text(yaml.safe_dump(config))
    _run_once(config, spark)  # the runs that need no command line run in the test's Spark
    produce(kafka_broker, topic, unread)
    after = [(0, r[1], r[2], None) for r in events(200, 10, bad_every=3)]  # offsets 40..49, stamped now
    produce(kafka_broker, topic, after)
    _set_topic_config(kafka_broker, topic, {"retention.ms": str(DAY_MS)})
    deadline = time.monotonic() + 60
    while _low_watermark(kafka_broker, topic, 0) < 40:  # the broker checks retention every 0.5 s
        assert time.monotonic() < deadline, "retention did not delete the first segment within 60 s"
        time.sleep(0.2)
    assert _low_watermark(kafka_broker, topic, 0) == 40
    started = time.monotonic()
    failed = run_cli("run", str(config_path), "--once")
    assert failed.returncode == 1, (failed.stdout[-2000:], failed.stderr[-2000:])
    assert [line for line in failed.stderr.splitlines() if "data loss" in line] == [
        failed.stderr.strip().splitlines()[-1]
    ]
    assert f"kafka data loss on {topic}/0@30..40: offsets 30..39 were deleted (retention)" in failed.stderr
    assert "on_data_loss: skip" in failed.stderr
    assert '"event": "restart"' not in failed.stdout  # terminal: no restart
    assert time.monotonic() - started < 90
    other = warehouse_reader(spark, "klosscheck", warehouse)
    assert table_rows(other, "klosscheck.kafka.kloss", COLUMNS, KEY) == model_of(before)  # nothing more

    config["on_data_loss"] = "skip"
    batches = _run_once(config, spark)
    assert sum(b.lost_ranges for b in batches) == 1
    other = warehouse_reader(spark, "klosscheck2", warehouse)
    assert table_rows(other, "klosscheck2.kafka.kloss", COLUMNS, KEY) == model_of(before + after)
    dead = other.table("klosscheck2.kafka.kloss_dead_letter").collect()
    lost = [r for r in dead if r["payload"] is None]
    assert [r["source_position"] for r in lost] == [f"{topic}/0@30..40"]
    assert lost[0]["error"] == "data loss: offsets 30..39 were deleted (retention)"
    bad_before = [f"{topic}/0@{i}" for i in range(30) if i % 7 == 0]
    bad_after = [f"{topic}/0@{i - 200 + 40}" for i in range(200, 210) if i % 3 == 0]
    assert sorted(r["source_position"] for r in dead if r["payload"] is not None) == sorted(bad_before + bad_after)
    # recorded once: a further run finds nothing lost and adds nothing
    _run_once(config, spark)
    assert other.table("klosscheck2.kafka.kloss_dead_letter").count() == len(dead)


def test_terminal_error_stops_at_once(kafka_broker: str, tmp_path: Path) -> None:
    topic = create_topic(kafka_broker, 3, prefix="terminal")
    produce(kafka_broker, topic, events(0, 30, bad_every=7))
    config = doc("kterm", kafka_broker, topic, warehouse=str(tmp_path / "warehouse"), max_bad_fraction=0.0)
    config["source"]["kafka"]["probe_timeout_seconds"] = 30
    # a restart would wait an hour: the run ending (within the timeout) shows there was none
    config["restart"] = {"max_attempts": 5, "backoff": "1h", "max_backoff": "1h"}
    config_path = tmp_path / "pipeline.yaml"
    config_path.write_text(yaml.safe_dump(config))
    failed = run_cli("run", str(config_path), timeout=900)
    assert failed.returncode == 1, (failed.stdout[-2000:], failed.stderr[-2000:])
    assert "more than max_bad_fraction" in failed.stderr
    assert '"event": "restart"' not in failed.stdout


def test_restart_and_data_loss_settings_are_validated_at_load() -> None:
    from icetide.config.pipeline import PipelineConfig, RestartConfig
    from icetide.errors import ConfigError

    base = doc("kcfg", "127.0.0.1:1", "t")
    assert PipelineConfig.from_dict(base).restart == RestartConfig(max_attempts=5, backoff=1.0, max_backoff=60.0)
    assert PipelineConfig.from_dict(base).on_data_loss == "fail"
    got = PipelineConfig.from_dict({**base, "restart": {"max_attempts": 3, "backoff": "500ms", "max_backoff": "2s"}})
    assert [got.restart.delay(n) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 2.0]
    for bad, key in (
        ({"restart": {"max_attempts": "x"}}, "restart.max_attempts"),
        ({"restart": {"backoff": "soon"}}, "restart.backoff"),
        ({"restart": {"retries": 1}}, "restart.retries"),
        ({"restart": {"backoff": "10s", "max_backoff": "1s"}}, "restart.max_backoff"),
        ({"restart": 5}, "restart"),
        ({"on_data_loss": "ignore"}, "on_data_loss"),
        ({"on_data_loss": "skip", "dead_letter": None}, "on_data_loss"),
    ):
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            PipelineConfig.from_dict({**base, **bad})


def test_a_sync_with_skip_reads_each_recreated_topic_again_into_its_table(
    spark: Any, kafka_broker: str, warehouse: str
) -> None:
    """A sync pipeline over two topics (orders, customers) with `on_data_loss: skip` whose topics are
    deleted and created again, each holding fewer records than its table's position, with
    changes to keys the table holds and to keys it does not. Each table ends equal to its model of
    every message, old log then new; the dead-letter table holds one lost range ("..?") per reset
    partition, once; a further run changes nothing.

    The change events are built from real Debezium messages: the MySQL `orders` and `customers`
    messages (and their keys) of tests/data/debezium/debezium_server_iceberg_mysql_inventory.jsonl
    (debezium-server-iceberg's test resources), through tests/test_db_sync.py's streams."""

    def new_log(stream: db.TableStream, live: dict[int, dict[str, Any]]) -> list[db.Record]:
        """Two updates and a delete (with its tombstone) of keys the table holds, three new keys."""
        held = sorted(live)
        assert len(held) >= 3
        out: list[db.Record] = []
        for i, key in enumerate(held[:2]):
            row = db.new_row(stream.table, key, 100 + i)
            out.append((0, stream.key(key), stream.change("u", live[key], row), None))
        out.append((0, stream.key(held[2]), stream.change("d", live[held[2]], None), None))
        out.append((0, stream.key(held[2]), None, None))
        for key in (5001, 5002, 5003):
            out.append((0, stream.key(key), stream.change("c", None, db.new_row(stream.table, key, 200)), None))
        return out

    prefix, namespace = f"dbreset{db.unique()}", "reset"
    streams = {t: s for t, s in db.inventory_streams().items() if t != "products"}
    keys = {"orders": "order_number", "customers": "id"}
    topics = {t: f"{prefix}.inventory.{t}" for t in streams}
    old = {t: db.changes(s, seed=40 + i, count=16) for i, (t, s) in enumerate(sorted(streams.items()))}
    for t in streams:
        create_topic(kafka_broker, 1, name=topics[t])
        produce(kafka_broker, topics[t], old[t])
    config = db.pipeline_doc("syncreset", kafka_broker, prefix, namespace, warehouse=warehouse)
    config["on_data_loss"] = "skip"
    config["source"]["kafka"]["probe_timeout_seconds"] = 10  # a loaded machine can be slow to fetch
    _run_once(config, spark)
    reader = warehouse_reader(spark, "resetcheck", warehouse)
    for t in streams:
        assert db.same(db.rows_of(reader, f"resetcheck.{namespace}.{t}", keys[t]), db.model_of(old[t])), t

    # The topics are deleted and created again: each table's position is now beyond its partition's end.
    new = {t: new_log(streams[t], db.model_of(old[t])) for t in streams}
    for t in streams:
        assert len(new[t]) < len(old[t])
        _recreate(kafka_broker, topics[t], 1)
        produce(kafka_broker, topics[t], new[t])
    batches = _run_once(config, spark)
    assert sum(b.lost_ranges for b in batches) == len(streams)

    lost = sorted(f"{topics[t]}/0@{len(old[t])}..?" for t in streams)

    def check() -> None:
        for t in streams:
            table = f"resetcheck.{namespace}.{t}"
            assert db.same(db.rows_of(reader, table, keys[t]), db.model_of(old[t] + new[t])), t
        dead = reader.table(f"resetcheck.{namespace}.dead_letter").collect()
        assert sorted(r["source_position"] for r in dead) == lost
        assert all(r["payload"] is None and r["error"].startswith("data loss: the partition ends") for r in dead)

    check()
    # Recorded once, read once: a further run finds nothing lost and nothing new.
    assert sum(b.lost_ranges for b in _run_once(config, spark)) == 0
    check()
