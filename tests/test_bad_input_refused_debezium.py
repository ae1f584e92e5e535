"""Debezium values that contradict their declared Connect schema inside a struct, array or map, a
Connect Decimal with digits beyond its declared scale (a negative one too), text that is no base64
where bytes are declared, a Decimal into a BINARY column, and a finite number beyond FLOAT's range:
each one dead letter naming the field (its place inside the value), never a row Spark's reading
repaired (issue 49; tests/test_bad_input_refused.py has the other kinds).

The messages: Apache Flink's MySQL products stream (tests/data/debezium/
flink_mysql_products_schema.jsonl, Flink's Debezium JSON test data, its source in
tests/data/debezium/SOURCES.md) as it is, with mutated copies of its first update interleaved:
the copy's schema declares nine more fields (a struct, an array, a map, a Decimal of scale 2, a
float, bytes, a Decimal of scale -2, one of scale 0 and a map with int32 keys, in the JSON
converter's schema layout) and its row carries them, each copy under a key of its own. The good
copies land as rows, each bad one is one dead letter.

Every path decodes with the same converters (decode/debezium/conversions.py): the fast path's
`TableRows` message by message, the Spark path's tasks (`DebeziumTask`, run here on an Arrow batch
without Spark) and the columnar runs (decode/debezium/event_runs.py `column_of`, which hands a value it
cannot take to the message-by-message reading). Each is compared with the model here, rows and
dead letters one by one. tests/test_files_debezium.py runs such messages through both paths of a
pipeline and compares their dead-letter tables and counts.
"""

from __future__ import annotations

import copy
import json
import re
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from icetide.decode.avro.container import NotColumnar
from icetide.decode.debezium import connect_schema as C
from icetide.decode.debezium.changes import SOURCE_ORDER_COLUMN, SOURCE_TS_COLUMN
from icetide.decode.debezium.conversions import Conversions
from icetide.decode.debezium.event_runs import column_of
from icetide.decode.debezium.message import EnvelopeReader
from icetide.decode.debezium.rows import TableRows, source_order
from icetide.decode.debezium.task import (
    BAD,
    GOOD,
    HEADS,
    KIND,
    RECORDS,
    SAMPLES,
    TRUNCATE_AT,
    TRUNCATES,
    UNKNOWN_COUNTS,
    DebeziumTask,
)
from icetide.decode.json.tasks import ERROR, PAYLOAD, POSITION
from icetide.decode.limits import PayloadLimits
from icetide.write.collapse import OP_COLUMN
from tests.debezium_messages import apply_changes, messages

