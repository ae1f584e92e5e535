"""How the Debezium decoder reads one Connect field's JSON value into a column.

The rules of the former Spark SQL decoder (its `field_conversion` and `convert`), per column:
a `Converter` turns the field's JSON value (not None) into the column's storage value (epoch
microseconds for timestamps, epoch days for dates); it raises `DeadLetter` where that decoder's
conversion gave null (the record is a dead letter), and `NotHere` where it cannot tell exactly
what that decoder gave (the sync fast path then hands the batch to the Spark path, where the
record is a "not decoded" dead letter). Converters are made once per (envelope schema, table
column), not per message.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa

from icetide.decode import limits as lim
from icetide.decode.debezium import connect_schema as C
from icetide.decode.debezium import decimals
from icetide.decode.debezium.declared import declared_check
from icetide.decode.json import nested
from icetide.decode.json.scalars import scalar_value, unfit_error, unsupported_columns
from icetide.decode.spark_compat import datetime_casts, json_values
from icetide.decode.spark_compat.connect_text import (
    WIDE,
    DeadLetter,
    NotHere,
    decimal_number,
    decimal_unscaled,
    exact_number,
    field_text,
    float32_of,
    java_double,
    java_fullmatch,
    time_of_day_text,
)

__all__ = ["Conversions", "Converter", "DeadLetter", "NotHere", "storage_type", "supported_column"]

_INTEGRAL_19 = re.compile("-?[0-9]{1,19}")
_INTEGRAL_18 = re.compile("-?[0-9]{1,18}")
_INTEGRAL_15 = re.compile("-?[0-9]{1,15}")
_INTEGRAL_7 = re.compile("-?[0-9]{1,7}")
_INTEGRAL_15_18 = re.compile("-?[0-9]{15,18}")
_NOT_TIMES = (float, Decimal)  # numbers whose Java text ("1.5", "1.0E7") no time or date cast reads
_MICROS_FROM = 100_000_000_000_000  # as the former Spark SQL decoder: a larger schemaless epoch is microseconds
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_WALL = datetime(1970, 1, 1)
_EPOCH_DAY = date(1970, 1, 1)
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_FLOAT32_OUT = 2.0**128 - 2.0**103  # halfway from the largest FLOAT to 2**128: from here on, infinity
# The words `java_double` reads as infinity (after Java's trim, a sign and any case): not a number.
_INFINITY_WORDS = ("inf", "infinity")
# What Spark's casts but to FLOAT and DOUBLE trim off text (UTF8String.trimAll: bytes that are
# Java whitespace or ISO controls, so ASCII only), as measured (tests/test_decoder_golden_values.py)
_TRIM_ALL = "".join(map(chr, [*range(0x21), 0x7F]))


def supported_column(t: pa.DataType) -> bool:
    """Can this decoder produce a column of Arrow type `t`? Those of the arrow_json decoder's scalar
    rules, DECIMAL, BINARY, TIMESTAMP_NTZ, and ARRAY, STRUCT and MAP of what
    decode/json/nested.py reads."""
    return (
        pa.types.is_decimal128(t)
        or (pa.types.is_timestamp(t) and t.unit == "us")
        or pa.types.is_binary(t)
        or nested.supported(t)
        or not unsupported_columns(pa.schema([pa.field("c", t)]))
    )


def storage_type(t: pa.DataType) -> pa.DataType:
    """The type the converters' Python values are collected in before the cast to `t`: epoch
    microseconds for timestamps, epoch days for dates, the column's own type otherwise."""
    if pa.types.is_timestamp(t):
        return pa.int64()
    if pa.types.is_date32(t):
        return pa.int32()
    return t


Converter = Callable[[Any], Any]  # a JSON value (not None) -> the column's storage value; DeadLetter or NotHere


