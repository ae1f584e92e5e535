"""Schema-aware Debezium decoding (decode/debezium/tasks.py, the Python decoder in Spark's tasks) on
real connector output (tests/data/debezium, sources in its SOURCES.md), plus hand-made messages
for the types no public test data carries (marked as such)."""

from __future__ import annotations

import base64
import json
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import pytest
from pyspark.sql import types as T

from icetide.config.pipeline import DebeziumSettings
from icetide.decode.debezium.connect_schema import parse_envelope_schema, table_schema
from icetide.decode.debezium.tasks import decode_debezium
from tests.debezium_messages import ProductsStream, apply_changes, lines, messages

KAFKA_POSITION = ["topic", "partition", "offset"]


def kafka_frame(spark: Any, values: list[str | bytes | None], partition: int = 0) -> Any:
    rows = [
        ("cdc", partition, i, None if v is None else v if isinstance(v, bytes) else v.encode())
        for i, v in enumerate(values)
    ]
    return spark.createDataFrame(rows, "topic STRING, partition INT, offset BIGINT, value BINARY")


def utc(text: str) -> datetime:
    """A collected TIMESTAMP: naive, in the session time zone (UTC in icetide sessions)."""
    return datetime.fromisoformat(text)


def test_paimon_mysql_all_types_by_their_schema(spark: Any) -> None:
    """apache/paimon's MySQL all-types message: every column typed from its Connect schema.
    Its decimals are JSON numbers (decimal.format=NUMERIC), which a Decimal field also accepts."""
    (value,) = lines("paimon_mysql_all_types")
    envelope = parse_envelope_schema(json.dumps(json.loads(value)["schema"]))
    schema = table_schema(envelope, ["_id"])
    types = {f.name: f.dataType.simpleString() for f in schema.fields}
    assert types["pt"] == "decimal(2,1)"
    assert types["_big_decimal"] == "decimal(38,10)"
    assert types["_fixed"] == "string"  # DECIMAL(40,3) is wider than Iceberg's decimal(38)
    assert types["_datetime6"] == "timestamp"
    assert types["_time"] == "string"
    assert types["_year"] == "int"
    assert types["_bit"] == "binary"
    decoded = decode_debezium(kafka_frame(spark, [value]), "value", schema, ["_id"], "upsert", KAFKA_POSITION)
    assert decoded.bad.count() == 0
    (row,) = decoded.good.collect()
    assert row["pt"] == Decimal("1.1")
    assert row["_numeric"] == Decimal("12345.110")
    assert row["_big_decimal"] == Decimal("2222222222222222300000001111.1234567890")
    assert row["_fixed"] == "123456789876543212345678987654321.110"
    assert row["_bigint_unsigned"] == Decimal(20000000000)
    assert row["_date"] == date(2023, 3, 23)
    assert row["_datetime"] == utc("2023-03-23T14:30:05")
    assert row["_datetime3"] == utc("2023-03-23T14:30:05.123")
    assert row["_datetime6"] == utc("2023-03-23T14:30:05.123456")
    assert row["_timestamp"] == utc("2023-03-23T22:00:10.123456")  # ZonedTimestamp, stored as UTC
    assert row["_time"] == "10:13:23.000000"  # MicroTime 36803000000
    assert row["_year"] == 2023
    assert row["_json"] == '{"a": "b"}'
    assert row["_enum"] == "value1"
    assert row["_bit"] == base64.b64decode("xwcAAAAAAAA=")
    assert row["_bin"] == base64.b64decode("Ynl0ZXMAAAAAAA==")
    assert row["_tinyint1"] == 1 and row["_bit1"] is True and row["_bigint"] == 10000000000
    assert json.loads(row["_point"])["wkb"] == "AQEAAAAAAAAAAADwPwAAAAAAAPA/"  # a struct keeps its JSON


