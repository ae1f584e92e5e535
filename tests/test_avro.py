"""Avro with a Schema Registry, without Spark: the wire format, the registry's failures, the
Connect schema and payload each Avro type gives, and the Debezium decoder's reading of them.

Records are produced by confluent-kafka's own AvroSerializer through the test registry
(tests/schema_registry_server.py, a stand-in: no Confluent-compatible registry is installable here).
"""

from __future__ import annotations

import base64
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from icetide.config.pipeline import RegistrySettings
from icetide.decode.avro.decoder import AvroMessages, AvroSettings
from icetide.decode.avro.schema import compile_schema
from icetide.decode.avro.schema_registry import RegistryAccessError, RegistryUnavailableError, registry_schemas
from icetide.decode.debezium.message import EnvelopeReader
from icetide.decode.debezium.rows import Conversions, NotHere, TableRows
from icetide.decode.limits import PayloadLimits
from icetide.errors import ConfigError, TerminalError, TransientError
from icetide.sources.base import source_error_in
from tests.schema_registry_server import SchemaRegistryServer

FLINK_SCHEMA = Path(__file__).parent / "data" / "avro" / "flink_debezium_test_schema.json"
TOPIC = "fullfillment.test1.person"


@pytest.fixture(scope="module")
def registry() -> Any:
    server = SchemaRegistryServer().start()
    yield server
    server.stop()


def serializer(url: str, schema: str | dict[str, Any]) -> Any:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    text = schema if isinstance(schema, str) else json.dumps(schema)
    avro = AvroSerializer(SchemaRegistryClient({"url": url}), text)

    def serialize(value: Any, topic: str = TOPIC, *, key: bool = False) -> bytes:
        field = MessageField.KEY if key else MessageField.VALUE
        return avro(value, SerializationContext(topic, field))

    return serialize


def messages(url: str, *, envelope: bool = True, **conf: Any) -> AvroMessages:
    return AvroMessages(AvroSettings(RegistrySettings.from_dict({"url": url, **conf}), envelope, PayloadLimits()))


def source(pos: int) -> dict[str, Any]:
    return {
        "version": "1.5.4.Final",
        "connector": "mysql",
        "name": "fullfillment",
        "ts_ms": 1_600_000_000_000,
        "snapshot": "false",
        "db": "test1",
        "table": "person",
        "server_id": 1,
        "gtid": None,
        "file": "mysql-bin.000003",
        "pos": pos,
        "row": 0,
        "thread": None,
        "query": None,
    }


def flink_events() -> list[dict[str, Any]]:
    """The rows of Flink's debezium-avro-{insert,update,delete}.avro (DebeziumAvroSerDeSchemaTest's
    expected output), with Flink's schema. Flink's binary files cannot be read from here; these
    records are encoded again with its schema by confluent-kafka's AvroSerializer."""
    lisi = {"id": 1, "name": "lisi", "description": "test debezium avro data", "weight": 21.799999237060547}
    zhangsan = {**lisi, "name": "zhangsan"}
    base = {"ts_ms": 1_600_000_000_001, "transaction": None}
    return [
        {**base, "before": None, "after": lisi, "source": source(10), "op": "c"},
        {**base, "before": lisi, "after": zhangsan, "source": source(20), "op": "u"},
        {**base, "before": zhangsan, "after": None, "source": source(30), "op": "d"},
    ]


def table_rows(schema: pa.Schema, key: list[str]) -> TableRows:
    return TableRows(schema, key, "upsert", Conversions())


