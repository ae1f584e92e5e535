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

from icetide.decode import connect as C
from icetide.decode import limits as lim
from icetide.decode.arrow_json import ArrowJsonDecoder
from icetide.decode.arrow_json_scalars import raw_text, unsupported_columns

_NUMBER = re.compile(r"^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$")
_DIGIT = re.compile("[0-9]")
_FLOAT_WORDS = {"inf", "+inf", "-inf", "infinity", "+infinity", "-infinity", "nan", "+nan", "-nan"}
_INTEGRAL_19 = re.compile("-?[0-9]{1,19}")
_NOT_BASE64 = re.compile(r"[^A-Za-z0-9+/=\s]")
_MICROS_FROM = 100_000_000_000_000  # as decode/debezium.py: a larger schemaless epoch is microseconds
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_DAY = date(1970, 1, 1)
_DECIMAL_38 = 10**38
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_FLOAT32_HALFWAY_OUT = 2.0**128 - 2.0**103  # halfway from the largest FLOAT to 2**128: from here on, infinity
_SPARK_TRIMS = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f "  # the whitespace Spark trims off text it casts (ASCII only)
# Spark's casts trim control characters as well (UTF8String.trimAll); the arrow_json rules do not
_CONTROLS = "".join(map(chr, [*range(0x20), *range(0x7F, 0xA0)]))


class NotHere(Exception):
    """This record (or table) is for the Spark path; the message says why, for the debug log."""


class DeadLetter(NotHere):
    """A record the Spark path makes a dead letter, with `error`, the error it gives it (None: a
    value that does not convert; the caller, which knows the column and the value, words it).

    A NotHere too: code that does not record dead letters sends the batch to the Spark path."""

    def __init__(self, error: str | None = None, why: str = "") -> None:
        super().__init__(error or why or "a value that does not convert (a dead letter on the Spark path)")
        self.error = error


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

    def __post_init__(self) -> None:
        object.__setattr__(self, "_json", ArrowJsonDecoder(pa.schema([]), (), time_zone=self.time_zone))

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
            return self._generic(t, name) if unit == "ms" else _epoch_micros(unit, name)
        if logical in C.TIME_MICROS:
            return _time_of_day(C.TIME_MICROS[logical], t, name)
        return self._generic(t, name)

    # -- conversions --------------------------------------------------------------------------

    def _generic(self, t: pa.DataType, name: str) -> Converter:
        """`convert(raw, t, "ms")` of the Spark path: the arrow_json decoder's rules."""
        json_value = self._json._value  # type: ignore[attr-defined]

        def value_of(raw: str, t: pa.DataType) -> Any:
            if raw.strip(_SPARK_TRIMS + _CONTROLS) != raw.strip(_SPARK_TRIMS):
                raise NotHere(f"column {name}: text with a control character at an end")
            if raw.strip() != raw.strip(_SPARK_TRIMS):
                if pa.types.is_integer(t) or pa.types.is_boolean(t):  # Spark's cast takes no such text
                    raise DeadLetter()
                raise NotHere(f"column {name}: text with a space Spark does not trim")
            value = json_value(raw, t)
            if value is None:
                _not_converted(raw, t, name)
            return value

        if pa.types.is_string(t):

            def text(v: Any) -> str:
                if type(v) is str:
                    return v
                if type(v) in (int, bool):
                    return raw_text(v)
                # Spark keeps the token's own text (1e5, {"a": 1}); Python would write it again
                raise NotHere(f"column {name}: a number or a nested value into a STRING column")

            return text
        if pa.types.is_integer(t):
            low, high = lim.INT_RANGES[t.bit_width]

            def integer(v: Any) -> Any:
                if type(v) is int and low <= v <= high:
                    return v
                return value_of(raw_text(v), t)

            return integer
        if pa.types.is_floating(t):
            single = pa.types.is_float32(t)

            def floating(v: Any) -> float:
                try:
                    x = float(v) if type(v) in (int, float) else value_of(raw_text(v), t)
                except OverflowError as exc:  # an integer beyond a double
                    raise NotHere(f"column {name}: a number beyond a DOUBLE") from exc
                if single and not (type(v) is int and int(x) == v):  # an integer that is its double: no doubt
                    return _single(x, name)
                return x

            return floating
        if pa.types.is_boolean(t):
            return lambda v: v if type(v) is bool else value_of(raw_text(v), t)
        if pa.types.is_timestamp(t):

            def timestamp(v: Any) -> Any:
                if type(v) is int and lim.MIN_EPOCH_MS <= v <= lim.MAX_EPOCH_MS:
                    return v * 1000
                moment = value_of(raw_text(v), t)
                return (moment - _EPOCH) // _MICRO

            return timestamp
        if pa.types.is_date32(t):
            return lambda v: (value_of(raw_text(v), t) - _EPOCH_DAY).days
        raise NotHere(f"column {name}: type {t}")

    def _adaptive_timestamp(self, v: Any) -> Any:
        """A schemaless timestamp: epoch microseconds when the integer is that large, else as "ms"."""
        raw = raw_text(v)
        if re.fullmatch(r"-?[0-9]{15,18}", raw) and abs(int(raw)) >= _MICROS_FROM:
            return _in_range(int(raw), "")
        return self._generic(pa.timestamp("us", tz="UTC"), "")(v)

    def _decimal(self, f: C.ConnectField, t: pa.DataType, name: str) -> Converter:
        scale = f.scale or 0
        if not 0 <= scale <= 38:
            raise NotHere(f"column {name}: decimal scale {scale}")
        if pa.types.is_string(t):
            return lambda v: _decimal_text(_unscaled(v, name), scale)
        if not pa.types.is_decimal128(t):
            raise NotHere(f"column {name}: a Connect Decimal into {t}")
        precision, target = t.precision, t.scale
        limit = 10**precision

        def decimal(v: Any) -> Any:
            unscaled = _unscaled(v, name)
            if scale <= target:
                unscaled *= 10 ** (target - scale)
            else:
                step = 10 ** (scale - target)
                if unscaled % step:
                    raise DeadLetter(why=f"column {name}: a decimal that would be rounded")
                unscaled //= step
            if not -limit < unscaled < limit:
                raise DeadLetter(why=f"column {name}: a decimal beyond DECIMAL({precision},{target})")
            return Decimal(unscaled).scaleb(-target)

        return decimal