def test_flink_cdc_mysql_precise_decimals_and_micro_timestamps(spark: Any) -> None:
    """apache/flink-cdc's MySQL full-types messages: base64 decimals in Debezium's default
    `precise` mode, DATETIME(3)/(6), TIME, DATE, TIMESTAMP; a snapshot row and an update."""
    values = lines("flink_cdc_mysql_full_types_schema")
    schema = T.StructType(
        [
            T.StructField("int_c", T.IntegerType(), nullable=False),
            T.StructField("decimal_c", T.DecimalType(8, 4)),
            T.StructField("numeric_c", T.DecimalType(6, 0)),
            T.StructField("big_decimal_c", T.StringType()),
            T.StructField("date_c", T.DateType()),
            T.StructField("time_c", T.StringType()),
            T.StructField("datetime3_c", T.TimestampType()),
            T.StructField("datetime6_c", T.TimestampType()),
            T.StructField("timestamp_c", T.TimestampType()),
            T.StructField("real_c", T.FloatType()),
            T.StructField("big_c", T.LongType()),
            T.StructField("file_uuid", T.BinaryType()),
        ]
    )
    decoded = decode_debezium(kafka_frame(spark, values), "value", schema, ["int_c"], "append", KAFKA_POSITION)
    assert decoded.bad.count() == 0
    snapshot, update = decoded.good.collect()
    assert snapshot["decimal_c"] == Decimal("123.4567")  # "EtaH", scale 4
    assert snapshot["numeric_c"] == Decimal(346)  # "AVo=", scale 0
    assert snapshot["big_decimal_c"] == "0." + "0" * 56 + "345678921"  # "FJqkSQ==", scale 65
    assert snapshot["date_c"] == date(2020, 7, 17)
    assert snapshot["time_c"] == "18:00:22.000000"
    assert snapshot["datetime3_c"] == utc("2020-07-17T18:00:22.123")
    assert snapshot["datetime6_c"] == utc("2020-07-17T18:00:22.123456")
    assert snapshot["timestamp_c"] == utc("2020-07-17T18:00:22")
    assert snapshot["big_c"] == 9223372036854775807
    assert snapshot["file_uuid"] == base64.b64decode("ZRrtCDkPSJOy8TaSPnt0AA==")
    assert update["_op"] == "INSERT" and update["_source_order"] > snapshot["_source_order"]
    assert "id" in decoded.unknown_fields  # sent by the source, not a column: counted, never silent


def _field(name: str, type_: str, logical: str | None = None, **parameters: str) -> dict[str, Any]:
    f: dict[str, Any] = {"type": type_, "optional": True, "field": name}
    if logical:
        f["name"] = logical
    if parameters:
        f["parameters"] = parameters
    return f


