"""`format: debezium-avro` end to end: Avro records from confluent-kafka's AvroSerializer, through a
schema registry, in a real broker (Apache Kafka), into Iceberg tables, checked against a
reference model of each source table, through the single-table runner and a database sync, across
SIGKILLs, a schema change and a failing or refusing registry.

The change events are tests/test_db_sync.py's (built from real Debezium messages of
tests/data/debezium), re-encoded as Confluent's AvroConverter writes them (tests/avro_messages.py).
The registry is tests/schema_registry_server.py: no Confluent-compatible registry server is
installable here, so the tests serve its REST endpoints themselves.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from icetide.config.pipeline import PipelineConfig
from icetide.errors import TerminalError, TransientError
from icetide.pipeline.table_runner import Runner
from tests.avro_messages import AvroEncoder
from tests.commands import crash_tour, warehouse_reader
from tests.kafka_broker import produce
from tests.schema_registry_server import SchemaRegistryServer
from tests.test_db_sync import Record, _create, changes, inventory_streams, model_of, rows_of, same, unique

KEYS = {"orders": "order_number", "customers": "id", "products": "id"}
NOT_AVRO = b'{"op":"c","after":{"id":1}}'  # a JSON value in an Avro topic: a dead letter


@pytest.fixture(scope="module")
def registry() -> Any:
    server = SchemaRegistryServer().start()
    yield server
    server.stop()


def encoded(encoder: AvroEncoder, topic: str, records: list[Record]) -> list[Record]:
    return [
        (p, encoder.encode(k, topic, key=True), encoder.encode(v, topic), ts) if v != NOT_AVRO else (p, k, v, ts)
        for p, k, v, ts in records
    ]


def single_table_doc(name: str, bootstrap: str, topic: str, table: str, registry_url: str, **extra: Any) -> dict:
    return {
        "pipeline": name,
        "source": {"kafka": {"bootstrap_servers": bootstrap, "topic": topic, "starting_offsets": "earliest"}},
        "format": "debezium-avro",
        "schema_registry": {"url": registry_url, "max.retries": 0},
        "table": {"name": table},
        "mode": "upsert",
        "dead_letter": f"{table}_dead_letter",
        **extra,
    }


def test_a_new_schema_id_with_a_new_field(spark: Any, kafka_broker: str, registry: SchemaRegistryServer) -> None:
    """A new field in a new schema: a nullable column with schema_evolution on; counted and named with
    it off. A truncate between them (on_truncate: apply) removes every row before it."""
    stream = inventory_streams()["customers"]
    first = changes(stream, seed=5, count=10)
    truncate: Record = (0, None, stream.change("t", None, None), None)  # TRUNCATE TABLE customers
    stream.add_column("tier", "int32")
    second = changes(stream, seed=6, count=10, extra=lambda i: {"tier": i % 3})
    records = [*first, truncate, *second]
    topic = f"db{unique()}.inventory.customers"
    _create(kafka_broker, topic)
    produce(kafka_broker, topic, encoded(AvroEncoder(registry.url), topic, records))
    evolving = f"lake.avro{unique()}.customers"
    doc = single_table_doc("avro2", kafka_broker, topic, evolving, registry.url, schema_evolution=True)
    Runner(PipelineConfig.from_dict(doc), spark).run(once=True)
    assert same(rows_of(spark, evolving, "id"), model_of(second))  # the truncate removed what came before
    assert "tier" in spark.table(evolving).columns
    fixed = f"lake.avro{unique()}.customers"
    doc = single_table_doc("avro3", kafka_broker, topic, fixed, registry.url)
    summary = Runner(PipelineConfig.from_dict(doc), spark).run(once=True)
    assert "tier" not in spark.table(fixed).columns
    assert sum(b.unknown_fields.get("tier", 0) for b in summary.batches) > 0


def test_a_failing_registry_is_retried_and_a_refusing_one_stops_the_run(spark: Any, kafka_broker: str) -> None:
    """5xx: transient, supervision restarts the run, no dead letter; 401: one terminal line naming the
    URL, not the secret; a schema id the registry lacks: that record's dead letter, with the reason."""
    server = SchemaRegistryServer(user_info="icetide:s3cret-pw").start()
    try:
        authed = f"http://icetide:s3cret-pw@{server.url.removeprefix('http://')}"
        stream = inventory_streams()["orders"]
        records = changes(stream, seed=9, count=8)
        topic = f"db{unique()}.inventory.orders"
        _create(kafka_broker, topic)
        avro = encoded(AvroEncoder(authed), topic, records)
        good = next(v for _, _, v, _ in avro if v is not None)
        unknown_id = b"\x00\x00\x00\x03\xe7" + good[5:]  # schema id 999
        produce(kafka_broker, topic, [*avro, (0, None, unknown_id, None)])
        table = f"lake.avro{unique()}.orders"
        restart = {"max_attempts": 0, "backoff": "4s"}
        doc = single_table_doc("avro4", kafka_broker, topic, table, server.url, restart=restart)
        doc["schema_registry"]["basic.auth.user.info"] = "icetide:s3cret-pw"
        doc["table"]["schema"] = (
            "order_number INT NOT NULL, order_date DATE, purchaser INT, quantity INT, product_id INT"
        )
        doc["table"]["key"] = ["order_number"]
        server.fail_with = 503
        with pytest.raises(TransientError, match="HTTP 503"):
            Runner(PipelineConfig.from_dict(doc), spark).run(once=True)
        assert spark.table(f"{table}_dead_letter").count() == 0  # nothing became a dead letter
        doc["schema_registry"]["basic.auth.user.info"] = "icetide:wrong-pw"
        server.fail_with = None
        with pytest.raises(TerminalError) as refused:
            Runner(PipelineConfig.from_dict(doc), spark).run(once=True)
        message = str(refused.value)
        assert server.url in message and "HTTP 401" in message and "pw" not in message and "\n" not in message
        # With restarts allowed, the run restarts through the outage and ends with every row.
        doc["schema_registry"]["basic.auth.user.info"] = "icetide:s3cret-pw"
        doc["restart"] = {"max_attempts": 3, "backoff": "4s"}
        server.fail_with = 503  # until the first restart
        summary = Runner(PipelineConfig.from_dict(doc), spark).run(
            once=True, on_restart=lambda _: setattr(server, "fail_with", None)
        )
        assert len(summary.restarts) == 1 and "HTTP 503" in summary.restarts[0].error
        assert same(rows_of(spark, table, "order_number"), model_of(records))
        dead = spark.table(f"{table}_dead_letter").collect()
        assert len(dead) == 1 and "schema id 999 is not in the schema registry" in dead[0]["error"]
    finally:
        server.stop()


