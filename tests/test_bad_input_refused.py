"""Input the decoders cannot read exactly is one dead letter each, never a row (issue 49).

Bytes that are not UTF-8 (in a value, in a key column's value, in a field name), a value that
contradicts the type its Debezium message's Connect schema declares, an object or array in a
STRING column of plain JSON (its JSON text only with the decoder's `nested_as_text`, counted), and
the other repairs the plain JSON decoder no longer makes (text after the object, a number beyond
FLOAT, a DECIMAL digit beyond the scale, a STRUCT from text that is no object, a struct field that
does not fit, an object or array in a STRING element or field: each a dead letter naming the
part; the keys no struct field has skipped and counted). The
decoders here are the ones every path runs (the fast path and Spark's tasks alike:
decode/json/records.py for JSON, decode/debezium/message.py with decode/debezium/rows.py for
Debezium), so these tests need no Spark; tests/test_files_fast.py runs landing files that are not
UTF-8, and objects in a STRING column, through both paths of a pipeline. The table is compared
with a reference model and the dead letters one by one.

JSON payloads: written here, each a kind of bad input the issue names, or a repair the decoder
made (issue 49, item 3), between good ones.

Debezium messages: Apache Flink's MySQL products stream (tests/data/debezium/
flink_mysql_products_schema.jsonl, its source in SOURCES.md), with mutated copies of its first
update interleaved, as the issue's reproduction had it.

Avro records: the rows of Apache Flink's debezium-avro test files with Flink's schema
(tests/test_avro.py `flink_events`, tests/data/avro/flink_debezium_test_schema.json), encoded by
confluent-kafka's AvroSerializer through the test registry, then the bytes of one string patched.
"""

from __future__ import annotations

import base64
import copy
import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql import types as T

from icetide.decode.avro.container import NotColumnar, run_reader
from icetide.decode.avro.schema_registry import HEADER_BYTES
from icetide.decode.debezium.rows import NotHere
from icetide.decode.json.evolution import UNKNOWN, UNKNOWN_PAYLOAD
from icetide.decode.json.records import ArrowJsonDecoder
from icetide.decode.json.scalars import RAW_MESSAGE_CHARS
from icetide.decode.json.tasks import ERROR, PAYLOAD, POSITION, JsonTask
from icetide.write.collapse import OP_COLUMN
from tests.debezium_messages import apply_changes, messages
from tests.schema_registry_server import SchemaRegistryServer
from tests.test_avro import FLINK_SCHEMA, flink_events, serializer, table_rows
from tests.test_avro import messages as avro_messages
from tests.test_debezium_arrow import python_changes

# -- plain JSON ----------------------------------------------------------------------------------

SCHEMA = pa.schema(
    [pa.field("id", pa.string(), nullable=False), pa.field("note", pa.string()), pa.field("n", pa.int64())]
)

# (payload, the dead letter's error or None for a row)
JSON_CASES: list[tuple[bytes, str | None]] = [
    (b'{"id": "a", "note": "plain", "n": 1}', None),
    (b'{"id": "b", "note": "plai\xff\xfen", "n": 2}', "payload is not valid UTF-8 at byte 25, in field note"),
    (b'{"id": "c\xc3", "note": "x"}', "payload is not valid UTF-8 at byte 9, in field id"),
    (b'{"id": "d", "no\xfete": "x"}', "payload is not valid UTF-8 at byte 15, in the name of field no\ufffdte"),
    (b'{"id": "e", "note": {"nested": true}}', "column note: object '{\"nested\":true}' is not a STRING"),
    (b'{"id": "f", "note": ["a", 1.5]}', "column note: array '[\"a\",1.5]' is not a STRING"),
    (b'{"id": "g", "note": "\xed\xa0\x80"}', "payload is not valid UTF-8 at byte 21, in field note"),
    (b'{"id": "h", "note": "fine", "n": 8}', None),
    (b'{"id": "i", "note": "{\\"quoted\\": 1}"}', None),  # text that looks like JSON is text
    (b'{"id": {"k": 1}, "note": "x"}', "column id: object '{\"k\":1}' is not a STRING"),  # in the key column
    # a number a STRING column would hold as its double's text, which is another number
    (b'{"id": "l", "note": 1e400}', "column note: number '1e400' is beyond a double: not a STRING"),
    (
        b'{"id": "m", "note": 0.1000000000000000055511151231257827}',
        "column note: number '0.1000000000000000055511151231257827' has digits a double does not hold: not a STRING",
    ),
]


