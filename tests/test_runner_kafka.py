"""The runner over a real broker (Apache Kafka): JSON and Debezium, exactly once."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from icetide.config.pipeline import PipelineConfig
from icetide.pipeline.table_runner import Runner
from tests.commands import crash_tour, warehouse_reader
from tests.kafka_broker import create_topic, produce
from tests.model import ReferenceModel, table_rows

ROOT = Path(__file__).resolve().parent.parent
COLUMNS = ["event_id", "event_time", "ad_id", "clicks"]
KEY = ["event_id", "event_time"]
SCHEMA = "event_id STRING NOT NULL, event_time TIMESTAMP NOT NULL, ad_id STRING, clicks INT"


def doc(name: str, bootstrap: str, topic: str, **extra: Any) -> dict[str, Any]:
    return {
        "pipeline": name,
        "source": {"kafka": {"bootstrap_servers": bootstrap, "topic": topic, "starting_offsets": "earliest"}},
        "table": {"name": f"lake.kafka.{name}", "schema": SCHEMA, "key": KEY, "partition_by": ["hours(event_time)"]},
        "trigger": {"interval": "1s", "max_records": 70},
        "dead_letter": f"lake.kafka.{name}_dead_letter",
        **extra,
    }


def events(start: int, count: int, *, bad_every: int = 0) -> list[tuple[int, bytes, bytes, None]]:
    out = []
    for i in range(start, start + count):
        if bad_every and i % bad_every == 0:
            payload = b'{"event_id": "e' + str(i).encode() + b'", "event_time": "not a time"}'
        else:
            payload = json.dumps(
                {
                    "event_id": f"e{i % 40}",
                    "event_time": f"2026-01-01T0{i % 3}:00:00",
                    "ad_id": f"ad{i % 7}",
                    "clicks": i,
                }
            ).encode()
        out.append((i % 3, f"k{i % 40}".encode(), payload, None))
    return out


def model_of(records: list[tuple[int, bytes, bytes, None]]) -> dict[Any, Any]:
    """Last write per key in offset order within each Kafka partition (keys never span partitions)."""
    model = ReferenceModel(KEY, COLUMNS, None)
    rows = []
    for _, _, payload, _ in records:
        r = json.loads(payload)
        if r["event_time"] == "not a time":
            continue
        rows.append({**r, "event_time": datetime.fromisoformat(r["event_time"])})
    model.apply(1, rows)
    return model.rows


@pytest.mark.guarantee
def test_json_from_kafka_exactly_once_with_dead_letters(spark: Any, kafka_broker: str) -> None:
    topic = create_topic(kafka_broker, partitions=3)
    first = events(0, 120, bad_every=17)
    produce(kafka_broker, topic, first)
    config = PipelineConfig.from_dict(doc("json_once", kafka_broker, topic))
    summary = Runner(config, spark).run(once=True, handle_signals=False)
    assert len(summary.batches) >= 2  # max_records 70 splits the backlog
    assert sum(b.records_in for b in summary.batches) == 120
    assert table_rows(spark, config.table.name, COLUMNS, KEY) == model_of(first)
    dead = spark.table(config.dead_letter).collect()
    assert sorted(r["source_position"] for r in dead) == sorted(
        f"{topic}/{i % 3}@{i // 3}" for i in range(120) if i % 17 == 0
    )
    second = events(120, 60)
    produce(kafka_broker, topic, second)
    summary = Runner(config, spark).run(once=True, handle_signals=False)
    assert sum(b.records_in for b in summary.batches) == 60
    assert table_rows(spark, config.table.name, COLUMNS, KEY) == model_of(first + second)
    assert spark.table(config.dead_letter).count() == len(dead)


def test_position_survives_compaction_other_writers_and_expiry(spark: Any, kafka_broker: str) -> None:
    topic = create_topic(kafka_broker, partitions=2)
    records = [
        (
            i % 2,
            None,
            json.dumps({"event_id": f"u{i}", "event_time": "2026-01-01T01:00:00", "clicks": i}).encode(),
            None,
        )
        for i in range(100)
    ]
    produce(kafka_broker, topic, records[:50])
    config = PipelineConfig.from_dict(doc("expiry", kafka_broker, topic, mode="append"))
    Runner(config, spark).run(once=True, handle_signals=False)
    table = config.table.name
    # Another writer's commit, a compaction, then expiry of every snapshot but the newest.
    spark.sql(f"INSERT INTO {table} VALUES ('other', timestamp'2026-01-01 05:00:00', 'x', 1)")
    spark.sql(
        f"CALL lake.system.rewrite_data_files(table => '{table.split('.', 1)[1]}', "
        "options => map('min-input-files', '1'))"
    ).collect()
    spark.sql(
        f"CALL lake.system.expire_snapshots(table => '{table.split('.', 1)[1]}', "
        "older_than => TIMESTAMP '2100-01-01 00:00:00', retain_last => 1)"
    ).collect()
    assert spark.sql(f"SELECT count(*) FROM {table}.snapshots").first()[0] == 1
    produce(kafka_broker, topic, records[50:])
    Runner(config, spark).run(once=True, handle_signals=False)
    ids = [r["event_id"] for r in spark.table(table).collect()]
    assert sorted(ids) == sorted([f"u{i}" for i in range(100)] + ["other"])  # nothing lost, nothing twice


def test_debezium_changes_apply_in_source_order(spark: Any, kafka_broker: str) -> None:
    topic = create_topic(kafka_broker, partitions=1)

    def change(op: str, before: dict[str, Any] | None, after: dict[str, Any] | None, ts: int) -> bytes:
        return json.dumps(
            {"payload": {"op": op, "before": before, "after": after, "ts_ms": ts + 5, "source": {"ts_ms": ts}}}
        ).encode()

    row = {"event_id": "a", "event_time": "2026-01-01T01:00:00Z", "ad_id": "ad1", "clicks": 1}
    records = [
        (0, b"a", change("c", None, row, 1000), None),
        (0, b"b", change("r", None, {**row, "event_id": "b"}, 1000), None),
        (0, b"a", change("u", row, {**row, "clicks": 3}, 3000), None),
        (0, b"a", change("u", row, {**row, "clicks": 2}, 2000), None),  # late: older source time loses
        (0, b"b", change("d", {**row, "event_id": "b"}, None, 4000), None),
        (0, b"b", None, None),  # tombstone: skipped
        (0, b"z", b'{"payload": {"op": "x"}}', None),
    ]
    produce(kafka_broker, topic, records)
    config = PipelineConfig.from_dict(doc("cdc", kafka_broker, topic, format="debezium"))
    summary = Runner(config, spark).run(once=True, handle_signals=False)
    assert sum(b.bad_records for b in summary.batches) == 1
    got = table_rows(spark, config.table.name, COLUMNS, KEY)
    assert got == {("a", datetime(2026, 1, 1, 1)): ("a", datetime(2026, 1, 1, 1), "ad1", 3)}


@pytest.mark.guarantee
def test_kill_9_after_write_then_restart(spark: Any, kafka_broker: str, tmp_path: Path) -> None:
    topic = create_topic(kafka_broker, partitions=3)
    records = events(0, 200, bad_every=23)
    produce(kafka_broker, topic, records)
    warehouse = tmp_path / "warehouse"
    config_path = tmp_path / "pipeline.yaml"
    config_path.write_text(yaml.safe_dump(doc("kcrash", kafka_broker, topic, warehouse=str(warehouse))))
    crash_tour(config_path, [("after_write", "2")])
    other = warehouse_reader(spark, "kcheck", warehouse)
    assert table_rows(other, "kcheck.kafka.kcrash", COLUMNS, KEY) == model_of(records)
    dead = [r["source_position"] for r in other.table("kcheck.kafka.kcrash_dead_letter").collect()]
    assert len(dead) == len(set(dead)) == sum(1 for i in range(200) if i % 23 == 0)
    referenced = {
        r[0].replace("file:", "") for r in other.sql("SELECT file_path FROM kcheck.kafka.kcrash.all_files").collect()
    }
    present = {str(p) for p in (warehouse / "kafka" / "kcrash" / "data").rglob("*.parquet")}
    assert present <= referenced  # the crashed batch's files were deleted on restart


@pytest.mark.parametrize("fast_path", ["auto", "off"])
def test_a_batch_read_again_after_its_dead_letters_committed_writes_each_once(
    spark: Any, kafka_broker: str, tmp_path: Path, fast_path: str
) -> None:
    """Upserts' side of test_fast_append's test of the same name, on the fast path and on the
    Spark path: killed after batch 2's dead letters committed, before its data; more records
    arrive before the restart, so the batch read again reads more. The table equals the model of
    the whole stream and every bad record is in the dead-letter table once."""
    topic = create_topic(kafka_broker, partitions=3)
    first, more = events(0, 120, bad_every=17), events(120, 90, bad_every=17)
    produce(kafka_broker, topic, first)  # max_records 70: batch 2 reads the last 50
    warehouse = tmp_path / "warehouse"
    config_path = tmp_path / "pipeline.yaml"
    config_path.write_text(
        yaml.safe_dump(doc("kheld", kafka_broker, topic, warehouse=str(warehouse), fast_path=fast_path))
    )
    done = crash_tour(config_path, [("after_dead_letter", "2")], between=lambda: produce(kafka_broker, topic, more))
    batches = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    path = ("json_fast", None) if fast_path == "auto" else ("spark", "fast_path_off")
    assert batches[0]["batch_id"] == 3 and all((b["path"], b["fallback"]) == path for b in batches)
    other = warehouse_reader(spark, "kheldcheck", warehouse)
    assert table_rows(other, "kheldcheck.kafka.kheld", COLUMNS, KEY) == model_of(first + more)
    dead = [r["source_position"] for r in other.table("kheldcheck.kafka.kheld_dead_letter").collect()]
    assert len(dead) == len(set(dead)) == sum(1 for i in range(210) if i % 17 == 0)


def test_bad_bytes_and_objects_from_kafka_are_dead_letters_on_both_paths(spark: Any, kafka_broker: str) -> None:
    """Issue 49 through a Kafka topic: the decoder cases of tests/test_bad_input_refused.py (written
    there by hand: bytes that are not UTF-8 in a value, in the key column's value and in a field
    name; an object and an array in a STRING column, an object in the key column) as messages, run
    by the runner on the fast path and on the Spark path. The table equals the model of the good
    messages, and the dead letters are the bad ones, one by one: position, payload (U+FFFD for bad
    bytes) and error. `format: json` reads rows from the value alone (the key column too): a good
    message whose Kafka message key is not UTF-8 is its row, on both paths."""
    from tests.test_bad_input_refused import JSON_CASES

    topic = create_topic(kafka_broker, partitions=1)
    produce(
        kafka_broker, topic, [(0, b"k\xff\xfe" if i == 0 else None, p, None) for i, (p, _) in enumerate(JSON_CASES)]
    )
    good = [json.loads(p) for p, error in JSON_CASES if error is None]
    model = ReferenceModel(["id"], ["id", "note", "n"], None)
    model.apply(1, [{"id": r["id"], "note": r["note"], "n": r.get("n")} for r in good])
    expected_dead = [
        (f"{topic}/0@{i}", payload.decode("utf-8", "replace"), error)
        for i, (payload, error) in enumerate(JSON_CASES)
        if error is not None
    ]
    for name, extra in (("refused_fast", {}), ("refused_spark", {"fast_path": "off"})):
        d = doc(name, kafka_broker, topic, **extra)
        d["table"] = {"name": f"lake.kafka.{name}", "schema": "id STRING NOT NULL, note STRING, n BIGINT"}
        d["table"]["key"] = ["id"]
        summary = Runner(PipelineConfig.from_dict(d), spark).run(once=True, handle_signals=False)
        assert [b.path for b in summary.batches] == (["json_fast"] if name == "refused_fast" else ["spark"])
        assert sum(b.bad_records for b in summary.batches) == len(expected_dead)
        assert table_rows(spark, f"lake.kafka.{name}", ["id", "note", "n"], ["id"]) == model.rows
        dead = spark.table(f"lake.kafka.{name}_dead_letter").select("source_position", "payload", "error").collect()
        assert sorted(tuple(r) for r in dead) == sorted(expected_dead)


def test_a_steady_stream_commits_once_an_interval_and_a_backlog_at_once(spark: Any, kafka_broker: str) -> None:
    """The cadence (docs/runner.md): a batch that did not fill `max_records` waits out the
    interval from its start, though records keep arriving; a full one (a backlog) starts the next
    at once. A producer thread sends 5 records every 0.5 s (20 an interval, under the limit) while
    the runner runs, after a backlog of 3 full batches."""
    import threading
    import time

    topic = create_topic(kafka_broker, partitions=3)
    backlog = events(0, 210)
    produce(kafka_broker, topic, backlog)
    config = PipelineConfig.from_dict(
        doc("cadence", kafka_broker, topic, trigger={"interval": "2s", "max_records": 70})
    )
    runner = Runner(config, spark)
    steady: list[tuple[int, bytes, bytes, None]] = []
    done = threading.Event()

    def produce_steadily() -> None:
        start = len(backlog)
        while not done.wait(0.5):
            more = events(start + len(steady), 5)
            produce(kafka_broker, topic, more)
            steady.extend(more)

    ends: list[tuple[float, int]] = []  # (when the batch was reported, records)

    def on_batch(metrics: Any) -> None:
        ends.append((time.monotonic(), metrics.records_in))
        if sum(1 for _, n in ends if n < 70) == 5:  # after the backlog, 5 batches of the steady stream
            runner.stop()

    producer = threading.Thread(target=produce_steadily, daemon=True)
    stop = threading.Timer(300, runner.stop)  # a safety net only
    producer.start()
    stop.start()
    try:
        runner.run(handle_signals=False, on_batch=on_batch)
    finally:
        done.set()
        stop.cancel()
        producer.join()
    assert [n for _, n in ends[:3]] == [70, 70, 70]  # the backlog first, in full batches, back to back
    # Then one batch an interval: 5 batches start at least 2 s apart, so the 5 end at least 8 s
    # apart, give or take one batch's length (well under 1.5 s here), where back to back they
    # would end about a batch's length apart.
    paced = [t for t, n in ends if n < 70]
    assert paced[-1] - paced[0] >= 2.0 * (len(paced) - 1) - 1.5, ends
    rest = Runner(config, spark).run(once=True, handle_signals=False)  # what arrived after the stop
    assert sum(n for _, n in ends) + sum(b.records_in for b in rest.batches) == len(backlog) + len(steady)
    assert table_rows(spark, config.table.name, COLUMNS, KEY) == model_of(backlog + steady)