def _read_as_is(f: C.ConnectField, t: pa.DataType) -> tuple[type, tuple[int, int] | None] | None:
    """The Python type whose values (within the integer bounds, if any) field `f` declares and
    column `t` stores unchanged, so its converter can return them at once; None where no such
    shortcut is exact (a logical type, a narrower float column, a type read otherwise)."""
    if f.logical is not None:
        return None
    if f.type == "string" and pa.types.is_string(t):
        return str, None
    if f.type in ("double", "float64") and pa.types.is_float64(t):
        return float, None
    if f.type == "boolean" and pa.types.is_boolean(t):
        return bool, None
    bits = _DECLARED_BITS.get(f.type)
    if bits is not None and pa.types.is_integer(t):
        (low, high), (col_low, col_high) = lim.INT_RANGES[bits], lim.INT_RANGES[t.bit_width]
        return int, (max(low, col_low), min(high, col_high))
    return None


_DECLARED_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
_NESTED = frozenset({"struct", "array", "map"})


@dataclass(frozen=True)
class Conversions:
    """How the Connect fields of a table's columns are read (what `decode_debezium` does, in Python)."""

    time_zone: str = "UTC"
    decimal_handling_mode: str = "precise"
    time_precision_mode: str = "adaptive_time_microseconds"

    def converter(self, f: C.ConnectField | None, t: pa.DataType, name: str) -> Converter:
        """The converter of column `name` of type `t` for Connect field `f` (None: no schema).
        NotHere for a combination it does not read exactly. A value the column's reading takes
        is a dead letter all the same where it contradicts the type `f` declares
        (decode/debezium/declared.py); one it refuses keeps that reading's error, but for a
        struct, array or map, whose parts are checked against their declared types first."""
        convert = self._reader(f, t, name)
        check = declared_check(f, name) if f is not None else None
        if check is None:
            return convert
        assert f is not None
        if f.type in _NESTED:  # its parts checked first: the error names the part and its declared type

            def parts_first(v: Any) -> Any:
                check(v)
                return convert(v)

            return parts_first
        same = _read_as_is(f, t)
        if same is None:

            def checked(v: Any) -> Any:
                return _read_then_check(convert, check, v)

            return checked
        kind, bounds = same
        if bounds is None:

            def as_is(v: Any) -> Any:  # most values in one call: of the declared form, stored as they are
                if type(v) is kind:
                    return v
                return _read_then_check(convert, check, v)

            return as_is
        low, high = bounds

        def integer_as_is(v: Any) -> Any:
            if type(v) is int and low <= v <= high:
                return v
            return _read_then_check(convert, check, v)

        return integer_as_is

    def _reader(self, f: C.ConnectField | None, t: pa.DataType, name: str) -> Converter:
        logical = f.logical if f is not None else None
        if f is None:
            if pa.types.is_decimal128(t) and self.decimal_handling_mode == "precise":
                return self._schemaless_decimal(t, name)
            if pa.types.is_timestamp(t) and self.time_precision_mode != "connect":
                return self._adaptive_timestamp(t, name)
            return self._generic(t, name, declared=False)
        if logical == C.DECIMAL:
            return self._decimal(f, t, name)
        if logical == C.VARIABLE_SCALE_DECIMAL:
            return self._variable_scale(t, name)
        if logical in C.TIMESTAMP_UNITS and pa.types.is_timestamp(t):
            unit = C.TIMESTAMP_UNITS[logical]
            return self._generic(t, name) if unit == "ms" else _epoch_micros(unit, name, self._generic(t, name))
        if logical in C.TIME_MICROS and (pa.types.is_string(t) or pa.types.is_integer(t)):
            return _time_of_day(C.TIME_MICROS[logical], t, name)
        return self._generic(t, name)

    def _of_text(self, t: pa.DataType, name: str) -> Callable[[str], Any]:
        """Decimal text into a column of `t` (the former Spark SQL decoder `_to_type`): a DECIMAL without
        rounding, never a BINARY (Spark read the digits as base64), any other type as text is converted."""
        if pa.types.is_decimal128(t):
            return lambda text: decimals.text_decimal(text, t, name)
        if pa.types.is_binary(t) or pa.types.is_fixed_size_binary(t):

            def no_bytes(text: str) -> Any:  # issue 49: its digits read as base64 were bytes of nothing
                raise DeadLetter(why=f"column {name}: a decimal is no BINARY")

            return no_bytes
        return self._generic(t, name)

    def _schemaless_decimal(self, t: pa.Decimal128Type, name: str) -> Converter:
        into = self._of_text(t, name)
        return lambda v: into(decimals.schemaless_decimal_text(v, t.scale, name))

    def _variable_scale(self, t: pa.DataType, name: str) -> Converter:
        into, zone = self._of_text(t, name), self.time_zone
        return lambda v: into(decimals.variable_scale_text(v, name, zone))

    # -- conversions --------------------------------------------------------------------------

    def _generic(self, t: pa.DataType, name: str, *, declared: bool = True) -> Converter:
        """`convert(raw, t, "ms")` of the Spark path: the arrow_json decoder's rules, Java's for
        FLOAT and DOUBLE text, Spark's parsers for time and date text (decode/spark_compat/datetime_casts.py);
        but exactly where Spark repaired (issue 49): a DECIMAL without rounding, a FLOAT without
        a finite value beyond its range, an ARRAY, STRUCT or MAP by `_nested`. `declared`: the
        message's schema declares the field (else the column's type alone decides)."""
        json_value = functools.partial(scalar_value, time_zone=self.time_zone)

        def value_of(raw: str, t: pa.DataType) -> Any:
            if pa.types.is_timestamp(t) or pa.types.is_date32(t):
                return time_of(raw, t)
            raw = raw.strip(_TRIM_ALL)  # Spark's casts trim ASCII spaces and controls (UTF8String.trimAll)
            if raw.strip() != raw:
                raise DeadLetter()  # another space at an end: no cast takes it
            value = json_value(raw, t)
            if value is None:
                raise DeadLetter()
            return value

        def time_of(raw: str, t: pa.DataType) -> Any:
            """the former Spark SQL JSON decoder `convert`: an epoch integer (its RLIKE test as Java matches it, its
            cast trimming a final line feed), else Spark's cast of the text."""
            epoch = _INTEGRAL_15 if pa.types.is_timestamp(t) else _INTEGRAL_7
            if java_fullmatch(epoch, raw):
                number = _long_text(raw, epoch)
                value = None if number is None else json_value(str(number), t)
            else:
                value = self._spark_datetime(raw, t, name)
            if value is None:
                raise DeadLetter()
            return value

        if pa.types.is_string(t):
            if not declared:  # no schema: an object or array is no text (as in plain JSON, issue 49)

                def schemaless_text(v: Any) -> str:
                    kind = type(v)
                    if kind is str:
                        return v  # type: ignore[no-any-return]
                    if kind is dict or kind is list:
                        shape = "object" if kind is dict else "array"
                        raise DeadLetter(unfit_error(name, field_text(v), t, shape=shape))
                    if kind is Decimal and v.is_finite() and not json_values.double_holds(v):
                        raise DeadLetter(unfit_error(name, str(v), t, shape="number"))  # as in plain JSON
                    return field_text(v)

                return schemaless_text

            def text(v: Any) -> str:
                return v if type(v) is str else field_text(v)

            return text
        if pa.types.is_integer(t):
            low, high = lim.INT_RANGES[t.bit_width]

            def integer(v: Any) -> Any:
                if type(v) is int and low <= v <= high:
                    return v
                return value_of(field_text(v), t)

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
                    if math.isinf(x) and (kind is int or (kind is Decimal and v.is_finite())):
                        # a number beyond a double, no infinity (issue 49): Spark wrote infinity. Its
                        # field_text is Jackson's '"Infinity"': the error quotes the number read.
                        raise DeadLetter(unfit_error(name, str(v), t, beyond=True))
                else:
                    text = field_text(v)
                    parsed = java_double(text)
                    if parsed is None:
                        raise DeadLetter()
                    word = text.strip(json_values.JAVA_TRIM).lower().lstrip("+-")
                    if math.isinf(parsed) and word not in _INFINITY_WORDS:  # numeric text beyond a double
                        raise DeadLetter(unfit_error(name, text, t, beyond=True))
                    x = parsed
                # an integer that is its double: no doubt
                if single and not (type(v) is int and math.isfinite(x) and int(x) == v):
                    y = _single(x, v)
                    if math.isinf(y) and math.isfinite(x):  # issue 49: Spark wrote infinity
                        raise DeadLetter(unfit_error(name, field_text(v), t, beyond=True))
                    return y
                return x

            return floating
        if pa.types.is_boolean(t):
            return lambda v: v if type(v) is bool else value_of(field_text(v), t)
        if pa.types.is_timestamp(t):
            epoch = _EPOCH if t.tz is not None else _EPOCH_WALL  # TIMESTAMP_NTZ: the wall time, as in UTC

            def timestamp(v: Any) -> Any:
                if type(v) is int and lim.MIN_EPOCH_MS <= v <= lim.MAX_EPOCH_MS:
                    return v * 1000
                if type(v) in _NOT_TIMES:
                    raise DeadLetter()
                moment = value_of(field_text(v), t)
                return (moment - epoch) // _MICRO

            return timestamp
        if pa.types.is_date32(t):

            def day(v: Any) -> int:
                if type(v) in _NOT_TIMES:
                    raise DeadLetter()
                return (value_of(field_text(v), t) - _EPOCH_DAY).days  # type: ignore[no-any-return]

            return day
        if pa.types.is_decimal128(t):  # exactly: no digit beyond the scale is rounded away (issue 49)
            return _converted(lambda raw: json_values.exact_decimal_value(raw, t))
        if pa.types.is_binary(t):
            return _converted(json_values.binary_value)
        return _nested(t, name, self.time_zone, declared=declared)

    def _spark_datetime(self, raw: str, t: pa.DataType, name: str) -> date | datetime | None:
        """Text the arrow_json rules do not read as a time or date, as Spark's cast reads it
        (decode/spark_compat/datetime_casts.py); None where it gives null, a dead letter saying
        what where it reads the text only by dropping part of it (`Inexact`)."""
        try:
            if pa.types.is_date32(t):
                days = datetime_casts.date_days(raw)
                return None if days is None else _EPOCH_DAY + timedelta(days=days)
            micros = datetime_casts.timestamp_micros(raw, self.time_zone, with_zone=t.tz is not None)
        except datetime_casts.Unsure as exc:
            why = f"column {name}: a time in year 0 or 10000 that its zone may bring into range ({exc})"
            raise NotHere(why) from None
        except datetime_casts.Inexact as exc:  # issue 49: not repaired into a row
            raise _Dropped(f"{unfit_error(name, raw, t)}: {exc}") from None
        if micros is None or not lim.MIN_EPOCH_MICROS <= micros <= lim.MAX_EPOCH_MICROS:
            return None
        return (_EPOCH if t.tz is not None else _EPOCH_WALL) + timedelta(microseconds=micros)

    def _adaptive_timestamp(self, t: pa.DataType, name: str) -> Converter:
        """A schemaless timestamp: epoch microseconds when the integer is that large, else as "ms"."""
        otherwise = self._generic(t, name)

        def adaptive(v: Any) -> Any:
            raw = field_text(v)
            if java_fullmatch(_INTEGRAL_15_18, raw):
                micros = _long_text(raw, _INTEGRAL_15_18)
                if micros is None:  # a line end the cast to BIGINT does not trim: null, so not micros
                    return otherwise(v)
                if abs(micros) >= _MICROS_FROM:
                    return _in_range(micros, name)
            return otherwise(v)

        return adaptive

    def _decimal(self, f: C.ConnectField, t: pa.DataType, name: str) -> Converter:
        """A Connect Decimal into a column: a number or base64 bytes at the declared scale, then
        at the column's, a digit beyond either a dead letter (the Spark SQL decoder rounded a
        number to the declared scale, and E notation such as 1.0E-7 to the column's)."""
        scale = f.scale or 0
        if not (0 <= scale <= 38 and pa.types.is_decimal128(t)):
            into = self._of_text(t, name)
            return lambda v: into(decimals.connect_decimal_text(v, scale, name))
        precision, target = t.precision, t.scale
        limit = 10**precision

        def decimal(v: Any) -> Any:
            number = decimal_number(v, name)
            # exactly at the declared scale; then the column's, never rounded (issue 49)
            unscaled = decimals.base64_unscaled(v, name) if number is None else decimal_unscaled(number, scale, name)
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