def _json_rows(payloads: list[bytes]) -> list[dict[str, Any]]:
    """The model: each payload's values, an object or array as its compact JSON text (Jackson's)."""
    rows = []
    for p in payloads:
        record = {c: _jackson(v) if isinstance(v, dict | list) else v for c, v in json.loads(p).items()}
        rows.append({"id": record["id"], "note": record.get("note"), "n": record.get("n")})
    return rows


def test_json_bad_bytes_and_objects_in_string_columns_are_dead_letters() -> None:
    decoder = ArrowJsonDecoder(SCHEMA, ["id"], op_mode="upsert")
    payloads = [p for p, _ in JSON_CASES]
    decoded = decoder.decode(payloads, lambda i: f"landing/a.json:{i + 1}")
    assert decoded.rows.to_pylist() == _json_rows([p for p, error in JSON_CASES if error is None])
    expected = [(f"landing/a.json:{i + 1}", e) for i, (_, e) in enumerate(JSON_CASES) if e is not None]
    assert [(b.source_position, b.error) for b in decoded.bad] == expected
    assert decoded.nested_as_text == 0
    for bad in decoded.bad:  # the payload as text, U+FFFD where its bytes are not UTF-8
        original = payloads[int(bad.source_position.rpartition(":")[2]) - 1]
        assert bad.payload == original.decode("utf-8", "replace")


def test_json_objects_in_string_columns_as_text_when_asked_and_counted() -> None:
    """`nested_as_text`: an object or array in a STRING column lands as its JSON text, as Spark's
    reader keeps it, each such value counted; bad bytes stay dead letters."""
    decoder = ArrowJsonDecoder(SCHEMA, ["id"], op_mode="upsert", nested_as_text=True)
    cases = [*JSON_CASES, (b'{"id": "j", "note": [], "n": 3}', None), (b'{"id": "k", "note": {}}', None)]
    payloads = [p for p, _ in cases]
    decoded = decoder.decode(payloads, lambda i: f"landing/a.json:{i + 1}")
    kept = [p for p, error in cases if error is None or "is not a STRING" in error]
    assert decoded.rows.to_pylist() == _json_rows(kept)
    notes = {r["id"]: r["note"] for r in decoded.rows.to_pylist()}
    assert [notes[k] for k in "efjk"] == ['{"nested":true}', '["a",1.5]', "[]", "{}"]
    assert decoded.nested_as_text == 5  # e, f, j, k and the key column's object
    refused = [(f"landing/a.json:{i + 1}", e) for i, (_, e) in enumerate(cases) if e and "is not a STRING" not in e]
    assert [(b.source_position, b.error) for b in decoded.bad] == refused  # bad bytes, numbers no double holds
    # the block path (records pyarrow reads at once) hands such a block to the per-record look
    block = [b'{"id": "x%d", "note": "t"}' % i for i in range(600)]
    block[300] = b'{"id": "y", "note": {"a": [1]}}'
    decoded = decoder.decode(block, str)
    assert decoded.rows.num_rows == 600 and decoded.rows["note"][300].as_py() == '{"a":[1]}'
    assert decoded.nested_as_text == 1
    strict = ArrowJsonDecoder(SCHEMA, ["id"], op_mode="upsert").decode(block, str)
    assert strict.rows.num_rows == 599 and [b.source_position for b in strict.bad] == ["300"]
    # every STRING column alike, a key column too
    keyed = decoder.decode([b'{"id": {"a": 1}, "note": ["x"]}'], str)
    assert keyed.rows.to_pylist() == [{"id": '{"a":1}', "note": '["x"]', "n": None}] and keyed.nested_as_text == 2


# -- plain JSON: values read exactly, never repaired ---------------------------------------------