def test_flink_debezium_avro_reads_as_the_json_converter_message(registry: SchemaRegistryServer) -> None:
    serialize = serializer(registry.url, FLINK_SCHEMA.read_text())
    reader = messages(registry.url)
    values = [serialize(e) for e in flink_events()]
    assert all(v[0] == 0 for v in values)
    # The fast path's events and the Spark path's messages (read by the JSON decoder) agree.
    schema = pa.schema(
        [("id", pa.int64()), ("name", pa.string()), ("description", pa.string()), ("weight", pa.float64())]
    )
    direct, via_json = table_rows(schema, ["id"]), table_rows(schema, ["id"])
    json_reader = EnvelopeReader(PayloadLimits())
    for offset, value in enumerate(values):
        envelope = reader.envelope(None, value)
        assert envelope is not None
        direct.add(envelope, str(offset), evolving=False)
        message = reader.message(None, value)
        assert message is not None
        parsed = json_reader.read(message)
        assert parsed is not None
        via_json.add(parsed, str(offset), evolving=False)
    got = direct.table().to_pylist()
    assert got == via_json.table().to_pylist()
    assert [(r["_op"], r["id"], r["name"], r["weight"]) for r in got] == [
        ("UPSERT", 1, "lisi", 21.799999237060547),
        ("UPSERT", 1, "zhangsan", 21.799999237060547),
        ("DELETE", 1, "zhangsan", 21.799999237060547),
    ]


def test_schemas_are_fetched_once_per_id(registry: SchemaRegistryServer) -> None:
    serialize = serializer(registry.url, FLINK_SCHEMA.read_text())
    values = [serialize(e) for e in flink_events() * 50]
    schema_id = int.from_bytes(values[0][1:5], "big")
    before = registry.requests.count(f"GET /schemas/ids/{schema_id}")
    reader = messages(registry.url, **{"cache.capacity": 1000})  # settings of its own: a fresh process cache
    for value in values:
        reader.message(None, value)
    assert registry.requests.count(f"GET /schemas/ids/{schema_id}") == before + 1


def test_bad_records_have_reasons(registry: SchemaRegistryServer) -> None:
    serialize = serializer(registry.url, FLINK_SCHEMA.read_text())
    good = serialize(flink_events()[0])
    reader = messages(registry.url)
    bad = {
        b'{"op":"c"}': "unknown magic byte 0x7b",
        b"": "unknown magic byte none",
        b"\x00\x00\x00\x7f\xff" + good[5:]: "schema id 32767 is not in the schema registry",
        good[:5] + b"\x02\x02": "does not decode with schema id",
        good + b"\x00": "1 byte(s) after the body",
    }
    keys, values, errors = reader.transcode_block([None] * len(bad), list(bad))
    for (raw, reason), value, error in zip(bad.items(), values, errors, strict=True):
        assert error is not None and reason in error
        assert value == base64.b64encode(raw)  # the dead letter keeps the record's bytes
        with pytest.raises(NotHere, match=reason.split(" ")[0]):
            reader.envelope(None, raw)
    assert keys == [None] * len(bad)


def test_registry_unreachable_or_failing_is_transient() -> None:
    server = SchemaRegistryServer().start()
    url = server.url
    good = serializer(url, FLINK_SCHEMA.read_text())(flink_events()[0])
    server.fail_with = 503
    with pytest.raises(RegistryUnavailableError, match="HTTP 503") as failing:
        messages(url, **{"max.retries": 0}).message(None, good)
    server.stop()
    with pytest.raises(RegistryUnavailableError, match="unreachable") as unreachable:
        messages(url, **{"max.retries": 0, "timeout": 2}).message(None, good)
    for exc in (failing.value, unreachable.value):
        assert isinstance(exc, TransientError)
        recovered = source_error_in(Exception(f"Py4JJavaError: worker said\n{exc}\n  at ..."))
        assert isinstance(recovered, TransientError) and not isinstance(recovered, TerminalError)


def test_refused_credentials_are_terminal_and_name_the_url_not_the_secret() -> None:
    server = SchemaRegistryServer(user_info="icetide:s3cret-pass", forbidden_user="reader").start()
    try:
        good = serializer(
            f"http://icetide:s3cret-pass@127.0.0.1:{server.url.rsplit(':', 1)[1]}", FLINK_SCHEMA.read_text()
        )(flink_events()[0])
        for user_info, status in (("icetide:wrong-pass", "401"), ("reader:whatever", "403")):
            with pytest.raises(RegistryAccessError) as refused:
                messages(server.url, **{"basic.auth.user.info": user_info}).message(None, good)
            text = str(refused.value)
            assert server.url in text and f"HTTP {status}" in text and "pass" not in text and "\n" not in text
            recovered = source_error_in(Exception(f"PythonException: ...\n{refused.value}\n"))
            assert isinstance(recovered, TerminalError) and server.url in str(recovered)
        right = messages(server.url, **{"basic.auth.user.info": "icetide:s3cret-pass"})
        assert right.message(None, good) is not None
    finally:
        server.stop()


