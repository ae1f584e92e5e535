"""The Python Debezium decoder of the sync fast path (decode/debezium/rows.py) against the Spark
SQL decoder (decode/debezium.py), message by message: for every record the Python side either
gives exactly the Spark side's good row (table columns, `_op`, `_source_order`) or refuses it with
NotHere. The Spark side is what the Spark SQL decoder gave for each batch, frozen in
tests/golden/debezium_differential/debezium_arrow.json before it was deleted (tests/frozen.py).
Real messages from tests/data/debezium (sources in its SOURCES.md), and messages built from a
real message's schema with changed values for the conversions no public message covers."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

from icetide.decode.debezium.connect_schema import parse_envelope_schema, table_schema
from icetide.decode.debezium.message import EnvelopeReader
from icetide.decode.debezium.rows import Conversions, DeadLetter, NotHere, TableRows, source_order
from icetide.decode.debezium.tasks import decode_debezium
from icetide.decode.limits import PayloadLimits, spark_text
from icetide.write.collapse import DELETE
from tests.debezium_messages import ProductsStream, lines, messages
from tests.frozen import PYTHON_DEBEZIUM, frozen, stored, unspelled

KAFKA_POSITION = ["topic", "partition", "offset"]
Rows = dict[tuple[str, str], tuple[Any, ...]]  # (_op, _source_order) -> the table's columns
GOLDEN = "debezium_differential/debezium_arrow.json"


def kafka_frame(spark: Any, values: Sequence[bytes | None]) -> Any:
    rows = [("cdc", 0, i, v) for i, v in enumerate(values)]
    return spark.createDataFrame(rows, "topic STRING, partition INT, offset BIGINT, value BINARY")


_ARROW = {
    "tinyint": pa.int8(),
    "smallint": pa.int16(),
    "int": pa.int32(),
    "bigint": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "string": pa.string(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
}


def arrow_schema(schema: T.StructType) -> pa.Schema:
    """The Arrow schema of a table of this Spark schema (as icetide.table.iceberg.arrow_schema gives)."""

    def arrow_type(t: T.DataType) -> pa.DataType:
        if isinstance(t, T.DecimalType):
            return pa.decimal128(t.precision, t.scale)
        return _ARROW[t.simpleString()]

    return pa.schema([pa.field(f.name, arrow_type(f.dataType), nullable=f.nullable) for f in schema.fields])


def _value(v: Any) -> Any:
    """A collected value in one spelling for both sides (timestamps are epoch microseconds by then):
    decimals and floats as text, so that a scale, -0.0 or NaN count."""
    if isinstance(v, Decimal):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    return v


def python_changes(
    values: Sequence[bytes | None],
    schema: T.StructType,
    key: Sequence[str],
    *,
    op_mode: str = "upsert",
    conversions: Conversions | None = None,
    first_offset: int = 0,
) -> tuple[Rows, dict[int, list[str]]]:
    """The changes the Python decoder makes of `values` (Kafka offsets from `first_offset`), as one
    batch, and its dead letters' errors by offset."""
    reader = EnvelopeReader(PayloadLimits())
    collected = TableRows(arrow_schema(schema), key, op_mode, conversions or Conversions())
    dead: dict[int, list[str]] = {}
    for offset, value in enumerate(values, start=first_offset):
        envelope = None if value is None else reader.read(value)
        if envelope is not None:
            errors = collected.add(envelope, source_order(envelope.source, envelope.ts_ms, offset), evolving=False)
            if errors:
                dead[offset] = errors
    table = collected.table()
    assert table.column_names == [*schema.names, "_op", "_source_order"]
    for i, f in enumerate(table.schema):
        if pa.types.is_timestamp(f.type):
            table = table.set_column(i, f.name, table[i].cast(pa.int64()))
    rows = {(r["_op"], r["_source_order"]): tuple(_value(r[n]) for n in schema.names) for r in table.to_pylist()}
    return rows, dead


def python_rows(
    values: Sequence[bytes | None],
    schema: T.StructType,
    key: Sequence[str],
    *,
    op_mode: str = "upsert",
    conversions: Conversions | None = None,
    first_offset: int = 0,
) -> Rows:
    """`python_changes` of messages that hold no dead letter: the first one raises DeadLetter."""
    rows, dead = python_changes(
        values, schema, key, op_mode=op_mode, conversions=conversions, first_offset=first_offset
    )
    for errors in dead.values():
        raise DeadLetter(errors[0])
    return rows


def spark_rows(
    spark: Any,
    values: Sequence[bytes | None],
    schema: T.StructType,
    key: Sequence[str],
    *,
    op_mode: str = "upsert",
    decode: Callable[..., Any] = decode_debezium,
) -> tuple[Rows, dict[int, str]]:
    """The good changes and the dead letters (offset -> error, one per event) `decode` makes of
    `values` as one batch, one Kafka offset each from 0 (default: the Python decoder in Spark's tasks)."""
    keep: list[Any] = []
    decoded = decode(
        kafka_frame(spark, values),
        "value",
        schema,
        key,
        op_mode,  # type: ignore[arg-type]
        KAFKA_POSITION,
        keep=keep,
    )
    try:
        good: Rows = {}
        micros = [
            F.unix_micros(f.name).alias(f.name) if isinstance(f.dataType, T.TimestampType) else F.col(f.name)
            for f in schema.fields
        ]
        for r in decoded.good.select(*micros, "_op", "_source_order").collect():
            change = (r["_op"], r["_source_order"])
            assert change not in good
            good[change] = tuple(_value(r[n]) for n in schema.names)
        bad: dict[int, str] = {}
        for r in decoded.bad.collect():
            offset = int(r["source_position"].rpartition("@")[2])
            assert offset not in bad, f"two dead letters of offset {offset}"
            bad[offset] = r["error"]
    finally:
        for frame in keep:
            frame.unpersist()
    return good, bad


def spelled_rows(good: Rows, bad: dict[int, Any]) -> dict[str, Any]:
    """Changes and dead letters in one order, as a golden file holds them."""
    return {
        "good": [[op, order, *row] for (op, order), row in sorted(good.items())],
        "dead_letters": [[offset, error] for offset, error in sorted(bad.items())],
    }


def golden_rows(case: str, columns: Sequence[str] | None = None) -> tuple[Rows, dict[int, str]]:
    """The Spark SQL decoder's changes and dead letters of a batch, from the golden file (`spelled_rows`);
    with `columns`, the rows of a case frozen with its "columns" cut to those."""
    frozen_case = unspelled(stored(GOLDEN, case))
    good = {(op, order): tuple(row) for op, order, *row in frozen_case["good"]}
    if columns is not None:
        at = [frozen_case["columns"].index(c) for c in columns]
        good = {change: tuple(row[i] for i in at) for change, row in good.items()}
    return good, {offset: error for offset, error in frozen_case["dead_letters"]}


def batch_name(values: Sequence[bytes | None], schema: T.StructType, key: Sequence[str], op_mode: str) -> str:
    """A golden case's name for a batch its caller does not name (tests/test_connect_values.py): a
    digest of the batch, its table, key and op mode, so that another batch has no golden output."""
    batch = repr((list(values), schema.simpleString(), list(key), op_mode)).encode()
    return f"batch {hashlib.sha256(batch).hexdigest()[:16]}"


