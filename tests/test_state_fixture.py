"""A warehouse written by an earlier icetide (tests/state_fixture.py: pipeline state version 0,
each pipeline killed mid-batch) resumes exactly once under today's code: the killed batch's
recorded plan is replayed, every table ends equal to the reference model of its whole stream,
and no dead letter is written twice."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from tests import state_fixture as fx
from tests.commands import run_cli, warehouse_reader


def test_a_version_0_warehouse_resumes_exactly_once(spark: Any, kafka_broker: str, tmp_path: Path) -> None:
    from tests.model import table_rows
    from tests.test_db_sync import model_of as sync_model
    from tests.test_db_sync import rows_of as sync_rows
    from tests.test_db_sync import same
    from tests.test_runner_kafka import COLUMNS, KEY
    from tests.test_runner_kafka import model_of as events_model

    fx.unpack()
    fx.create_topics(kafka_broker)
    fx.produce_part(kafka_broker, 0)  # what the fixture was written from: the same topics, offsets, records
    fx.produce_part(kafka_broker, 1)
    for doc in (fx.events_doc(kafka_broker), fx.sync_doc(kafka_broker)):
        done = run_cli("run", str(fx.write_config(doc, tmp_path)), "--once")
        assert done.returncode == 0, done.stderr[-3000:]
    reader = warehouse_reader(spark, "statev0", fx.WAREHOUSE)

    records = fx.events_records(0) + fx.events_records(1)
    assert table_rows(reader, "statev0.v0.events", COLUMNS, KEY) == events_model(records)
    dead = Counter(r["source_position"] for r in reader.table("statev0.v0.events_dead_letter").collect())
    assert set(dead.values()) == {1}, "a dead letter was written twice"
    expected = {f"{fx.EVENTS_TOPIC}/{i % 3}@{i // 3}" for i in range(180) if i % 17 == 0}
    assert set(dead) == expected

    whole = {t: fx.sync_records(0)[t] + fx.sync_records(1)[t] for t in fx.sync_records(0)}
    keys = {"orders": "order_number", "customers": "id", "products": "id"}
    for topic, stream in whole.items():
        table = topic.rsplit(".", 1)[1]
        assert same(sync_rows(reader, f"statev0.v0sync.{table}", keys[table]), sync_model(stream)), table
    assert reader.table("statev0.v0sync.dead_letter").count() == 0


def test_pipeline_state_of_every_version_reads_as_one_typed_value() -> None:
    """Version 0 kept a dead-letter table's plan or registry inside its source position; version 1
    keeps the position and the registry apart. A state newer than this icetide is refused, naming
    the pipeline."""
    import json

    import pytest

    from icetide.commit.pipeline_state import STATE_VERSION, PipelineState
    from icetide.errors import TerminalError

    plan = {"items": [{"topic": "t", "partition": 0, "start": 3, "end": 9}], "position": {"0": 9}, "records_planned": 6}
    forms = {
        "one table": ({"plan": plan}, {"0": 9}, None),
        "many tables": (
            {"position": {"t": {"0": 9}}, "tables": {"db.a": {"t": {"0": 0}}}},
            {"t": {"0": 9}},
            {"db.a": {"t": {"0": 0}}},
        ),
        "a table": ({"t": {"0": 9}}, {"t": {"0": 9}}, None),
        "files": ({"max_mtime_ms": 5, "files": {"a.json": 5}}, {"max_mtime_ms": 5, "files": {"a.json": 5}}, None),
    }
    for what, (v0, position, registry) in forms.items():
        text = json.dumps({"batch_id": 3, "source_position": v0, "committed_at": "x"})
        state = PipelineState.from_json("p", text)
        assert (state.source_position, state.registry, state.version) == (position, registry, STATE_VERSION), what
        again = PipelineState.from_json("p", state.to_json())
        assert again == state and json.loads(state.to_json())["version"] == STATE_VERSION, what
    newer = json.dumps({"version": STATE_VERSION + 1, "batch_id": 3, "source_position": {}, "committed_at": "x"})
    with pytest.raises(TerminalError, match=r"pipeline p: .* version 2, written by a newer icetide"):
        PipelineState.from_json("p", newer)
