"""Reading ahead of the trigger (docs/runner.md, "Reading ahead"), over a real broker (Apache
Kafka): a JSON fast-path batch reads the records arriving until its trigger time, exactly once,
and a stop does not wait for the trigger. The records are test_runner_kafka's generated ad events
(upserts by event_id and event_time), produced while the runner runs."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from icetide.config.pipeline import PipelineConfig
from icetide.pipeline.table_runner import Runner
from tests.commands import run_cli, warehouse_reader
from tests.kafka_broker import create_topic, produce
from tests.model import table_rows
from tests.test_runner_kafka import COLUMNS, KEY, doc, events, model_of


class SteadyProducer:
    """Sends `per_send` records every `every` seconds on a thread, counting what it sent."""

    def __init__(
        self, bootstrap: str, topic: str, *, per_send: int = 3, every: float = 0.2, bad_every: int = 0
    ) -> None:
        self.bootstrap, self.topic, self.per_send, self.every = bootstrap, topic, per_send, every
        self.bad_every = bad_every
        self.sent: list[tuple[int, bytes, bytes, None]] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._done.wait(self.every):
            more = events(len(self.sent), self.per_send, bad_every=self.bad_every)
            self.sent.extend(more)  # counted before it is sent: a plan never sees more than `sent`
            produce(self.bootstrap, self.topic, more)

    def __enter__(self) -> SteadyProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()


def batches_with_plans(runner: Any, planner: Any, sent: Callable[[], int], count: int = 4) -> list[tuple[int, Any]]:
    """Run `runner` for `count` batches: each batch's metrics, with what the producer had `sent`
    when it was planned (`planner.plan` is wrapped to count, and still plans)."""
    batches: list[tuple[int, Any]] = []
    planned_at: list[int] = []
    plan = planner.plan

    def counting_plan(*args: Any, **kwargs: Any) -> Any:
        planned_at.append(sent())
        return plan(*args, **kwargs)

    planner.plan = counting_plan

    def on_batch(metrics: Any) -> None:
        batches.append((planned_at[-1], metrics))
        if len(batches) == count:
            runner.stop()

    safety = threading.Timer(120, runner.stop)
    safety.start()
    try:
        runner.run(handle_signals=False, on_batch=on_batch)
    finally:
        safety.cancel()
    return batches


def stop_while_reading_ahead(runner: Any) -> None:
    """Run `runner` (a 30 s interval) and stop it 3 s in, while its batch reads ahead: the run ends
    well before the trigger time and commits nothing."""
    threading.Timer(3.0, runner.stop).start()
    started = time.monotonic()
    summary = runner.run(handle_signals=False)
    stopped_after = time.monotonic() - started
    assert stopped_after < 20, stopped_after  # not held until the trigger time, 30 s on
    assert summary.batches == []  # the batch reading ahead was cancelled, not committed


def test_a_batch_holds_what_arrived_after_its_plan_until_its_trigger(spark: Any, kafka_broker: str) -> None:
    """Each batch is planned at its start and read until its trigger time: it holds records sent
    after it was planned. The source's plan is wrapped (it still plans) to count what the producer
    had sent when each batch was planned; after 4 batches and a run of what came after the stop,
    the table equals the model of everything sent."""
    topic = create_topic(kafka_broker, partitions=3)
    config = PipelineConfig.from_dict(
        doc("ahead", kafka_broker, topic, trigger={"interval": "2s", "max_records": 10_000})
    )
    assert config.trigger.read_ahead  # the default
    runner = Runner(config, spark)
    with SteadyProducer(kafka_broker, topic) as producer:
        batches = batches_with_plans(runner, runner.source, lambda: len(producer.sent))
    read = 0
    for sent_at_plan, metrics in batches:
        read += metrics.records_in
        assert read > sent_at_plan, batches  # by this batch, more than had been sent when it was planned
    rest = Runner(config, spark).run(once=True, handle_signals=False)
    assert read + sum(b.records_in for b in rest.batches) == len(producer.sent)
    assert table_rows(spark, config.table.name, COLUMNS, KEY) == model_of(producer.sent)


def test_a_stop_while_reading_ahead_cancels_the_batch_and_loses_nothing(spark: Any, kafka_broker: str) -> None:
    """With a 30 s interval, the runner is stopped 3 s into a batch that reads ahead: the run ends
    well before the trigger time, the batch's files are deleted and nothing of it is committed;
    the next run reads those records again, once."""
    topic = create_topic(kafka_broker, partitions=3)
    first = events(0, 30)
    produce(kafka_broker, topic, first)
    config = PipelineConfig.from_dict(doc("ahead_stop", kafka_broker, topic, trigger={"interval": "30s"}))
    runner = Runner(config, spark)
    with SteadyProducer(kafka_broker, topic) as producer:
        stop_while_reading_ahead(runner)
    rest = Runner(config, spark).run(once=True, handle_signals=False)
    assert rest.abandoned_files_removed == 0  # the stopped batch deleted its own files
    assert sum(b.records_in for b in rest.batches) == len(first) + len(producer.sent)
    assert table_rows(spark, config.table.name, COLUMNS, KEY) == model_of(first + producer.sent)


@pytest.mark.guarantee
def test_kill_9_while_reading_ahead_then_restart_writes_each_record_once(
    spark: Any, kafka_broker: str, tmp_path: Path
) -> None:
    """`icetide run` (no --once: batches read ahead) while a producer sends, a third of its
    records bad: killed -9 after a batch's dead letters committed (its table not), then, restarted,
    after the next batch wrote its files (nothing committed). The batch read again after the first
    kill reads to a different end than the one killed. After the producer stops, a run of what is
    left: every good record in the table once (the model), every bad one in the dead-letter
    table once."""
    topic = create_topic(kafka_broker, partitions=3)
    warehouse = tmp_path / "warehouse"
    config_path = tmp_path / "pipeline.yaml"
    name = "ahead_kill"
    config_path.write_text(yaml.safe_dump(doc(name, kafka_broker, topic, warehouse=str(warehouse))))
    with SteadyProducer(kafka_broker, topic, bad_every=3) as producer:
        for point in ("after_dead_letter", "after_write"):
            crashed = run_cli("run", str(config_path), env={"ICETIDE_CRASH_AT": point}, timeout=300)
            assert crashed.returncode == -signal.SIGKILL, (point, crashed.returncode, crashed.stderr[-2000:])
    done = run_cli("run", str(config_path), "--once", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    other = warehouse_reader(spark, "aheadcheck", warehouse)
    assert table_rows(other, f"aheadcheck.kafka.{name}", COLUMNS, KEY) == model_of(producer.sent)
    dead = [r["source_position"] for r in other.table(f"aheadcheck.kafka.{name}_dead_letter").collect()]
    assert len(dead) == len(set(dead)) == sum(1 for i in range(len(producer.sent)) if i % 3 == 0)
