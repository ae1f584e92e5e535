"""A Debezium CDC stream through `icetide run` on a real broker (Apache Kafka): the table is
created from the stream, key changes, truncates, deletes and tombstones land as the source says,
exactly once across SIGKILLs. Checked against a reference model of the source table."""

from __future__ import annotations

import json
import random
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from icetide.config.pipeline import PipelineConfig
from icetide.errors import IcetideError, one_line
from icetide.pipeline.table_runner import Runner
from tests.commands import crash_tour, warehouse_reader
from tests.debezium_messages import ProductsStream, apply_changes
from tests.kafka_broker import create_topic, produce

MAX_RECORDS = 7


def cdc_stream(
    seed: int, count: int = 90, *, compact: bool = True
) -> tuple[list[tuple[int, bytes | None, bytes | None, None]], list[int]]:
    """Kafka records of a products table's changes (inserts, updates, primary-key updates,
    deletes with their tombstones, truncates), and the offsets of the truncates. `compact`: as
    Kafka's JsonConverter writes them (the reader then splits the schema off, see
    icetide.sources.head_split), else with spaces (the values are decoded whole)."""
    rng = random.Random(seed)
    stream = ProductsStream(compact=compact)
    live: dict[int, dict[str, Any]] = {}
    records: list[tuple[int, bytes | None, bytes | None, None]] = []
    truncates: list[int] = []
    next_id = 100
    while len(records) < count:
        roll = rng.random()
        if live and roll < 0.03:
            truncates.append(len(records))
            records.append((0, None, stream.truncate(), None))
            live.clear()
        elif not live or roll < 0.35:
            next_id += 1
            row = {"id": next_id, "name": f"p{next_id}", "description": None, "weight": round(rng.random(), 3)}
            live[next_id] = row
            records.append((0, stream.key(next_id), stream.change(rng.choice("cr"), None, row), None))
        elif roll < 0.7:
            old = live[rng.choice(sorted(live))]
            new = {**old, "weight": round(rng.random(), 3), "description": f"v{len(records)}"}
            live[old["id"]] = new
            records.append((0, stream.key(old["id"]), stream.change("u", old, new), None))
        elif roll < 0.85:
            old = live.pop(rng.choice(sorted(live)))
            next_id += 1
            moved = {**old, "id": next_id}
            live[next_id] = moved
            records.append((0, stream.key(next_id), stream.change("u", old, moved), None))
        else:
            old = live.pop(rng.choice(sorted(live)))
            records.append((0, stream.key(old["id"]), stream.change("d", old, None), None))
            records.append((0, stream.key(old["id"]), None, None))  # the tombstone that follows a delete
    return records, truncates


def model_of(records: list[tuple[int, bytes | None, bytes | None, None]]) -> dict[int, tuple[Any, ...]]:
    model: dict[int, tuple[Any, ...]] = {}
    for _, _, value, _ in records:
        if value is not None:
            apply_changes(model, json.loads(value)["payload"])
    return model


def doc(name: str, bootstrap: str, topic: str, **extra: Any) -> dict[str, Any]:
    return {
        "pipeline": name,
        "source": {"kafka": {"bootstrap_servers": bootstrap, "topic": topic, "starting_offsets": "earliest"}},
        "format": "debezium",
        "table": {"name": f"lake.cdc.{name}"},  # schema and key from the stream
        "trigger": {"interval": "1s", "max_records": MAX_RECORDS},
        "dead_letter": f"lake.cdc.{name}_dead_letter",
        **extra,
    }


def rows_of(spark: Any, table: str) -> dict[int, tuple[Any, ...]]:
    out: dict[int, tuple[Any, ...]] = {}
    for r in spark.table(table).collect():
        assert r["id"] not in out, f"duplicate key {r['id']} in {table}"
        out[r["id"]] = (r["name"], r["description"], r["weight"])
    return out