# Written here, each a repair the former Spark SQL JSON decoder (and Spark's JSON reader) made
# that the decoder now refuses (issue 49, item 3): text after the object, a finite number beyond
# FLOAT, a DECIMAL digit beyond the scale, text that is no object for a STRUCT, a struct field
# that does not fit, an object or array in a STRING element or field.
INNER = pa.struct([pa.field("e", pa.float64())])
BUYER = pa.struct([pa.field("x", pa.int32()), pa.field("note", pa.string()), pa.field("inner", INNER)])
EXACT = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("r", pa.float32()),
        pa.field("d", pa.decimal128(6, 2)),
        pa.field("s", BUYER),
        pa.field("tags", pa.list_(pa.string())),
        pa.field("items", pa.list_(pa.struct([pa.field("qty", pa.int32())]))),
    ]
)
_S = "struct<x:int,note:string,inner:struct<e:double>>"
# (payload, the dead letter's error or None for a row; with nested_as_text, its error if it has one)
EXACT_CASES: list[tuple[bytes, str | None, str | None]] = [
    (
        b'{"id": "a", "r": 1.5, "d": "1.500", "s": {"x": 1, "note": "n", "inner": {"e": 2.5}}, '
        b'"tags": ["t", 3], "items": [{"qty": 1}]}',
        None,
        None,
    ),
    (b'{"id": "b", "r": 3.4028235e38, "d": -0.00} \t ', None, None),  # the largest FLOAT; JSON space after
    (
        b'{"id": "c", "s": {"x": 2, "zz": 1, "inner": {"e": 1, "yy": null}}, "items": [{"qty": 3, "note": "n"}]}',
        None,
        None,
    ),
    (b'{"id": "d", "r": "Infinity", "s": "{\\"x\\": 5}"}', None, None),  # the text Infinity; JSON text into a STRUCT
    (b'{"id": "e"} garbage', "malformed JSON: text after the object, at character 12", ...),
    (b' {"id": "f"}{"id": "g"}', "malformed JSON: text after the object, at character 12", ...),
    (b'{"id": "h", "r": 1e39}', "column r: '1.0E39' is out of FLOAT range", ...),
    (b'{"id": "i", "r": "-1e39"}', "column r: '-1e39' is out of FLOAT range", ...),
    (b'{"id": "j", "d": 2.345}', "column d: '2.345' is not a DECIMAL(6,2)", ...),
    (b'{"id": "k", "d": "12345.6"}', "column d: '12345.6' is not a DECIMAL(6,2)", ...),  # beyond the precision
    (b'{"id": "l", "s": "x"}', f"column s: 'x' is not a {_S}", ...),
    (b'{"id": "m", "s": [{"x": 1}]}', f"column s: '[{{\"x\":1}}]' is not a {_S}", ...),
    (b'{"id": "n", "s": {"x": "abc"}}', "column s.x: 'abc' is not an INT", ...),
    (b'{"id": "o", "s": {"inner": {"e": "x"}}}', "column s.inner.e: 'x' is not a DOUBLE", ...),
    (b'{"id": "p", "s": {"note": {"a": 1}}}', "column s.note: object '{\"a\":1}' is not a STRING", None),
    (b'{"id": "q", "tags": ["t", ["u"]]}', "column tags[1]: array '[\"u\"]' is not a STRING", None),
    (b'{"id": "r", "items": [{"qty": 1}, {"qty": 1.5}]}', "column items[1].qty: '1.5' is not an INT", ...),
    (b'{"id": "s", "s": {"x": 1, "zz": 2, "note": [1]}}', "column s.note: array '[1]' is not a STRING", None),
    (b'{"id": "u", "tags": ["t", -1e400]}', "column tags[1]: number '-1E+400' is beyond a double: not a STRING", ...),
]


def _jackson(v: Any) -> Any:
    """A JSON value in a STRING element or field: text as it is, else its compact JSON text."""
    return v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))


def _exact_rows(payloads: list[bytes]) -> list[dict[str, Any]]:
    """The model: each payload's values in EXACT's columns (keys no field has left out)."""
    rows = []
    for p in payloads:
        record = json.loads(p)
        r, d, s, tags, items = (record.get(c) for c in ("r", "d", "s", "tags", "items"))
        if isinstance(s, str):
            s = json.loads(s)
        rows.append(
            {
                "id": record["id"],
                "r": None if r is None else float(np.float32(float(r))),
                "d": None if d is None else Decimal(str(d)).quantize(Decimal("0.01")),
                "s": None
                if s is None
                else {
                    "x": s.get("x"),
                    "note": None if s.get("note") is None else _jackson(s["note"]),
                    "inner": None if s.get("inner") is None else {"e": s["inner"].get("e")},
                },
                "tags": None if tags is None else [_jackson(t) if not isinstance(t, int) else str(t) for t in tags],
                "items": None if items is None else [{"qty": i.get("qty")} for i in items],
            }
        )
    return rows