@pytest.mark.parametrize("routing", [False, True])
def test_each_table_equals_its_source_after_kill_9(
    spark: Any, kafka_broker: str, registry: SchemaRegistryServer, tmp_path: Path, routing: bool
) -> None:
    """`icetide run` killed with SIGKILL after its second batch committed, then run again: every
    table (created from the Avro key and value schemas) equals its model, and the record that is
    not in the wire format is in the dead-letter table once, with its bytes and the reason."""
    prefix, namespace = f"db{unique()}", f"avrokill{unique()}"
    streams = {
        t: s for t, s in inventory_streams().items() if t in (("orders", "customers") if routing else ("orders",))
    }
    records = {t: changes(s, seed=20 + i, count=16) for i, (t, s) in enumerate(sorted(streams.items()))}
    encoder = AvroEncoder(registry.url)
    for t, recs in records.items():
        recs.insert(len(recs) // 2, (0, None, NOT_AVRO, None))
        topic = f"{prefix}.inventory.{t}"
        _create(kafka_broker, topic)
        produce(kafka_broker, topic, encoded(encoder, topic, recs))
    warehouse = tmp_path / "wh"
    kafka: dict[str, Any] = {"bootstrap_servers": kafka_broker, "starting_offsets": "earliest"}
    if routing:
        kafka["topic_pattern"] = prefix + r"\.inventory\..*"
        table = f"lake.{namespace}.{{table}}"
    else:
        kafka["topic"] = f"{prefix}.inventory.orders"
        table = f"lake.{namespace}.orders"
    doc = {
        "pipeline": "avrokill",
        "warehouse": str(warehouse),
        "source": {"kafka": kafka},
        "format": "debezium-avro",
        "schema_registry": {"url": registry.url},
        "table": {"name": table},
        "mode": "upsert",
        "dead_letter": f"lake.{namespace}.dead_letter",
        "trigger": {"interval": "1s", "max_records": 7},
    }
    config_path = tmp_path / "pipeline.yaml"
    config_path.write_text(yaml.safe_dump(doc))
    point = "after_table_commit" if routing else "after_commit"
    restarted = crash_tour(config_path, [(point, "2")])
    if routing:
        paths = [json.loads(line).get("path") for line in restarted.stdout.splitlines() if line.startswith("{")]
        assert "sync_avro_fast" in paths, paths  # the sync fast path read Avro too
    other = warehouse_reader(spark, "avrocheck", warehouse)
    for t in streams:
        assert same(rows_of(other, f"avrocheck.{namespace}.{t}", KEYS[t]), model_of(records[t])), t
    dead = other.table(f"avrocheck.{namespace}.dead_letter").collect()
    assert len(dead) == len(streams) and all("unknown magic byte 0x7b" in r["error"] for r in dead)
    assert all(base64.b64decode(r["payload"]) == NOT_AVRO for r in dead)
    columns = {f.name: f.dataType.simpleString() for f in other.table(f"avrocheck.{namespace}.orders").schema}
    assert columns == {
        "order_number": "int",
        "order_date": "date",
        "purchaser": "int",
        "quantity": "int",
        "product_id": "int",
    }


def test_format_avro_reads_flat_records_and_deletes_on_tombstones(
    spark: Any, kafka_broker: str, registry: SchemaRegistryServer
) -> None:
    """`format: avro` (e.g. after Debezium's ExtractNewRecordState): each record upserts its row, a
    tombstone deletes the key its Avro key holds; the table is created from the key and value
    schemas. A record whose string bytes are not UTF-8 is one dead letter naming the byte and the
    field, by the Spark path that the fast path hands its batch to (issue 49)."""
    stream = inventory_streams()["customers"]
    row_schema = next(f for f in stream.schema["fields"] if f["field"] == "after")
    flat: list[Record] = []
    for partition, key, value, ts in changes(stream, seed=11, count=30):
        if value is None:
            flat.append((partition, key, None, ts))  # the tombstone after a delete: the delete itself
            continue
        event = json.loads(value)["payload"]
        if event["op"] != "d":
            flat.append((partition, key, json.dumps({"schema": row_schema, "payload": event["after"]}).encode(), ts))
    model: dict[int, dict[str, Any]] = {}
    for _, key, value, _ in flat:
        assert key is not None
        key_value = json.loads(key)["payload"]["id"]
        if value is None:
            model.pop(key_value, None)
        else:
            model[key_value] = json.loads(value)["payload"]
    assert len(model) < len({json.loads(k or b"")["payload"]["id"] for _, k, _, _ in flat})  # some deleted
    topic = f"db{unique()}.inventory.customers"
    _create(kafka_broker, topic)
    encoder = AvroEncoder(registry.url)
    records = encoded(encoder, topic, flat)
    # issue 49: a string whose bytes are not UTF-8 (as long as the text it replaces: the Avro
    # length before it holds), for a key the model lacks: a dead letter naming the byte and the field
    partition, key, value, ts = next(r for r in flat if r[2] is not None)
    assert key is not None and value is not None
    doc_of, key_of = json.loads(value), json.loads(key)
    doc_of["payload"] = {**doc_of["payload"], "id": 99_999, "first_name": "badXY"}
    key_of["payload"] = {"id": 99_999}
    bad = encoder.encode(json.dumps(doc_of).encode(), topic)
    assert bad is not None and bad.count(b"badXY") == 1
    bad = bad.replace(b"badXY", b"bad\xff\xfe")
    records.append((partition, encoder.encode(json.dumps(key_of).encode(), topic, key=True), bad, ts))
    produce(kafka_broker, topic, records)
    at = bad.index(b"\xff")
    error = f"avro: a string is not valid UTF-8 at byte {at} of the record, in field first_name"
    table = f"lake.avro{unique()}.customers"
    doc = single_table_doc("avro5", kafka_broker, topic, table, registry.url, trigger={"max_records": 12})
    doc["format"] = "avro"
    summary = Runner(PipelineConfig.from_dict(doc), spark).run(once=True)
    assert same(rows_of(spark, table, "id"), model)
    # the fast path hands a batch with a record it cannot read to the Spark path, which makes it
    # the dead letter (decode/avro/decoder.py `envelope`): both paths ran, one dead letter
    paths = [(b.path, b.fallback, b.bad_records) for b in summary.batches]
    assert paths == [("avro_fast", None, 0), ("avro_fast", None, 0), ("spark", "record_for_spark", 1)], paths
    dead = spark.table(f"{table}_dead_letter").collect()
    assert [(base64.b64decode(r["payload"]), r["error"]) for r in dead] == [(bad, error)]


@pytest.mark.parametrize("routing", [False, True])
def test_long_runs_are_read_as_columns_and_equal_the_model(
    spark: Any, kafka_broker: str, registry: SchemaRegistryServer, routing: bool
) -> None:
    """Streams long enough for runs of one schema id (decode/debezium/event_runs.py MIN_RUN), with updates,
    deletes and their tombstones, and a DATE column: the one-table runner and a database sync
    (routing by the source block's table) read most records as columns, and every table equals its
    model."""
    from icetide.decode.debezium.event_runs import MIN_RUN
    from icetide.pipeline.sync.runner import SyncRunner

    tables = ("orders", "customers") if routing else ("orders",)
    streams = {t: s for t, s in inventory_streams().items() if t in tables}
    records = {t: changes(s, seed=40 + i, count=3 * MIN_RUN) for i, (t, s) in enumerate(sorted(streams.items()))}
    prefix, namespace = f"db{unique()}", f"avroruns{unique()}"
    encoder = AvroEncoder(registry.url)
    for t, recs in records.items():
        topic = f"{prefix}.inventory.{t}"
        _create(kafka_broker, topic)
        produce(kafka_broker, topic, encoded(encoder, topic, recs))
    if routing:
        doc = single_table_doc("avroruns", kafka_broker, "", f"lake.{namespace}.{{table}}", registry.url)
        doc["source"]["kafka"].pop("topic")
        doc["source"]["kafka"]["topic_pattern"] = prefix + r"\.inventory\..*"
        doc["dead_letter"] = f"lake.{namespace}.dead_letter"
        runner: Any = SyncRunner(PipelineConfig.from_dict(doc), spark)
    else:
        doc = single_table_doc(
            "avroruns", kafka_broker, f"{prefix}.inventory.orders", f"lake.{namespace}.orders", registry.url
        )
        runner = Runner(PipelineConfig.from_dict(doc), spark)
    summary = runner.run(once=True)
    events = sum(1 for recs in records.values() for _, _, v, _ in recs if v is not None)
    as_columns = sum(b.records_as_columns for b in summary.batches)
    assert as_columns > events // 2, (as_columns, events, [b.path for b in summary.batches])
    assert {b.path for b in summary.batches} == {"sync_avro_fast" if routing else "avro_fast"}
    for t in streams:
        assert same(rows_of(spark, f"lake.{namespace}.{t}", KEYS[t]), model_of(records[t])), t
