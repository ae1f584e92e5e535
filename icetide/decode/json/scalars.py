"""A JSON value's text into one scalar column, as Spark's try_cast reads it (the rules of
decode/json/records.py, record by record), and how the decoders name types and values.

`scalar_value` converts the raw text of a JSON value (`json_values.spark_text`, or `raw_text` for
the Debezium decoder) to STRING, integers, FLOAT/DOUBLE, BOOLEAN, TIMESTAMP, TIMESTAMP_NTZ and
DATE: None when it does not fit. The column types the decoder reads block-wise are `supported`;
those it produces at all are `decodable` (decode/spark_compat/json_values.py and nested.py
read the others).
"""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pyarrow as pa

from icetide.decode import limits as lim
from icetide.decode.json import nested
from icetide.decode.spark_compat import json_values

RAW_MESSAGE_CHARS = 60  # as the former Spark SQL JSON decoder: how much of a bad value an error message quotes
TIMESTAMP_TEXT = nested.TIMESTAMP_TEXT.pattern  # for pyarrow's regular expression kernels
MIN_EPOCH_MS, MAX_EPOCH_MS = lim.MIN_EPOCH_MICROS // 1000, lim.MAX_EPOCH_MICROS // 1000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_INTEGRAL_MS = re.compile(r"^-?[0-9]{1,15}$")
_INTEGRAL_DAYS = re.compile(r"^-?[0-9]{1,7}$")
_INTEGER_TEXT = re.compile(r"^[+-]?[0-9]+$")
_NUMBER_TEXT = re.compile(r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$|^[+-]?(NaN|Infinity|inf)$")
# a date, and after it a midnight at most: Spark's casts drop any text after a space or T (issue 49)
_DATE_TEXT = re.compile(r"^(\d{4})(?:-(\d{1,2})(?:-(\d{1,2})(?:[T ]00:00(?::00(?:\.0+)?)?)?)?)?$")
_TRUE, _FALSE = {"t", "true", "y", "yes", "1"}, {"f", "false", "n", "no", "0"}
_EPOCH_DAY = date(1970, 1, 1)


def supported(dtype: pa.DataType) -> bool:
    """Whether the block-wise path reads a column of type `dtype` (and `scalar_value` converts it)."""
    if pa.types.is_timestamp(dtype):
        return dtype.unit == "us" and dtype.tz in ("UTC", "+00:00")
    return (
        pa.types.is_string(dtype)
        or pa.types.is_integer(dtype)
        or pa.types.is_float32(dtype)
        or pa.types.is_float64(dtype)
        or pa.types.is_boolean(dtype)
        or pa.types.is_date32(dtype)
    )


def unsupported_columns(schema: pa.Schema) -> list[str]:
    """Columns (as 'name TYPE') the block-wise path cannot produce (nor `scalar_value`,
    which the Debezium decoder shares); empty when the table's blocks decode in one pyarrow read.
    A table whose other columns are all `json_values.supported` still decodes, record by record."""
    return [f"{f.name} {f.type}" for f in schema if not supported(f.type)]


def decodable(dtype: pa.DataType) -> bool:
    """Whether the decoder produces a column of type `dtype` at all."""
    if pa.types.is_timestamp(dtype):
        return dtype.unit == "us"  # with a zone: TIMESTAMP; without: TIMESTAMP_NTZ
    return supported(dtype) or json_values.supported(dtype) or nested.supported(dtype)


def undecodable_columns(schema: pa.Schema) -> list[str]:
    """Columns (as 'name TYPE') this decoder cannot produce at all; empty when it can decode the
    table. Every type a Spark table's columns map to (pyspark's to_arrow_type) decodes, and every
    Iceberg type icetide writes (table/iceberg.py's arrow_type) but TIME (time64): Spark has no
    such type, so no table icetide creates has one, and decode_json has no rule to follow."""
    return [f"{f.name} {f.type}" for f in schema if not decodable(f.type)]


def type_name(dtype: pa.DataType) -> str:
    """How the Spark decoder's errors name a type (INT, BIGINT, TIMESTAMP, DECIMAL(10,2), array<int>...)."""
    name = json_values.simple_string(dtype)
    return name if "<" in name else name.upper()


def unfit_error(column: str, raw: str, t: pa.DataType, shape: str | None = None, beyond: bool = False) -> str:
    """The error of a value that does not fit column (or part of a column) `column` of type `t`:
    `shape` "object" or "array" for JSON where a STRING is, "number" for a number there that a
    double does not hold exactly (`json_values.double_holds`), `beyond` for a finite number beyond FLOAT. One
    wording for the JSON and the Debezium decoders."""
    quoted = raw if len(raw) <= RAW_MESSAGE_CHARS else raw[:RAW_MESSAGE_CHARS] + "..."
    if shape == "number":  # one a STRING would hold as a double's text, which is another number
        why = "is beyond a double" if math.isinf(float(raw)) else "has digits a double does not hold"
        return f"column {column}: number '{quoted}' {why}: not a STRING"
    if shape is not None:
        return f"column {column}: {shape} '{quoted}' is not a STRING"
    shown = type_name(t)
    if beyond:
        return f"column {column}: '{quoted}' is out of {shown} range"
    article = "an" if shown[:1].upper() in "AEIOU" else "a"
    return f"column {column}: '{quoted}' is not {article} {shown}"


def raw_text(value: Any) -> str:
    """A JSON value's text as the Debezium decoder has it (decode/debezium/rows.py): text as it
    is, a double as Python writes it (1e7: "10000000.0"). The JSON decoder spells values as
    Spark's from_json keeps them instead (`json_values.spark_text`: 1e7 is "1.0E7")."""
    if isinstance(value, str):
        return value
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ("NaN" if math.isnan(value) else "Infinity")
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def scalar_value(raw: str, t: pa.DataType, time_zone: str) -> Any:
    """Spark's try_cast of the raw text to `t`, in Python; None when it does not fit."""
    if pa.types.is_string(t):
        return raw
    if pa.types.is_integer(t):
        text = raw.strip()
        if not _INTEGER_TEXT.match(text):
            return None
        digits = text.lstrip("+-").lstrip("0")
        if len(digits) > 20:  # beyond every integer type, and maybe beyond int()
            return None
        number = int(text)
        low, high = lim.INT_RANGES[t.bit_width]
        return number if low <= number <= high else None
    if pa.types.is_floating(t):
        text = raw.strip()
        if not _NUMBER_TEXT.match(text):
            return None
        return float(text.replace("Infinity", "inf"))
    if pa.types.is_boolean(t):
        word = raw.strip().lower()
        return True if word in _TRUE else False if word in _FALSE else None
    if pa.types.is_timestamp(t):
        return _timestamp(raw, time_zone) if t.tz is not None else _wall_time(raw)
    if pa.types.is_date32(t):
        return _date(raw)
    return None


def _timestamp(raw: str, time_zone: str) -> datetime | None:
    """The instant, in years 0001-9999 in UTC (icetide.decode.limits), or None."""
    if _INTEGRAL_MS.match(raw):
        millis = int(raw)
        return _EPOCH + timedelta(milliseconds=millis) if MIN_EPOCH_MS <= millis <= MAX_EPOCH_MS else None
    return nested.timestamp_text(raw, time_zone)


def _wall_time(raw: str) -> datetime | None:
    """TIMESTAMP_NTZ (the former Spark SQL JSON decoder): integral epoch milliseconds as UTC wall time, else
    timestamp text without a zone (one would be dropped: None, issue 49); years 0001-9999."""
    if _INTEGRAL_MS.match(raw):
        return nested.epoch_wall_time(int(raw))
    return nested.wall_time_text(raw)


def _date(raw: str) -> date | None:
    if _INTEGRAL_DAYS.match(raw):
        days = int(raw)
        return _EPOCH_DAY + timedelta(days=days) if lim.MIN_EPOCH_DAYS <= days <= lim.MAX_EPOCH_DAYS else None
    match = _DATE_TEXT.match(raw.strip())
    if not match:
        return None
    try:
        return date(int(match.group(1)), int(match.group(2) or 1), int(match.group(3) or 1))
    except ValueError:
        return None