class _Dropped(DeadLetter):
    """A value Spark's cast reads only by dropping part of it (issue 49: a dead letter, never repaired)."""


def _read_then_check(convert: Converter, check: Callable[[Any], None], v: Any) -> Any:
    """`convert(v)`, then the declared type's `check(v)`; where `convert` refuses a value only
    for what its cast would drop, a contradiction of the declared type is named first (it is
    the first thing wrong: text where an int32 date is declared)."""
    try:
        value = convert(v)
    except _Dropped:
        check(v)
        raise
    check(v)
    return value


def _nested(t: pa.DataType, name: str, zone: str, *, declared: bool) -> Converter:
    """An ARRAY, STRUCT or MAP column (`supported_column`) from the field's JSON value, read
    exactly (decode/json/nested.py `exact_value`, the JSON decoder's reading; issue 49):
    a part that does not fit its element or field type is a dead letter naming it (`column
    geo.srid: 'x' is not an INT`), never null as Spark's from_json left it. An object or array
    in a STRING element or field is kept as its JSON text only where the message's schema
    declares the field (`declared`): its parts have then passed the declared check, so such a
    part is declared a struct, array or map, as a top-level one into a STRING column is kept;
    without a schema, the column's type alone decides and it is a dead letter."""

    def read(v: Any) -> Any:
        try:
            value = nested.exact_value(field_text(v), t, nested.Reading(zone, as_text=declared))
        except nested.Unfit as part:
            raise DeadLetter(unfit_error(name + part.path, part.raw, part.type, part.shape, part.beyond)) from None
        if value is None:
            raise DeadLetter()
        return value

    return read


