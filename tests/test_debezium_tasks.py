"""decode/debezium/tasks.py: the Python Debezium decoder in Spark's tasks gives what the Spark SQL
decoder (decode/debezium.py) gave, with every option of `decode_debezium` (its outputs frozen in
tests/golden/debezium_differential/debezium_tasks.json), but for a double Java 17 wrote with other
digits than the shortest, which it writes with the shortest, on purpose."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

from icetide.decode.debezium import tasks as debezium_tasks
from icetide.decode.debezium.connect_schema import parse_envelope_schema, table_schema
from icetide.errors import SchemaEvolutionError
from tests.debezium_messages import ProductsStream
from tests.frozen import PYTHON_DEBEZIUM, frozen, spelled, stored
from tests.test_debezium_arrow import _POISON_LIMITS, KAFKA_POSITION, _poison, kafka_frame
from tests.test_head_split import _frame

Decode = Callable[..., Any]
ROW = {"id": 101, "name": "scooter", "description": "small", "weight": 3.14}


def _products() -> T.StructType:
    return table_schema(parse_envelope_schema(json.dumps(ProductsStream().schema)), ["id"])


def _changes(stream: ProductsStream, first: int, n: int) -> list[bytes]:
    out = []
    for i in range(first, first + n):
        row = {**ROW, "id": i, "weight": i / 4}
        out.append(stream.change("c", None, row) if i % 3 else stream.change("u", {**row, "weight": 0.5}, row))
    return out


def _output(decode: Decode, frame: Any, schema: T.StructType, key: list[str], **options: Any) -> dict[str, Any]:
    """Everything a decode gives, in one comparable spelling."""
    keep: list[Any] = []
    out = decode(frame, "value", schema, key, options.pop("op_mode", "upsert"), KAFKA_POSITION, keep=keep, **options)
    try:
        columns = [
            F.unix_micros(c).alias(c) if isinstance(out.good.schema[c].dataType, T.TimestampType) else F.col(f"`{c}`")
            for c in out.good.columns
        ]
        # new columns come in another order from each decoder: rows are compared by column name
        good = sorted(
            tuple(sorted((k, str(v)) for k, v in r.asDict().items())) for r in out.good.select(*columns).collect()
        )
        bad = sorted(tuple(r) for r in out.bad.collect())
    finally:
        for frame_kept in keep:
            frame_kept.unpersist()
    return {
        "columns": sorted(out.good.columns),
        "good": good,
        "bad": bad,
        "truncated": out.truncated,
        "truncates": out.truncates,
        "unknown_fields": out.unknown_fields,
        "new_columns": sorted((f.name, f.dataType.simpleString()) for f in out.new_columns),
        "schemas": len(out.schemas),
    }


GOLDEN = "debezium_differential/debezium_tasks.json"


def _as_frozen(case: str, frame: Any, schema: T.StructType, key: list[str], **options: Any) -> dict[str, Any]:
    """The Python decoder's output, checked equal to what the Spark SQL decoder gave: case `case` of the golden file."""
    mine = _output(debezium_tasks.decode_debezium, frame, schema, key, **options)
    frozen(GOLDEN, case, mine, decoder=PYTHON_DEBEZIUM)
    return mine