def _offset(change: tuple[str, str]) -> int:
    return int(change[1].rpartition("|")[2])


# A deliberate difference from the Spark SQL decoder (issue 49): the UTF-8 error says where the
# bad bytes are. (The rows Spark repaired that are now dead letters are rewritten in the golden files.)
_UTF8_PLACE = re.compile(r"^(payload is not valid UTF-8) at byte .*$")


def spark_sql_error(error: str) -> str:
    """A dead letter's error as the Spark SQL decoder worded it."""
    return _UTF8_PLACE.sub(r"\1", error)


def compare_each(
    spark: Any,
    values: Sequence[bytes | None],
    schema: T.StructType,
    key: Sequence[str],
    *,
    op_mode: str = "upsert",
    conversions: Conversions | None = None,
    golden: str | None = None,
    shortest: Mapping[int, tuple[str, str]] | None = None,
) -> tuple[dict[int, str], dict[int, str]]:
    """Decode every message alone on the Python side, against the Spark SQL decoder's output of all
    of them together (one decode), case `golden` of the golden file: where Python takes a message, it
    has Spark's dead letter for it, or none, and the same rows. Returns (offset -> NotHere reason,
    offset -> Spark error). Without `golden`, the case is named by what was decoded (`batch_name`):
    a batch the Spark SQL decoder did not decode before it was deleted has no golden output. `spark`
    is no longer used (kept for callers). `shortest`: offset -> (a double's Java 17 text in Spark's
    output, the shortest digits the Python decoder writes instead, a deliberate difference); Spark's
    dead letter and text values of that message are compared with the one replaced by the other.
    Where issue 49 made a row Spark repaired a dead letter (a value that contradicts its declared
    Connect type, a decimal rounded, a finite number beyond FLOAT), the golden file holds that dead
    letter, rewritten by hand (each commit says which and why)."""
    good, bad = golden_rows(golden or batch_name(values, schema, key, op_mode))
    refused: dict[int, str] = {}
    for offset, value in enumerate(values):
        try:
            mine, dead = python_changes(
                [value], schema, key, op_mode=op_mode, conversions=conversions, first_offset=offset
            )
        except NotHere as exc:
            refused[offset] = str(exc)
            continue
        theirs_dead = [bad[offset]] if offset in bad else []
        theirs = {c: row for c, row in good.items() if _offset(c) == offset}
        if shortest and offset in shortest:
            java17, shortest_text = shortest[offset]
            replaced_dead = [e.replace(java17, shortest_text) for e in theirs_dead]
            replaced = {c: tuple(_replaced(v, java17, shortest_text) for v in row) for c, row in theirs.items()}
            assert (replaced_dead, replaced) != (theirs_dead, theirs), (
                f"message {offset}: no {java17!r} in Spark's output"
            )
            theirs_dead, theirs = replaced_dead, replaced
        mine_dead = [spark_sql_error(e) for e in dead.get(offset, [])]
        assert mine_dead == theirs_dead, f"message {offset}: Python {dead} != Spark {theirs_dead}"
        if mine != theirs:
            differing = [
                (name, [r[i] for r in mine.values()], [r[i] for r in theirs.values()])
                for i, name in enumerate(schema.names)
                if [r[i] for r in mine.values()] != [r[i] for r in theirs.values()]
            ]
            raise AssertionError(f"message {offset}: Python {mine.keys()} != Spark {theirs.keys()}: {differing}")
    return refused, bad


def _replaced(v: Any, old: str, new: str) -> Any:
    return v.replace(old, new) if isinstance(v, str) else v


# -- the real messages, file by file ------------------------------------------------------------


def file_schema(name: str, key: Sequence[str], table: str | None = None) -> tuple[list[bytes], T.StructType]:
    """The messages of tests/data/debezium/<name>.jsonl (of source table `table` only, when given),
    and a table of every field their schemas name (first type seen wins), nullable but the key."""
    values: list[bytes] = []
    fields: dict[str, T.StructField] = {}
    for text, message in zip(lines(name), messages(name), strict=True):
        if table is not None and message["payload"]["source"]["table"] != table:
            continue
        values.append(text.encode())
        if message.get("schema") is not None:
            for f in table_schema(parse_envelope_schema(json.dumps(message["schema"])), list(key)).fields:
                fields.setdefault(f.name, f)
    return values, T.StructType(list(fields.values()))


def refused_columns(
    values: list[bytes], schema: T.StructType, key: Sequence[str]
) -> tuple[T.StructType, dict[str, str]]:
    """The table without the columns the Python decoder refuses for these messages (one by one, as
    its NotHere names them), and the reason of each."""
    refused: dict[str, str] = {}
    while True:
        try:
            python_rows(values, schema, key)
            return schema, refused
        except NotHere as exc:
            named = re.match(r"column (\S+?): ", str(exc))
            assert named is not None and named[1] not in key, f"the whole batch is refused: {exc}"
            refused[named[1]] = _DEAD_LETTER if isinstance(exc, DeadLetter) else str(exc).partition(": ")[2]
            schema = T.StructType([f for f in schema.fields if f.name != named[1]])


_DEAD_LETTER = "a dead letter (as on the Spark path)"

GEOMETRY_COLUMNS = ("point_c", "geometry_c", "linestring_c", "polygon_c", "multipoint_c", "multiline_c")
GEOMETRY_COLUMNS += ("multipolygon_c", "geometrycollection_c")
FILES: list[tuple[str, str | None, tuple[str, ...], dict[str, tuple[str, ...]]]] = [
    # (file, source table, key, reason -> the columns the Python decoder refuses for it)
    ("debezium_doc_mysql_customers_create", None, ("id",), {}),
    ("debezium_doc_postgres_customers_create", None, ("id",), {}),
    ("debezium_doc_tutorial_mysql_customers", None, ("id",), {}),
    ("debezium_serde_with_schema_mysql_customers", None, ("id",), {}),
    ("debezium_server_iceberg_mysql_inventory", "orders", ("order_number",), {}),
    ("debezium_server_iceberg_mysql_inventory", "customers", ("id",), {}),
    ("flink_mysql_products_schema", None, ("id",), {}),
    ("flink_cdc_pipeline_mysql_to_kafka_debezium_json_schema", "customers", ("id",), {}),
    ("flink_cdc_pipeline_mysql_to_kafka_debezium_json_schema", "products", ("id",), {}),
    ("paimon_mysql_products_schema_evolution", None, ("id",), {}),
    ("paimon_mysql_all_types", None, ("_id",), {}),
    (
        "flink_cdc_mysql_full_types_schema",
        None,
        ("int_c",),
        {
            # "AQ==" as int32 and so on: hand-edited values; geometry objects where the schema
            # says string (SOURCES.md), read as their JSON text before issue 49
            _DEAD_LETTER: ("id", "big_un_c", "bit1_c", *GEOMETRY_COLUMNS),
        },
    ),
]