@pytest.mark.parametrize("nested_as_text", [False, True])
def test_json_values_are_read_exactly_or_are_dead_letters_naming_the_part(nested_as_text: bool) -> None:
    decoder = ArrowJsonDecoder(EXACT, ["id"], nested_as_text=nested_as_text)
    errors = [(p, as_text if nested_as_text and as_text is not ... else error) for p, error, as_text in EXACT_CASES]
    payloads = [p for p, _ in errors]
    decoded = decoder.decode(payloads, lambda i: f"landing/b.json:{i + 1}")
    assert decoded.rows.to_pylist() == _exact_rows([p for p, e in errors if e is None])
    expected = [(f"landing/b.json:{i + 1}", e) for i, (_, e) in enumerate(errors) if e is not None]
    assert [(b.source_position, b.error) for b in decoded.bad] == expected
    # JSON kept as text: counted per value (p's object, q's array, s's array); a bad record's not
    assert decoded.nested_as_text == (3 if nested_as_text else 0)
    # a delete's other values go unread: no dead letter, no JSON kept as text, none counted
    delete = decoder.decode([b'{"id": "t", "_op": "delete", "s": {"x": "abc", "note": {}}, "tags": [[1]]}'], str)
    assert delete.rows.to_pylist() == [dict.fromkeys(EXACT.names) | {"id": "t"}]
    assert delete.ops().to_pylist() == ["DELETE"] and not delete.bad and delete.nested_as_text == 0
    # keys no struct field has: skipped, counted by their place, a bad record's not
    unknown = {"s.zz": 1 + nested_as_text, "s.inner.yy": 1, "items.element.note": 1}
    assert decoded.unknown_fields == unknown
    # the Spark path's tasks (decode/json/tasks.py) list the same keys per good row, which the batch counts
    output = pa.schema(
        [
            *[pa.field(f.name, f.type) for f in EXACT],
            pa.field(OP_COLUMN, pa.string()),
            pa.field(ERROR, pa.string()),
            pa.field(PAYLOAD, pa.string()),
            pa.field(POSITION, pa.string()),
            pa.field(UNKNOWN, pa.list_(pa.string())),
            pa.field(UNKNOWN_PAYLOAD, pa.string()),
        ]
    )
    batch = JsonTask(decoder, "value", (), (), output).decode(pa.record_batch([pa.array(payloads)], names=["value"]))
    listed = [k for keys in batch.column(UNKNOWN).to_pylist() if keys for k in keys]
    assert {k: listed.count(k) for k in listed} == unknown
    assert [e for e in batch.column(ERROR).to_pylist() if e is not None] == [e for _, e in expected]


def test_json_text_after_the_object_and_numbers_beyond_float_leave_the_block_read() -> None:
    """The block read (one pyarrow read of many records) gives up on such a record, and the
    record-by-record look makes it the dead letter it makes of it alone; the others are rows."""
    schema = pa.schema([pa.field("id", pa.string(), nullable=False), pa.field("r", pa.float32())])
    decoder = ArrowJsonDecoder(schema, ["id"])
    block = [b'{"id": "x%d", "r": %d.5}' % (i, i) for i in range(600)]
    assert decoder._read_block(b"\n".join(block), len(block)) is not None
    bad = {
        100: (b'{"id": "y", "r": 1e39}', "column r: '1.0E39' is out of FLOAT range"),
        200: (b'{"id": "y", "r": -3.5e38}', "column r: '-3.5E38' is out of FLOAT range"),
        300: (b'{"id": "y"} x', "malformed JSON: text after the object, at character 12"),
        400: (b'{"id": "y"} {"id": "z"}', "malformed JSON: text after the object, at character 12"),
    }
    for i, (payload, _) in bad.items():
        one = [*block[:i], payload, *block[i + 1 :]]
        assert decoder._read_block(b"\n".join(one), len(one)) is None, payload
        block[i] = payload
    decoded = decoder.decode(block, str)
    assert [(b.source_position, b.error) for b in decoded.bad] == [(str(i), e) for i, (_, e) in bad.items()]
    kept = [i for i in range(600) if i not in bad]
    assert decoded.rows.to_pylist() == [{"id": f"x{i}", "r": i + 0.5} for i in kept]