def test_settings_are_validated_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"schema_registry\.url: required"):
        RegistrySettings.from_dict({"basic.auth.user.info": "a:b"})
    with pytest.raises(ConfigError, match="schema_registry: Unrecognized properties: colour"):
        RegistrySettings.from_dict({"url": "http://127.0.0.1:1", "colour": "blue"})
    with pytest.raises(ConfigError, match="schema_registry: expected a mapping"):
        RegistrySettings.from_dict("http://127.0.0.1:1")
    settings = RegistrySettings.from_dict({"url": "http://127.0.0.1:1", "basic.auth.user.info": "u:topsecret"})
    assert "topsecret" not in repr(settings)
    assert registry_schemas(settings) is registry_schemas(RegistrySettings.from_dict(dict(settings.conf)))


def _field(name: str, schema: Any) -> dict[str, Any]:
    return {"name": name, "type": ["null", schema], "default": None}


ALL_TYPES = {
    "type": "record",
    "name": "Value",
    "namespace": "db.inv.all_types",
    "fields": [
        {"name": "id", "type": "int"},
        _field("tiny", {"type": "int", "connect.type": "int16"}),
        _field("big", "long"),
        _field("f32", "float"),
        _field("f64", "double"),
        _field("flag", "boolean"),
        _field("text", "string"),
        _field("blob", "bytes"),
        _field(
            "price",
            {
                "type": "bytes",
                "scale": 2,
                "precision": 10,
                "connect.version": 1,
                "connect.parameters": {"scale": "2", "connect.decimal.precision": "10"},
                "connect.name": "org.apache.kafka.connect.data.Decimal",
                "logicalType": "decimal",
            },
        ),
        _field("plain_decimal", {"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 3}),
        _field(
            "fixed_decimal",
            {"type": "fixed", "name": "F", "size": 4, "logicalType": "decimal", "precision": 8, "scale": 1},
        ),
        _field(
            "vsd",
            {
                "type": "record",
                "name": "VariableScaleDecimal",
                "namespace": "io.debezium.data",
                "fields": [{"name": "scale", "type": "int"}, {"name": "value", "type": "bytes"}],
                "connect.name": "io.debezium.data.VariableScaleDecimal",
            },
        ),
        _field("day", {"type": "int", "connect.version": 1, "connect.name": "io.debezium.time.Date"}),
        _field("avro_day", {"type": "int", "logicalType": "date"}),
        _field("dt", {"type": "long", "connect.version": 1, "connect.name": "io.debezium.time.Timestamp"}),
        _field("dt6", {"type": "long", "connect.version": 1, "connect.name": "io.debezium.time.MicroTimestamp"}),
        _field("ts_millis", {"type": "long", "logicalType": "timestamp-millis"}),
        _field("ts_micros", {"type": "long", "logicalType": "timestamp-micros"}),
        _field("local_micros", {"type": "long", "logicalType": "local-timestamp-micros"}),
        _field("zoned", {"type": "string", "connect.version": 1, "connect.name": "io.debezium.time.ZonedTimestamp"}),
        _field("tod", {"type": "long", "connect.version": 1, "connect.name": "io.debezium.time.MicroTime"}),
        _field("year", {"type": "int", "connect.version": 1, "connect.name": "io.debezium.time.Year"}),
        _field("doc", {"type": "string", "connect.version": 1, "connect.name": "io.debezium.data.Json"}),
        _field(
            "colour",
            {
                "type": "string",
                "connect.version": 1,
                "connect.parameters": {"allowed": "red,green"},
                "connect.name": "io.debezium.data.Enum",
            },
        ),
        _field("avro_enum", {"type": "enum", "name": "Size", "symbols": ["S", "M", "L"]}),
        _field("uid", {"type": "string", "logicalType": "uuid"}),
        _field("tags", {"type": "array", "items": "string"}),
        _field("attrs", {"type": "map", "values": "long"}),
        _field(
            "point",
            {
                "type": "record",
                "name": "Point",
                "fields": [{"name": "x", "type": "double"}, {"name": "wkb", "type": ["null", "bytes"]}],
            },
        ),
        _field("either", ["int", "string"]),
    ],
}


def test_type_mapping_follows_connect_names_then_avro_logical_types(registry: SchemaRegistryServer) -> None:
    from icetide.decode.debezium.connect_schema import column_ddl

    compiled = compile_schema(1, json.dumps(ALL_TYPES))
    reader = messages(registry.url, envelope=False)
    shape = reader._value_shape(compiled)
    ddl = {f.name: column_ddl(f) for f in shape.envelope.fields}
    assert ddl == {
        "id": "INT",
        "tiny": "INT",
        "big": "BIGINT",
        "f32": "FLOAT",
        "f64": "DOUBLE",
        "flag": "BOOLEAN",
        "text": "STRING",
        "blob": "BINARY",
        "price": "DECIMAL(10,2)",
        "plain_decimal": "DECIMAL(6,3)",
        "fixed_decimal": "DECIMAL(8,1)",
        "vsd": "DECIMAL(38,10)",
        "day": "DATE",
        "avro_day": "DATE",
        "dt": "TIMESTAMP",
        "dt6": "TIMESTAMP",
        "ts_millis": "TIMESTAMP",
        "ts_micros": "TIMESTAMP",
        "local_micros": "TIMESTAMP",
        "zoned": "TIMESTAMP",
        "tod": "STRING",
        "year": "INT",
        "doc": "STRING",
        "colour": "STRING",
        "avro_enum": "STRING",
        "uid": "STRING",
        "tags": "STRING",
        "attrs": "STRING",
        "point": "STRING",
        "either": "STRING",
    }


def test_values_decode_as_the_json_path_decodes_them(registry: SchemaRegistryServer) -> None:
    """Each value through the Avro reader and through the JSON converter message it becomes:
    the same typed row, with the column types a table created from the stream gets."""
    import datetime as dt
    import uuid

    serialize = serializer(registry.url, ALL_TYPES)
    row = {
        "id": 7,
        "tiny": -3,
        "big": 2**40,
        "f32": 21.8,
        "f64": -1.5e300,
        "flag": True,
        "text": "héllo",
        "blob": b"\x00\xff",
        "price": Decimal("-12345678.90"),
        "plain_decimal": Decimal("1.250"),
        "fixed_decimal": Decimal("-7.5"),
        "vsd": {"scale": 2, "value": (12345).to_bytes(2, "big", signed=True)},
        "day": 19_000,
        "avro_day": dt.date(2024, 2, 29),
        "dt": 1_700_000_000_123,
        "dt6": 1_700_000_000_123_456,
        "ts_millis": dt.datetime(2024, 1, 1, 12, 0, 0, 5000, tzinfo=dt.UTC),
        "ts_micros": dt.datetime(2024, 1, 1, 12, 0, 0, 5, tzinfo=dt.UTC),
        "local_micros": dt.datetime(2024, 1, 1, 12, 0, 0, 5),
        "zoned": "2024-01-01T10:00:00.5Z",
        "tod": 3_723_000_001,
        "year": 2024,
        "doc": '{"a": [1, 2]}',
        "colour": "green",
        "avro_enum": "M",
        "uid": str(uuid.UUID(int=5)),
        "tags": ["x", "y"],
        "attrs": {"k": 1},
        "point": {"x": 1.5, "wkb": b"\x01"},
        "either": 5,
    }
    value = serialize(row, "db.inv.all_types")
    reader = messages(registry.url, envelope=False)
    envelope = reader.envelope(None, value)
    assert envelope is not None and envelope.op == "c"
    schema = pa.schema(
        [
            ("id", pa.int32()), ("tiny", pa.int32()), ("big", pa.int64()), ("f32", pa.float32()), ("f64", pa.float64()),
            ("flag", pa.bool_()), ("text", pa.string()), ("price", pa.decimal128(10, 2)),
            ("plain_decimal", pa.decimal128(6, 3)), ("fixed_decimal", pa.decimal128(8, 1)),
            ("day", pa.date32()), ("avro_day", pa.date32()), ("dt", pa.timestamp("us", tz="UTC")),
            ("dt6", pa.timestamp("us", tz="UTC")), ("ts_millis", pa.timestamp("us", tz="UTC")),
            ("ts_micros", pa.timestamp("us", tz="UTC")), ("local_micros", pa.timestamp("us", tz="UTC")),
            ("tod", pa.string()), ("year", pa.int32()), ("doc", pa.string()), ("colour", pa.string()),
            ("avro_enum", pa.string()), ("uid", pa.string()), ("either", pa.string()),
        ]
    )  # fmt: skip
    direct, via_json = table_rows(schema, ["id"]), table_rows(schema, ["id"])
    direct.add(envelope, "", evolving=False)
    message = reader.message(None, value)
    assert message is not None
    parsed = EnvelopeReader(PayloadLimits()).read(message)
    assert parsed is not None
    via_json.add(parsed, "", evolving=False)
    got = direct.table().to_pylist()[0]
    assert got == via_json.table().to_pylist()[0]
    # Nested values are for the Spark path (it keeps their JSON text): as the JSON converter sends them.
    after = json.loads(message)["payload"]["after"]
    assert (after["tags"], after["attrs"], after["point"]) == (["x", "y"], {"k": 1}, {"x": 1.5, "wkb": "AQ=="})
    assert after["vsd"] == {"scale": 2, "value": "MDk="} and after["blob"] == "AP8="
    utc = dt.UTC
    assert got == {
        "id": 7,
        "tiny": -3,
        "big": 2**40,
        "f32": pytest.approx(21.8),
        "f64": -1.5e300,
        "flag": True,
        "text": "héllo",
        "price": Decimal("-12345678.90"),
        "plain_decimal": Decimal("1.250"),
        "fixed_decimal": Decimal("-7.5"),
        "day": dt.date(2022, 1, 8),
        "avro_day": dt.date(2024, 2, 29),
        "dt": dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=utc),
        "dt6": dt.datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=utc),
        "ts_millis": dt.datetime(2024, 1, 1, 12, 0, 0, 5000, tzinfo=utc),
        "ts_micros": dt.datetime(2024, 1, 1, 12, 0, 0, 5, tzinfo=utc),
        "local_micros": dt.datetime(2024, 1, 1, 12, 0, 0, 5, tzinfo=utc),
        "tod": "01:02:03.000001",
        "year": 2024,
        "doc": '{"a": [1, 2]}',
        "colour": "green",
        "avro_enum": "M",
        "uid": "00000000-0000-0000-0000-000000000005",
        "either": "5",
        "_op": "UPSERT",
        "_source_order": "",
    }


