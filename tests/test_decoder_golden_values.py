"""The value conversions the Python Debezium decoder once left to the Spark SQL decoder (NotHere in
decode/debezium/conversions.py and decode/spark_compat/connect_text.py), frozen as a golden file before that
decoder goes (issue 23, item 3), then read by the Python decoder alone.

tests/golden/debezium_conversions/values_not_here.json was written by the Spark SQL decoder
(decode/debezium.py `decode_debezium`, named in its header) as it stood at 888db84: one batch of
the cases below, one Kafka offset per case from 0, one case per line under a stable id, as
tests/test_decoder_golden_conversions.py writes its files. That decoder is deleted: the file is
the specification, changed by hand only for a change of rule that is meant, said in the commit.

The messages: the real flink-cdc MySQL full_types snapshot message (tests/data/debezium/
flink_cdc_mysql_full_types_schema.jsonl, Debezium 1.5.2; its BINARY(16) `file_uuid`, BIT(64)
`bit_c` and DECIMAL(65,...) `big_decimal_c` are real columns) with its row's values changed per
case, on its real schema plus hand-made fields (`_EXTRA`) for Connect types no message of
tests/data carries in this shape (arrays, maps, a Debezium geometry struct as
paimon_mysql_all_types.jsonl has it, VariableScaleDecimal), and schemaless messages.

Each case must decode, in one batch through `decode_debezium` (decode/debezium/tasks.py) with no
fallback, and alone through the Python decoder, to its golden output, or to its DELIBERATE output
where matching the Spark SQL decoder is not sensible (asserted to differ from the golden one).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pyarrow as pa
from pyspark.sql import Row
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from icetide.decode.debezium.message import EnvelopeReader
from icetide.decode.debezium.rows import Conversions, TableRows, source_order
from icetide.decode.debezium.tasks import decode_debezium
from icetide.decode.limits import PayloadLimits
from tests.debezium_messages import messages
from tests.test_debezium_arrow import spark_rows
from tests.test_decoder_golden_conversions import (
    GOLDEN,
    Case,
    Output,
    by_reason,
    check_python,
    unique,
)
from tests.test_decoder_golden_conversions import _debezium_rows as debezium_rows

PATH = GOLDEN / "debezium_conversions" / "values_not_here.json"
_REAL = messages("flink_cdc_mysql_full_types_schema")[0]
_VSD = "io.debezium.data.VariableScaleDecimal"
_DECIMAL = "org.apache.kafka.connect.data.Decimal"


def _field(name: str, type_: str, logical: str | None = None, **more: Any) -> dict[str, Any]:
    f: dict[str, Any] = {"type": type_, "optional": True, "field": name, **more}
    if logical:
        f.update(name=logical, version=1)
    return f


_VSD_STRUCT = [_field("scale", "int32"), _field("value", "bytes")]
# Hand-made fields beside the real ones (Connect's JSON converter schema shapes).
_EXTRA = [
    _field("arr_i", "array", items={"type": "int32", "optional": True}),
    _field("arr_s", "array", items={"type": "string", "optional": True}),
    _field("map_c", "map", keys={"type": "string", "optional": False}, values={"type": "int32", "optional": True}),
    _field(
        "geo",
        "struct",
        "io.debezium.data.geometry.Geometry",
        fields=[_field("wkb", "bytes"), _field("srid", "int32")],
    ),
    _field("dbl_dec", "double"),
    _field("str_dec", "string"),
    _field("var_dec", "struct", _VSD, fields=_VSD_STRUCT),
    _field("var_s", "struct", _VSD, fields=_VSD_STRUCT),
    _field("dec_dbl", "bytes", _DECIMAL, parameters={"scale": "2", "connect.decimal.precision": "10"}),
    _field("dec_int", "bytes", _DECIMAL, parameters={"scale": "2", "connect.decimal.precision": "10"}),
    _field("time_d", "int64", "io.debezium.time.MicroTime"),
    _field("ntz_ms", "int64", "io.debezium.time.Timestamp"),
    _field("ntz_micro", "int64", "io.debezium.time.MicroTimestamp"),
    _field("ntz_nano", "int64", "io.debezium.time.NanoTimestamp"),
    _field("ntz_zoned", "string", "io.debezium.time.ZonedTimestamp"),
]
TABLE = T.StructType(
    [
        T.StructField("int_c", T.IntegerType(), nullable=False),
        T.StructField("file_uuid", T.BinaryType()),
        T.StructField("bit_c", T.BinaryType()),
        T.StructField("big_decimal_c", T.StringType()),
        T.StructField("decimal_c", T.DecimalType(8, 4)),
        T.StructField("varchar_c", T.StringType()),
        T.StructField("tiny_c", T.IntegerType()),
        T.StructField("double_c", T.DoubleType()),
        T.StructField("real_c", T.FloatType()),
        T.StructField("date_c", T.DateType()),
        T.StructField("timestamp_c", T.TimestampType()),
        T.StructField("datetime6_c", T.TimestampType()),
        T.StructField("arr_i", T.ArrayType(T.IntegerType())),
        T.StructField("arr_s", T.ArrayType(T.StringType())),
        T.StructField("map_c", T.MapType(T.StringType(), T.IntegerType())),
        T.StructField(
            "geo", T.StructType([T.StructField("wkb", T.BinaryType()), T.StructField("srid", T.IntegerType())])
        ),
        T.StructField("dbl_dec", T.DecimalType(10, 2)),
        T.StructField("str_dec", T.DecimalType(10, 2)),
        T.StructField("var_dec", T.DecimalType(38, 10)),
        T.StructField("var_s", T.StringType()),
        T.StructField("dec_dbl", T.DoubleType()),
        T.StructField("dec_int", T.LongType()),
        T.StructField("time_d", T.DoubleType()),
        T.StructField("time_c", T.StringType()),
        T.StructField("ntz_ms", T.TimestampNTZType()),
        T.StructField("ntz_micro", T.TimestampNTZType()),
        T.StructField("ntz_nano", T.TimestampNTZType()),
        T.StructField("ntz_zoned", T.TimestampNTZType()),
    ]
)
KEY = ["int_c"]


def with_schema(row_id: int, **after: Any) -> bytes:
    """The real full_types snapshot message with `after` (and `int_c`) as its row, on its real
    schema plus _EXTRA; its binlog position moved by `row_id`."""
    schema = copy.deepcopy(_REAL["schema"])
    for part in schema["fields"]:
        if part["field"] in ("before", "after"):
            part["fields"] += _EXTRA
    payload = copy.deepcopy(_REAL["payload"])
    payload.update(before=None, after={"int_c": row_id, **after})
    payload["source"]["pos"] += row_id
    return json.dumps({"schema": schema, "payload": payload}, separators=(",", ":"), ensure_ascii=False).encode()


def updated(row_id: int, **before_after: Any) -> bytes:
    """An update of the real message's row: its one column's value goes from before to after."""
    ((column, (before, after)),) = before_after.items()
    message = json.loads(with_schema(row_id, **{column: after}))
    message["payload"].update(op="u", before={"int_c": row_id, column: before})
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()


def schemaless(row_id: int, **after: Any) -> bytes:
    """The same message without its schema (the JSON converter with schemas.enable=false)."""
    return json.dumps(json.loads(with_schema(row_id, **after))["payload"], separators=(",", ":")).encode()


# (message builder, column, value): one case each; its id is "column=value" (schemaless: a "~" first).
VALUES: list[tuple[Any, str, Any]] = [
    # BINARY columns from Connect bytes (BINARY(16), BIT(64) as the real message has them)
    (with_schema, "file_uuid", "ZRrtCDkPSJOy8TaSPnt0AA=="),
    (with_schema, "file_uuid", ""),
    (with_schema, "file_uuid", "ZRrt CDkP\nSJOy8TaSPnt0AA=="),
    (with_schema, "file_uuid", "ZRrtCDkPSJOy8TaSPnt0AA"),
    (with_schema, "file_uuid", "ZRrtCDkPSJOy8TaSPnt0AA="),
    (with_schema, "file_uuid", "ZRrtCDkPSJOy8TaSPnt0A"),
    (with_schema, "file_uuid", "QR=="),
    (with_schema, "file_uuid", "not base64!"),
    (with_schema, "file_uuid", "-_8="),
    (with_schema, "file_uuid", "AAAA=AAA"),
    (with_schema, "file_uuid", 1234),
    (with_schema, "file_uuid", True),
    (with_schema, "bit_c", "BAQEBAQEBAQ="),
    (with_schema, "bit_c", "xwcAAAAAAAA="),
    # a Decimal of scale 65 (MySQL DECIMAL(65,30) and the like) kept as text
    (with_schema, "big_decimal_c", "FJqkSQ=="),
    (with_schema, "big_decimal_c", "/w=="),
    (with_schema, "big_decimal_c", "AA=="),
    (with_schema, "big_decimal_c", 12.5),
    (with_schema, "big_decimal_c", "12.5"),
    # arrays, maps and structs into such columns
    (with_schema, "arr_i", [1, 2, None, -3]),
    (with_schema, "arr_i", []),
    (with_schema, "arr_i", [1, "2"]),
    (with_schema, "arr_i", [2**31]),
    (with_schema, "arr_i", [1.5]),
    (with_schema, "arr_i", "[1,2]"),
    (with_schema, "arr_s", ["a", "b\u00e9", None]),
    (with_schema, "arr_s", [1, True, 1.5, {"x": [1]}]),
    (with_schema, "map_c", {"a": 1, "b": None}),
    (with_schema, "map_c", {"a": "x"}),
    (with_schema, "geo", {"wkb": "AQEAAAAAAAAAAADwPwAAAAAAAPA/", "srid": None}),
    (with_schema, "geo", {"wkb": "AQEAAAAAAAAAAADwPwAAAAAAAPA/", "srid": 4326}),
    (with_schema, "geo", {"wkb": "not base64!", "srid": "x"}),
    (with_schema, "geo", {}),
    # TIMESTAMP_NTZ columns (a DATETIME kept as the source's wall time)
    (with_schema, "ntz_ms", 1595008822123),
    (with_schema, "ntz_ms", -62135596800001),
    (with_schema, "ntz_micro", 1595008822123456),
    (with_schema, "ntz_micro", "1595008822123456"),
    (with_schema, "ntz_micro", 253402300800000000),
    (with_schema, "ntz_nano", 1595008822123456789),
    (with_schema, "ntz_zoned", "2020-07-17T18:00:22.123456+05:30"),
    (with_schema, "ntz_zoned", "2020-07-17 18:00:22"),
    (with_schema, "ntz_zoned", "2020-07-17T18:00:22Z"),
    (with_schema, "ntz_zoned", "not a time"),
    (schemaless, "ntz_micro", 1595008822123456),
    (schemaless, "ntz_micro", 1595008822123),
    (schemaless, "ntz_zoned", "2020-07-17T18:00:22+05:30"),
    # decimals without a schema (decimal.handling.mode=precise: base64, or a number)
    (schemaless, "decimal_c", "EtaH"),
    (schemaless, "decimal_c", 12.5),
    (schemaless, "decimal_c", "12.5"),
    (schemaless, "decimal_c", 12.34567),
    (schemaless, "decimal_c", 1e-7),
    (schemaless, "decimal_c", 1234),
    (schemaless, "decimal_c", 12345),
    (schemaless, "decimal_c", "not base64!"),
    (schemaless, "decimal_c", "12.5\n"),
    (schemaless, "decimal_c", ""),
    (with_schema, "decimal_c", ""),
    (with_schema, "decimal_c", "Eta H"),
    (with_schema, "decimal_c", "EtaH="),
    # a Decimal sent as text that ends a line (Java's `$` matches before it)
    (with_schema, "decimal_c", "12.5\n"),
    (with_schema, "decimal_c", "EtaH\n"),
    (with_schema, "decimal_c", "12.5\r\n"),
    # an update whose Decimal is a number: the Spark SQL decoder read it again from the payload,
    # both row parts as DECIMAL(38, scale)
    (updated, "decimal_c", ("AeJA", 13.25)),
    (updated, "decimal_c", (True, 13.25)),
    (updated, "decimal_c", ({"a": 1}, 13.25)),
    (updated, "decimal_c", ("1e99", 13.25)),
    (updated, "decimal_c", ("1,2.5", "13.25")),
    (updated, "decimal_c", (12.5, "AeJA")),
    (updated, "decimal_c", (12.5, 13.25)),
    (updated, "decimal_c", ("12.5\n", 13.25)),
    # other Connect types into DECIMAL columns
    (with_schema, "dbl_dec", 12.5),
    (with_schema, "dbl_dec", 12.345),
    (with_schema, "dbl_dec", 1e20),
    (with_schema, "dbl_dec", 1e-7),
    (with_schema, "str_dec", "12.345"),
    (with_schema, "str_dec", " 12.5 "),
    (with_schema, "str_dec", "1,000"),
    (with_schema, "str_dec", "1e3"),
    (with_schema, "str_dec", "abc"),
    # io.debezium.data.VariableScaleDecimal (PostgreSQL NUMERIC without a precision)
    (with_schema, "var_dec", {"scale": 2, "value": "MDk="}),
    (with_schema, "var_dec", {"scale": 0, "value": "/w=="}),
    (with_schema, "var_dec", {"scale": 12, "value": "MDk="}),
    (with_schema, "var_dec", {"scale": 40, "value": "MDk="}),
    (with_schema, "var_dec", {"scale": -1, "value": "MDk="}),
    (with_schema, "var_dec", {"value": "MDk="}),
    (with_schema, "var_s", {"scale": 2, "value": "MDk="}),
    (with_schema, "var_s", {"scale": 40, "value": "MDk="}),
    (with_schema, "var_s", {"scale": 3, "value": "not base64!"}),
    # a Connect Decimal into DOUBLE and BIGINT columns
    (with_schema, "dec_dbl", "MDk="),
    (with_schema, "dec_dbl", 1.5),
    (with_schema, "dec_dbl", "1.5"),
    (with_schema, "dec_int", "MDk="),
    (with_schema, "dec_int", "AZA="),
    (with_schema, "dec_int", 12),
    # a time of day into DOUBLE, and its text ending a line
    (with_schema, "time_d", 64822000000),
    (with_schema, "time_c", "64822000000\n"),
    (with_schema, "time_c", "64822000000\r\n"),
    (with_schema, "time_c", "64822000000\u2028"),
    (with_schema, "datetime6_c", "1595008822123456\u2028"),
    (schemaless, "datetime6_c", "1595008822123456\n"),
    # text with control characters or spaces Spark does or does not trim
    (with_schema, "tiny_c", "\x0012"),
    (with_schema, "tiny_c", "12\x00"),
    (with_schema, "tiny_c", "12\x7f"),
    (with_schema, "tiny_c", "12\x85"),
    (with_schema, "double_c", "\x001.5"),
    (with_schema, "double_c", "1.5\u00a0"),
    (with_schema, "double_c", "1.5\u2003"),
    (with_schema, "date_c", " 2020-07-17 "),
    (with_schema, "date_c", "\x012020-07-17"),
    (with_schema, "date_c", "2020-07-17\u00a0"),
    (with_schema, "timestamp_c", "2020-07-17T18:00:22Z\x00"),
    (with_schema, "timestamp_c", "\u20032020-07-17T18:00:22Z"),
    (with_schema, "varchar_c", " x\x00 "),
    # text the arrow_json rules do not convert
    (with_schema, "timestamp_c", "2020-07-17T18:00"),
    (with_schema, "timestamp_c", "2020-07-17T18:00:22+05"),
    (with_schema, "timestamp_c", "2020-07-17 18:00:22 UTC"),
    (with_schema, "timestamp_c", "2020-7-1T8:00:22Z"),
    (with_schema, "timestamp_c", "2020-07-17T18:00:22.123Z[UTC]"),
    (with_schema, "timestamp_c", "1595008822"),
    (with_schema, "date_c", "20200717"),
    (with_schema, "date_c", "2020-7-1"),
    (with_schema, "date_c", "2020-07-17T00:00:00Z"),
    (with_schema, "date_c", "2020-07-17junk"),
    (with_schema, "date_c", "2020-07-17 junk"),
    (with_schema, "date_c", "+2020-07-17"),
    (with_schema, "date_c", "02020-07-17"),
    (with_schema, "date_c", "2020-07"),
    (with_schema, "date_c", "2020-02-30"),
    (with_schema, "timestamp_c", "2020-07-17T18:00Z"),
    (with_schema, "timestamp_c", "2020-07-17T18:00:22 +05:00"),
    (with_schema, "timestamp_c", "2020-07-17T18:00:22 Europe/Paris"),
    (with_schema, "timestamp_c", "2020-01-17T18:00:22America/New_York"),
    (with_schema, "timestamp_c", "2020-07-17T18:00:22PST"),
    (with_schema, "timestamp_c", "2020-07-17T18:00:22GMT+2"),
    (with_schema, "timestamp_c", "2020-07-17T18:00:22+5:30"),
    (with_schema, "timestamp_c", "2020-07-17T18:00:22+19:00"),
    (with_schema, "timestamp_c", "2020-07-17T18:00:22 Nowhere/None"),
    (with_schema, "timestamp_c", "2020-07"),
    (with_schema, "timestamp_c", "2020"),
    (with_schema, "timestamp_c", "2020-07-17T25:00:00Z"),
    (with_schema, "timestamp_c", "2020-02-30T00:00:00Z"),
    (with_schema, "timestamp_c", "2020-07-17T18:00:22.1234567+01:00"),
    (with_schema, "timestamp_c", "2020-07-17T18:00:22.Z"),
    (with_schema, "timestamp_c", "2020-03-08T02:30:00 America/New_York"),
    (with_schema, "timestamp_c", "2020-11-01T01:30:00 America/New_York"),
    (with_schema, "ntz_zoned", "2020-07-17T18:00:22 Europe/Paris"),
    (with_schema, "ntz_zoned", "2020-07-17T18:00:22 Nowhere/None"),
    (with_schema, "ntz_zoned", "2020-7-1 8:00"),
    (with_schema, "timestamp_c", "18:00:22"),
    (with_schema, "timestamp_c", "T18:00:22Z"),
    (with_schema, "ntz_zoned", "18:00:22"),
    (with_schema, "double_c", "1.5f"),
    (with_schema, "double_c", "1.5d"),
    (with_schema, "double_c", "0x1p3"),
    (with_schema, "double_c", "1_000.5"),
    (with_schema, "real_c", "0x1.000001p0"),
    # epoch timestamps that are no integer
    (with_schema, "datetime6_c", "1595008822123456\n"),
    (with_schema, "datetime6_c", "1595008822123456.5"),
    (with_schema, "datetime6_c", 1595008822123456.5),
    (with_schema, "datetime6_c", True),
    # doubles Java 17 writes with other digits than the shortest that reads back (DELIBERATE)
    (with_schema, "varchar_c", 1e23),
    (with_schema, "varchar_c", 2.0**60),
    (with_schema, "varchar_c", 5e-324),
    (with_schema, "tiny_c", 1e23),
    (with_schema, "arr_s", [1e23]),
    # issue 49: text Spark's casts read only by dropping part of it is a dead letter; the same text
    # but nothing dropped is read (entries added by hand, not by the Spark SQL decoder)
    (schemaless, "date_c", "2020-07-17 junk"),
    (schemaless, "date_c", "2020-07-17T18:00:22"),
    (schemaless, "date_c", "2020-07-17T00:00:00"),
    (with_schema, "ntz_zoned", "2020-07-17T18:00:22.1234560"),
]


def _case_id(build: Any, column: str, value: Any) -> str:
    shown = repr(value)
    shown = shown if len(shown) <= 60 else f"{shown[:20]}...({len(shown)} chars)"
    return f"{'~' if build is schemaless else 'u:' if build is updated else ''}{column}={shown}"


def cases() -> list[Case]:
    return unique([(_case_id(b, c, v), b(i, **{c: v})) for i, (b, c, v) in enumerate(VALUES)])


def _declared_string(number: str) -> str:
    return f"column varchar_c: number '{number}' where the message's schema declares string"


# Where the Python decoder gives another output than the Spark SQL decoder on purpose: case id ->
# what differs from its golden output (a column's value in its one row, or the dead letters).
# A time without a date into a TIMESTAMP: Spark's cast dates it today (the golden file holds the day
# it was written); here it is a dead letter (decode/spark_compat/datetime_casts.py).
# A double whose Java 17 text is not its shortest digits (1e23: "9.999999999999999E22", the golden
# text): written with the shortest, as Java 19 on writes it (decode/spark_compat/connect_text.py `field_text`).
DELIBERATE: dict[str, dict[str, Any]] = {
    "timestamp_c='18:00:22'": {"dead_letters": ["column timestamp_c: '18:00:22' is not a TIMESTAMP"]},
    "timestamp_c='T18:00:22Z'": {"dead_letters": ["column timestamp_c: 'T18:00:22Z' is not a TIMESTAMP"]},
    # a number where the schema says string: a dead letter since issue 49 (the shortest digits shown)
    "varchar_c=1.152921504606847e+18": {"dead_letters": [_declared_string("1.152921504606847E18")]},
    "varchar_c=1e+23": {"dead_letters": [_declared_string("1.0E23")]},
    "varchar_c=5e-324": {"dead_letters": [_declared_string("5.0E-324")]},
    "tiny_c=1e+23": {"dead_letters": ["column tiny_c: '1.0E23' is not an INT"]},
    # nanoseconds below a microsecond: Spark divided them away; a dead letter since issue 49
    "ntz_nano=1595008822123456789": {
        "dead_letters": ["column ntz_nano: 1595008822123456789 ns, a timestamp finer than the column's microseconds"]
    },
}
# What the Python decoder does not read yet: NotHere reason -> case ids.
NOT_YET: dict[str, Any] = {}


def deliberate(case: str, golden: Output) -> Output:
    """The output DELIBERATE gives `case`: its golden output with the changes listed there."""
    changes = DELIBERATE[case]
    if "dead_letters" in changes:
        return {"good": [], "dead_letters": changes["dead_letters"]}
    good = [{**row, **changes} for row in golden["good"]]
    return {"good": good, "dead_letters": golden["dead_letters"]}


def python_alone(offset: int, value: bytes | None) -> Output:
    """What the Python decoder (decode/debezium/rows.py `TableRows`) makes of one message at `offset`."""
    schema = to_arrow_schema(TABLE)
    rows = TableRows(schema, KEY, "upsert", Conversions())
    envelope = None if value is None else EnvelopeReader(PayloadLimits()).read(value)
    dead: list[str] = []
    if envelope is not None:
        dead = rows.add(envelope, source_order(envelope.source, envelope.ts_ms, offset), evolving=False)
    table = rows.table()
    for i, f in enumerate(table.schema):
        if pa.types.is_timestamp(f.type) and f.type.tz is not None:  # as spark_rows: epoch microseconds
            table = table.set_column(i, f.name, table[i].cast(pa.int64()))
    changes = {}
    for r in table.to_pylist():
        values = tuple(
            dict(r[n]) if pa.types.is_map(schema.field(n).type) and r[n] is not None else r[n] for n in TABLE.names
        )
        changes[(r["_op"], r["_source_order"])] = values
    return {"good": debezium_rows(changes, TABLE), "dead_letters": dead}


def _plain(v: Any) -> Any:
    """A collected value without Spark's Row: a struct as a dict."""
    if isinstance(v, Row):
        return {k: _plain(x) for k, x in v.asDict().items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def _per_case(spark: Any, values: list[bytes | None], decode: Any) -> list[Output]:
    good, bad = spark_rows(spark, values, TABLE, KEY, decode=decode)
    out = []
    for offset in range(len(values)):
        mine = {c: tuple(map(_plain, row)) for c, row in good.items() if int(c[1].rpartition("|")[2]) == offset}
        out.append({"good": debezium_rows(mine, TABLE), "dead_letters": [bad[offset]] if offset in bad else []})
    return out


def test_values_match_the_spark_sql_decoders_golden_file(spark: Any) -> None:
    all_cases = cases()
    head = {
        "decoder": "icetide.decode.debezium.decode_debezium",  # the Spark SQL decoder that wrote the file
        "table": [[f.name, f.dataType.simpleString(), f.nullable] for f in TABLE.fields],
        "key": KEY,
        "op_mode": "upsert",
    }
    golden = json.loads(PATH.read_text())
    assert {k: golden[k] for k in head} == head
    assert [c["id"] for c in golden["cases"]] == [c for c, _ in all_cases]

    # One batch through decode_debezium: the Python decoder in Spark's tasks, with no fallback.
    not_yet = {i for ids in NOT_YET.values() for i in ids}
    kept = [None if case in not_yet else v for case, v in all_cases]
    batch = _per_case(spark, kept, decode_debezium)
    for (case, _), mine, expected in zip(all_cases, batch, golden["cases"], strict=True):
        want = {"good": expected["good"], "dead_letters": expected["dead_letters"]}
        if case in DELIBERATE:
            assert deliberate(case, want) != want, f"{case}: as golden, not deliberate"
            want = deliberate(case, want)
        assert mine == ({"good": [], "dead_letters": []} if case in not_yet else want), case

    # Each case alone through the Python decoder.
    def python(offset: int, value: bytes | None) -> Output:
        return python_alone(offset, value)

    refused = check_python("values_not_here", all_cases, golden, python, dict.fromkeys(DELIBERATE, "deliberate"))
    golden_of = {c["id"]: {"good": c["good"], "dead_letters": c["dead_letters"]} for c in golden["cases"]}
    for offset, (case, value) in enumerate(all_cases):
        if case in DELIBERATE:
            assert python(offset, value) == deliberate(case, golden_of[case]), case
    assert by_reason(refused, all_cases) == NOT_YET