@pytest.mark.parametrize("column_type", [pa.float32(), pa.float64()])
def test_json_numbers_beyond_a_double_are_dead_letters_and_infinity_stays_a_value(column_type: pa.DataType) -> None:
    """A finite number beyond a double (as a number, as numeric text, as an integer) is no
    infinity (issue 49): a dead letter naming the column, in FLOAT and DOUBLE alike, in a block
    read by pyarrow (which reads a long integer as infinity) or record by record. The literal and
    the text Infinity, and NaN, keep their meaning."""
    schema = pa.schema([pa.field("id", pa.string(), nullable=False), pa.field("r", column_type)])
    decoder = ArrowJsonDecoder(schema, ["id"])
    shown = "FLOAT" if column_type == pa.float32() else "DOUBLE"
    long_number = "1" + "0" * (RAW_MESSAGE_CHARS - 1)  # as much of it as an error quotes
    block = [b'{"id": "x%d", "r": %d.5}' % (i, i) for i in range(300)]
    bad = {
        50: (b'{"id": "y", "r": -1e400}', f"column r: '-1e400' is out of {shown} range"),
        100: (b'{"id": "y", "r": "1e400"}', f"column r: '1e400' is out of {shown} range"),
        150: (b'{"id": "y", "r": 1%s}' % (b"0" * 400), f"column r: '{long_number}...' is out of {shown} range"),
        200: (b'{"id": "y", "r": " 2E+999 "}', f"column r: ' 2E+999 ' is out of {shown} range"),
    }
    values = {
        250: (b'{"id": "z", "r": Infinity}', float("inf")),
        251: (b'{"id": "z", "r": -Infinity}', float("-inf")),
        252: (b'{"id": "z", "r": "Infinity"}', float("inf")),
        253: (b'{"id": "z", "r": "-inf"}', float("-inf")),
    }
    for i, (payload, _) in bad.items():
        block[i] = payload
    for i, (payload, _) in values.items():
        block[i] = payload
    decoded = decoder.decode(block, str)
    assert [(b.source_position, b.error) for b in decoded.bad] == [(str(i), e) for i, (_, e) in bad.items()]
    expected = [values[i][1] if i in values else i + 0.5 for i in range(300) if i not in bad]
    assert decoded.rows["r"].to_pylist() == expected
    for i, (payload, error) in bad.items():  # alone, too
        alone = decoder.decode([payload], str)
        assert [b.error for b in alone.bad] == [error] and alone.rows.num_rows == 0, i


# -- Debezium ------------------------------------------------------------------------------------

PRODUCTS = T.StructType(
    [
        T.StructField("id", T.IntegerType(), False),
        T.StructField("name", T.StringType()),
        T.StructField("description", T.StringType()),
        T.StructField("weight", T.DoubleType()),
    ]
)


def _declare(message: dict[str, Any], field: str, connect_type: str) -> None:
    for part in message["schema"]["fields"]:
        if part["field"] in ("before", "after"):
            for f in part["fields"]:
                if f["field"] == field:
                    f["type"] = connect_type