def test_plain_avro_tombstone_deletes_the_key(registry: SchemaRegistryServer) -> None:
    key_schema = {"type": "record", "name": "Key", "fields": [{"name": "id", "type": "int"}]}
    key = serializer(registry.url, key_schema)({"id": 7}, "db.inv.all_types", key=True)
    reader = messages(registry.url, envelope=False)
    envelope = reader.envelope(key, None)
    assert envelope is not None and envelope.op == "d" and envelope.before == {"id": 7}
    key_message = reader.key_message(key)
    assert key_message is not None and json.loads(key_message)["payload"] == {"id": 7}
    assert messages(registry.url).envelope(key, None) is None  # debezium-avro: a tombstone follows its delete
    assert reader.envelope(None, None) is None


PAIMON = Path(__file__).parent / "data" / "avro"


def _connect_shape(schema: dict[str, Any]) -> Any:
    """A Connect schema's types, names, optionality and parameters (what decides the columns)."""
    out = {k: schema.get(k) for k in ("type", "optional", "name", "parameters")}
    if schema.get("type") == "struct":
        out["fields"] = {f["field"]: _connect_shape(f) for f in schema["fields"]}
        # An Avro named type is defined once: every geometry column after the first refers to the
        # first one's record, `connect.parameters` (the source column's name and type) included.
        out.pop("parameters")
    return out


