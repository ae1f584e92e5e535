"""How the sync fast path's Python decoder reads one Connect field's JSON value into a column.

The rules of the Spark decoder (decode/debezium.py `field_conversion` and `convert`), per column:
a `Converter` turns the field's JSON value (not None) into the column's storage value (epoch
microseconds for timestamps, epoch days for dates); it raises `DeadLetter` where the Spark path's
conversion gives null (the record is a dead letter there), and `NotHere` when only the Spark path
reads it exactly. Converters are made once per (envelope schema, table column), not per message.
"""

from __future__ import annotations

import base64
import binascii
import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa

from icetide.decode import arrow_json_values as json_values
from icetide.decode import connect as C
from icetide.decode import limits as lim
from icetide.decode.arrow_json_scalars import scalar_value, unsupported_columns
from icetide.decode.connect_values import (
    JAVA_LINE_ENDS,
    WIDE,
    DeadLetter,
    NotHere,
    decimal_number,
    decimal_unscaled,
    exact_number,
    field_text,
    float32_of,
    java_decimal_text,
    time_of_day_text,
    wrapped_long,
)

__all__ = ["Conversions", "Converter", "DeadLetter", "NotHere", "storage_type", "supported_column"]

_DIGIT = re.compile("[0-9]")
_FLOAT_WORDS = {"inf", "+inf", "-inf", "infinity", "+infinity", "-infinity", "nan", "+nan", "-nan"}
_INTEGRAL_19 = re.compile("-?[0-9]{1,19}")
_INTEGRAL_18 = re.compile("-?[0-9]{1,18}")
_PAST_MICROS = re.compile(r"(:[0-9]{2}\.[0-9]{6})[0-9]+")  # a second's fraction past microseconds
_NOT_TIMES = (float, Decimal)  # numbers whose Java text ("1.5", "1.0E7") no time or date cast reads
_NOT_BASE64 = re.compile(r"[^A-Za-z0-9+/=\s]")
_MICROS_FROM = 100_000_000_000_000  # as decode/debezium.py: a larger schemaless epoch is microseconds
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_DAY = date(1970, 1, 1)
_DECIMAL_38 = 10**38
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_FLOAT32_OUT = 2.0**128 - 2.0**103  # halfway from the largest FLOAT to 2**128: from here on, infinity
_SPARK_TRIMS = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f "  # the whitespace Spark trims off text it casts (ASCII only)
# Spark's casts trim control characters as well (UTF8String.trimAll); the arrow_json rules do not
_CONTROLS = "".join(map(chr, [*range(0x20), *range(0x7F, 0xA0)]))


def supported_column(t: pa.DataType) -> bool:
    """Can this decoder produce a column of Arrow type `t`?"""
    return pa.types.is_decimal128(t) or not unsupported_columns(pa.schema([pa.field("c", t)]))


def storage_type(t: pa.DataType) -> pa.DataType:
    """The type the converters' Python values are collected in before the cast to `t`: epoch
    microseconds for timestamps, epoch days for dates, the column's own type otherwise."""
    if pa.types.is_timestamp(t):
        return pa.int64()
    if pa.types.is_date32(t):
        return pa.int32()
    return t


Converter = Callable[[Any], Any]  # a JSON value (not None) -> the column's storage value; DeadLetter or NotHere