_MICRO = datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=UTC) - _EPOCH


def _single(x: float, name: str) -> float:
    """`x` for a FLOAT column. Spark parses the value's text straight to a FLOAT; Arrow rounds the
    double `x` to one. The two can differ only where `x` is halfway between two FLOATs (the text,
    Java's for a JSON number, may lie on either side of it), or beyond the largest FLOAT: below
    halfway to 2**128 both round to the largest FLOAT, from there on Spark's rounding decides."""
    if not math.isfinite(x):
        return x
    if abs(x) > _FLOAT32_MAX:
        if abs(x) < _FLOAT32_HALFWAY_OUT:  # 3.4028235E38, the JSON converter's largest FLOAT: Spark rounds it down
            return math.copysign(_FLOAT32_MAX, x)
        raise NotHere(f"column {name}: a number beyond a FLOAT")
    nearest = float(np.float32(x))
    if nearest != x:
        mirror = 2 * Fraction(x) - Fraction(nearest)  # a FLOAT too when x is halfway
        if abs(mirror) <= _FLOAT32_MAX and Fraction(float(np.float32(float(mirror)))) == mirror:
            raise NotHere(f"column {name}: a number halfway between two FLOATs")
    return x


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


def _epoch_micros(unit: str, name: str) -> Converter:
    """MicroTimestamp ("us", up to 18 digits) and NanoTimestamp ("ns", divided toward zero)."""

    def micros(v: Any) -> Any:
        if type(v) is not int:
            raise NotHere(f"column {name}: an epoch timestamp that is not an integer")
        if unit == "ns":
            if not lim.INT_RANGES[64][0] <= v <= lim.INT_RANGES[64][1]:
                raise DeadLetter(why=f"column {name}: a nanosecond timestamp beyond a BIGINT")
            v = -(-v // 1000) if v < 0 else v // 1000
        elif not -(10**18) < v < 10**18:
            raise DeadLetter(why=f"column {name}: a microsecond timestamp beyond 18 digits")
        return _in_range(v, name)

    return micros


def _time_of_day(per_unit_micros: int, t: pa.DataType, name: str) -> Converter:
    """Time/MicroTime/NanoTime as `_time_of_day` of decode/debezium.py: text or integral micros."""

    low64, high64 = lim.INT_RANGES[64]

    def micros_of(v: Any) -> int:
        if type(v) is not int or not low64 <= v <= high64:
            if type(v) in (int, str) and _INTEGRAL_19.fullmatch(str(v)):
                # Spark reads text of up to 19 digits too, and past a BIGINT writes 'null:null:null.  null'
                raise NotHere(f"column {name}: a time of day that is not a BIGINT")
            raise DeadLetter(why=f"column {name}: a time of day that is not a BIGINT")
        if per_unit_micros == 0:
            return -(-v // 1000) if v < 0 else v // 1000
        if not low64 <= v * per_unit_micros <= high64:
            raise NotHere(f"column {name}: a time of day beyond a BIGINT of microseconds")
        return v * per_unit_micros

    if pa.types.is_string(t):

        def text(v: Any) -> str:
            micros = micros_of(v)
            if micros == low64:  # Spark's abs() of it overflows (and keeps it negative)
                raise NotHere(f"column {name}: a time of day of -2**63 microseconds")
            a = abs(micros)
            sign = "-" if micros < 0 else ""
            hours, minutes, seconds = a // 3_600_000_000, a // 60_000_000 % 60, a // 1_000_000 % 60
            return f"{sign}{hours:02d}:{minutes:02d}:{seconds:02d}.{a % 1_000_000:06d}"

        return text
    if pa.types.is_integer(t):
        low, high = lim.INT_RANGES[t.bit_width]

        def integral(v: Any) -> int:
            micros = micros_of(v)
            if not low <= micros <= high:
                raise DeadLetter(why=f"column {name}: a time of day beyond {t}")
            return micros

        return integral
    raise NotHere(f"column {name}: a Connect time of day into {t}")


def _unscaled(v: Any, name: str) -> int:
    """The unscaled integer of a precise decimal: base64 big-endian two's complement, at most 16 bytes."""
    if type(v) is not str:
        raise NotHere(f"column {name}: a decimal sent as a number")
    if _NUMBER.match(v) and (any(c in v for c in ".eE-") or len(v) % 4):
        raise NotHere(f"column {name}: a decimal sent as text")
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