def test_paimon_all_types_avro_reads_as_debezium_json_converter_wrote_it(registry: SchemaRegistryServer) -> None:
    """Paimon's all-types MySQL table (KafkaDebeziumAvroSyncTableActionITCase): records built from
    Debezium's JSON-converter messages with Paimon's Avro schemas, as its IT case builds them, read
    back as the very messages they came from: the same row values and the same Connect types."""
    from tests.avro_messages import avro_value

    lines = [json.loads(line) for line in (PAIMON / "paimon_debezium_avro_data_1.jsonl").read_text().splitlines()]
    serialize_key = serializer(registry.url, (PAIMON / "paimon_all_types_key.avsc").read_text())
    serialize_value = serializer(registry.url, (PAIMON / "paimon_all_types_value.avsc").read_text())
    reader = messages(registry.url)
    json_reader = EnvelopeReader(PayloadLimits())
    for key_line, value_line in zip(lines[::2], lines[1::2], strict=True):
        payload = value_line["payload"]
        row_schema = next(f for f in value_line["schema"]["fields"] if f["field"] == "after")
        record = {
            "before": None,
            "after": avro_value(row_schema, payload["after"]),
            "source": payload["source"],
            "op": payload["op"],
            "ts_ms": payload["ts_ms"],
            "transaction": None,
        }
        key = serialize_key(key_line["payload"], "all_type", key=True)
        value = serialize_value(record, "all_type")
        message = reader.message(key, value)
        assert message is not None
        read = json.loads(message)
        assert read["payload"]["after"] == payload["after"]
        assert read["payload"]["source"] == payload["source"]
        after = next(f for f in read["schema"]["fields"] if f["field"] == "after")
        assert _connect_shape(after)["fields"] == _connect_shape(row_schema)["fields"]
        key_message = reader.key_message(key)
        assert key_message is not None and json.loads(key_message)["payload"] == key_line["payload"]
        # The Python decoder reads the Avro event as it reads Debezium's own JSON message.
        from icetide.decode.debezium.connect_schema import column_ddl

        envelope = reader.envelope(key, value)
        assert envelope is not None and envelope.schema is not None
        arrow = {"INT": pa.int32(), "BIGINT": pa.int64(), "FLOAT": pa.float32(), "DOUBLE": pa.float64()}
        arrow |= {"BOOLEAN": pa.bool_(), "STRING": pa.string(), "DATE": pa.date32()}
        arrow |= {"TIMESTAMP": pa.timestamp("us", tz="UTC")}
        nested = {f.name for f in envelope.schema.fields if f.type in ("struct", "array", "map")}
        columns = [
            (f.name, arrow[column_ddl(f)])
            for f in envelope.schema.fields
            if column_ddl(f) in arrow and f.name not in nested
        ]
        direct, via_json = table_rows(pa.schema(columns), ["_id"]), table_rows(pa.schema(columns), ["_id"])
        direct.add(envelope, "", evolving=False)
        original = json_reader.read(json.dumps(value_line, separators=(",", ":")).encode())
        assert original is not None
        via_json.add(original, "", evolving=False)
        assert direct.table().to_pylist() == via_json.table().to_pylist()
        assert len(columns) > 50