@dataclass(frozen=True)
class Conversions:
    """How the Connect fields of a table's columns are read (what `decode_debezium` does, in Python)."""

    time_zone: str = "UTC"
    decimal_handling_mode: str = "precise"
    time_precision_mode: str = "adaptive_time_microseconds"

    def converter(self, f: C.ConnectField | None, t: pa.DataType, name: str) -> Converter:
        """The converter of column `name` of type `t` for Connect field `f` (None: no schema).
        NotHere when the combination is one only the Spark path reads."""
        logical = f.logical if f is not None else None
        if f is None:
            if pa.types.is_decimal128(t):
                raise NotHere(f"column {name}: a DECIMAL from a message without a schema")
            if pa.types.is_timestamp(t) and self.time_precision_mode != "connect":
                return self._adaptive_timestamp
            return self._generic(t, name)
        if logical == C.DECIMAL:
            return self._decimal(f, t, name)
        if logical == C.VARIABLE_SCALE_DECIMAL or pa.types.is_decimal128(t):
            raise NotHere(f"column {name}: {logical or f.type} into {t}")
        if logical in C.TIMESTAMP_UNITS and pa.types.is_timestamp(t):
            unit = C.TIMESTAMP_UNITS[logical]
            return self._generic(t, name) if unit == "ms" else _epoch_micros(unit, name, self._generic(t, name))
        if logical in C.TIME_MICROS:
            return _time_of_day(C.TIME_MICROS[logical], t, name)
        return self._generic(t, name)

    # -- conversions --------------------------------------------------------------------------

    def _generic(self, t: pa.DataType, name: str) -> Converter:
        """`convert(raw, t, "ms")` of the Spark path: the arrow_json decoder's rules."""
        json_value = functools.partial(scalar_value, time_zone=self.time_zone)

        def value_of(raw: str, t: pa.DataType) -> Any:
            if raw.strip(_SPARK_TRIMS + _CONTROLS) != raw.strip(_SPARK_TRIMS):
                raise NotHere(f"column {name}: text with a control character at an end")
            if raw.strip() != raw.strip(_SPARK_TRIMS):
                if pa.types.is_integer(t) or pa.types.is_boolean(t):  # Spark's cast takes no such text
                    raise DeadLetter()
                raise NotHere(f"column {name}: text with a space Spark does not trim")
            value = json_value(raw, t)
            if value is None and pa.types.is_timestamp(t) and _PAST_MICROS.search(raw):
                value = json_value(_PAST_MICROS.sub(r"\1", raw, count=1), t)  # Spark ignores those digits
            if value is None:
                _not_converted(raw, t, name)
            return value

        if pa.types.is_string(t):

            def text(v: Any) -> str:
                return v if type(v) is str else field_text(v, name)

            return text
        if pa.types.is_integer(t):
            low, high = lim.INT_RANGES[t.bit_width]

            def integer(v: Any) -> Any:
                if type(v) is int and low <= v <= high:
                    return v
                return value_of(field_text(v, name), t)

            return integer
        if pa.types.is_floating(t):
            single = pa.types.is_float32(t)

            def floating(v: Any) -> float:
                kind = type(v)
                if kind is Decimal or kind is float or kind is int:
                    try:
                        x = float(v)
                    except OverflowError:  # an integer beyond a double: Java reads its digits as infinity
                        x = math.inf if v > 0 else -math.inf
                    if x != x and kind is Decimal:  # the NaN literal: Spark's text of it, '"NaN"', does not cast
                        raise DeadLetter()
                else:
                    x = value_of(field_text(v, name), t)
                # an integer that is its double: no doubt
                if single and not (type(v) is int and math.isfinite(x) and int(x) == v):
                    return _single(x, name, v if type(v) is not str else v.strip(_SPARK_TRIMS))
                return x

            return floating
        if pa.types.is_boolean(t):
            return lambda v: v if type(v) is bool else value_of(field_text(v, name), t)
        if pa.types.is_timestamp(t):

            def timestamp(v: Any) -> Any:
                if type(v) is int and lim.MIN_EPOCH_MS <= v <= lim.MAX_EPOCH_MS:
                    return v * 1000
                if type(v) in _NOT_TIMES:
                    raise DeadLetter()
                moment = value_of(field_text(v, name), t)
                return (moment - _EPOCH) // _MICRO

            return timestamp
        if pa.types.is_date32(t):

            def day(v: Any) -> int:
                if type(v) in _NOT_TIMES:
                    raise DeadLetter()
                return (value_of(field_text(v, name), t) - _EPOCH_DAY).days  # type: ignore[no-any-return]

            return day
        raise NotHere(f"column {name}: type {t}")

    def _adaptive_timestamp(self, v: Any) -> Any:
        """A schemaless timestamp: epoch microseconds when the integer is that large, else as "ms"."""
        raw = field_text(v)
        if re.fullmatch(r"-?[0-9]{15,18}", raw) and abs(int(raw)) >= _MICROS_FROM:
            return _in_range(int(raw), "")
        return self._generic(pa.timestamp("us", tz="UTC"), "")(v)

    def _decimal(self, f: C.ConnectField, t: pa.DataType, name: str) -> Converter:
        scale = f.scale or 0
        if not 0 <= scale <= 38:
            raise NotHere(f"column {name}: decimal scale {scale}")
        if pa.types.is_string(t):

            def text(v: Any) -> str:
                number = decimal_number(v, name)
                if number is None:
                    return _decimal_text(_base64_unscaled(v, name), scale)
                return java_decimal_text(_number_unscaled(number, scale, name), scale)

            return text
        if not pa.types.is_decimal128(t):
            raise NotHere(f"column {name}: a Connect Decimal into {t}")
        precision, target = t.precision, t.scale
        limit = 10**precision

        def decimal(v: Any) -> Any:
            number = decimal_number(v, name)
            if number is None:
                unscaled = _base64_unscaled(v, name)
            else:
                unscaled = _number_unscaled(number, scale, name)
                shown = java_decimal_text(unscaled, scale)
                if "E" in shown:  # Spark casts this text with rounding (decode/debezium.py `_to_type`)
                    value = json_values.decimal_value(shown, t)
                    if value is None:
                        raise DeadLetter(why=f"column {name}: a decimal beyond DECIMAL({precision},{target})")
                    return value
            if scale <= target:
                unscaled *= 10 ** (target - scale)
            else:
                step = 10 ** (scale - target)
                if unscaled % step:
                    raise DeadLetter(why=f"column {name}: a decimal that would be rounded")
                unscaled //= step
            if not -limit < unscaled < limit:
                raise DeadLetter(why=f"column {name}: a decimal beyond DECIMAL({precision},{target})")
            return Decimal(unscaled).scaleb(-target, context=WIDE)  # the default context keeps 28 digits

        return decimal