def _converted(convert: Callable[[str], Any]) -> Converter:
    """A converter of the value's text by `convert` (None: it does not convert, a dead letter)."""

    def converted(v: Any) -> Any:
        value = convert(field_text(v))
        if value is None:
            raise DeadLetter()
        return value

    return converted


_MICRO = datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=UTC) - _EPOCH


def _single(x: float, v: Any) -> float:
    """`x`, the double of value `v`, for a FLOAT column. Spark parses the value's text (Java's for
    a JSON number) straight to a FLOAT; Arrow rounds the double `x` to one. The two can differ
    only where `x` is halfway between two FLOATs (the text may lie on either side of it), or
    beyond the largest FLOAT: there the text's exact value decides (`float32_of`). Infinity for
    a finite `x` is a value beyond FLOAT's range, which the converter refuses (issue 49)."""
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
    exact = exact_number(v)
    if exact is None:  # no number Java's Float.parseFloat reads: Spark's cast gives null
        raise DeadLetter()
    return float32_of(exact)


def _in_range(micros: int, name: str) -> int:
    if not lim.MIN_EPOCH_MICROS <= micros <= lim.MAX_EPOCH_MICROS:
        raise DeadLetter(why=f"column {name}: a timestamp outside years 0001-9999")
    return micros


def _epoch_micros(unit: str, name: str, otherwise: Converter) -> Converter:
    """MicroTimestamp ("us", up to 18 digits) and NanoTimestamp ("ns", whole microseconds only: the
    column holds microseconds), from an integer or its text. Other text: for "us", a time as
    `otherwise` reads it; for "ns", a dead letter."""

    integral = _INTEGRAL_19 if unit == "ns" else _INTEGRAL_18

    def micros(v: Any) -> Any:
        if type(v) is not int:
            text = field_text(v)
            if not java_fullmatch(integral, text):
                if unit == "ns":
                    raise DeadLetter()
                return otherwise(v)
            v = _long_text(text, integral)
            if v is None:  # a line end the cast to BIGINT does not trim: null
                raise DeadLetter()
        if unit == "ns":
            if not lim.INT_RANGES[64][0] <= v <= lim.INT_RANGES[64][1]:
                raise DeadLetter(why=f"column {name}: a nanosecond timestamp beyond a BIGINT")
            v = _whole_micros(v, name, "timestamp")
        elif not -(10**18) < v < 10**18:
            raise DeadLetter(why=f"column {name}: a microsecond timestamp beyond 18 digits")
        return _in_range(v, name)

    return micros


