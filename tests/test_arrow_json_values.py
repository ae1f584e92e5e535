"""The pyarrow JSON decoder's DECIMAL, BINARY and ARRAY values and its op modes, against what the
Spark SQL JSON decoder gave on the same payloads (the rules of decode/spark_compat/json_values.py were
measured so), frozen in tests/golden/json/arrow_json_values.json: the pyarrow decoder alone and
`decode_json` in Spark's tasks (decode/json/tasks.py) must both give it."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from icetide.decode.json.records import ArrowJsonDecoder, DecodedBlock
from icetide.decode.json.scalars import undecodable_columns, unsupported_columns
from icetide.decode.json.tasks import decode_json
from icetide.decode.spark_compat.json_values import java_double_text
from icetide.errors import ConfigError
from tests.frozen import PYTHON_JSON, frozen
from tests.test_debezium_arrow import KAFKA_POSITION, kafka_frame

GOLDEN = "json/arrow_json_values.json"
_TYPES = {
    "d": "decimal(10,2)",
    "b": "binary",
    "s": "array<string>",
    "i": "array<int>",
    "l": "array<bigint>",
    "o": "array<boolean>",
    "m": "array<decimal(5,2)>",
}
# column -> JSON texts of its value (Spark fails the batch on none of them)
VALUES: dict[str, list[str]] = {
    "d": [
        *("1.5", '"2.345"', '"2.355"', "-2.345", "2.344999", '" 1.5 "', '"\\t1.5\\n"', '"+1.5"', '".5"', '"5."'),
        *('"1e2"', "1e2", "1E-2", '"1,5"', '"abc"', '"NaN"', '"Infinity"', "1e400", "12345678.995", "99999999.99"),
        *("99999999.995", "100000000", "123456789012.5", "true", "[1]", '{"a":1}', '""', "0.000001", "1.0E7"),
        *('"1d"', '"0x10"', '"\\uff11"', '"\\u00a01.5"', "-0.0", '"-0.005"', '"1_000"', '"1e-400"', '"1e400"'),
        *("12345678901234567890123456789012345678901234", "123.456e1", '"1e99999999999"'),
    ],
    "b": [
        *('"aGk="', '"aGk"', '"aG"', '"a"', '"aGk=\\n"', '" aGk= "', '"aG k="', '"aGk=="', '"aGk=aGk="', '"-_-_"'),
        *('"+/+/"', '""', '"!!"', "12", "true", "[1]", '"YR=="', '"YQ="', '"Y Q = ="', '"aGk\\u00a0"', '"aGk\\u3000"'),
        *('"aG =="', '"aG= ="', '"aGlha"', '"aGk\\t"', '"aGk\\u0000"', '"   "', '"a b c d"', "1.5", '"=="', '"a==="'),
    ],
    "s": [
        *('["x", "y"]', "[]", "[null]", "[1, 2.5, true]", '[[1], {"a": 1}]', '"solo"', '"[\\"a\\"]"', '{"a": 1}'),
        *("1", "[1e400]", "[123456789012.5]", '""', '" [1] "', '"[1] x"', '"null"', '["a\\nb", "\\u0001"]'),
        *('[{"b": 2, "a": [1.0, 1e7, 0.0001]}]', "[-0.0, 1E2, 12e-1, 100000000000000000000000]", '"[1e400]"'),
        *('"[01]"', "[NaN]", '"[,]"', '"[1]]"', '"  "'),
    ],
    "i": [
        *("[1, 2]", '["1"]', "[1.5]", "[1.0]", "[99999999999]", "[null, 1]", "[true]", '"[1,2]"', "[1e2]"),
        *("[-2147483648]", "[2147483648]", '"[ 1 , 2 ]"', "[-0]"),
    ],
    "l": ["[1, 2]", '["1"]', "[9223372036854775807]", "[9223372036854775808]", "[1.5]"],
    "o": ["[true, false]", '["true"]', "[1]", "[false, null]", '"[true]"'],
    "m": [
        *("[1.5, 2.345]", '["1.5"]', "[1234.5]", "[1]", "[1e2]", "[true]", '[" 1.5"]', '["1,5"]', '["abc"]'),
        *('["1e2"]', "[-999.995]", "[999.994]", "[null]", '[""]', "[123456789012.5]", '["\\uff11"]'),
    ],
}


def _spark_table() -> T.StructType:
    return T.StructType(
        [T.StructField("id", T.LongType(), nullable=False)]
        + [T.StructField(c, T._parse_datatype_string(ddl)) for c, ddl in _TYPES.items()]
    )


def _arrow_type(ddl: str) -> pa.DataType:
    if ddl.startswith("array<"):
        return pa.list_(_arrow_type(ddl[len("array<") : -1]))
    if ddl.startswith("decimal("):
        precision, scale = ddl[len("decimal(") : -1].split(",")
        return pa.decimal128(int(precision), int(scale))
    return {"string": pa.string(), "int": pa.int32(), "bigint": pa.int64(), "boolean": pa.bool_()}.get(ddl, pa.binary())


_ARROW_TABLE = pa.schema(
    [pa.field("id", pa.int64(), nullable=False)] + [pa.field(c, _arrow_type(ddl)) for c, ddl in _TYPES.items()]
)


def _plain(v: Any) -> Any:
    if isinstance(v, bytearray | bytes):
        return bytes(v)
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def _tasks_output(spark: Any, payloads: list[bytes], schema: T.StructType, key: list[str], op_mode: str) -> Any:
    good, bad = decode_json(kafka_frame(spark, payloads), "value", schema, key, op_mode, KAFKA_POSITION)  # type: ignore[arg-type]
    rows = sorted((r[key[0]], {n: _plain(r[n]) for n in [*schema.names, "_op"]}) for r in good.collect())
    errors = {int(r["source_position"].rpartition("@")[2]): r["error"] for r in bad.collect()}
    return [row for _, row in rows], errors


def _python_output(decoded: DecodedBlock, key: str) -> Any:
    rows = sorted((r[key], {n: _plain(v) for n, v in r.items()}) for r in decoded.with_ops().to_pylist())
    errors = {int(b.source_position.rpartition("@")[2]): b.error for b in decoded.bad}
    return [row for _, row in rows], errors


def test_decimal_binary_and_array_values_as_the_golden_file(spark: Any) -> None:
    payloads = [
        f'{{"id": {i}, "{column}": {text}}}'.encode()
        for i, (column, text) in enumerate((c, t) for c, texts in VALUES.items() for t in texts)
    ]
    decoder = ArrowJsonDecoder(_ARROW_TABLE, ["id"])
    got = _python_output(decoder.decode(payloads, lambda i: f"cdc/0@{i}"), "id")
    frozen(GOLDEN, "decimal, binary and array values", got, decoder=PYTHON_JSON)
    tasks = _tasks_output(spark, payloads, _spark_table(), ["id"], "append")
    frozen(GOLDEN, "decimal, binary and array values", tasks, decoder=PYTHON_JSON)
    good, errors = got  # the cases cover both outcomes of every column
    assert len(good) > 50 and len(errors) > 50


def test_the_new_types_decode_record_by_record() -> None:
    """The append fast path's block reading takes none of DECIMAL, BINARY, ARRAY (nor STRUCT,
    MAP: tests/test_arrow_json_nested.py): a table with one decodes record by record."""
    for t in (pa.list_(pa.float64()), pa.list_(pa.date32()), pa.list_(pa.list_(pa.int32())), pa.list_(pa.int16())):
        schema = pa.schema([pa.field("id", pa.int64()), pa.field("v", t)])
        assert undecodable_columns(schema) == []
        assert unsupported_columns(schema) == [f"v {t}"]
    assert unsupported_columns(_ARROW_TABLE) == [f"{f.name} {f.type}" for f in _ARROW_TABLE if f.name != "id"]
    assert undecodable_columns(_ARROW_TABLE) == []


_OPS_TABLE = T.StructType(
    [
        T.StructField("id", T.LongType(), nullable=False),
        T.StructField("n", T.StringType(), nullable=False),
        T.StructField("u", T.IntegerType()),
    ]
)
_OPS_ARROW = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), pa.field("n", pa.string(), nullable=False), pa.field("u", pa.int32())]
)
# Records that decode in one pyarrow read (valid ops, all fitting) ...
GOOD_OPS = [
    {"id": 1, "n": "a"},
    {"id": 2, "n": "b", "_op": " delete "},
    {"id": 3, "n": "c", "_op": "Upsert", "u": 3},
    {"id": 4, "n": "d", "_op": "insert"},
    {"id": 5, "n": "e", "_op": None},
]
# ... and records that need the record-by-record look.
OTHER_OPS = [
    *('"\\tdelete"', '"\\u00a0insert"', '"\\ndelete"', "5", "1.5e7", "true", '["x"]', '{"a": 1.0}', '""'),
    *('"\\u0131nsert"', "null"),
]


@pytest.mark.parametrize("op_mode", ["append", "upsert"])
def test_ops_as_the_golden_file(spark: Any, op_mode: str) -> None:
    block = [json.dumps(r).encode() for r in GOOD_OPS]
    others = [f'{{"id": {10 + i}, "n": "x", "_op": {op}}}'.encode() for i, op in enumerate(OTHER_OPS)]
    deletes = [
        b'{"id": 30, "_op": "delete", "u": "abc", "n": null}',  # a delete's other values go unread
        b'{"id": 31, "_op": "DELETE", "u": 5, "n": "x"}',
        b'{"id": 32, "_op": "delete", "u": "abc"}',
    ]
    decoder = ArrowJsonDecoder(_OPS_ARROW, ["id"], op_mode=op_mode)  # type: ignore[arg-type]
    batches = {"valid ops": block, "and deletes": block + deletes, "and other ops": block + others + deletes}
    for name, payloads in batches.items():
        decoded = decoder.decode(payloads, lambda i: f"cdc/0@{i}")
        rows, _ = frozen(GOLDEN, f"{op_mode}: {name}", _python_output(decoded, "id"), decoder=PYTHON_JSON)
        tasks = _tasks_output(spark, payloads, _OPS_TABLE, ["id"], op_mode)
        frozen(GOLDEN, f"{op_mode}: {name}", tasks, decoder=PYTHON_JSON)
        assert decoded.changes == any(row["_op"] != "INSERT" for row in rows)
    # the first block is read in one pyarrow read, not record by record
    fast = decoder._read_block(b"\n".join(block), len(block))
    assert fast is not None and fast.with_ops() == decoder._per_record(block, str).with_ops()


def test_append_mode_keeps_the_rows_and_the_changes_flag() -> None:
    decoder = ArrowJsonDecoder(_OPS_ARROW, ["id"])
    plain = decoder.decode([b'{"id": 1, "n": "a"}', b'{"id": 2, "n": "b", "_op": "INSERT"}'], str)
    assert plain.rows.schema == _OPS_ARROW and not plain.changes
    assert plain.ops().to_pylist() == ["INSERT", "INSERT"]
    delete = decoder.decode([b'{"id": 1, "n": "a"}', b'{"id": 2, "_op": "delete"}'], str)
    assert delete.changes and delete.ops().to_pylist() == ["INSERT", "DELETE"]
    upsert = ArrowJsonDecoder(_OPS_ARROW, ["id"], op_mode="upsert").decode([b'{"id": 1, "n": "a"}'], str)
    assert upsert.changes and upsert.ops().to_pylist() == ["UPSERT"]
    assert upsert.with_ops().column_names == ["id", "n", "u", "_op"]
    with pytest.raises(ConfigError, match="op_mode 'merge'"):
        ArrowJsonDecoder(_OPS_ARROW, ["id"], op_mode="merge")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("x", "text"),
    [
        (1.5, "1.5"),
        (100.0, "100.0"),
        (0.001, "0.001"),
        (0.0001, "1.0E-4"),
        (9999999.0, "9999999.0"),
        (1e7, "1.0E7"),
        (123456789012.5, "1.234567890125E11"),
        (-2.5e-10, "-2.5E-10"),
        (-0.0, "-0.0"),
        (0.0, "0.0"),
        (1e300, "1.0E300"),
        (float("inf"), "Infinity"),
    ],
)
def test_doubles_are_written_as_java_writes_them(x: float, text: str) -> None:
    assert java_double_text(x) == text


def test_decimals_are_read_exactly_and_never_as_negative_zero() -> None:
    """A DECIMAL takes no digit beyond its scale but zeros (issue 49: Spark rounds half up), nor
    a number its precision cannot hold; a negative zero is zero."""
    decoder = ArrowJsonDecoder(pa.schema([pa.field("id", pa.int64()), pa.field("d", pa.decimal128(4, 1))]), ["id"])
    payloads = [b'{"id": 1, "d": "-0.00"}', b'{"id": 2, "d": -12.300}', b'{"id": 3, "d": "999.95"}']
    payloads += [b'{"id": 4, "d": -0.05}', b'{"id": 5, "d": "1.0001"}', b'{"id": 6, "d": 999.9}']
    decoded = decoder.decode(payloads, str)
    assert decoded.rows["d"].to_pylist() == [Decimal("0.0"), Decimal("-12.3"), Decimal("999.9")]
    assert str(decoded.rows["d"][0].as_py()) == "0.0"
    assert [b.error for b in decoded.bad] == [
        "column d: '999.95' is not a DECIMAL(4,1)",
        "column d: '-0.05' is not a DECIMAL(4,1)",
        "column d: '1.0001' is not a DECIMAL(4,1)",
    ]


def test_keys_no_column_count_null_values_too_in_a_block_and_record_by_record() -> None:
    """As decode_json counts them: a key the table lacks counts when its value is null, not when
    it is absent or only text mentions it; the block read and the record-by-record look agree."""
    decoder = ArrowJsonDecoder(_OPS_ARROW, ["id"])
    block = [
        b'{"id": 1, "n": "a", "color": null}',
        b'{"id": 2, "n": "b", "color": "red", "size": null}',
        b'{"id": 3, "n": "\\"color\\": null", "note": {"color": null}}',
        b'{"id": 4, "n": "d", "c\\u006flor": null}',
        b'{"id": 5, "n": "e"}',
    ]
    expected = {"color": 3, "size": 1, "note": 1}
    fast = decoder._read_block(b"\n".join(block), len(block))
    assert fast is not None and fast.unknown_fields == expected
    assert decoder._per_record(block, str).unknown_fields == expected


@pytest.mark.parametrize("op_mode", ["append", "upsert"])
def test_a_block_with_bad_records_decodes_as_record_by_record_in_pieces(op_mode: str) -> None:
    """A refused block is decoded in pieces (malformed records alone, the runs between by pyarrow,
    halved where refused): rows, dead letters, ops and counts as the record-by-record look has them."""
    decoder = ArrowJsonDecoder(_OPS_ARROW, ["id"], op_mode=op_mode)  # type: ignore[arg-type]

    def payload(i: int) -> bytes:
        if i % 1500 == 7:
            return b"{not json"
        if i % 2100 == 11:
            return b'{"id": %d, "n": "x", "u": "no"}' % i  # refused by pyarrow's read: halved down
        if i % 900 == 5:
            return b' {"id": %d, "n": "y", "_op": "delete", "extra": null} ' % i
        if i % 1300 == 3:
            return b'{"id": %d, "n": "z", "_op": "upsert"}\n' % i
        return json.dumps({"id": i, "n": "a", "u": i % 100, "color": None if i % 3 else "red"}).encode()

    values = [payload(i) for i in range(10_000)]
    pieces = decoder.decode(values, lambda i: f"cdc/0@{i}")
    whole = decoder._per_record(values, lambda i: f"cdc/0@{i}")
    assert pieces.with_ops() == whole.with_ops() and pieces.bad == whole.bad
    assert pieces.unknown_fields == whole.unknown_fields and pieces.changes == whole.changes
    assert len(pieces.bad) == 7 + 5 and pieces.rows.num_rows == 10_000 - 12