@pytest.mark.parametrize(("name", "table", "key", "expected_refusals"), FILES, ids=[f"{f[0]}-{f[1]}" for f in FILES])
@pytest.mark.usefixtures("spark")  # table schemas are Spark SQL types, parsed in its JVM
def test_real_messages_decode_as_on_the_spark_path(
    name: str, table: str | None, key: tuple[str, ...], expected_refusals: dict[str, tuple[str, ...]]
) -> None:
    """Every message of the file, one batch on each side: the Python side decodes all of them for
    the columns it supports, and gives the Spark side's rows."""
    values, full = file_schema(name, key, table)
    schema, refusals = refused_columns(values, full, key)
    by_reason: dict[str, set[str]] = {}
    for column, reason in refusals.items():
        by_reason.setdefault(reason, set()).add(column)
    assert by_reason == {reason: set(columns) for reason, columns in expected_refusals.items()}
    assert len(schema.fields) > len(key)
    mine = python_rows(values, schema, key)
    # Frozen for every column but those both decoders make dead letters of: cut to the ones read here.
    theirs, bad = golden_rows(f"real messages: {name}-{table}", schema.names)
    assert bad == {}
    assert mine == theirs
    assert len(mine) >= len(values)


# -- conversions, on the real flink-cdc full_types schema --------------------------------------

_FULL_TYPES = messages("flink_cdc_mysql_full_types_schema")[0]  # Debezium 1.5.2 MySQL, precise decimals


