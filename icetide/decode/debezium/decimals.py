"""Decimal text of Connect values, as the former Spark SQL decoder built it, for the
Python decoder's conversions (decode/debezium/conversions.py).

A Connect Decimal is read as text first: a number (decimal.format=NUMERIC, or the string and
double handling modes) as its text, or base64 big-endian two's-complement bytes (precise mode) as
its unscaled value with the schema's scale; io.debezium.data.VariableScaleDecimal as a struct of
its scale and such bytes. That text then goes into the column as any text does, but a DECIMAL
column takes it only without rounding (`text_decimal`).
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa

from icetide.decode.json import nested
from icetide.decode.json.scalars import unfit_error
from icetide.decode.spark_compat import json_values
from icetide.decode.spark_compat.connect_text import (
    DeadLetter,
    decimal_number,
    decimal_unscaled,
    field_text,
    java_decimal_text,
    java_fullmatch,
)

_DECIMAL_38 = 10**38
_VARIABLE_SCALE = pa.struct([("scale", pa.int32()), ("value", pa.string())])


def connect_decimal_text(v: Any, scale: int, name: str) -> str:
    """The text of a Connect Decimal of `scale` (the former Spark SQL decoder `_number_or_base64` with
    `_exact_number`): a number read again from the payload as DECIMAL(38, scale) when the scale
    is 0 to 38 (else its own text), or base64 bytes. DeadLetter where Spark's text is null, and
    where the number has a digit beyond `scale` (`decimal_unscaled`; Spark rounded it)."""
    number = decimal_number(v, name)
    if number is None:
        return unscaled_text(base64_unscaled(v, name), scale)
    if scale < 0 and (shifted := number.scaleb(scale)) != shifted.to_integral_value():
        raise DeadLetter(f"column {name}: '{field_text(v)}' has digits beyond the scale {scale} its schema declares")
    if not 0 <= scale <= 38:
        return field_text(v)
    return java_decimal_text(decimal_unscaled(number, scale, name), scale)


def schemaless_decimal_text(v: Any, scale: int, name: str) -> str:
    """The text of a decimal without a schema (decimal.handling.mode=precise): a number as its own
    text (not read again), or base64 bytes with the column's scale."""
    if decimal_number(v, name, read_again=False) is None:
        return unscaled_text(base64_unscaled(v, name), scale)
    return field_text(v)


def variable_scale_text(v: Any, name: str, time_zone: str) -> str:
    """The text of an io.debezium.data.VariableScaleDecimal (`{"scale": s, "value": base64}`),
    read exactly as a `scale INT, value STRING` struct (decode/json/nested.py `exact_value`:
    a part that does not fit is a dead letter naming it); DeadLetter without a scale of 0 to 38."""
    try:
        parts = nested.exact_value(field_text(v), _VARIABLE_SCALE, nested.Reading(time_zone))
    except nested.Unfit as part:
        raise DeadLetter(unfit_error(name + part.path, part.raw, part.type, part.shape, part.beyond)) from None
    scale = parts["scale"] if parts is not None else None
    if scale is None or not 0 <= scale <= 38 or parts["value"] is None:
        raise DeadLetter(why=f"column {name}: a variable scale decimal without a scale of 0 to 38")
    return unscaled_text(base64_unscaled(parts["value"], name), scale)


def text_decimal(text: str, t: pa.Decimal128Type, name: str) -> Any:
    """Decimal text into a DECIMAL column, exactly: plain or E notation, with no non-zero digit
    beyond the column's scale (issue 49: the former Spark SQL decoder `_to_type` cast E notation
    with rounding half up); DeadLetter otherwise."""
    plain = re.compile(rf"-?[0-9]*(\.[0-9]{{0,{t.scale}}}0*)?")
    value = None
    if "e" in text or "E" in text or java_fullmatch(plain, text):
        value = json_values.exact_decimal_value(text, t)
    if value is None:
        raise DeadLetter(why=f"column {name}: a decimal that does not fit DECIMAL({t.precision},{t.scale})")
    return value


def base64_unscaled(v: Any, name: str) -> int:
    """The unscaled integer of a precise decimal: base64 big-endian two's complement, at most 16
    bytes, read as `try_to_binary(v, 'base64')` reads it (no bytes: 0)."""
    data = json_values.binary_value(field_text(v))
    if data is None:
        raise DeadLetter(why=f"column {name}: a decimal that is not base64")
    if len(data) > 16:
        raise DeadLetter(why=f"column {name}: a decimal of {len(data)} bytes")
    unscaled = int.from_bytes(data, "big", signed=True) if data else 0
    # Spark adds the high 8 bytes times 2**64 to the low 8 in DECIMAL(38,0): past 38 digits, on
    # the way (a negative value within 2**64 of -10**38) or at the end, its text is null.
    if abs(unscaled) >= _DECIMAL_38 or abs(unscaled >> 64 << 64) >= _DECIMAL_38:
        raise DeadLetter(why=f"column {name}: a decimal beyond 38 digits")
    return unscaled


def unscaled_text(unscaled: int, scale: int) -> str:
    """The decimal text of unscaled / 10**scale, plain, as `_decimal_text` in the former Spark SQL
    decoder; a negative scale multiplies (issue 49: Spark's text was the digits alone, 5 at scale
    -2 read as 5, not 500)."""
    digits = str(abs(unscaled)).rjust(scale + 1, "0") if scale > 0 else str(abs(unscaled)) + "0" * -scale
    sign = "-" if unscaled < 0 else ""
    return sign + (digits[: len(digits) - scale] + "." + digits[len(digits) - scale :] if scale > 0 else digits)