def _mutations(update: dict[str, Any]) -> list[tuple[bytes, str]]:
    """Mutated copies of a real update and the error each must be a dead letter with."""
    out: list[tuple[bytes, str]] = []
    declared = copy.deepcopy(update)
    _declare(declared, "name", "int32")
    error = "column name: text 'hammer' where the message's schema declares int32"
    out.append((json.dumps(declared).encode(), error))
    nested = copy.deepcopy(update)
    nested["payload"]["after"]["description"] = {"nested": True}
    error = "column description: object '{\"nested\":true}' where the message's schema declares string"
    out.append((json.dumps(nested).encode(), error))
    texts = copy.deepcopy(update)
    texts["payload"]["after"]["weight"] = "1.5"
    out.append((json.dumps(texts).encode(), "column weight: text '1.5' where the message's schema declares double"))
    numbers = copy.deepcopy(update)
    numbers["payload"]["after"]["name"] = 42
    out.append((json.dumps(numbers).encode(), "column name: number '42' where the message's schema declares string"))
    key = copy.deepcopy(update)
    key["payload"]["after"]["id"] = str(key["payload"]["after"]["id"])
    key["payload"]["before"]["id"] = str(key["payload"]["before"]["id"])
    out.append((json.dumps(key).encode(), "column id: text '106' where the message's schema declares int32"))
    for sent, quoted in ((b"-1e400", "-1E+400"), (b"1" + b"0" * 400, "1" + "0" * (RAW_MESSAGE_CHARS - 1) + "...")):
        beyond = copy.deepcopy(update)
        beyond["payload"]["after"]["weight"] = 123456.789  # a finite number beyond a double: no infinity
        error = f"column weight: '{quoted}' is out of DOUBLE range"
        out.append((json.dumps(beyond).encode().replace(b"123456.789", sent), error))
    text = json.dumps(update).encode()
    after = text.index(b'"after"', text.index(b'"payload"'))
    bad_value = text[:after] + text[after:].replace(b'"hammer"', b'"ham\xffmer"', 1)
    at = bad_value.index(b"\xff")
    out.append((bad_value, f"payload is not valid UTF-8 at byte {at}, in field payload.after.name"))
    bad_name = text[:after] + text[after:].replace(b'"weight"', b'"wei\xc3ght"', 1)
    at = bad_name.index(b"\xc3")
    error = f"payload is not valid UTF-8 at byte {at}, in the name of field payload.after.wei\ufffdght"
    out.append((bad_name, error))
    return out


def test_debezium_values_against_their_declared_types_and_bad_bytes_are_dead_letters() -> None:
    stream = messages("flink_mysql_products_schema")
    update = next(m for m in stream if m["payload"]["op"] == "u")
    values: list[bytes] = []
    expected_dead: dict[int, list[str]] = {}
    model: dict[int, tuple[Any, ...]] = {}
    mutations = _mutations(update)
    for message in stream:
        values.append(json.dumps(message).encode())
        apply_changes(model, message["payload"])
        if mutations:  # one after each message, while there are any
            value, error = mutations.pop(0)
            expected_dead[len(values)] = [error]
            values.append(value)
    assert not mutations
    rows, dead = python_changes(values, PRODUCTS, ["id"])
    assert dead == expected_dead
    # the table: the model's rows, each key's last change (the stream changes one key at a time)
    table: dict[int, tuple[Any, ...]] = {}
    for (op, _order), row in sorted(rows.items(), key=lambda kv: kv[0][1]):
        if op == "DELETE":
            table.pop(row[0], None)
        else:
            table[row[0]] = row[1:]
    assert table == {k: (name, description, repr(weight)) for k, (name, description, weight) in model.items()}


def test_a_table_from_the_stream_never_takes_its_columns_from_bytes_that_are_not_utf8() -> None:
    """The first message with a schema and a key makes the table; one whose value or Kafka message
    key has bytes that are not UTF-8 (a field name with byte FF here) is passed over, not read with
    U+FFFD as a column name."""
    from icetide.pipeline.table_from_stream import definition_from_messages

    stream = messages("flink_mysql_products_schema")
    key = json.dumps(
        {"schema": {"type": "struct", "fields": [{"type": "int32", "field": "id"}]}, "payload": {"id": 101}}
    ).encode()
    good = json.dumps(stream[0]).encode()
    bad = good.replace(b'"field": "description"', b'"field": "descr\xffiption"', 1)
    assert bad != good
    found = definition_from_messages([(key, bad), (key, good)])
    assert found is not None
    envelope, columns = found
    assert envelope.names == ["id", "name", "description", "weight"] and columns == ["id"]
    assert definition_from_messages([(key, bad)]) is None
    # the message key names the key columns: a key whose bytes are not UTF-8 is passed over too
    bad_key = key.replace(b'"field": "id"', b'"field": "i\xffd"', 1)
    assert bad_key != key
    assert definition_from_messages([(bad_key, good)]) is None
    assert definition_from_messages([(bad_key, good), (key, good)]) == found