def _unscaled(value: int, size: int | None = None) -> str:
    """A precise decimal's unscaled value as the JSON converter sends it: big-endian two's complement, base64."""
    size = size or max(1, (value.bit_length() + 8) // 8)
    return base64.b64encode(value.to_bytes(size, "big", signed=True)).decode()


def _connect(name: str, type_: str, logical: str | None = None, **parameters: str) -> dict[str, Any]:
    f: dict[str, Any] = {"type": type_, "optional": True, "field": name}
    if logical:
        f.update(name=logical, version=1)
    if parameters:
        f["parameters"] = parameters
    return f


_DECIMAL = "org.apache.kafka.connect.data.Decimal"
# Fields added to the real schema (hand-made: Connect types no public message carries, or a
# Decimal of another scale than its column's), each beside the real ones.
_ADDED_FIELDS = [
    _connect("fine_c", "bytes", _DECIMAL, scale="6", **{"connect.decimal.precision": "10"}),
    _connect("coarse_c", "bytes", _DECIMAL, scale="2", **{"connect.decimal.precision": "8"}),
    _connect("decimal_s", "bytes", _DECIMAL, scale="4", **{"connect.decimal.precision": "50"}),
    _connect("whole_s", "bytes", _DECIMAL, scale="0", **{"connect.decimal.precision": "40"}),
    _connect("nanos_c", "int64", "io.debezium.time.NanoTimestamp"),
    _connect("nano_time_c", "int64", "io.debezium.time.NanoTime"),
    _connect("ms_time_c", "int32", "io.debezium.time.Time"),
    _connect("micro_time_i", "int64", "io.debezium.time.MicroTime"),
    _connect("flag_c", "boolean"),
]
_FULL_TYPES_TABLE = T.StructType(
    [
        T.StructField("int_c", T.IntegerType(), nullable=False),
        T.StructField("tiny_c", T.IntegerType()),
        T.StructField("big_c", T.LongType()),
        T.StructField("varchar_c", T.StringType()),
        T.StructField("real_c", T.FloatType()),
        T.StructField("double_c", T.DoubleType()),
        T.StructField("decimal_c", T.DecimalType(8, 4)),
        T.StructField("numeric_c", T.DecimalType(6, 0)),
        T.StructField("fine_c", T.DecimalType(8, 4)),
        T.StructField("coarse_c", T.DecimalType(8, 4)),
        T.StructField("decimal_s", T.StringType()),
        T.StructField("whole_s", T.StringType()),
        T.StructField("date_c", T.DateType()),
        T.StructField("time_c", T.StringType()),
        T.StructField("micro_time_i", T.LongType()),
        T.StructField("ms_time_c", T.StringType()),
        T.StructField("nano_time_c", T.StringType()),
        T.StructField("datetime3_c", T.TimestampType()),
        T.StructField("datetime6_c", T.TimestampType()),
        T.StructField("nanos_c", T.TimestampType()),
        T.StructField("timestamp_c", T.TimestampType()),
        T.StructField("year_c", T.IntegerType()),
        T.StructField("flag_c", T.BooleanType()),
    ]
)


def full_types(row_id: int, op: str = "r", **after: Any) -> bytes:
    """The real full_types snapshot message with `after` (and `int_c`) as its row, on the real
    schema plus _ADDED_FIELDS; its binlog position moved by `row_id`."""
    schema = copy.deepcopy(_FULL_TYPES["schema"])
    for part in schema["fields"]:
        if part["field"] in ("before", "after"):
            part["fields"] += _ADDED_FIELDS
    payload = copy.deepcopy(_FULL_TYPES["payload"])
    payload.update(op=op, before=None, after={"int_c": row_id, **after})
    payload["source"]["pos"] += row_id
    return json.dumps({"schema": schema, "payload": payload}, separators=(",", ":")).encode()


SAME, REFUSED, DEAD_LETTER = "same", "refused", "dead letter"
LOST = "lost by the Spark SQL decoder"  # neither a row nor a dead letter there; a dead letter here
# (column, value, expected): SAME, the Python side decodes it as the Spark side does; REFUSED,
# NotHere (whatever the Spark side makes of it); DEAD_LETTER, the Spark side's dead letter on both.
CONVERSIONS: list[tuple[str, Any, str]] = [
    # precise decimals: DECIMAL(8,4) from scale 4, DECIMAL(6,0) from scale 0
    ("decimal_c", _unscaled(1234567), SAME),
    ("decimal_c", _unscaled(-1234567), SAME),
    ("decimal_c", _unscaled(-1), SAME),
    ("decimal_c", _unscaled(0), SAME),
    ("decimal_c", _unscaled(99999999), SAME),
    ("decimal_c", _unscaled(-99999999), SAME),
    ("decimal_c", _unscaled(1, size=16), SAME),
    ("decimal_c", _unscaled(100000000), DEAD_LETTER),  # beyond the precision
    ("decimal_c", _unscaled(-100000000), DEAD_LETTER),
    ("decimal_c", "not base64!", DEAD_LETTER),
    ("decimal_c", _unscaled(1, size=17), DEAD_LETTER),
    ("decimal_c", 12.5, SAME),  # decimal.format=NUMERIC: read again from the payload, exactly
    ("decimal_c", "12.5", SAME),  # decimal.handling.mode=string
    ("numeric_c", _unscaled(346), SAME),
    ("numeric_c", _unscaled(-999999), SAME),
    ("numeric_c", _unscaled(1000000), DEAD_LETTER),
    # a Decimal of scale 6 into DECIMAL(8,4): trailing zeros go, a digit that would round is refused
    ("fine_c", _unscaled(1234500), SAME),
    ("fine_c", _unscaled(-100), SAME),
    ("fine_c", _unscaled(1234567), DEAD_LETTER),
    # a Decimal of scale 2 into DECIMAL(8,4)
    ("coarse_c", _unscaled(-12345), SAME),
    ("coarse_c", _unscaled(1000000), DEAD_LETTER),  # 10000.00 needs DECIMAL(9,4)
    # a Decimal wider than Iceberg's decimal(38) kept as text
    ("decimal_s", _unscaled(1234567), SAME),
    ("decimal_s", _unscaled(-1), SAME),
    ("decimal_s", _unscaled(10**38 - 1), SAME),
    ("decimal_s", _unscaled(-(10**38) + 2**63), SAME),
    ("decimal_s", _unscaled(10**38), DEAD_LETTER),  # 39 digits: beyond Spark's DECIMAL(38)
    ("decimal_s", _unscaled(2**127 - 1), DEAD_LETTER),
    ("decimal_s", _unscaled(-(2**127)), DEAD_LETTER),
    ("decimal_s", _unscaled(-(10**38) + 1), DEAD_LETTER),  # Spark's high half times 2**64 overflows
    ("whole_s", _unscaled(-123), SAME),
    ("whole_s", _unscaled(0), SAME),
    # io.debezium.time.Date
    ("date_c", 18460, SAME),
    ("date_c", -1, SAME),
    ("date_c", -719162, SAME),  # 0001-01-01
    ("date_c", 2932896, SAME),  # 9999-12-31
    ("date_c", -719163, DEAD_LETTER),
    ("date_c", 2932897, DEAD_LETTER),
    ("date_c", "2020-07-17", DEAD_LETTER),  # declared otherwise (issue 49)
    # io.debezium.time.MicroTime (MySQL TIME: a signed duration) into STRING and BIGINT
    ("time_c", 64822000000, SAME),
    ("time_c", 0, SAME),
    ("time_c", -1, SAME),
    ("time_c", -(838 * 3600 + 59 * 60 + 59) * 10**6, SAME),
    ("time_c", 2**63 - 1, SAME),
    ("time_c", -(2**63) + 1, SAME),
    ("time_c", -(2**63), DEAD_LETTER),  # Spark's abs() overflowed to '--2562047788:00:06.224192' (issue 49)
    ("time_c", 2**63, DEAD_LETTER),  # beyond a BIGINT: Spark writes 'null:null:null.  null'
    ("time_c", 2**64, DEAD_LETTER),
    ("time_c", "18:00:22", DEAD_LETTER),
    ("time_c", 1.5, DEAD_LETTER),  # Spark's error quotes the number as Java writes it
    ("micro_time_i", 64822000000, SAME),
    ("micro_time_i", -5, SAME),
    # io.debezium.time.Time (ms) and NanoTime into STRING
    ("ms_time_c", 52205123, SAME),
    ("ms_time_c", -52205123, SAME),
    # NanoTime finer than a microsecond: Spark dropped the nanoseconds (toward zero); a dead letter
    # since issue 49 (the golden entries rewritten, rows to dead letters)
    ("nano_time_c", 52205123456789, DEAD_LETTER),
    ("nano_time_c", -1500, DEAD_LETTER),
    ("nano_time_c", -999, DEAD_LETTER),
    # io.debezium.time.Timestamp (ms)
    ("datetime3_c", 1595008822123, SAME),
    ("datetime3_c", -1, SAME),
    ("datetime3_c", -62135596800000, SAME),  # 0001-01-01
    ("datetime3_c", -62135596800001, DEAD_LETTER),
    # io.debezium.time.MicroTimestamp
    ("datetime6_c", 1595008822123456, SAME),
    ("datetime6_c", -1, SAME),
    ("datetime6_c", -1595008822123456, SAME),
    ("datetime6_c", 253402300799999999, SAME),  # 9999-12-31T23:59:59.999999
    ("datetime6_c", 253402300800000000, DEAD_LETTER),
    ("datetime6_c", -62135596800000001, DEAD_LETTER),
    ("datetime6_c", 10**18, DEAD_LETTER),
    ("datetime6_c", "1595008822123456", DEAD_LETTER),  # declared otherwise (issue 49)
    # io.debezium.time.NanoTimestamp finer than a microsecond: Spark divided toward zero; a dead
    # letter since issue 49 (the golden entries rewritten, rows to dead letters)
    ("nanos_c", 1595008822123456789, DEAD_LETTER),
    ("nanos_c", -1, DEAD_LETTER),
    ("nanos_c", -1001, DEAD_LETTER),
    ("nanos_c", -1595008822123456789, DEAD_LETTER),
    ("nanos_c", 2**63, DEAD_LETTER),
    # io.debezium.time.ZonedTimestamp text
    ("timestamp_c", "2020-07-17T18:00:22Z", SAME),
    ("timestamp_c", "2020-07-17T18:00:22.123456+05:30", SAME),
    ("timestamp_c", "2020-07-17T18:00:22.5-08:00", SAME),
    ("timestamp_c", "2020-07-17T18:00:22-0800", SAME),
    ("timestamp_c", "2020-07-17 18:00:22", SAME),  # no zone: the session's (UTC)
    ("timestamp_c", "0001-01-01T00:00:00Z", SAME),
    ("timestamp_c", "2020-07-17T18:00:22.123456789Z", DEAD_LETTER),  # nanoseconds: Spark drops them (issue 49)
    ("timestamp_c", "not a time", DEAD_LETTER),
    # plain Connect types
    ("tiny_c", 127, SAME),
    ("tiny_c", -(2**31), DEAD_LETTER),  # declared otherwise (issue 49)
    ("tiny_c", "12", DEAD_LETTER),  # declared otherwise (issue 49)
    ("tiny_c", " 12 ", DEAD_LETTER),  # declared otherwise (issue 49)
    ("tiny_c", "\t12\x1c\r\n", DEAD_LETTER),  # declared otherwise (issue 49)
    ("tiny_c", "\u00a012", DEAD_LETTER),  # Spark trims ASCII whitespace only
    ("tiny_c", "\u200312", DEAD_LETTER),
    ("tiny_c", 2**31, DEAD_LETTER),
    ("tiny_c", 5.0, DEAD_LETTER),  # a dead letter quoting the number as Java writes it
    ("big_c", 9223372036854775807, SAME),
    ("big_c", 9223372036854775808, DEAD_LETTER),
    ("year_c", 2021, SAME),
    ("flag_c", True, SAME),
    ("flag_c", "yes", DEAD_LETTER),  # declared otherwise (issue 49)
    ("flag_c", 1, DEAD_LETTER),  # declared otherwise (issue 49)
    ("flag_c", "\u00a0true", DEAD_LETTER),
    ("varchar_c", "Hello World", SAME),
    ("varchar_c", "", SAME),
    ("varchar_c", "\u00e9t\u00e9 \U0001f600", SAME),
    ("varchar_c", 12, DEAD_LETTER),  # declared otherwise (issue 49)
    ("varchar_c", False, DEAD_LETTER),  # declared otherwise (issue 49)
    ("varchar_c", 1.5, DEAD_LETTER),  # declared otherwise (issue 49)
    ("varchar_c", {"a": [1, "b"]}, DEAD_LETTER),  # declared otherwise (issue 49)
    ("double_c", 404.4443, SAME),
    ("double_c", -0.0, SAME),
    ("double_c", 1e308, SAME),
    ("double_c", 5e-324, SAME),
    ("double_c", 12345678901234567890123, SAME),
    ("double_c", "1.5", DEAD_LETTER),  # declared otherwise (issue 49)
    ("double_c", " 1.5\x1f", DEAD_LETTER),  # declared otherwise (issue 49)
    ("double_c", 10**400, DEAD_LETTER),  # beyond a double: refused (issue 49; Spark: infinity)
    ("real_c", 123.102, SAME),
    ("real_c", 3.4028234663852886e38, SAME),  # the largest FLOAT
    ("real_c", 16777217, SAME),  # halfway, but exactly: both round to even
    ("real_c", 2**60 + 2**36, SAME),
    ("real_c", 1.0000000596046448, SAME),  # a double halfway between two FLOATs: Java's text decides
    ("real_c", "1.00000005960464477539062500001", DEAD_LETTER),  # its double is halfway
    ("real_c", 2**54 + 2**30 + 1, SAME),  # likewise
    ("real_c", 3.5e38, DEAD_LETTER),  # within a double, beyond FLOAT: refused (issue 49; Spark: infinity)
]


@pytest.mark.usefixtures("spark")  # table schemas are Spark SQL types, parsed in its JVM
def test_conversions_decode_as_on_the_spark_path() -> None:
    """One message per case, all in one Spark decode; each decoded alone on the Python side."""
    values = [full_types(i, **{column: value}) for i, (column, value, _) in enumerate(CONVERSIONS)]
    refused, bad = compare_each(None, values, _FULL_TYPES_TABLE, ["int_c"], golden="conversions")
    for i, (column, value, expected) in enumerate(CONVERSIONS):
        case = f"{column}={value!r}"
        if expected == REFUSED:
            assert i in refused, f"{case}: accepted"
            assert refused[i].startswith(f"column {column}:"), f"{case}: {refused[i]}"
        else:
            assert i not in refused, f"{case}: refused ({refused.get(i)})"
            assert (i in bad) == (expected == DEAD_LETTER), f"{case}: Spark: {bad.get(i)}"


# -- change events, on the real products schema (flink_mysql_products_schema.jsonl) -------------


def _raw_change(stream: ProductsStream, payload_text: str) -> bytes:
    """A message with the real schema and a payload given as text (for what json.dumps cannot write)."""
    return (
        b'{"schema":'
        + json.dumps(stream.schema, separators=(",", ":")).encode()
        + b',"payload":'
        + payload_text.encode()
        + b"}"
    )


def _events() -> list[tuple[str, bytes | None, str]]:
    stream = ProductsStream()
    row = {"id": 101, "name": "scooter", "description": "small", "weight": 3.14}
    source = json.dumps(stream.source, separators=(",", ":"))
    return [
        ("truncate", stream.truncate(), REFUSED),  # first: the Spark path keeps what follows it
        ("create", stream.change("c", None, row), SAME),
        ("snapshot read", stream.change("r", None, {**row, "id": 102}), SAME),
        ("update", stream.change("u", row, {**row, "weight": 5.0}), SAME),
        ("update without before", stream.change("u", None, {**row, "name": "x"}), SAME),
        ("update that moves the key", stream.change("u", row, {**row, "id": 901}), SAME),
        ("update that moves a key to null", stream.change("u", row, {**row, "id": None}), DEAD_LETTER),  # and a delete
        ("update from a null key", stream.change("u", {**row, "id": None}, {**row, "id": 5}), SAME),
        ("delete", stream.change("d", row, None), SAME),
        ("delete with the key only", stream.change("d", {"id": 7}, None), SAME),
        ("delete without before", stream.change("d", None, None), DEAD_LETTER),
        ("update without after", stream.change("u", row, None), DEAD_LETTER),
        ("op in capitals, spaced", stream.change(" C ", None, row), SAME),
        ("op after a tab", stream.change("\tc", None, row), DEAD_LETTER),
        ("message op", stream.change("m", None, None), DEAD_LETTER),
        ("unknown op", stream.change("x", None, row), DEAD_LETTER),
        ("tombstone", None, SAME),
        ("tombstone of the converter", _raw_change(stream, "null"), SAME),
        ("a key sent as text", stream.change("c", None, {**row, "id": "33"}), DEAD_LETTER),  # int32 declared (issue 49)
        ("a key that is not an INT", stream.change("c", None, {**row, "id": "x"}), DEAD_LETTER),
        ("a field the table lacks", stream.change("c", None, {**row, "extra": 1}), SAME),
        ("NaN", _raw_change(stream, f'{{"op":"c","after":{{"id":1,"weight":NaN}},"source":{source}}}'), DEAD_LETTER),
        ("a row twice", _raw_change(stream, f'{{"op":"c","after":{{"id":1,"id":2}},"source":{source}}}'), LOST),
        ("a source that is text", _raw_change(stream, '{"op":"c","after":{"id":1},"source":"x"}'), DEAD_LETTER),
        ("a row that is a list", _raw_change(stream, '{"op":"c","after":[1],"source":{}}'), DEAD_LETTER),
        ("a before that is text", _raw_change(stream, '{"op":"c","before":"x","after":{"id":1}}'), DEAD_LETTER),
        ("no source", _raw_change(stream, '{"op":"c","after":{"id":3},"ts_ms":1589362330904}'), SAME),
        ("no source time", _raw_change(stream, '{"op":"c","after":{"id":3},"ts_ms":"x"}'), SAME),
        ("postgres lsn", _raw_change(stream, '{"op":"c","after":{"id":3},"source":{"lsn":24023128}}'), SAME),
    ]


@pytest.mark.parametrize("op_mode", ["upsert", "append"])
@pytest.mark.usefixtures("spark")  # table schemas are Spark SQL types, parsed in its JVM
def test_change_events_decode_as_on_the_spark_path(op_mode: str) -> None:
    """Ops, key changes, deletes, tombstones and envelopes that are not the JSON converter's
    usual ones, in the real products schema and source block (hand-made: no public stream has
    them), each decoded alone on the Python side and all in one Spark decode."""
    events = _events()
    schema = table_schema(parse_envelope_schema(json.dumps(ProductsStream().schema)), ["id"])
    values = [value for _, value, _ in events]
    good, bad = golden_rows(f"change events, {op_mode}")
    lost = [i for i, (_, _, expected) in enumerate(events) if expected == LOST]
    for i in lost:  # the Spark SQL decoder gave nothing for it; the Python decoder a dead letter
        assert not [c for c in good if _offset(c) == i]
        rows, dead = python_changes([values[i]], schema, ["id"], op_mode=op_mode, first_offset=i)
        assert not rows and dead == {i: ["malformed JSON: key 'id' repeated in an object"]}
    compared = [None if i in lost else value for i, value in enumerate(values)]
    golden = f"change events without the lost one, {op_mode}"
    refused, bad = compare_each(None, compared, schema, ["id"], op_mode=op_mode, golden=golden)
    for i, (case, _, expected) in enumerate(events):
        assert (i in refused) == (expected == REFUSED), f"{case}: {refused.get(i, 'accepted')}"
        if expected not in (REFUSED, LOST):
            assert (i in bad) == (expected == DEAD_LETTER), f"{case}: Spark: {bad.get(i)}"


# Spark's casts trim ASCII control characters (UTF8String.trimAll; FLOAT and DOUBLE: Java's
# parseDouble, which trims up to U+0020) where the arrow_json rules do not: the Python side trims
# them too (kept out of CONVERSIONS, whose Spark output is frozen in tests/golden/debezium_conversions/)
CONTROL_CHARACTERS: list[tuple[str, Any, str]] = [
    ("tiny_c", "\u00005", DEAD_LETTER),  # declared otherwise (issue 49)
    ("tiny_c", "5\u0008", DEAD_LETTER),  # declared otherwise (issue 49)
    ("tiny_c", "\x855", DEAD_LETTER),
    ("tiny_c", "\u00a0\u00005", DEAD_LETTER),
    ("flag_c", "\u0007t", DEAD_LETTER),  # declared otherwise (issue 49)
    ("double_c", "NaN\u0001", DEAD_LETTER),  # declared otherwise (issue 49)
    ("double_c", "\u0000inf", DEAD_LETTER),  # declared otherwise (issue 49)
    ("double_c", "\u00001.5", DEAD_LETTER),  # declared otherwise (issue 49)
    ("tiny_c", "\t12\x1c", DEAD_LETTER),  # declared otherwise (issue 49)
]


@pytest.mark.usefixtures("spark")  # table schemas are Spark SQL types, parsed in its JVM
def test_control_characters_at_the_ends_as_on_the_spark_path() -> None:
    values = [full_types(i, **{column: value}) for i, (column, value, _) in enumerate(CONTROL_CHARACTERS)]
    refused, bad = compare_each(None, values, _FULL_TYPES_TABLE, ["int_c"], golden="control characters")
    for i, (column, value, expected) in enumerate(CONTROL_CHARACTERS):
        case = f"{column}={value!r}"
        assert (i in refused) == (expected == REFUSED), f"{case}: {refused.get(i, 'accepted')}"
        if expected != REFUSED:
            assert (i in bad) == (expected == DEAD_LETTER), f"{case}: Spark: {bad.get(i)}"


@pytest.mark.usefixtures("spark")  # table schemas are Spark SQL types, parsed in its JVM
def test_malformed_truncates_are_refused() -> None:
    """A truncate whose before or source is not an object is applied on the Spark path (on_truncate:
    apply), not a dead letter: the Python side refuses it."""
    stream = ProductsStream()
    values = [
        _raw_change(stream, '{"op":"t","source":"x"}'),
        _raw_change(stream, '{"op":" T ","before":"x","source":{"ts_ms":1}}'),
    ]
    schema = table_schema(parse_envelope_schema(json.dumps(ProductsStream().schema)), ["id"])
    refused, bad = compare_each(None, values, schema, ["id"], golden="malformed truncates")
    assert sorted(refused) == [0, 1]
    assert bad == {}


MALFORMED = [
    b'{"op":"c","after":{"id":1,"extra":2},"source":"x"}',
    b'{"op":"c","source":"x","after":{"id":1,"extra":2}}',
    b'{"op":"c","before":"x","after":{"id":1,"extra":2,"more":[1]}}',
    b'{"op":"c","after":{"id":1,"extra":2},"source":{"ts_ms":1},"before":[1]}',
    b'{"op":"d","before":{"id":1,"extra":2},"after":"x"}',
    b'{"op":"u","before":{"id":1,"extra":2},"after":{"id":2,"more":3},"source":5}',
    b'{"op":"c","after":[1],"source":{"ts_ms":1}}',
    b'{"op":" U ","before":{"id":1},"after":{"id":1,"more":3},"source":5}',
    b'{"op":"d","before":{"id":1},"after":{"id":2},"source":5}',
    b'{"op":5,"before":{"id":1},"after":{"id":2},"source":5}',
]


@pytest.mark.parametrize("evolving", [False, True])
@pytest.mark.usefixtures("spark")  # table schemas are Spark SQL types, parsed in its JVM
def test_malformed_envelopes_count_and_add_fields_as_on_the_spark_path(evolving: bool) -> None:
    """A before, after or source that is not an object makes a dead letter; the Spark path still
    reads the parts that are objects: the fields the table lacks are counted (or, with
    schema_evolution, become columns). The Python side counts the same, or refuses the event."""
    schema = T.StructType([T.StructField("id", T.IntegerType(), False), T.StructField("name", T.StringType())])
    for number, value in enumerate(MALFORMED):
        spark_sql = stored(GOLDEN, f"malformed {number}, evolving {evolving}")  # each value its own batch
        bad, added, unknown = spark_sql["dead_letters"], spark_sql["new_columns"], spark_sql["unknown_fields"]
        assert spark_sql["good"] == 0
        rows = TableRows(arrow_schema(schema), ["id"], "upsert", Conversions())
        try:
            errors = rows.add(EnvelopeReader(PayloadLimits()).read(value), "", evolving=evolving)
        except NotHere:
            assert evolving and added, f"{value!r}: refused"
            continue
        assert errors == bad, value
        assert (dict(rows.unknown), []) == (unknown, added), value


# The JSON converter writes the largest FLOAT as 3.4028235E38, a double beyond it that Spark (and
# Arrow) round to it; only from halfway to 2**128 on does a FLOAT overflow, as Java's text of the
# double says (kept out of CONVERSIONS, whose Spark output is frozen in tests/golden/debezium_conversions/)
LARGEST_FLOATS: list[tuple[str, Any, str]] = [
    ("real_c", 3.4028235e38, SAME),
    ("real_c", -3.4028235e38, SAME),
    ("real_c", "3.4028235E38", DEAD_LETTER),  # declared otherwise (issue 49)
    ("real_c", 3.4028235677973362e38, SAME),  # the last double below halfway
    ("real_c", 2.0**128 - 2.0**103, SAME),  # halfway: its shortest text lies below it, the largest FLOAT
    ("real_c", 3.5e38, DEAD_LETTER),  # beyond FLOAT: refused (issue 49), where Spark wrote infinity
]


@pytest.mark.usefixtures("spark")  # table schemas are Spark SQL types, parsed in its JVM
def test_the_largest_float_as_the_json_converter_writes_it() -> None:
    values = [full_types(i, **{column: value}) for i, (column, value, _) in enumerate(LARGEST_FLOATS)]
    refused, bad = compare_each(None, values, _FULL_TYPES_TABLE, ["int_c"], golden="largest floats")
    for i, (column, value, expected) in enumerate(LARGEST_FLOATS):
        case = f"{column}={value!r}"
        assert (i in refused) == (expected == REFUSED), f"{case}: {refused.get(i, 'accepted')}"
        if expected != REFUSED:
            assert (i in bad) == (expected == DEAD_LETTER), f"{case}: Spark: {bad.get(i)}"


@pytest.mark.usefixtures("spark")  # table schemas are Spark SQL types, parsed in its JVM
def test_surrogates_encoded_in_utf8_are_dead_letters() -> None:
    """UTF-8 bytes of a surrogate (ED A0 80 to ED BF BF) are not valid UTF-8: the Spark path makes
    the record a dead letter ("payload is not valid UTF-8"), and so does the Python side (json.loads
    alone would read them, surrogatepass). Hand-made messages."""
    values = [
        b'{"op":"c","after":{"id":1,"name":"\xed\xa0\x80x"},"source":{"ts_ms":1}}',
        b'{"op":"c","after":{"id":2,"extra":"\xed\xbf\xbf"},"source":{"ts_ms":1}}',
        b'{"op":"c","after":{"id":3},"source":{"ts_ms":1,"db":"\xed\xa0\x80"}}',
        b'{"op":"c","after":{"id":4,"name":"\xc3\xa9t\xc3\xa9"},"source":{"ts_ms":1}}',
    ]
    schema = T.StructType([T.StructField("id", T.IntegerType(), False), T.StructField("name", T.StringType())])
    refused, bad = compare_each(None, values, schema, ["id"], golden="surrogates")
    assert refused == {}
    assert bad == dict.fromkeys([0, 1, 2], "payload is not valid UTF-8")


def test_a_key_moving_update_with_two_bad_changes_is_one_dead_letter(spark: Any) -> None:
    """A key-moving update is two changes: a DELETE of the old key, then an upsert. When both are
    bad (here the old key is not an INT and the new row's weight is not a DOUBLE), the event is one
    dead letter, the DELETE's, on both decoders: two with one source position made `bad_records`
    count 2 where the dead-letter table keeps 1 (a review finding). Real products schema, values
    hand-made (no public stream has them)."""
    stream = ProductsStream()
    row = {"id": 101, "name": "scooter", "description": "small", "weight": 3.14}
    values = [
        stream.change("u", {**row, "id": "x"}, {**row, "id": 901, "weight": "heavy"}),
        stream.change("u", row, {**row, "id": 902, "weight": "heavy"}),  # the delete is good: it applies
    ]
    schema = table_schema(parse_envelope_schema(json.dumps(stream.schema)), ["id"])
    keep: list[Any] = []
    decoded = decode_debezium(kafka_frame(spark, values), "value", schema, ["id"], "upsert", KAFKA_POSITION, keep=keep)
    try:
        spark_bad = [(r["source_position"], r["error"]) for r in decoded.bad.orderBy("source_position").collect()]
        spark_good = [(r["id"], r["_op"]) for r in decoded.good.collect()]
    finally:
        for frame in keep:
            frame.unpersist()
    spark_sql = {"dead_letters": spark_bad, "good": spark_good}
    frozen(GOLDEN, "a key-moving update with two bad changes", spark_sql, decoder=PYTHON_DEBEZIUM)
    rows, dead = python_changes(values, schema, ["id"])
    assert [p.rpartition("@")[2] for p, _ in spark_bad] == ["0", "1"]
    assert spark_bad[0][1] == "column id: 'x' is not an INT"
    assert dead == {0: [spark_bad[0][1]], 1: [spark_bad[1][1]]}
    assert spark_bad[1][1].startswith("column weight")
    assert spark_good == [(101, DELETE)]
    assert [(v[0], op) for (op, _), v in rows.items()] == [(101, DELETE)]


# -- poison messages: whole-message dead letters ------------------------------------------------

_POISON_LIMITS = PayloadLimits(max_record_bytes=2600, max_nesting_depth=8)  # a products message: 2340 bytes, 7 deep
_SKIPPED, _GOOD = "skipped: a tombstone on both sides", "a good row on both sides"


def _corrupted(value: bytes, marker: bytes, replacement: bytes) -> bytes:
    assert value.count(marker) == 1
    return value.replace(marker, replacement)


def _poison() -> list[tuple[str, bytes, str]]:
    """(case, message, the Spark path's dead-letter error, or _SKIPPED, or _GOOD). Real messages: the products
    stream's (flink_mysql_products_schema.jsonl) with the corruption the case names; hand-made
    ones say so."""
    stream = ProductsStream()
    row = {"id": 101, "name": "scooter", "description": "small", "weight": 3.14}

    def real(**after: Any) -> bytes:
        return stream.change("c", None, {**row, **after})

    size = "payload is {} bytes, over max_record_bytes (2600)"
    utf8, depth = "payload is not valid UTF-8", "JSON nested deeper than max_nesting_depth (8)"
    surrogate = "payload escapes a lone UTF-16 surrogate (\\uD800-\\uDFFF), which UTF-8 cannot hold"
    long_row = real(description="x" * 300, extra=1)
    long_bad = _corrupted(real(description="x" * 300 + "_"), b"x_", b"\xff\xed\xa0")
    cases: list[tuple[str, bytes, str]] = [
        ("real, a longer description and a field the table lacks", long_row, size.format(len(long_row))),
        ("real, longer and not UTF-8 (size first)", long_bad, size.format(len(long_bad))),
        ("real tombstone of the converter, padded past the limit", _raw_change(stream, "null") + b" " * 900, _SKIPPED),
        ("real, a field the table lacks nested 6 deep", real(extra=[[[[[[1]]]]]]), depth),
        ("real, a name with a lone surrogate escape", real(name="\ud800"), surrogate),
        ("real, a name with an escaped pair", real(name="\U0001f600"), _GOOD),
        ("real, a name with byte FF", _corrupted(real(name="a_b"), b"a_b", b"a\xffb"), utf8),
        ("real, the UTF-8 bytes of a surrogate", _corrupted(real(name="a_b"), b"a_b", b"a\xed\xa0\x80b"), utf8),
        ("real, a surrogate's first two bytes", _corrupted(real(name="a_b"), b"a_b", b"a\xed\xbfb"), utf8),
        ("real, bytes F5 80 80 80", _corrupted(real(name="a_b"), b"a_b", b"\xf5\x80\x80\x80"), utf8),
        ("real, a cut 3-byte character", _corrupted(real(name="a_b"), b"a_b", b"a\xe2\x82b"), utf8),
        ("real, a field name with byte FF", _corrupted(real(extra=1), b'"extra"', b'"ex\xfftra"'), utf8),
        ("real, a field name with surrogate bytes", _corrupted(real(extra=1), b'"extra"', b'"e\xed\xa0\x80"'), utf8),
        ("real, its payload a list", _raw_change(stream, "[1]"), "malformed JSON"),
        ("real, its payload a number", _raw_change(stream, "5"), "malformed JSON"),
        ("real, its payload text", _raw_change(stream, '"x"'), "malformed JSON"),
        ("real payload after a UTF-8 byte order mark", b"\xef\xbb\xbf" + real(), "malformed JSON: not an object"),
        ("hand-made: empty", b"", "malformed JSON: empty payload"),
        ("hand-made: spaces", b"   ", "malformed JSON: empty payload"),
        ("hand-made: a tab", b"\t", "not a Debezium change event: op is missing"),
        ("hand-made: CR LF", b" \r\n", "not a Debezium change event: op is missing"),
        ("hand-made: null", b"null", _SKIPPED),
        ("hand-made: null in spaces", b" null  ", _SKIPPED),
        ("hand-made: null after a newline", b"\nnull", "malformed JSON: not an object"),
        ("hand-made: null before a newline", b"null\n", "malformed JSON: not an object"),
        ("hand-made: a list", b'[{"op":"c","after":{"id":1}}]', "malformed JSON: not an object"),
        ("hand-made: an empty list", b"[]", "malformed JSON: not an object"),
        ("hand-made: a number", b" 5", "malformed JSON: not an object"),
        ("hand-made: text", b'"x"', "malformed JSON: not an object"),
        ("hand-made: true", b"true", "malformed JSON: not an object"),
        ("hand-made: not JSON", b"hello", "malformed JSON: not an object"),
        ("hand-made: a cut list", b"[1", "malformed JSON: not an object"),
        ("hand-made: NUL", b"\x00", "malformed JSON: not an object"),
        ("hand-made: a list too deep", b"[" * 9 + b"]" * 9, depth),
        ("hand-made: not UTF-8 nor JSON", b"\xff", utf8),
        ("hand-made: an object after a tab", b'\t{"op":"c","after":{"id":7}}', _GOOD),
        ("hand-made: an empty object", b"{}", "not a Debezium change event: op is missing"),
    ]
    return cases


def test_poison_messages_are_the_spark_paths_dead_letters(spark: Any) -> None:
    """Messages the Spark path makes dead letters as a whole (a payload limit broken, text that is
    not a JSON object) are the same dead letters on the Python side, error, payload (U+FFFD where
    the bytes are not UTF-8, as Java's decoder puts them) and the fields the table lacks counted
    alike; tombstones are skipped on both. One batch on each side, as the sync fast path reads it."""
    cases = _poison()
    values = [value for _, value, _ in cases]
    schema = table_schema(parse_envelope_schema(json.dumps(ProductsStream().schema)), ["id"])
    keep: list[Any] = []
    decoded = decode_debezium(
        kafka_frame(spark, values), "value", schema, ["id"], "upsert", KAFKA_POSITION, keep=keep, limits=_POISON_LIMITS
    )
    try:
        spark_bad = {
            int(r["source_position"].rpartition("@")[2]): (r["error"], r["payload"]) for r in decoded.bad.collect()
        }
        spark_good = sorted(r["_source_order"] for r in decoded.good.collect())
        spark_unknown = dict(decoded.unknown_fields)
    finally:
        for frame in keep:
            frame.unpersist()
    spark_sql = {"dead_letters": sorted(spark_bad.items()), "good": spark_good, "unknown_fields": spark_unknown}
    frozen(GOLDEN, "poison messages", spark_sql, decoder=PYTHON_DEBEZIUM)
    reader = EnvelopeReader(_POISON_LIMITS)
    rows = TableRows(arrow_schema(schema), ["id"], "upsert", Conversions())
    dead: dict[int, tuple[str, str]] = {}
    skipped: list[int] = []
    for offset, value in enumerate(values):
        envelope = reader.read(value)
        if envelope is None:
            skipped.append(offset)
            continue
        for error in rows.add(envelope, source_order(envelope.source, envelope.ts_ms, offset), evolving=False):
            dead[offset] = (error, spark_text(value))  # the payload the sync fast path stores
    for offset, (case, _, expected) in enumerate(cases):
        if expected not in (_SKIPPED, _GOOD):
            error = spark_sql_error(spark_bad.get(offset, ("none",))[0])
            assert error == expected, f"{case}: Spark {spark_bad.get(offset)}"
    assert dead == spark_bad
    assert skipped == [i for i, (_, _, expected) in enumerate(cases) if expected == _SKIPPED]
    assert sorted(rows.table().column("_source_order").to_pylist()) == spark_good
    assert [_offset(("", order)) for order in spark_good] == [i for i, c in enumerate(cases) if c[2] == _GOOD]
    assert dict(rows.unknown) == spark_unknown
    assert spark_unknown["extra"] == 2
    assert {"ex\ufffdtra", "e\ufffd"} <= spark_unknown.keys()  # one U+FFFD for a surrogate's three bytes


@pytest.mark.usefixtures("spark")  # table schemas are Spark SQL types, parsed in its JVM
def test_poison_the_spark_path_reads_otherwise_is_refused() -> None:
    """What the Python side cannot give as the Spark path does stays NotHere: a truncate over a
    limit is applied there, not a dead letter; and text that starts as an object but is not JSON
    to Python is read by Jackson in part (a cut message: "malformed JSON", its fields counted) or
    whole (single quotes, text after the object: a row). Real products messages, corrupted as named."""
    stream = ProductsStream()
    row = {"id": 101, "name": "scooter", "description": "small", "weight": 3.14}
    cut = stream.change("c", None, {**row, "extra": 1})[:-1]
    values = [
        stream.truncate() + b" " * 600,  # over the size limit
        cut,
        stream.change("c", None, row) + b" trailing",
        b"{'op':'c','after':{'id':9}}",  # hand-made
    ]
    assert len(values[0]) > _POISON_LIMITS.max_record_bytes
    spark_sql = stored(GOLDEN, "poison read otherwise")  # the Spark SQL decoder's output of the batch
    spark_bad, spark_good = dict(spark_sql["dead_letters"]), spark_sql["good"]
    assert spark_sql["truncates"] == 1
    assert spark_bad == {1: "malformed JSON"}
    assert spark_good == [2, 3]
    for value in values:
        with pytest.raises(NotHere):
            EnvelopeReader(_POISON_LIMITS).read(value)


@pytest.mark.parametrize(
    ("column", "arrow_type", "holds"),
    [
        ("id", pa.int64(), True),  # the schema's int32 goes into a wider column as it is
        ("id", pa.int32(), True),
        ("id", pa.int16(), False),  # narrower: the Spark path widens the column
        ("weight", pa.float64(), True),
        ("weight", pa.float32(), False),
        ("weight", pa.decimal128(10, 2), False),
        ("name", pa.binary(), False),
    ],
)
def test_a_column_that_cannot_take_a_field_as_it_is_is_left_to_the_spark_path(
    column: str, arrow_type: pa.DataType, holds: bool
) -> None:
    """With schema_evolution, a table column whose type does not take the message schema's field
    as it is (the products schema of flink_mysql_products_schema.jsonl: id int32, weight double,
    name string) is refused with NotHere naming the column: the Spark path widens it."""
    types = {"id": pa.int64(), "name": pa.string(), "description": pa.string(), "weight": pa.float64()}
    types[column] = arrow_type
    schema = pa.schema([pa.field(n, t, nullable=n != "id") for n, t in types.items()])
    row = {"id": 101, "name": "scooter", "description": "small", "weight": 3.25}
    envelope = EnvelopeReader(PayloadLimits()).read(ProductsStream().change("c", None, row))
    rows = TableRows(schema, ["id"], "upsert", Conversions())
    if holds:
        assert rows.add(envelope, "", evolving=True) == []
    else:
        with pytest.raises(NotHere, match=f"column {column}:"):
            rows.add(envelope, "", evolving=True)