@pytest.mark.guarantee
@pytest.mark.parametrize("compact", [True, False])
def test_cdc_stream_creates_its_table_and_lands_as_the_source_says(
    spark: Any, kafka_broker: str, compact: bool
) -> None:
    records, truncates = cdc_stream(seed=7, compact=compact)
    assert truncates, "the stream must hold a truncate"
    topic = create_topic(kafka_broker, partitions=1, prefix="cdc")
    produce(kafka_broker, topic, records)
    config = PipelineConfig.from_dict(doc(f"products_{compact}".lower(), kafka_broker, topic))
    summary = Runner(config, spark).run(once=True, handle_signals=False)
    table = spark.table(config.table.name)
    assert [(f.name, f.dataType.simpleString(), f.nullable) for f in table.schema.fields] == [
        ("id", "int", False),
        ("name", "string", True),
        ("description", "string", True),
        ("weight", "double", True),
    ]
    assert rows_of(spark, config.table.name) == model_of(records)
    assert sum(b.bad_records for b in summary.batches) == 0
    assert sum(b.truncated for b in summary.batches) == len({t // MAX_RECORDS for t in truncates})
    # A one-table pipeline is a many-table one with one route: the sync fast path stages every
    # batch it can decode exactly; a truncate is for the Spark path, which says why.
    truncating = {t // MAX_RECORDS + 1 for t in truncates}
    for b in summary.batches:
        if b.batch_id in truncating:
            assert (b.path, b.fallback) == ("spark", "record_for_spark") and "op 't'" in b.fallback_detail, b
        else:
            assert (b.path, b.fallback, b.fallback_detail) == ("debezium_fast", None, None), b


@pytest.mark.parametrize("point", [pytest.param("after_write", marks=pytest.mark.guarantee), "random"])
def test_cdc_stream_exactly_once_across_kill_9(spark: Any, kafka_broker: str, tmp_path: Path, point: str) -> None:
    records, truncates = cdc_stream(seed=11)
    topic = create_topic(kafka_broker, partitions=1, prefix="cdc")
    produce(kafka_broker, topic, records)
    warehouse = tmp_path / "wh"
    config_path = tmp_path / "pipeline.yaml"
    config_path.write_text(yaml.safe_dump(doc("kill", kafka_broker, topic, warehouse=str(warehouse))))
    # The batch that holds the first truncate: a crash around its commit must apply it once.
    crash_tour(config_path, [(point, str(truncates[0] // MAX_RECORDS + 1))])
    other = warehouse_reader(spark, "cdccheck", warehouse)
    assert rows_of(other, "cdccheck.cdc.kill") == model_of(records)
    assert other.table("cdccheck.cdc.kill_dead_letter").count() == 0


def test_dead_letters_hold_the_whole_record_when_the_schema_was_split_off(spark: Any, kafka_broker: str) -> None:
    """Bad records among compact messages (whose schema the reader splits off) reach the
    dead-letter table as they were sent, byte for byte; the good ones land. The fast path writes
    every batch's dead letters itself: the message cut short is read, as on the Spark path's tasks,
    by the final reader (decode/debezium/message.py), whose dead letter says where it ends."""
    records, _ = cdc_stream(seed=3, count=30)
    good = [r for r in records if r[2] is not None and json.loads(r[2])["payload"]["op"] in "cr"]
    bad_value = json.loads(good[0][2])  # type: ignore[arg-type]
    bad_value["payload"]["after"]["weight"] = "heavy"
    bad = [
        json.dumps(bad_value, separators=(",", ":")).encode(),
        good[1][2][:-30],  # type: ignore[index]  # cut short: malformed
        good[2][2].replace(b'"op":"', b'"op":"x'),  # type: ignore[union-attr]  # an unknown op
    ]
    topic = create_topic(kafka_broker, partitions=1, prefix="cdc")
    produce(kafka_broker, topic, [(0, None, bad[0], None), (0, None, bad[2], None), *records, (0, None, bad[1], None)])
    config = PipelineConfig.from_dict(doc("split_bad", kafka_broker, topic))
    summary = Runner(config, spark).run(once=True, handle_signals=False)
    assert sum(b.bad_records for b in summary.batches) == len(bad)
    first, last = summary.batches[0], summary.batches[-1]
    assert (first.path, first.bad_records) == ("debezium_fast", 2), first
    assert (last.path, last.bad_records) == ("debezium_fast", 1), last
    letters = spark.table(f"{config.table.name}_dead_letter").collect()
    assert sorted(r["payload"].encode() for r in letters) == sorted(bad)
    assert any(r["error"].startswith("column weight") for r in letters)
    # The Spark path (fast_path: off) writes the same dead letters, errors and positions included.
    off = PipelineConfig.from_dict(doc("split_bad_off", kafka_broker, topic, fast_path="off"))
    Runner(off, spark).run(once=True, handle_signals=False)
    spark_letters = spark.table(f"{off.table.name}_dead_letter").collect()
    assert sorted((r["payload"], r["error"], r["source_position"]) for r in spark_letters) == sorted(
        (r["payload"], r["error"], r["source_position"]) for r in letters
    )
    assert any(r["error"].startswith("malformed JSON: ") for r in letters)
    assert rows_of(spark, config.table.name) == model_of(records)


def test_a_failed_fast_path_job_names_the_pipeline_and_its_table(spark: Any, kafka_broker: str, warehouse: str) -> None:
    """A batch whose sync fast path job fails for real (the table's data directory is a file: no
    task can write under it, not even as root) fails with one line that names the pipeline and
    the table, and the root cause; nothing is committed."""
    records, _ = cdc_stream(seed=5, count=20)
    inserts = [r for r in records if r[2] is not None and json.loads(r[2])["payload"]["op"] in "cr"]
    topic = create_topic(kafka_broker, partitions=1, prefix="cdc")
    produce(kafka_broker, topic, inserts[:5])
    config = PipelineConfig.from_dict(doc("unwritable", kafka_broker, topic))
    first = Runner(config, spark).run(once=True, handle_signals=False)
    assert [b.path for b in first.batches] == ["debezium_fast"]
    data = Path(warehouse) / "cdc" / "unwritable" / "data"
    shutil.rmtree(data)
    data.write_text("a file where the table's data directory was")
    produce(kafka_broker, topic, inserts[5:])
    runner = Runner(config, spark)
    with pytest.raises(IcetideError) as failed:
        runner.run(once=True, handle_signals=False)
    line = one_line(failed.value)
    assert line.startswith("pipeline unwritable, table lake.cdc.unwritable: writing batch 2 failed: "), line
    assert str(data) in line and line.endswith("nothing was committed"), line
    assert "\n" not in line
    assert runner.last_committed_batch() == 1


def bad_products(stream: ProductsStream) -> list[tuple[bytes, str]]:
    """Change events the Spark path makes dead letters, each with its error (ids the good stream never uses)."""
    row = {"id": 5000, "name": "bad", "description": None, "weight": 1.0}
    malformed = json.loads(stream.change("c", None, row))
    malformed["payload"]["before"] = "text"
    # issue 49: values that contradict their declared schema, which the producer changed
    nested = json.loads(stream.change("c", None, {**row, "description": {"x": "a"}}))
    decimal = json.loads(stream.change("c", None, {**row, "weight": 1.234}))
    for message, name, declared in (
        (nested, "description", {"type": "struct", "fields": [{"type": "int32", "optional": True, "field": "x"}]}),
        (
            decimal,
            "weight",
            {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "2"}},
        ),
    ):
        for part in message["schema"]["fields"]:
            for f in part.get("fields", []) if part["field"] in ("before", "after") else []:
                if f["field"] == name:
                    f.update(declared)
    issue_49 = [
        (
            json.dumps(nested, separators=stream.separators).encode(),
            "column description.x: text 'a' where the message's schema declares int32",
        ),
        (
            json.dumps(decimal, separators=stream.separators).encode(),
            "column weight: '1.234' has digits beyond the scale 2 its schema declares",
        ),
    ]
    # issue 49: bytes that are not UTF-8 in a value and in a field name (the dead letter's payload
    # holds U+FFFD where they were)
    in_value = stream.change("c", None, {**row, "name": "badXY"}).replace(b'"badXY"', b'"bad\xff\xfe"')
    in_name = stream.change("c", None, row).replace(b'"weight":1.0', b'"wei\xc3ght":1.0')
    in_key = stream.change("c", None, {**row, "id": "badID"}).replace(b'"badID"', b'"5\xfd"')  # the key column
    at_value, at_name, at_key = in_value.index(b"\xff"), in_name.index(b"\xc3"), in_key.index(b"\xfd")
    issue_49 += [
        (in_value, f"payload is not valid UTF-8 at byte {at_value}, in field payload.after.name"),
        (in_name, f"payload is not valid UTF-8 at byte {at_name}, in the name of field payload.after.wei\ufffdght"),
        (in_key, f"payload is not valid UTF-8 at byte {at_key}, in field payload.after.id"),
    ]
    return [
        (stream.change("c", None, {**row, "weight": "heavy"}), "column weight: 'heavy' is not a DOUBLE"),
        (stream.change("r", None, {**row, "id": "x"}), "column id: 'x' is not an INT"),
        (stream.change("x", None, row), "unknown op 'x'"),
        (stream.change("m", None, None), "unsupported op 'm' (message)"),
        (stream.change("d", None, None), "before is missing for op 'd' (a delete needs the key)"),
        (stream.change("u", row, None), "after is missing for op 'u'"),
        (json.dumps(malformed, separators=stream.separators).encode(), "malformed JSON"),
        *issue_49,
    ]


def test_bad_records_stay_on_the_fast_path_with_the_spark_paths_dead_letters(spark: Any, kafka_broker: str) -> None:
    """Bad records spread over the batches: every batch runs on the fast path, which commits the
    dead letters the Spark path (`fast_path: off`, same topic) commits, payload, error and
    position alike; the good records land as the model says. The first message's Kafka key is not
    UTF-8 (a field name with byte FF): the table created from the stream takes its key columns
    from the next message's key, and the message, whose value is good, is its row (the key's
    bytes are read for nothing else)."""
    records, _ = cdc_stream(seed=13, count=45)
    records = [r for r in records if r[2] is None or json.loads(r[2])["payload"]["op"] != "t"]
    first_key = records[0][1]
    assert first_key is not None and first_key.count(b'"field":"id"') == 1
    records[0] = (0, first_key.replace(b'"field":"id"', b'"field":"i\xffd"'), records[0][2], None)
    bad = bad_products(ProductsStream())
    mixed = list(records)
    for i, (value, _) in enumerate(bad):
        mixed.insert(2 + i * 6, (0, None, value, None))
    topic = create_topic(kafka_broker, partitions=1, prefix="cdc")
    produce(kafka_broker, topic, mixed)
    letters: dict[str, list[tuple[str, str, str]]] = {}
    counted: dict[str, list[int]] = {}
    for kind, extra in (("fast", {}), ("spark", {"fast_path": "off"})):
        config = PipelineConfig.from_dict(doc(f"bad_{kind}_{uuid.uuid4().hex[:6]}", kafka_broker, topic, **extra))
        summary = Runner(config, spark).run(once=True, handle_signals=False)
        assert rows_of(spark, config.table.name) == model_of(records), kind
        assert sum(b.bad_records for b in summary.batches) == len(bad), kind
        # max_bad_fraction's denominator: every source record, tombstones and key-moving updates
        # alike on both paths (the Spark path counted change rows before)
        counted[kind] = [b.records_in for b in summary.batches]
        assert sum(counted[kind]) == len(mixed), kind
        expected = ("debezium_fast", None) if kind == "fast" else ("spark", "fast_path_off")
        assert {(b.path, b.fallback) for b in summary.batches} == {expected}, summary.batches
        assert sum(1 for b in summary.batches if b.bad_records) >= 3, summary.batches
        dead = spark.table(f"{config.table.name}_dead_letter").collect()
        letters[kind] = sorted((r["payload"], r["error"], r["source_position"]) for r in dead)
    assert letters["fast"] == letters["spark"]
    assert counted["fast"] == counted["spark"]
    assert sorted(error for _, error, _ in letters["fast"]) == sorted(error for _, error in bad)
    sent = sorted(value.decode("utf-8", "replace").encode() for value, _ in bad)  # U+FFFD for bad bytes
    assert sorted(payload.encode() for payload, _, _ in letters["fast"]) == sent


def test_a_debezium_batch_read_again_after_its_dead_letters_committed_writes_each_once(
    spark: Any, kafka_broker: str, tmp_path: Path
) -> None:
    """A kill after batch 2 committed its dead letters on the fast path, before its data; more
    records (good and bad) arrive before the restart, so the batch read again reads more. The
    table equals the model of the whole stream, every bad record is in the dead-letter table
    once, and every batch of the restart runs on the fast path."""
    records, _ = cdc_stream(seed=17, count=40)
    records = [r for r in records if r[2] is None or json.loads(r[2])["payload"]["op"] != "t"]
    bad = bad_products(ProductsStream())
    mixed = list(records)
    for i, (value, _) in enumerate(bad):
        mixed.insert(1 + i * 4, (0, None, value, None))
    later = ProductsStream()
    later.pos = 10**6  # after every change of the first stream
    more_good = [
        (
            0,
            later.key(9000 + i),
            later.change("c", None, {"id": 9000 + i, "name": "n", "description": None, "weight": 0.5}),
            None,
        )
        for i in range(5)
    ]
    more_bad = bad_products(later)[:3]
    more = [*more_good[:2], *[(0, None, value, None) for value, _ in more_bad], *more_good[2:]]
    topic = create_topic(kafka_broker, partitions=1, prefix="cdc")
    produce(kafka_broker, topic, mixed)
    warehouse = tmp_path / "wh"
    config_path = tmp_path / "pipeline.yaml"
    config_path.write_text(yaml.safe_dump(doc("held", kafka_broker, topic, warehouse=str(warehouse))))
    done = crash_tour(config_path, [("after_dead_letter", "2")], between=lambda: produce(kafka_broker, topic, more))
    paths = [json.loads(line).get("path") for line in done.stdout.splitlines() if line.startswith("{")]
    assert paths and set(paths) == {"debezium_fast"}, paths
    other = warehouse_reader(spark, "cdcheld", warehouse)
    assert rows_of(other, "cdcheld.cdc.held") == model_of(records + more_good)
    dead = other.table("cdcheld.cdc.held_dead_letter").collect()
    assert len({r["source_position"] for r in dead}) == len(dead)
    assert sorted(r["error"] for r in dead) == sorted(error for _, error in bad + more_bad)


def test_a_double_java_17_wrote_otherwise_lands_with_its_shortest_digits(spark: Any, kafka_broker: str) -> None:
    """1e23 into a STRING column (Java 17, which ran the former Spark SQL decoder, wrote it
    "9.999999999999999E22") lands with its shortest digits, "1.0E23", as Java 19 on writes it, on
    the Spark path of a runner; the rest of its batch lands, and records_in (max_bad_fraction's
    denominator) is every source record, tombstones included. The message's schema declares the
    field a double (a number in a field declared `string` is a dead letter: issue 49)."""
    records, _ = cdc_stream(seed=17, count=30)
    records = [r for r in records if r[2] is None or json.loads(r[2])["payload"]["op"] != "t"]
    stream = ProductsStream()
    row = {"id": 9001, "name": "placeholder", "description": None, "weight": 0.5}
    shortest = (
        stream.change("c", None, row)
        .replace(b'"name":"placeholder"', b'"name":1e23')
        .replace(
            b'{"type":"string","optional":false,"field":"name"}', b'{"type":"double","optional":false,"field":"name"}'
        )
    )
    mixed = [*records, (0, stream.key(9001), shortest, None)]
    topic = create_topic(kafka_broker, partitions=1, prefix="cdc")
    produce(kafka_broker, topic, mixed)
    config = PipelineConfig.from_dict(
        doc(f"shortest_{uuid.uuid4().hex[:6]}", kafka_broker, topic, fast_path="off", trigger={"max_records": 1000})
    )
    summary = Runner(config, spark).run(once=True, handle_signals=False)
    assert sum(b.records_in for b in summary.batches) == len(mixed)
    assert sum(b.bad_records for b in summary.batches) == 0
    assert rows_of(spark, config.table.name) == {**model_of(records), 9001: ("1.0E23", None, 0.5)}


def long_stream(seed: int, count: int) -> list[tuple[int, bytes | None, bytes | None, None]]:
    """Products changes as the JSON converter writes them, long enough for runs of one schema head
    (decode/debezium/json_runs.py): inserts, updates, deletes and their tombstones, no key moves or truncates
    (those the runs hand to the one-by-one reader, which cdc_stream's tests cover)."""
    rng = random.Random(seed)
    stream = ProductsStream()
    live: dict[int, dict[str, Any]] = {}
    records: list[tuple[int, bytes | None, bytes | None, None]] = []
    next_id = 100
    while len(records) < count:
        roll = rng.random()
        if not live or roll < 0.5:
            next_id += 1
            row = {"id": next_id, "name": f"p{next_id}", "description": None, "weight": round(rng.random(), 3)}
            live[next_id] = row
            records.append((0, stream.key(next_id), stream.change("c", None, row), None))
        elif roll < 0.85:
            old = live[rng.choice(sorted(live))]
            new = {**old, "weight": round(rng.random(), 3), "description": f"v{len(records)}"}
            live[old["id"]] = new
            records.append((0, stream.key(old["id"]), stream.change("u", old, new), None))
        else:
            old = live.pop(rng.choice(sorted(live)))
            records.append((0, stream.key(old["id"]), stream.change("d", old, None), None))
            records.append((0, stream.key(old["id"]), None, None))
    return records


@pytest.mark.parametrize("routing", [False, True])
def test_long_runs_of_json_messages_are_read_as_columns_and_equal_the_model(
    spark: Any, kafka_broker: str, routing: bool
) -> None:
    """Runs of messages with one schema head are read as columns (records_as_columns) by the one-
    table runner and by a database sync whose table is created from a run's samples; the tables
    equal the model, and the Spark path's table of the same stream. The sync reads one `topic`
    into a table-name template (it once read nothing: only `topics` and `topic_pattern` were
    listed)."""
    from icetide.decode.debezium.event_runs import MIN_RUN
    from icetide.pipeline.sync.runner import SyncRunner

    records = long_stream(71, 4 * MIN_RUN)
    topic = create_topic(kafka_broker, partitions=1)
    produce(kafka_broker, topic, records)
    name = f"jsonruns_{'sync' if routing else 'one'}"
    trigger = {"interval": "1s", "max_records": 3 * MIN_RUN}
    if routing:
        config = doc(name, kafka_broker, topic, trigger=trigger)
        config["table"] = {"name": f"lake.cdc.{name}_{{table}}"}
        runner: Any = SyncRunner(PipelineConfig.from_dict(config), spark)
        table = f"lake.cdc.{name}_products"
    else:
        runner = Runner(PipelineConfig.from_dict(doc(name, kafka_broker, topic, trigger=trigger)), spark)
        table = f"lake.cdc.{name}"
    summary = runner.run(once=True, handle_signals=False)
    events = sum(1 for _, _, v, _ in records if v is not None)
    assert sum(b.records_as_columns for b in summary.batches) > events // 2, [b.path for b in summary.batches]
    assert {b.path for b in summary.batches} == {"sync_fast" if routing else "debezium_fast"}
    assert any(b.columnar for b in summary.batches)
    assert all(b.columnar == (b.records_as_columns > 0) for b in summary.batches)
    assert rows_of(spark, table) == model_of(records)
    slow = f"{name}_spark"
    # In batches as large as the fast path's (the default MAX_RECORDS would take 150 batches).
    Runner(PipelineConfig.from_dict(doc(slow, kafka_broker, topic, fast_path="off", trigger=trigger)), spark).run(
        once=True, handle_signals=False
    )
    assert rows_of(spark, f"lake.cdc.{slow}") == rows_of(spark, table)