def test_key_changes_and_truncates_keep_the_debezium_rules(registry: SchemaRegistryServer) -> None:
    """An update that changes the key is a delete of the old key and an upsert of the new row; a
    truncate (no row) is left to the Spark path, which applies it, as for `format: debezium`."""
    serialize = serializer(registry.url, FLINK_SCHEMA.read_text())
    reader = messages(registry.url)
    one = {"id": 1, "name": "a", "description": None, "weight": 1.0}
    moved = {**one, "id": 2}
    base = {"ts_ms": 1, "transaction": None}
    update = serialize({**base, "before": one, "after": moved, "source": source(40), "op": "u"})
    truncate = serialize({**base, "before": None, "after": None, "source": source(50), "op": "t"})
    schema = pa.schema(
        [("id", pa.int64()), ("name", pa.string()), ("description", pa.string()), ("weight", pa.float64())]
    )
    rows = table_rows(schema, ["id"])
    envelope = reader.envelope(None, update)
    assert envelope is not None
    rows.add(envelope, "o", evolving=False)
    assert [(r["_op"], r["id"]) for r in rows.table().to_pylist()] == [("DELETE", 1), ("UPSERT", 2)]
    cut = reader.envelope(None, truncate)
    assert cut is not None and cut.op == "t"
    with pytest.raises(NotHere, match="op 't'"):
        rows.add(cut, "p", evolving=False)
    message = reader.message(None, truncate)
    assert message is not None and json.loads(message)["payload"]["op"] == "t"