# -- Avro ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def registry() -> Any:
    server = SchemaRegistryServer().start()
    yield server
    server.stop()


def _patched(record: bytes, text: bytes, bad: bytes) -> tuple[bytes, int]:
    """`record` with the string bytes `text` (found once) replaced by `bad` (as long: the
    string's length stays right), and the offset of the first byte that is not UTF-8."""
    assert record.count(text) == 1 and len(bad) == len(text)
    patched = record.replace(text, bad)
    at = next(i for i in range(len(patched)) if patched[i] != record[i])
    return patched, at


def test_avro_strings_that_are_not_utf8_are_dead_letters_naming_the_field(registry: SchemaRegistryServer) -> None:
    """Avro strings are UTF-8 by the spec: a record whose string bytes are not is one dead letter
    naming the byte and the field, on the Spark path's read (the record's bytes kept, base64) and
    on the fast path's (which hands such a batch to the Spark path), never a row with U+FFFD. The
    columnar read of a run refuses the run, which is then read record by record."""
    serialize = serializer(registry.url, FLINK_SCHEMA.read_text())
    events = flink_events()
    good = [serialize(e) for e in events]
    in_after, at_after = _patched(good[0], b"lisi", b"li\xffi")
    in_source, at_source = _patched(good[1], b"test1", b"tes\xc3\x28")  # source.db: a cut-short sequence
    values = [good[0], in_after, good[1], in_source, good[2]]
    expected = {
        1: f"avro: a string is not valid UTF-8 at byte {at_after} of the record, in field after.name",
        3: f"avro: a string is not valid UTF-8 at byte {at_source} of the record, in field source.db",
    }
    assert values[1][at_after] == 0xFF and values[3][at_source : at_source + 2] == b"\xc3\x28"

    reader = avro_messages(registry.url)
    _, transcoded, errors = reader.transcode_block([None] * len(values), values)
    assert {i: e for i, e in enumerate(errors) if e is not None} == expected
    for i in expected:
        assert transcoded[i] == base64.b64encode(values[i])  # the dead letter keeps the record's bytes
        with pytest.raises(NotHere) as refused:
            reader.envelope(None, values[i])
        assert str(refused.value) == expected[i]

    # the good records: the model's rows (Flink's expected output), through the fast path's read
    schema = pa.schema(
        [("id", pa.int64()), ("name", pa.string()), ("description", pa.string()), ("weight", pa.float64())]
    )
    rows = table_rows(schema, ["id"])
    for offset, value in enumerate(values):
        if offset not in expected:
            envelope = reader.envelope(None, value)
            assert envelope is not None
            rows.add(envelope, str(offset), evolving=False)
    got = [(r["_op"], r["id"], r["name"]) for r in rows.table().to_pylist()]
    assert got == [("UPSERT", 1, "lisi"), ("UPSERT", 1, "zhangsan"), ("DELETE", 1, "zhangsan")]

    compiled = reader.compiled(int.from_bytes(good[0][1:HEADER_BYTES], "big"))
    # the columnar reader (DuckDB, a dependency of the project) reads the good run, refuses the bad one
    records = run_reader().decode(compiled.writer, [memoryview(v)[HEADER_BYTES:] for v in good])
    assert [r["after"]["name"] if r["after"] else None for r in records.to_pylist()] == ["lisi", "zhangsan", None]
    with pytest.raises(NotColumnar):
        run_reader().decode(compiled.writer, [memoryview(v)[HEADER_BYTES:] for v in values])