_DECIMAL = "org.apache.kafka.connect.data.Decimal"
# The JSON converter's schemas of the nine fields the copies add (connect/json JsonSchema's layout).
EXTRA_FIELDS: list[dict[str, Any]] = [
    {
        "type": "struct",
        "optional": True,
        "field": "dims",
        "fields": [
            {"type": "int32", "optional": True, "field": "w"},
            {"type": "string", "optional": True, "field": "unit"},
        ],
    },
    {"type": "array", "optional": True, "field": "tags", "items": {"type": "string", "optional": True}},
    {
        "type": "map",
        "optional": True,
        "field": "meta",
        "keys": {"type": "string", "optional": False},
        "values": {"type": "int32", "optional": True},
    },
    {
        "type": "bytes",
        "optional": True,
        "field": "price",
        "name": _DECIMAL,
        "version": 1,
        "parameters": {"scale": "2", "connect.decimal.precision": "10"},
    },
    {"type": "float", "optional": True, "field": "ratio"},
    {"type": "bytes", "optional": True, "field": "blob"},  # into a STRING column: its base64 text
    {
        "type": "bytes",
        "optional": True,
        "field": "lots",
        "name": _DECIMAL,
        "version": 1,
        "parameters": {"scale": "-2"},  # hundreds: a Connect Decimal's scale may be negative
    },
    {"type": "bytes", "optional": True, "field": "code", "name": _DECIMAL, "version": 1, "parameters": {"scale": "0"}},
    {  # keys that are not strings: the JSON converter writes [key, value] pairs
        "type": "map",
        "optional": True,
        "field": "codes",
        "keys": {"type": "int32", "optional": False},
        "values": {"type": "string", "optional": True},
    },
]
TABLE = pa.schema(
    [
        pa.field("id", pa.int32(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("description", pa.string()),
        pa.field("weight", pa.float64()),
        pa.field("dims", pa.struct([("w", pa.int32()), ("unit", pa.string())])),
        pa.field("tags", pa.list_(pa.string())),
        pa.field("meta", pa.map_(pa.string(), pa.int32())),
        pa.field("price", pa.decimal128(10, 2)),
        pa.field("ratio", pa.float32()),
        pa.field("blob", pa.string()),
        pa.field("lots", pa.decimal128(10, 0)),
        pa.field("code", pa.binary()),  # a decimal is no bytes: only null lands
        # null only: the decoders refuse the JSON converter's [key, value] pairs into a MAP column
        # (`is not a map<int,string>`); what is checked here is the declared check of each pair
        pa.field("codes", pa.map_(pa.int32(), pa.string())),
    ]
)
GOOD_EXTRAS: dict[str, Any] = {
    "dims": {"w": 2, "unit": "cm"},
    "tags": ["a", "b"],
    "meta": {"k": 1},
    "price": 1.5,  # decimal.format=NUMERIC
    "ratio": 3.4028235e38,  # the largest FLOAT, as Java writes it
    "blob": "AQID",
    "lots": "BQ==",  # 5 hundreds
}
DECLARED = "where the message's schema declares"
# (what a copy changes in GOOD_EXTRAS, its dead letter's error or None for a row)
KINDS: list[tuple[dict[str, Any], str | None]] = [
    ({}, None),
    # base64 bytes of 123456 at scale 2; the JSON converter's text of Float.POSITIVE_INFINITY
    ({"price": "AeJA", "ratio": "Infinity", "tags": [], "meta": {}}, None),
    ({"dims": {"w": "x", "unit": "cm"}}, f"column dims.w: text 'x' {DECLARED} int32"),
    ({"dims": {"w": 2, "unit": {"a": 1}}}, f"column dims.unit: object '{{\"a\":1}}' {DECLARED} string"),
    ({"tags": ["a", 5]}, f"column tags[1]: number '5' {DECLARED} string"),
    ({"tags": '["a"]'}, f"column tags: text '[\"a\"]' {DECLARED} array"),
    ({"meta": {"k": "v"}}, f"column meta[\"k\"]: text 'v' {DECLARED} int32"),
    ({"meta": {"k": 2**31}}, f"column meta[\"k\"]: number '2147483648' {DECLARED} int32"),
    ({"price": 1.234}, "column price: '1.234' has digits beyond the scale 2 its schema declares"),
    ({"price": "1.005"}, "column price: '1.005' has digits beyond the scale 2 its schema declares"),
    ({"ratio": 3.5e38}, "column ratio: '3.5E38' is out of FLOAT range"),
    ({"ratio": -1e39}, "column ratio: '-1.0E39' is out of FLOAT range"),
    ({"lots": 700}, None),  # decimal.format=NUMERIC: the number itself, a multiple of 100
    ({"blob": "no base64!"}, f"column blob: text 'no base64!' {DECLARED} bytes"),
    ({"lots": 750}, "column lots: '750' has digits beyond the scale -2 its schema declares"),
    ({"code": "AfQ="}, "column code: 'AfQ=' is not a BINARY"),  # Spark read the digits 500 as base64
    ({"codes": [[7, "a"], ["x", "b"]]}, f"column codes[1].key: text 'x' {DECLARED} int32"),  # a map's key
    ({"codes": [[7, 8]]}, f"column codes[0].value: number '8' {DECLARED} string"),
]


def _copy(update: dict[str, Any], row_id: int, extras: dict[str, Any]) -> dict[str, Any]:
    """The real update under key `row_id`, its schema declaring EXTRA_FIELDS and its row carrying `extras`."""
    message = copy.deepcopy(update)
    for part in message["schema"]["fields"]:
        if part["field"] in ("before", "after"):
            part["fields"] += copy.deepcopy(EXTRA_FIELDS)
    message["payload"]["before"]["id"] = row_id
    message["payload"]["after"] = {**message["payload"]["after"], "id": row_id, **extras}
    return message


def stream() -> tuple[list[bytes], dict[int, str], dict[int, tuple[Any, ...]]]:
    """The messages (real and copies), the dead letters' errors by offset, and the model table."""
    real = messages("flink_mysql_products_schema")
    update = next(m for m in real if m["payload"]["op"] == "u")
    values: list[bytes] = []
    dead: dict[int, str] = {}
    model: dict[int, tuple[Any, ...]] = {}
    extras: dict[int, dict[str, Any]] = {}
    kinds = list(KINDS)
    for i, message in enumerate(real):
        values.append(json.dumps(message).encode())
        apply_changes(model, message["payload"])
        slots = (len(real) + 1 - i) // 2  # the odd places from here on: every kind placed by the last
        for _ in range(-(-len(kinds) // slots) if i % 2 == 1 else 0):
            change, error = kinds.pop(0)
            row_id = 1000 + len(values)
            copied = _copy(update, row_id, {**GOOD_EXTRAS, **change})
            if error is None:
                apply_changes(model, copied["payload"])
                extras[row_id] = copied["payload"]["after"]
            else:
                dead[len(values)] = error
            values.append(json.dumps(copied).encode())
    assert not kinds
    table = {k: (*v, *_extra_columns(extras.get(k))) for k, v in model.items()}
    return values, dead, table


def _extra_columns(after: dict[str, Any] | None) -> tuple[Any, ...]:
    """The nine columns a good copy's row holds, as the table keeps them (None: a real message's row)."""
    if after is None:
        return (None,) * 9
    price = after["price"]
    exact = Decimal("1234.56") if price == "AeJA" else Decimal(str(price)).quantize(Decimal("0.01"))
    ratio = float("inf") if after["ratio"] == "Infinity" else 3.4028234663852886e38
    lots = Decimal(500) if after["lots"] == "BQ==" else Decimal(after["lots"])
    return after["dims"], after["tags"], sorted(after["meta"].items()), exact, ratio, after["blob"], lots, None, None


def _table(rows: list[dict[str, Any]]) -> dict[int, tuple[Any, ...]]:
    """The table the changes leave (each key's last change by `_source_order`), from decoded rows."""
    table: dict[int, tuple[Any, ...]] = {}
    for r in sorted(rows, key=lambda r: r["_source_order"]):
        if r["_op"] == "DELETE":
            table.pop(r["id"], None)
        else:
            values = [r[n] for n in TABLE.names[1:]]
            if values[5] is not None:
                values[5] = sorted(values[5])
            table[r["id"]] = tuple(values)
    return table


def test_values_against_their_declared_schema_on_the_fast_path_reading() -> None:
    values, dead, model = stream()
    reader = EnvelopeReader(PayloadLimits())
    rows = TableRows(TABLE, ["id"], "upsert", Conversions())
    got: dict[int, str] = {}
    for offset, value in enumerate(values):
        envelope = reader.read(value)
        assert envelope is not None
        errors = rows.add(envelope, source_order(envelope.source, envelope.ts_ms, offset), evolving=False)
        assert len(errors) <= 1  # one dead letter per message
        if errors:
            got[offset] = errors[0]
    assert got == dead
    assert _table(rows.table().to_pylist()) == model


def test_the_spark_paths_tasks_give_the_same_rows_and_dead_letters() -> None:
    """`DebeziumTask`, the `mapInArrow` body of the Spark path, over one Arrow batch of the messages
    as Kafka values: the same dead letters (position, error) and the same table."""
    values, dead, model = stream()
    offsets = pa.array(range(len(values)), pa.int64())
    batch = pa.record_batch([pa.array(values, pa.binary()), offsets], names=["value", "offset"])
    string = pa.string()
    output = pa.schema(
        [
            *TABLE,
            (OP_COLUMN, string),
            (SOURCE_TS_COLUMN, pa.timestamp("us", tz="UTC")),
            (SOURCE_ORDER_COLUMN, string),
            (KIND, string),
            (ERROR, string),
            (PAYLOAD, string),
            (POSITION, string),
            (RECORDS, pa.int64()),
            (TRUNCATES, pa.int64()),
            (TRUNCATE_AT, string),
            (UNKNOWN_COUNTS, pa.map_(string, pa.int64())),
            (SAMPLES, pa.map_(string, string)),
            (HEADS, pa.list_(string)),
        ]
    )
    task = DebeziumTask(
        schema=TABLE,
        key=("id",),
        op_mode="upsert",
        conversions=Conversions(),
        limits=PayloadLimits(),
        value_col="value",
        position_cols=("offset",),
        extra_cols=(),
        split=None,
        error_col=None,
        arrival_col=None,
        on_truncate="apply",
        sample=False,
        output=output,
    )
    (out,) = list(task([batch]))
    frame = out.to_pylist()
    bad = [(r[POSITION], r[ERROR], r[PAYLOAD]) for r in frame if r[KIND] == BAD]
    assert bad == [(str(offset), error, values[offset].decode()) for offset, error in sorted(dead.items())]
    assert _table([r for r in frame if r[KIND] == GOOD]) == model


def test_the_columnar_reading_takes_only_what_the_converter_takes() -> None:
    """A run's column is made by the column's own converter where its form is not plainly the
    column's (decode/debezium/event_runs.py `column_of`); a value the converter refuses refuses the run
    (NotColumnar), and the message-by-message reading then makes it the dead letter above."""
    conversions = Conversions()
    ratio = C.ConnectField("ratio", "double")  # a double into a FLOAT column: converted value by value
    convert = conversions.converter(ratio, pa.float32(), "ratio")
    taken = column_of(pa.array([1.5, 3.4028235e38, None]), ratio, pa.float32(), "ratio", convert)
    assert taken.to_pylist() == [1.5, 3.4028234663852886e38, None]
    with pytest.raises(NotColumnar, match="out of FLOAT range"):
        column_of(pa.array([1.5, 3.5e38]), ratio, pa.float32(), "ratio", convert)
    price = C.ConnectField("price", "bytes", _DECIMAL, parameters={"scale": "3"})
    convert = conversions.converter(price, pa.decimal128(10, 2), "price")
    # base64 unscaled values at scale 3: 1.230 fits DECIMAL(10,2), 1.234 would be rounded
    assert column_of(pa.array(["BM4="]), price, pa.decimal128(10, 2), "price", convert).to_pylist() == [Decimal("1.23")]
    with pytest.raises(NotColumnar):
        column_of(pa.array(["BM4=", "BNI="]), price, pa.decimal128(10, 2), "price", convert)
    # bytes into a STRING column: base64 text, checked value by value (text that is no base64 refused)
    blob = C.ConnectField("blob", "bytes")
    convert = conversions.converter(blob, pa.string(), "blob")
    assert column_of(pa.array(["AQID", None]), blob, pa.string(), "blob", convert).to_pylist() == ["AQID", None]
    with pytest.raises(NotColumnar, match="declares bytes"):
        column_of(pa.array(["AQID", "no base64!"]), blob, pa.string(), "blob", convert)


def test_without_a_schema_the_column_type_decides_and_an_object_is_no_text() -> None:
    """Schemaless messages (the JSON converter with schemas.enable=false: Flink's update's payload
    alone) declare nothing: the table column's type decides, as for plain JSON. An object or array
    in a STRING column or element is a dead letter (its JSON text was no text the message held),
    a scalar is its text."""
    real = messages("flink_mysql_products_schema")
    update = next(m for m in real if m["payload"]["op"] == "u")["payload"]
    cases: list[tuple[dict[str, Any], str | None]] = [
        ({"description": 42, "tags": ["a", 1]}, None),
        ({"description": {"nested": True}}, "column description: object '{\"nested\":true}' is not a STRING"),
        ({"description": ["a"]}, "column description: array '[\"a\"]' is not a STRING"),
        ({"tags": ["a", {"b": 1}]}, "column tags[1]: object '{\"b\":1}' is not a STRING"),
        ({"dims": {"w": "x"}}, "column dims.w: 'x' is not an INT"),
        # numbers as sent (written in place of the text "=..."): a STRING takes a double's text only
        # where that text is the number sent (issue 49, as in plain JSON)
        ({"description": "=2.50"}, None),
        ({"description": "=1e400"}, "column description: number '1E+400' is beyond a double: not a STRING"),
        (
            {"description": "=0.1000000000000000055511151231257827"},
            "column description: number '0.1000000000000000055511151231257827' has digits a double does not hold:"
            " not a STRING",
        ),
    ]
    reader = EnvelopeReader(PayloadLimits())
    rows = TableRows(TABLE, ["id"], "upsert", Conversions())
    dead = []
    for offset, (change, _) in enumerate(cases):
        payload = copy.deepcopy(update)
        payload["after"] = {**payload["after"], **change}
        text = re.sub(r'"=([^"]*)"', r"\1", json.dumps(payload))
        envelope = reader.read(text.encode())
        assert envelope is not None and envelope.schema is None
        dead += rows.add(envelope, source_order(envelope.source, envelope.ts_ms, offset), evolving=False)
    assert dead == [error for _, error in cases if error is not None]
    assert sorted((r["description"], r["tags"]) for r in rows.table().to_pylist() if r["_op"] == "UPSERT") == [
        ("2.5", None),
        ("42", ["a", "1"]),
    ]