def test_pipeline_files_name_the_bad_key() -> None:
    from icetide.config.pipeline import PipelineConfig

    base: dict[str, Any] = {
        "pipeline": "p",
        "source": {"kafka": {"bootstrap_servers": "b:9092", "topic": "t"}},
        "format": "debezium-avro",
        "schema_registry": {"url": "http://127.0.0.1:8081", "basic.auth.user.info": "u:sekrit-pw"},
        "table": {"name": "lake.db.t"},
    }
    config = PipelineConfig.from_dict(base)
    assert config.reads_debezium and config.schema_registry is not None
    assert config.schema_registry.url == "http://127.0.0.1:8081"
    assert "sekrit-pw" not in repr(config)
    from icetide.config.secrets import scrub

    in_url = PipelineConfig.from_dict({**base, "schema_registry": {"url": "http://user:hunter22@127.0.0.1:8081"}})
    assert in_url.schema_registry is not None and in_url.schema_registry.url == "http://127.0.0.1:8081"
    assert "hunter22" not in repr(in_url)
    assert (
        scrub("GET http://user:hunter22@127.0.0.1:8081 with u:sekrit-pw")
        == "GET http://user:***@127.0.0.1:8081 with ***"
    )
    cases = [
        ({"schema_registry": None}, r"schema_registry: required with format: debezium-avro"),
        ({"format": "json"}, r"schema_registry: only read with format: debezium-avro or avro"),
        ({"format": "protobuf"}, r"format: 'protobuf' is not one of json, debezium, debezium-avro, avro"),
        ({"schema_registry": {"url": "ftp://x"}}, r"schema_registry: Invalid url ftp://x"),
        (
            {"schema_registry": {"url": "http://a:b@h:1", "basic.auth.user.info": "u:p"}},
            "schema_registry: basic.auth.user.info configured with userinfo credentials in the URL",
        ),
        ({"source": {"files": {"path": "landing", "format": "json"}}}, r"format: debezium-avro reads Kafka records"),
        (
            {"format": "avro", "table": {"name": "lake.db.{table}"}, "dead_letter": "lake.db.dl"},
            r"table.name: format avro",
        ),
    ]
    for change, message in cases:
        doc = {k: v for k, v in {**base, **change}.items() if v is not None}
        with pytest.raises(ConfigError, match=f"^{message}"):
            PipelineConfig.from_dict(doc)
    routed = PipelineConfig.from_dict(
        {
            **base,
            "table": {"name": "lake.db.{table}"},
            "dead_letter": "lake.db.dl",
            "source": {"kafka": {"bootstrap_servers": "b", "topic_pattern": "db\\..*"}},
        }
    )
    assert routed.routes_tables and routed.format == "debezium-avro"


def test_schemas_icetide_cannot_read_make_dead_letters(registry: SchemaRegistryServer) -> None:
    recursive = {
        "type": "record",
        "name": "Node",
        "fields": [{"name": "id", "type": "int"}, {"name": "next", "type": ["null", "Node"], "default": None}],
    }
    schema_id = registry.register("recursive-value", recursive)
    not_avro = registry.register("proto-value", 'syntax = "proto3"; message M { int32 id = 1; }', "PROTOBUF")
    primitive = registry.register("plain-value", '"string"')
    reader = messages(registry.url)
    values = [
        b"\x00" + schema_id.to_bytes(4, "big") + b"\x02\x00",
        b"\x00" + not_avro.to_bytes(4, "big") + b"\x08",
        b"\x00" + primitive.to_bytes(4, "big") + b"\x02a",
    ]
    for _ in range(2):  # the second time from what the reader remembers
        _, out, errors = reader.transcode_block([None] * 3, values)
        assert out == [base64.b64encode(v) for v in values]
        assert errors[0] is not None and "recursive type Node" in errors[0]
        assert errors[1] is not None and "is a PROTOBUF schema, not Avro" in errors[1]
        assert errors[2] is not None and f"schema id {primitive} is not a record" in errors[2]