_MICRO = datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=UTC) - _EPOCH


def _single(x: float, name: str, v: Any) -> float:
    """`x`, the double of value `v`, for a FLOAT column. Spark parses the value's text (Java's for
    a JSON number) straight to a FLOAT; Arrow rounds the double `x` to one. The two can differ
    only where `x` is halfway between two FLOATs (the text may lie on either side of it), or
    beyond the largest FLOAT: there the text's exact value decides (`float32_of`)."""
    if not math.isfinite(x):
        return x
    if abs(x) <= _FLOAT32_MAX:
        nearest = float(np.float32(x))
        if nearest == x:
            return x
        mirror = 2 * Fraction(x) - Fraction(nearest)  # a FLOAT too when x is halfway
        if abs(mirror) > _FLOAT32_MAX or Fraction(float(np.float32(float(mirror)))) != mirror:
            return x
    elif abs(x) != _FLOAT32_OUT:  # the text lies on x's side of that double: below it, the largest FLOAT
        return math.copysign(_FLOAT32_MAX, x) if abs(x) < _FLOAT32_OUT else math.copysign(math.inf, x)
    exact = exact_number(v, name)
    if exact is None:
        raise NotHere(f"column {name}: a number near a FLOAT's halfway whose text is not plain decimal")
    return float32_of(exact)


def _not_converted(raw: str, t: pa.DataType, name: str) -> None:
    """Raise for text that the arrow_json decoder's rules do not convert to `t`: DeadLetter where
    the Spark path surely does not convert it either. Its casts to a time or a date take more
    forms than those rules (and a number, Java's), so there only an epoch integer out of range or
    text without a digit is surely a dead letter; for a FLOAT or DOUBLE, text without a digit that
    is none of the words Spark reads as infinity or NaN."""
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        raise DeadLetter()
    if pa.types.is_floating(t) and not _DIGIT.search(raw) and raw.strip().lower() not in _FLOAT_WORDS:
        raise DeadLetter()
    epoch_digits = 15 if pa.types.is_timestamp(t) else 7 if pa.types.is_date32(t) else 0
    if epoch_digits and (re.fullmatch(f"-?[0-9]{{1,{epoch_digits}}}", raw) or not _DIGIT.search(raw)):
        raise DeadLetter()
    raise NotHere(f"column {name}: a value that does not convert (the Spark path may read it)")


def _in_range(micros: int, name: str) -> int:
    if not lim.MIN_EPOCH_MICROS <= micros <= lim.MAX_EPOCH_MICROS:
        raise DeadLetter(why=f"column {name}: a timestamp outside years 0001-9999")
    return micros


