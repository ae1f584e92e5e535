"""The JSON half of tests/test_decoder_golden_conversions.py (see its docstring): the Spark SQL
decoder's output on the payloads of tests/test_decode.py and tests/test_fast_append.py, frozen in
tests/golden/json/. `decode_json` (now the Python decoder in Spark's tasks, decode/json/tasks.py)
must give it for each group decoded as one batch, and `ArrowJsonDecoder` for each case alone."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

from icetide.decode.debezium.rows import NotHere
from icetide.decode.json.records import ArrowJsonDecoder
from icetide.decode.json.tasks import decode_json
from tests.test_debezium_arrow import KAFKA_POSITION, arrow_schema, kafka_frame
from tests.test_decode import ADS, BAD_CASES, LACKING_VALUES, TYPED_VALUES
from tests.test_decoder_golden import _spelling
from tests.test_decoder_golden_conversions import (
    GOLDEN,
    Case,
    Output,
    by_reason,
    check_golden,
    check_python,
    unique,
)
from tests.test_fast_append import BAD, KEY, KEYS_NO_COLUMN, SCHEMA, good_event


def _text_cases(values: Sequence[str | bytes | None]) -> list[Case]:
    """Cases named by their payload (a payload is its own stable id; None is a tombstone)."""
    encoded = [v.encode() if isinstance(v, str) else v for v in values]
    return unique([("tombstone" if v is None else v.decode(), v) for v in encoded])


def _fast_append_table() -> T.StructType:
    fields = []
    for column in SCHEMA.split(", "):
        name, ddl, *not_null = column.split(" ")
        fields.append(T.StructField(name, T._parse_datatype_string(ddl), nullable=not not_null))
    return T.StructType(fields)


_KEYS_NO_COLUMN_TABLE = T.StructType(
    [T.StructField("id", T.StringType(), nullable=False), T.StructField("n", T.LongType())]
)

JSON_GROUPS: dict[str, tuple[Callable[[], list[Case]], Callable[[], T.StructType], list[str], str]] = {
    # group -> (cases, table, key, op mode)
    "ads_typed-upsert": (lambda: _text_cases(TYPED_VALUES), lambda: ADS, ["ad_id"], "upsert"),
    "ads_typed-append": (lambda: _text_cases(TYPED_VALUES), lambda: ADS, ["ad_id"], "append"),
    "ads_bad": (lambda: _text_cases(list(BAD_CASES)), lambda: ADS, ["ad_id"], "upsert"),
    "ads_lacking_fields": (lambda: _text_cases(LACKING_VALUES), lambda: ADS, ["ad_id"], "upsert"),
    "fast_append": (
        lambda: unique([(f"good_event({i})", json.dumps(good_event(i)).encode()) for i in range(5)]) + _text_cases(BAD),
        _fast_append_table,
        KEY,
        "append",
    ),
    "keys_no_column": (lambda: _text_cases(KEYS_NO_COLUMN), lambda: _KEYS_NO_COLUMN_TABLE, ["id"], "append"),
    # The ADS payloads again, into the columns of ADS the pyarrow decoder can produce, appended.
    "ads_supported_columns": (
        lambda: _text_cases(list(dict.fromkeys([*TYPED_VALUES, *BAD_CASES, *LACKING_VALUES]))),
        lambda: T.StructType([f for f in ADS.fields if f.name not in ("price", "tags", "blob")]),
        ["ad_id"],
        "append",
    ),
}

# What the Python JSON decoder does not decode yet: group -> reason -> case ids (or ALL).
NOT_YET_JSON: dict[str, dict[str, Any]] = {}
# Cases the Python decoder decodes, but not as the golden file has them: group -> id -> how.
PYTHON_DIFFERS: dict[str, dict[str, str]] = {}
# Groups whose count of keys the table lacks differs between the decoders, and why.
UNKNOWN_FIELDS_NOT_YET: dict[str, str] = {}


def _arrow_type(t: T.DataType) -> pa.DataType:
    if isinstance(t, T.ArrayType):
        return pa.list_(_arrow_type(t.elementType))
    return arrow_schema(T.StructType([T.StructField("v", t)])).field(0).type


def _json_row(row: dict[str, Any], schema: T.StructType, op: str) -> dict[str, Any]:
    return {"_op": op, **{n: _spelling(row[n]) for n in schema.names}}


@pytest.mark.parametrize("group", list(JSON_GROUPS))
def test_json_decoders_match_the_golden_files(spark: Any, group: str) -> None:
    make_cases, make_table, key, op_mode = JSON_GROUPS[group]
    cases, schema = make_cases(), make_table()
    keep: list[Any] = []
    unknown: dict[str, int] = {}
    good, bad = decode_json(
        kafka_frame(spark, [v for _, v in cases]),
        "value",
        schema,
        key,
        op_mode,  # type: ignore[arg-type]
        KAFKA_POSITION,
        extra_cols=["offset"],
        keep=keep,
        unknown_fields=unknown,
    )
    try:
        columns = [
            F.unix_micros(f.name).alias(f.name) if isinstance(f.dataType, T.TimestampType) else F.col(f"`{f.name}`")
            for f in schema.fields
        ]
        rows = [
            (r["offset"], _json_row(r.asDict(), schema, r["_op"]))
            for r in good.select(*columns, "_op", "offset").collect()
        ]
        errors = {int(r["source_position"].rpartition("@")[2]): r["error"] for r in bad.collect()}
    finally:
        for frame in keep:
            frame.unpersist()
    per_case = [
        {
            "id": case,
            "good": [row for at, row in rows if at == offset],
            "dead_letters": [errors[offset]] if offset in errors else [],
        }
        for offset, (case, _) in enumerate(cases)
    ]
    head = {
        "decoder": "icetide.decode.json.decode_json",  # the Spark SQL decoder that wrote the file
        "table": [[f.name, f.dataType.simpleString(), f.nullable] for f in schema.fields],
        "key": key,
        "op_mode": op_mode,
        "unknown_fields": unknown,
    }
    golden = check_golden(GOLDEN / "json" / f"{group}.json", head, per_case)

    arrow = pa.schema([pa.field(f.name, _arrow_type(f.dataType), nullable=f.nullable) for f in schema.fields])
    counted: dict[str, int] = {}

    def python(offset: int, value: bytes | None) -> Output:
        try:
            decoder = ArrowJsonDecoder(arrow, key, op_mode=op_mode)  # type: ignore[arg-type]
        except ValueError as exc:
            raise NotHere(str(exc)) from None
        try:
            decoded = decoder.decode([value], lambda _: f"cdc/0@{offset}")
        except pa.ArrowInvalid as exc:  # a crash, where the Spark decoder gives a row or a dead letter
            return {"raises": f"ArrowInvalid: {exc}"}
        table = decoded.with_ops()
        for i, f in enumerate(table.schema):
            if pa.types.is_timestamp(f.type):
                table = table.set_column(i, f.name, table[i].cast(pa.int64()))
        for name, count in decoded.unknown_fields.items():
            counted[name] = counted.get(name, 0) + count
        return {
            "good": [_json_row(r, schema, r["_op"]) for r in table.to_pylist()],
            "dead_letters": [b.error for b in decoded.bad],
        }

    not_yet = check_python(group, cases, golden, python, PYTHON_DIFFERS.get(group))
    assert by_reason(not_yet, cases) == NOT_YET_JSON.get(group, {})
    if not not_yet:  # counted over every case of the group
        assert (counted == golden["unknown_fields"]) == (group not in UNKNOWN_FIELDS_NOT_YET), counted