def _whole_micros(nanos: int, name: str, what: str) -> int:
    """`nanos` in microseconds; a dead letter when that would drop nanoseconds (the column holds
    microseconds: Spark's and Iceberg's timestamps, and icetide's times of day)."""
    micros, rest = divmod(nanos, 1000)
    if rest:
        raise _Dropped(f"column {name}: {nanos} ns, a {what} finer than the column's microseconds")
    return micros


def _time_of_day(per_unit_micros: int, t: pa.DataType, name: str) -> Converter:
    """Time/MicroTime/NanoTime, an integer or its text of up to 19 digits, in microseconds. A dead
    letter for what does not fit exactly: text that is no integer, a number beyond a BIGINT,
    microseconds beyond one, and nanoseconds below a microsecond (the former Spark SQL decoder read
    the first two as null, wrapped the third as Java's long does and dropped the last)."""

    low64, high64 = lim.INT_RANGES[64]

    def micros_of(v: Any) -> int:
        if type(v) is int and low64 <= v <= high64:  # 19 digits at most
            n = v
        else:
            text = v if type(v) is str else field_text(v)
            if not java_fullmatch(_INTEGRAL_19, text):
                raise DeadLetter(why=f"column {name}: a time of day that is not an integer")
            number = _long_text(text, _INTEGRAL_19)
            if number is None:
                raise _Dropped(why=f"column {name}: a time of day that is not an integer")
            n = number
        micros = _whole_micros(n, name, "time of day") if per_unit_micros == 0 else n * per_unit_micros
        if not low64 < micros <= high64:  # -2**63 too; a declared type contradicted is named first
            raise _Dropped(why=f"column {name}: a time of day beyond a BIGINT of microseconds")
        return micros

    if pa.types.is_string(t):
        return lambda v: time_of_day_text(micros_of(v))
    if pa.types.is_integer(t):
        low, high = lim.INT_RANGES[t.bit_width]

        def integral(v: Any) -> int:
            try:
                micros = micros_of(v)
            except _Dropped as exc:
                if exc.error:  # finer than a microsecond
                    raise
                micros = None
            if micros is None or not low <= micros <= high:
                raise DeadLetter(why=f"column {name}: a time of day beyond {t}")
            return micros

        return integral
    raise ValueError(f"column {name}: a time of day is read into STRING and integers only, not {t}")


def _long_text(text: str, integral: re.Pattern[str]) -> int | None:
    """The integer of `text`, which matches `integral` as Java's `$` does, as Spark's cast to a
    BIGINT reads it: a final line feed or carriage return trimmed, any other line end not (None)."""
    stripped = text.removesuffix("\n").removesuffix("\r")
    return int(stripped) if integral.fullmatch(stripped) else None