def _epoch_micros(unit: str, name: str, otherwise: Converter) -> Converter:
    """MicroTimestamp ("us", up to 18 digits) and NanoTimestamp ("ns", divided toward zero), from
    an integer or its text. Other text: for "us", a time as `otherwise` reads it; for "ns", null."""

    def micros(v: Any) -> Any:
        if type(v) is not int:
            if type(v) is not str or v.endswith(JAVA_LINE_ENDS):
                if type(v) in _NOT_TIMES or type(v) is bool:
                    raise DeadLetter()
                raise NotHere(f"column {name}: an epoch timestamp that is not an integer")
            if not (_INTEGRAL_19 if unit == "ns" else _INTEGRAL_18).fullmatch(v):
                if unit == "ns":
                    raise DeadLetter()
                return otherwise(v)
            v = int(v)
        if unit == "ns":
            if not lim.INT_RANGES[64][0] <= v <= lim.INT_RANGES[64][1]:
                raise DeadLetter(why=f"column {name}: a nanosecond timestamp beyond a BIGINT")
            v = -(-v // 1000) if v < 0 else v // 1000
        elif not -(10**18) < v < 10**18:
            raise DeadLetter(why=f"column {name}: a microsecond timestamp beyond 18 digits")
        return _in_range(v, name)

    return micros


def _time_of_day(per_unit_micros: int, t: pa.DataType, name: str) -> Converter:
    """Time/MicroTime/NanoTime as `_time_of_day` of decode/debezium.py: text of up to 19 digits
    (else null), read as a BIGINT (null beyond one), times the unit in Java's long arithmetic."""

    low64, high64 = lim.INT_RANGES[64]

    def micros_of(v: Any) -> int | None:
        if type(v) is int and low64 <= v <= high64:  # 19 digits at most
            n = v
        else:
            text = v if type(v) is str else field_text(v, name)
            if not _INTEGRAL_19.fullmatch(text):
                if text.endswith(JAVA_LINE_ENDS):
                    raise NotHere(f"column {name}: a time of day whose text ends a line")
                raise DeadLetter(why=f"column {name}: a time of day that is not an integer")
            n = int(text)
            if not low64 <= n <= high64:
                return None  # Spark's try_cast to BIGINT: null
        if per_unit_micros == 0:
            return -(-n // 1000) if n < 0 else n // 1000
        return wrapped_long(n * per_unit_micros)

    if pa.types.is_string(t):
        return lambda v: time_of_day_text(micros_of(v))
    if pa.types.is_integer(t):
        low, high = lim.INT_RANGES[t.bit_width]

        def integral(v: Any) -> int:
            micros = micros_of(v)
            if micros is None or not low <= micros <= high:
                raise DeadLetter(why=f"column {name}: a time of day beyond {t}")
            return micros

        return integral
    raise NotHere(f"column {name}: a Connect time of day into {t}")


def _number_unscaled(number: Decimal, scale: int, name: str) -> int:
    """The unscaled integer of a Connect Decimal sent as a number, read as DECIMAL(38, scale)."""
    unscaled = decimal_unscaled(number, scale)
    if unscaled is None:
        raise DeadLetter(why=f"column {name}: a decimal number beyond DECIMAL(38,{scale})")
    return unscaled


def _base64_unscaled(v: Any, name: str) -> int:
    """The unscaled integer of a precise decimal: base64 big-endian two's complement, at most 16 bytes."""
    if type(v) is Decimal:  # NaN, Infinity, or beyond a double: quoted text, not base64
        raise DeadLetter(why=f"column {name}: a decimal that is not base64")
    v = field_text(v, name)
    try:
        data = base64.b64decode(v, validate=True)
    except (binascii.Error, ValueError) as exc:
        if _NOT_BASE64.search(v):  # Spark's decoder is laxer on padding and spaces, not on these
            raise DeadLetter(why=f"column {name}: a decimal that is not base64") from exc
        raise NotHere(f"column {name}: a decimal that is not base64") from exc
    if len(data) > 16:
        raise DeadLetter(why=f"column {name}: a decimal of {len(data)} bytes")
    if not data:
        raise NotHere(f"column {name}: a decimal of no bytes")
    unscaled = int.from_bytes(data, "big", signed=True)
    # Spark adds the high 8 bytes times 2**64 to the low 8 in DECIMAL(38,0): past 38 digits, on
    # the way (a negative value within 2**64 of -10**38) or at the end, its text is null.
    if abs(unscaled) >= _DECIMAL_38 or abs(unscaled >> 64 << 64) >= _DECIMAL_38:
        raise DeadLetter(why=f"column {name}: a decimal beyond 38 digits")
    return unscaled


def _decimal_text(unscaled: int, scale: int) -> str:
    """The decimal text of `_decimal_text` in decode/debezium.py."""
    digits = str(abs(unscaled)).rjust(scale + 1, "0")
    sign = "-" if unscaled < 0 else ""
    return sign + (digits[: len(digits) - scale] + "." + digits[len(digits) - scale :] if scale else digits)