def test_a_double_java_17_wrote_otherwise_lands_with_its_shortest_digits(spark: Any) -> None:
    """1e23 into a STRING column, which the Spark SQL decoder (deleted) wrote as Java 17 does,
    "9.999999999999999E22", lands with its shortest digits, "1.0E23", as Java 19 on writes it: a
    deliberate difference (decode/spark_compat/connect_text.py `field_text`); the rest of its batch decodes as
    without it, and as the Spark SQL decoder gave it but for those digits (the golden file's case "a
    record the Python decoder does not read")."""
    stream = ProductsStream()
    values = _changes(stream, 1, 30)
    # The message declares its name a double: a number where the schema says string is a dead
    # letter (issue 49), so this one message carries a schema of its own.
    shortest = stream.change("c", None, {**ROW, "id": 77}).replace(b'"name":"scooter"', b'"name":1e23')
    declared = b'{"type":"string","optional":false,"field":"name"}'
    shortest = shortest.replace(declared, b'{"type":"double","field":"name"}')
    bad = b'{"op":"c","after":{"id":"x"}}'
    values[12:12] = [shortest, bad]
    out = _output(debezium_tasks.decode_debezium, kafka_frame(spark, values), _products(), ["id"])
    values[12] = None  # a tombstone in its place keeps the other offsets
    without = _output(debezium_tasks.decode_debezium, kafka_frame(spark, values), _products(), ["id"])
    landed = [dict(r) for r in out["good"] if r not in without["good"]]
    assert [(r["id"], r["name"]) for r in landed] == [("77", "1.0E23")]
    assert len(out["good"]) == 31 and all(r in out["good"] for r in without["good"])
    assert out["bad"] == without["bad"] and len(without["bad"]) == 1
    golden = stored(GOLDEN, "a record the Python decoder does not read")
    deliberate = json.loads(json.dumps(golden).replace('"9.999999999999999E22"', '"1.0E23"'))
    assert deliberate != golden and spelled({**out, "schemas": golden["schemas"]}) == deliberate
    assert out["schemas"] == golden["schemas"] + 1  # the double's own schema
    del values[12]
    _as_frozen("the batch without it", kafka_frame(spark, values), _products(), ["id"], extra_cols=["partition"])


def test_a_change_the_decoder_cannot_read_exactly_is_a_dead_letter_saying_why(spark: Any) -> None:
    """A value the decoder cannot convert exactly as the former Spark SQL decoder did (a time in
    year 10000 whose zone may bring it into range: decode/spark_compat/datetime_casts.py `Unsure`) makes its
    record a dead letter with its payload and the reason ("not decoded: ..."). A key-moving update
    whose upsert half is such a value leaves no change at all: its delete half, added first, is
    undone (TableRows.undo). The records beside it land. Hand-made schemaless events: no connector
    sends a year-10000 time."""
    schema = T.StructType([T.StructField("id", T.LongType(), False), T.StructField("ts", T.TimestampType(), True)])
    unsure = "10000-01-01T00:30:00+01:00"
    events = [
        {"op": "c", "after": {"id": 1, "ts": "2024-05-01T10:00:00Z"}},
        {"op": "c", "after": {"id": 2, "ts": unsure}},
        {"op": "u", "before": {"id": 1, "ts": None}, "after": {"id": 3, "ts": unsure}},
        {"op": "c", "after": {"id": 4, "ts": None}},
    ]
    values = [json.dumps(e).encode() for e in events]
    out = _output(debezium_tasks.decode_debezium, kafka_frame(spark, values), schema, ["id"])
    assert [dict(r)["id"] for r in out["good"]] == ["1", "4"]
    reason = f"not decoded: column ts: a time in year 0 or 10000 that its zone may bring into range ({unsure})"
    assert [(p, e, where.rpartition("@")[2]) for p, e, where in out["bad"]] == [
        (values[1].decode(), reason, "1"),
        (values[2].decode(), reason, "2"),
    ]


@pytest.mark.parametrize("on_truncate", ["apply", "dead_letter"])
def test_truncates_as_the_spark_decoder(spark: Any, on_truncate: str) -> None:
    stream = ProductsStream()
    values = [*_changes(stream, 1, 10), stream.truncate(), *_changes(stream, 11, 10), stream.truncate()]
    values += _changes(stream, 21, 10)
    out = _as_frozen(
        f"truncates, {on_truncate}", kafka_frame(spark, values), _products(), ["id"], on_truncate=on_truncate
    )
    assert out["truncates"] == 2 and out["truncated"] == (on_truncate == "apply")
    if on_truncate == "apply":  # what the latest truncate left: the changes after it
        assert len(out["good"]) == 10 and not out["bad"]
    else:
        assert len(out["good"]) == 30 and len(out["bad"]) == 2