def _unscaled(value: int) -> str:
    return base64.b64encode(value.to_bytes(max(1, (value.bit_length() + 8) // 8), "big", signed=True)).decode()


# Hand-made: no public message carries these types. Field shapes follow the type tables of
# Debezium's PostgreSQL and MySQL connector documentation and Kafka Connect's logical types.
HAND_MADE_FIELDS = [
    _field("id", "int32"),
    _field("price", "bytes", "org.apache.kafka.connect.data.Decimal", scale="2", **{"connect.decimal.precision": "10"}),
    _field("small", "bytes", "org.apache.kafka.connect.data.Decimal", scale="2", **{"connect.decimal.precision": "4"}),
    _field("amount", "struct", "io.debezium.data.VariableScaleDecimal"),
    _field("ns_ts", "int64", "io.debezium.time.NanoTimestamp"),
    _field("connect_ts", "int64", "org.apache.kafka.connect.data.Timestamp"),
    _field("connect_date", "int32", "org.apache.kafka.connect.data.Date"),
    _field("ms_time", "int32", "io.debezium.time.Time"),
    _field("ns_time", "int64", "io.debezium.time.NanoTime"),
    _field("connect_time", "int32", "org.apache.kafka.connect.data.Time"),
    _field("tiny", "int8"),
    _field("flags", "string", "io.debezium.data.EnumSet"),
    _field("ratio", "float"),
]


def _hand_made(after: dict[str, Any], op: str = "r") -> str:
    schema = {
        "type": "struct",
        "name": "pg.public.items.Envelope",
        "fields": [
            {
                "type": "struct",
                "fields": HAND_MADE_FIELDS,
                "optional": True,
                "name": "pg.public.items.Value",
                "field": f,
            }
            for f in ("before", "after")
        ],
    }
    source = {"connector": "postgresql", "lsn": 24023128, "ts_ms": 1679581805000, "db": "shop", "table": "items"}
    return json.dumps({"schema": schema, "payload": {"before": None, "after": after, "op": op, "source": source}})


def test_hand_made_types_and_values_that_do_not_fit(spark: Any) -> None:
    envelope = parse_envelope_schema(json.dumps(json.loads(_hand_made({}))["schema"]))
    schema = table_schema(envelope, ["id"])
    assert schema["amount"].dataType == T.DecimalType(38, 10)
    good_row = {
        "id": 1,
        "price": "AdTA",  # the PostgreSQL DECIMAL(10,2): 120000 at scale 2
        "small": _unscaled(-1234),
        "amount": {"scale": 3, "value": _unscaled(-120000)},
        "ns_ts": 1679581805123456000,
        "connect_ts": 1679581805123,
        "connect_date": 19439,
        "ms_time": 52205123,
        "ns_time": 52205123456000,
        "connect_time": 1000,
        "tiny": -7,
        "flags": "a,b",
        "ratio": 0.5,
    }
    values = [
        _hand_made(good_row),
        _hand_made({**good_row, "id": 2, "small": _unscaled(123456)}),  # 1234.56 does not fit DECIMAL(4,2)
        _hand_made({**good_row, "id": 3, "amount": {"scale": 12, "value": _unscaled(1)}}),  # 1e-12: rounds
        _hand_made({**good_row, "id": 4, "price": "not base64!"}),
        # Nanoseconds below a microsecond (SQL Server's datetime2(7), Oracle's TIMESTAMP(9)): the
        # columns hold microseconds, so each would be dropped; a dead letter, not a rounded row.
        _hand_made({**good_row, "id": 5, "ns_ts": 1679581805123456789}),
        _hand_made({**good_row, "id": 6, "ns_time": 52205123456789}),
    ]
    decoded = decode_debezium(kafka_frame(spark, values), "value", schema, ["id"], "upsert", KAFKA_POSITION)
    (row,) = decoded.good.collect()
    assert row["price"] == Decimal("1200.00")
    assert row["small"] == Decimal("-12.34")
    assert row["amount"] == Decimal("-120.000")
    assert row["ns_ts"] == utc("2023-03-23T14:30:05.123456")
    assert row["connect_ts"] == utc("2023-03-23T14:30:05.123")
    assert row["connect_date"] == date(2023, 3, 23)
    assert row["ms_time"] == "14:30:05.123000"
    assert row["ns_time"] == "14:30:05.123456"
    assert row["connect_time"] == "00:00:01.000000"
    assert row["tiny"] == -7 and row["flags"] == "a,b" and row["ratio"] == 0.5
    errors = {r["source_position"]: r["error"] for r in decoded.bad.collect()}
    assert errors == {
        "cdc/0@1": f"column small: '{_unscaled(123456)}' is not a DECIMAL(4,2)",
        "cdc/0@2": 'column amount: \'{"scale":12,"value":"AQ=="}\' is not a DECIMAL(38,10)',
        "cdc/0@3": "column price: 'not base64!' is not a DECIMAL(10,2)",
        "cdc/0@4": "column ns_ts: 1679581805123456789 ns, a timestamp finer than the column's microseconds",
        "cdc/0@5": "column ns_time: 52205123456789 ns, a time of day finer than the column's microseconds",
    }


def test_schemaless_messages_read_as_the_connector_settings_say(spark: Any) -> None:
    """Without a schema (schemas.enable=false), the pipeline's `debezium:` keys say how to read values."""
    schema = T.StructType(
        [
            T.StructField("id", T.IntegerType(), nullable=False),
            T.StructField("price", T.DecimalType(10, 2)),
            T.StructField("ts", T.TimestampType()),
        ]
    )
    values = [
        json.dumps({"op": "c", "after": {"id": 1, "price": "AdTA", "ts": 1679581805123456}}),  # precise, micros
        json.dumps({"op": "c", "after": {"id": 2, "price": 1200.5, "ts": 1679581805123}}),  # numeric, millis
        json.dumps({"op": "c", "after": {"id": 3, "price": "99.99", "ts": 1679581805000}}),  # string handling
    ]
    frame = kafka_frame(spark, values)
    adaptive = decode_debezium(frame, "value", schema, ["id"], "upsert", KAFKA_POSITION)
    rows = {r["id"]: (r["price"], r["ts"]) for r in adaptive.good.collect()}
    assert rows == {
        1: (Decimal("1200.00"), utc("2023-03-23T14:30:05.123456")),
        2: (Decimal("1200.50"), utc("2023-03-23T14:30:05.123")),
        3: (Decimal("99.99"), utc("2023-03-23T14:30:05")),
    }
    connect = DebeziumSettings.from_dict({"time.precision.mode": "connect"})
    millis = decode_debezium(frame, "value", schema, ["id"], "upsert", KAFKA_POSITION, settings=connect)
    assert millis.bad.count() == 1  # 1679581805123456 as milliseconds is past the year 9999
    assert {r["id"] for r in millis.good.collect()} == {2, 3}


def test_update_that_moves_the_key_deletes_the_old_row(spark: Any) -> None:
    """Hand-made on the real products schema: no public message has a primary-key update as `u`."""
    stream = ProductsStream()
    row = {"id": 101, "name": "scooter", "description": "small", "weight": 3.14}
    values = [
        stream.change("u", row, {**row, "id": 901}),
        stream.change("u", {**row, "id": 901}, {**row, "id": 101, "weight": 5.0}),  # and back
        stream.change("u", {**row, "id": 102}, {**row, "id": 103}),
    ]
    schema = table_schema(parse_envelope_schema(json.dumps(stream.schema)), ["id"])
    decoded = decode_debezium(kafka_frame(spark, values), "value", schema, ["id"], "upsert", KAFKA_POSITION)
    changes = [(r["id"], r["_op"], r["weight"]) for r in decoded.good.orderBy("_source_order", "_op").collect()]
    assert changes == [
        (101, "DELETE", 3.14),
        (901, "UPSERT", 3.14),
        (901, "DELETE", 3.14),
        (101, "UPSERT", 5.0),
        (102, "DELETE", 3.14),
        (103, "UPSERT", 3.14),
    ]


@pytest.mark.parametrize("on_truncate", ["apply", "dead_letter"])
def test_truncate_keeps_what_follows_it(spark: Any, on_truncate: str) -> None:
    stream = ProductsStream()
    row = {"id": 1, "name": "a", "description": None, "weight": 1.0}
    values = [
        stream.change("c", None, row),
        stream.truncate(),
        stream.change("c", None, {**row, "id": 2}),
    ]
    schema = table_schema(parse_envelope_schema(json.dumps(stream.schema)), ["id"])
    decoded = decode_debezium(
        kafka_frame(spark, values), "value", schema, ["id"], "upsert", KAFKA_POSITION, on_truncate=on_truncate
    )
    ids = sorted(r["id"] for r in decoded.good.collect())
    if on_truncate == "apply":
        assert decoded.truncated and decoded.truncates == 1 and ids == [2]
        assert decoded.bad.count() == 0
    else:
        assert not decoded.truncated and ids == [1, 2]
        assert [r["error"] for r in decoded.bad.collect()] == [
            "truncate event (on_truncate: dead_letter keeps the table as it is)"
        ]


def test_real_products_stream_lands_as_the_source_says(spark: Any, table_name: str) -> None:
    """Flink's copy of the Debezium tutorial's products stream (snapshot, updates, inserts, a
    delete), one batch, through the sink: the table equals the source's final state."""
    import icetide

    values = lines("flink_mysql_products_schema")
    envelope = parse_envelope_schema(json.dumps(messages("flink_mysql_products_schema")[0]["schema"]))
    ddl = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in table_schema(envelope, ["id"]).fields)
    icetide.create_table(spark, table_name, schema=ddl.replace("id int", "id int NOT NULL"), key=["id"])
    decoded = decode_debezium(
        kafka_frame(spark, values), "value", spark.table(table_name).schema, ["id"], "upsert", KAFKA_POSITION
    )
    sink = icetide.UpsertSink(spark, table_name, pipeline_id="products", order_by=decoded.order_by)
    assert sink.write(decoded.good.drop("_source_ts"), batch_id=1).committed
    model: dict[int, tuple[Any, ...]] = {}
    for m in messages("flink_mysql_products_schema"):
        apply_changes(model, m["payload"])
    got = {r["id"]: (r["name"], r["description"], r["weight"]) for r in spark.table(table_name).collect()}
    assert got == model and len(got) == 10


def test_paimon_schema_evolution_stream_adds_widens_and_refuses(spark: Any, table_name: str) -> None:
    """apache/paimon's schema-evolution messages, one per batch: a column appears (int32), widens
    (int64), narrows back (int32, written into the wider column), then turns string (refused, nothing
    committed); the last message, a delete without a schema, still lands."""
    import icetide
    from icetide.errors import SchemaEvolutionError

    values = lines("paimon_mysql_products_schema_evolution")
    first = parse_envelope_schema(json.dumps(json.loads(values[0])["schema"]))
    ddl = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in table_schema(first, ["id"]).fields)
    icetide.create_table(spark, table_name, schema=ddl.replace("id int", "id int NOT NULL"), key=["id"])
    sink = icetide.UpsertSink(
        spark, table_name, pipeline_id="evolving", order_by="_source_order", schema_evolution=True
    )

    def decode(value: str, evolve: bool = True) -> Any:
        schema = spark.table(table_name).schema
        return decode_debezium(
            kafka_frame(spark, [value]), "value", schema, ["id"], "upsert", KAFKA_POSITION, schema_evolution=evolve
        )

    off = decode(values[1], evolve=False)
    assert off.unknown_fields == {"age": 1} and not off.new_columns  # counted and named, not dropped silently
    model: dict[int, tuple[Any, ...]] = {}
    for batch_id, value in enumerate(values[:4], start=1):
        decoded = decode(value)
        assert sink.write(decoded.good.drop("_source_ts"), batch_id=batch_id).committed
        after = json.loads(value)["payload"]["after"]
        model[after["id"]] = (after["name"], after.get("age"))
        assert len(decoded.schemas) == 1  # one distinct schema, parsed once
    assert spark.table(table_name).schema["age"].dataType == T.LongType()  # int32, widened by int64
    snapshots = spark.sql(f"SELECT count(*) FROM {table_name}.snapshots").first()[0]
    with pytest.raises(SchemaEvolutionError, match=r"column 'age'.*string.*bigint"):
        decode(values[4])
    assert spark.sql(f"SELECT count(*) FROM {table_name}.snapshots").first()[0] == snapshots
    deleted = decode(values[5])
    assert sink.write(deleted.good.drop("_source_ts"), batch_id=5).committed
    model.pop(101)
    got = {r["id"]: (r["name"], r["age"]) for r in spark.table(table_name).collect()}
    assert got == model


def test_each_distinct_schema_is_parsed_once(spark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The 16 messages of Flink's products stream share one schema: a task's reader parses it once
    (decode/debezium/message.py), and so does the driver, for the batch's schemas (decode/debezium/tasks.py)."""
    from icetide.decode.debezium import message as debezium_message
    from icetide.decode.debezium import tasks as debezium_tasks
    from icetide.decode.limits import PayloadLimits

    parsed: list[bytes] = []
    parse_head = debezium_message._parse_head

    def counting(head: bytes, limits: PayloadLimits) -> Any:
        parsed.append(head)
        return parse_head(head, limits)

    monkeypatch.setattr(debezium_message, "_parse_head", counting)
    values = lines("flink_mysql_products_schema")
    reader = debezium_message.EnvelopeReader(PayloadLimits())
    assert all(reader.read(v.encode()) is not None for v in values)
    assert len(parsed) == 1
    parsed.clear()
    envelope = parse_envelope_schema(json.dumps(messages("flink_mysql_products_schema")[0]["schema"]))
    schema = table_schema(envelope, ["id"])
    first = decode_debezium(kafka_frame(spark, values), "value", schema, ["id"], "upsert", KAFKA_POSITION)
    assert first.good.count() == 16 and first.bad.count() == 0
    assert len(parsed) == 1 and len(first.schemas) == 1  # the tasks parse in their own processes
    assert debezium_tasks.head_schema is debezium_message.head_schema


def test_one_keys_changes_follow_the_source_position_not_the_kafka_offset(spark: Any) -> None:
    """Hand-made on the real products schema and source block (no public stream has these
    orders). Each id gets two updates whose Kafka offsets run against the source's own order:
    the binlog position decides (file, then pos, then row), or the PostgreSQL LSN; without a
    source position, `source.ts_ms`, then the offset within one `ts_ms` value."""
    stream = ProductsStream()
    no_position = {"file": None, "pos": None, "row": None}

    def update(row_id: int, weight: float, **source: Any) -> str:
        after = {"id": row_id, "name": "p", "description": None, "weight": weight}
        block = {**stream.source, "ts_ms": 1589362330000, **source}
        payload = {"before": None, "after": after, "source": block, "op": "u", "ts_ms": 1589362330904}
        return json.dumps({"schema": stream.schema, "payload": payload})

    values = [  # (offset order) the later change first, except for id 5
        update(1, 1.2, file="mysql-bin.000003", pos=3000, row=0),
        update(1, 1.1, file="mysql-bin.000003", pos=2000, row=0),
        update(2, 2.2, file="mysql-bin.000010", pos=4, row=0),  # binlog file names compare as text
        update(2, 2.1, file="mysql-bin.000009", pos=99999, row=0),
        update(3, 3.2, file="mysql-bin.000003", pos=500, row=1),  # rows of one binlog event
        update(3, 3.1, file="mysql-bin.000003", pos=500, row=0),
        update(4, 4.2, **no_position, lsn=24023200),  # PostgreSQL
        update(4, 4.1, **no_position, lsn=24023128),
        update(5, 5.1, **no_position),  # one ts_ms second: the Kafka offset orders
        update(5, 5.2, **no_position),
        update(6, 6.2, **no_position, ts_ms=1589362331000),
        update(6, 6.1, **no_position, ts_ms=1589362330000),
    ]
    schema = table_schema(parse_envelope_schema(json.dumps(stream.schema)), ["id"])
    decoded = decode_debezium(kafka_frame(spark, values), "value", schema, ["id"], "upsert", KAFKA_POSITION)
    assert decoded.bad.count() == 0 and decoded.order_by == "_source_order"
    last: dict[int, tuple[str, float]] = {}
    for r in decoded.good.collect():
        if r["id"] not in last or r["_source_order"] > last[r["id"]][0]:
            last[r["id"]] = (r["_source_order"], r["weight"])
    assert {i: w for i, (_, w) in last.items()} == {1: 1.2, 2: 2.2, 3: 3.2, 4: 4.2, 5: 5.2, 6: 6.2}


def test_schemaless_fields_the_table_lacks_become_columns_typed_by_their_values(spark: Any, table_name: str) -> None:
    """Without a schema in the message (schemas.enable=false), a JSON key the table lacks adds a
    nullable column typed by a value (BOOLEAN, BIGINT, DOUBLE, else STRING) when evolution is on;
    older rows read NULL. Hand-made: the public schemaless messages found carry no new field."""
    import icetide

    icetide.create_table(spark, table_name, schema="id INT NOT NULL, name STRING", key=["id"])
    sink = icetide.UpsertSink(
        spark, table_name, pipeline_id="schemaless", order_by="_source_order", schema_evolution=True
    )

    def decode(values: list[str]) -> Any:
        return decode_debezium(
            kafka_frame(spark, values),
            "value",
            spark.table(table_name).schema,
            ["id"],
            "upsert",
            KAFKA_POSITION,
            schema_evolution=True,
        )

    first = decode([json.dumps({"op": "c", "after": {"id": 1, "name": "a"}})])
    assert not first.new_columns and sink.write(first.good.drop("_source_ts"), batch_id=1).committed
    new = {"id": 2, "name": "b", "qty": 5, "ratio": 0.5, "ok": True, "note": "x"}
    second = decode([json.dumps({"op": "c", "after": new})])
    assert {f.name: f.dataType.simpleString() for f in second.new_columns} == {
        "qty": "bigint",
        "ratio": "double",
        "ok": "boolean",
        "note": "string",
    }
    assert not second.unknown_fields  # added, so not reported as left out
    assert sink.write(second.good.drop("_source_ts"), batch_id=2).committed
    rows = {r["id"]: r.asDict() for r in spark.table(table_name).collect()}
    assert rows == {1: {**{k: None for k in new}, "id": 1, "name": "a"}, 2: new}


def test_decimal_base64_that_looks_like_a_number_is_read_as_base64() -> None:
    """A Connect Decimal's JSON form is base64 text: "77e4" is the bytes EF B7 B8, -10670.80 at
    scale 2 (PostgreSQL's numeric(12,2), as Debezium's PostgreSQL connector sent it to
    bench/cdc_live.py), not the number 77e4 (it landed as 770000.00 before)."""
    import pyarrow as pa

    from icetide.decode.debezium.connect_schema import ConnectField
    from icetide.decode.debezium.conversions import Conversions

    decimal = "org.apache.kafka.connect.data.Decimal"
    price = ConnectField("price", "bytes", decimal, parameters={"scale": "2", "connect.decimal.precision": "12"})
    convert = Conversions().converter(price, pa.decimal128(12, 2), "price")
    assert base64.b64decode("77e4") == bytes([0xEF, 0xB7, 0xB8])
    assert convert("77e4") == Decimal("-10670.80")
    assert convert("AdTA") == Decimal("1200.00")
    assert convert(Decimal("12.5")) == Decimal("12.50")  # decimal.format=NUMERIC: a JSON number