def test_avro_keys_map_keys_and_values_against_their_types_are_dead_letters(registry: SchemaRegistryServer) -> None:
    """`format: avro` reads a tombstone's Avro key as the delete of its row: a key whose string
    bytes are not UTF-8 is one dead letter naming the byte and the field, never a delete of a key
    with U+FFFD. An Avro map's keys are strings in the record's bytes (its field names are in the
    schema, not in the record): one that is not UTF-8 is a dead letter naming the map's key. Both
    reads are checked: the Spark path's (`transcode_block`, the record's bytes kept) and the fast
    path's (`envelope`, which hands the batch to the Spark path). A value its Avro type holds but
    its Connect name (a ZonedTimestamp that is no time, or finer than a microsecond) or the
    table's column (a long beyond INT) contradicts is a dead letter naming the column. The good
    records' rows equal the model."""
    key_schema = {"type": "record", "name": "Key", "fields": [{"name": "sku", "type": "string"}]}
    zoned = {"type": "string", "connect.name": "io.debezium.time.ZonedTimestamp"}
    value_schema = {
        "type": "record",
        "name": "Row",
        "fields": [
            {"name": "sku", "type": "string"},
            {"name": "qty", "type": "long"},
            {"name": "seen", "type": ["null", zoned]},
            {"name": "attrs", "type": {"type": "map", "values": "int"}},
        ],
    }
    topic = "db.inv.stock"
    key_of, value_of = serializer(registry.url, key_schema), serializer(registry.url, value_schema)
    seen = "2020-07-17T18:00:22Z"
    rows_sent = [
        ("ab1", 1, seen),
        ("ab2", 2, None),
        ("ab3", 3, seen),
        ("ab4", 4, "yesterday"),
        ("ab5", 2**40, seen),
        ("ab6", 6, "2020-07-17T18:00:22.1234567Z"),
    ]
    values = [value_of({"sku": s, "qty": n, "seen": t, "attrs": {"colorQ": n % 7}}, topic) for s, n, t in rows_sent]
    in_map, at_map = _patched(values[2], b"colorQ", b"colo\xf0Q")  # a cut-short four-byte sequence
    in_key, at_key = _patched(key_of({"sku": "abZ"}, topic, key=True), b"abZ", b"a\xffZ")
    records: list[tuple[bytes, bytes | None]] = [
        *[(key_of({"sku": s}, topic, key=True), v) for (s, _, _), v in zip(rows_sent, values, strict=True)],
        (key_of({"sku": "ab1"}, topic, key=True), None),  # a tombstone: ab1 deleted
        (in_key, None),
    ]
    records[2] = (records[2][0], in_map)
    refused = {  # by the read, on both paths
        2: f"avro: a string is not valid UTF-8 at byte {at_map} of the record, in the name of field attrs.colo\ufffdQ",
        7: f"avro: a string is not valid UTF-8 at byte {at_key} of the record, in field sku (the key of a tombstone)",
    }
    reader = avro_messages(registry.url, envelope=False)
    _, transcoded, errors = reader.transcode_block([k for k, _ in records], [v for _, v in records])
    assert {i: e for i, e in enumerate(errors) if e is not None} == refused
    assert transcoded[2] == base64.b64encode(in_map) and transcoded[7] == base64.b64encode(in_key)
    for i in refused:
        with pytest.raises(NotHere) as raised:
            reader.envelope(*records[i])
        assert str(raised.value) == refused[i]
    # by the Debezium conversions every path shares
    contradicted = {
        3: "column seen: 'yesterday' is not a TIMESTAMP",
        4: "column qty: '1099511627776' is not an INT",
        5: "column seen: '2020-07-17T18:00:22.1234567Z' is not a TIMESTAMP: its digits beyond the microsecond would"
        " be dropped",
    }
    schema = pa.schema(
        [
            ("sku", pa.string()),
            ("qty", pa.int32()),
            ("seen", pa.timestamp("us", tz="UTC")),
            ("attrs", pa.map_(pa.string(), pa.int32())),
        ]
    )
    rows = table_rows(schema, ["sku"])
    dead: dict[int, str] = {}
    for offset, (key, value) in enumerate(records):
        if offset not in refused:
            envelope = reader.envelope(key, value)
            assert envelope is not None
            for error in rows.add(envelope, str(offset), evolving=False):
                dead[offset] = error
    assert dead == contradicted
    when = datetime(2020, 7, 17, 18, 0, 22, tzinfo=UTC)
    got = [(r["_op"], r["sku"], r["qty"], r["seen"], r["attrs"]) for r in rows.table().to_pylist()]
    assert got == [
        ("UPSERT", "ab1", 1, when, [("colorQ", 1)]),
        ("UPSERT", "ab2", 2, None, [("colorQ", 2)]),
        ("DELETE", "ab1", None, None, None),
    ]