def test_schema_evolution_as_the_spark_decoder(spark: Any) -> None:
    """New columns typed by the schema, a column the schema widens, and schemaless ones typed by a value."""
    stream = ProductsStream()
    narrow = T.StructType(
        [f if f.name != "weight" else T.StructField("weight", T.FloatType()) for f in _products().fields]
    )
    lacking = T.StructType([f for f in narrow.fields if f.name != "description"])
    schemaless = [
        json.dumps(
            {"op": "c", "after": {"id": 500 + i, "extra": 12, "label": f"n{i}", "ratio": i + 0.5}, "ts_ms": 1}
        ).encode()
        for i in range(3)
    ]
    values = [*_changes(stream, 1, 10), *schemaless]
    off = _as_frozen("evolution off", kafka_frame(spark, values), lacking, ["id"])
    assert off["unknown_fields"] == {"description": 10, "extra": 3, "label": 3, "ratio": 3} and not off["new_columns"]
    on = _as_frozen("evolution on", kafka_frame(spark, values), lacking, ["id"], schema_evolution=True)
    # a sample of a number that is not an integer is typed from its text, as Spark SQL does
    assert on["new_columns"] == [
        ("description", "string"),
        ("extra", "bigint"),
        ("label", "string"),
        ("ratio", "double"),
    ]
    assert not on["unknown_fields"] and len(on["good"]) == 13 and on["schemas"] == 1

    wide = T.StructType([f if f.name != "id" else T.StructField("id", T.StringType(), False) for f in narrow.fields])
    with pytest.raises(SchemaEvolutionError, match="column 'id'"):
        debezium_tasks.decode_debezium(
            kafka_frame(spark, values[:2]), "value", wide, ["id"], "upsert", KAFKA_POSITION, schema_evolution=True
        )


def test_widened_columns_hold_the_wider_values(spark: Any) -> None:
    stream = ProductsStream()
    narrow = T.StructType(
        [f if f.name != "weight" else T.StructField("weight", T.FloatType()) for f in _products().fields]
    )
    values = _changes(stream, 1, 5)
    keep: list[Any] = []
    out = debezium_tasks.decode_debezium(
        kafka_frame(spark, values), "value", narrow, ["id"], "upsert", KAFKA_POSITION, keep=keep, schema_evolution=True
    )
    try:
        assert out.good.schema["weight"].dataType == T.DoubleType()
        assert sorted(r["weight"] for r in out.good.collect()) == [0.25, 0.5, 0.75, 1.0, 1.25]
    finally:
        for frame in keep:
            frame.unpersist()
    _as_frozen("widened columns", kafka_frame(spark, values), narrow, ["id"], schema_evolution=True)


def test_split_heads_as_the_spark_decoder(spark: Any) -> None:
    stream = ProductsStream()
    values: list[bytes | None] = [*_changes(stream, 1, 20), None, stream.change("d", ROW, None)]
    split = ("value_head_id", "value_head")
    # One partition, as a Kafka range's records are read: a head's text is on its first row of each
    # Arrow batch, in the task that reads it (a task that meets an id without its text falls back).
    out = _as_frozen("split heads", _frame(spark, values, split=True).coalesce(1), _products(), ["id"], split=split)
    assert len(out["good"]) == 21


def test_records_the_source_could_not_read_as_the_spark_decoder(spark: Any) -> None:
    stream = ProductsStream()
    values: list[bytes | None] = list(_changes(stream, 1, 6))
    errors: list[str | None] = [None] * 6
    values += [base64.b64encode(b"\x00\x01avro"), None]
    errors += ["the Avro value does not match its schema", "a tombstone"]
    rows = [("cdc", 0, i, v, e) for i, (v, e) in enumerate(zip(values, errors, strict=True))]
    frame = spark.createDataFrame(rows, "topic STRING, partition INT, offset BIGINT, value BINARY, value_error STRING")
    out = _as_frozen("records the source could not read", frame, _products(), ["id"], error_col="value_error")
    assert len(out["good"]) == 6
    assert [r[1] for r in out["bad"]] == ["the Avro value does not match its schema"]


def test_poison_messages_as_the_spark_decoder(spark: Any) -> None:
    """The poison messages of tests/test_debezium_arrow.py (real products messages corrupted in
    stated ways, and hand-made ones: over a payload limit, not UTF-8, not a JSON object) are the
    Spark SQL decoder's dead letters on the Spark path too, payloads included, with no fallback."""
    values = [value for _, value, _ in _poison()]
    out = _as_frozen("poison messages", kafka_frame(spark, values), _products(), ["id"], limits=_POISON_LIMITS)
    assert len(out["bad"]) >= 10 and out["unknown_fields"]["extra"] == 2
