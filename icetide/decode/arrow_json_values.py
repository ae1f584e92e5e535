"""DECIMAL, BINARY and ARRAY values of the pyarrow JSON decoder (decode/arrow_json.py), one at a time.

Each function is what decode/json.py does to a field's raw text, in Python, as Spark 3.5 does it:
- DECIMAL: `try_cast(raw AS DECIMAL(p,s))`: the text trimmed of characters up to U+0020 (Java's
  `String.trim`), then Java's BigDecimal grammar (Unicode digits count, no `NaN`, `Infinity` or
  `_`), rounded half up to the scale; more integral digits than `p - s` after rounding does not fit.
- BINARY: `try_to_binary(raw, 'base64')`: the base64 alphabet (not the URL-safe one), Java
  whitespace skipped before the padding and nothing but `=` after it, at most two `=`, and with
  them a multiple of four characters; without padding any length but 4n+1. Trailing bits are ignored.
- ARRAY: `from_json(raw, array<T>)`: the first JSON value of the text (leading JSON whitespace
  skipped, the rest ignored) must be an array, and every element fit T by Spark's JSON reader's
  rules, else the whole value does not fit. Elements: STRING (a non-string element as Jackson
  writes it), INT and BIGINT (integral numbers in range), BOOLEAN (true or false), DECIMAL (numbers,
  or text with its commas removed, in BigDecimal's grammar untrimmed; rounded half up). Other
  element types are not decoded here (`supported`): Spark's reader fails the whole batch on some
  of their values (text into array<double>, a bad date into array<date>).

The raw text is Spark's (Jackson's) text of a JSON value (`spark_text`): a number that is not
integral is written as Java's `Double.toString` writes it (`1.234567890125E11`), and one beyond a
double as the quoted text `"Infinity"`. Known difference: Java 17 sometimes writes a double with
more digits than the shortest that reads back; this module writes the shortest.
"""

from __future__ import annotations

import base64
import json
import math
import re
import unicodedata
from decimal import MAX_EMAX, MIN_EMIN, ROUND_HALF_UP, Context, Decimal, InvalidOperation
from typing import Any

import pyarrow as pa

from icetide.decode import limits as lim

MAX_NUMBER_LENGTH = 1000  # as decode/arrow_json.py: Spark's reader refuses a longer number
_BIG_DECIMAL = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)(?:[eE]([+-]?\d+))?")  # \d: any Unicode digit, as Java
_JAVA_TRIM = "".join(chr(c) for c in range(0x21))  # String.trim: every character up to U+0020
_JSON_SPACE = " \t\n\r"
_BASE64 = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
_JAVA_SPACE = frozenset("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f")
_NO_BREAK = frozenset("\u00a0\u2007\u202f")
_MAX_EXPONENT = 2**31 - 1  # BigDecimal's scale is an int


def _checked_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_NUMBER_LENGTH:
        raise ValueError("number too long")
    return int(text)


def _checked_decimal(text: str) -> Decimal:
    if len(text) > MAX_NUMBER_LENGTH:
        raise ValueError("number too long")
    return Decimal(text)


# Numbers that are not integral are kept exact (Jackson reads a BigDecimal from the token's text).
_ELEMENTS = json.JSONDecoder(parse_int=_checked_int, parse_float=_checked_decimal)


def java_double_text(x: float) -> str:
    """Java's `Double.toString(x)` (shortest digits): decimal from 1e-3 up to 1e7, else `d.dddE±n`."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    sign, digits, exponent = Decimal(repr(x)).as_tuple()
    assert isinstance(exponent, int)
    shown = "".join(map(str, digits)).rstrip("0") or "0"
    point = len(digits) + exponent  # digits before the decimal point
    minus = "-" if sign else ""
    if 1e-3 <= abs(x) < 1e7:
        if point <= 0:
            return f"{minus}0.{'0' * -point}{shown}"
        if point >= len(shown):
            return f"{minus}{shown}{'0' * (point - len(shown))}.0"
        return f"{minus}{shown[:point]}.{shown[point:]}"
    return f"{minus}{shown[0]}.{shown[1:] or '0'}E{point - 1}"


def spark_text(value: Any) -> str:
    """The raw text Spark keeps for a JSON value (parsed by Python's json) read as STRING: text
    as it is, anything else as Jackson writes it again (compact, doubles as Java writes them)."""
    return value if isinstance(value, str) else _jackson(value)


def _jackson(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float | Decimal):
        x = float(value)
        return java_double_text(x) if math.isfinite(x) else f'"{java_double_text(x)}"'
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ",".join(_jackson(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{_jackson(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def supported(t: pa.DataType) -> bool:
    """Whether this module converts values of type `t`."""
    if pa.types.is_decimal128(t) or pa.types.is_binary(t):
        return True
    if pa.types.is_list(t):
        e = t.value_type
        return (
            pa.types.is_string(e)
            or pa.types.is_int32(e)
            or pa.types.is_int64(e)
            or pa.types.is_boolean(e)
            or pa.types.is_decimal128(e)
        )
    return False


def simple_string(t: pa.DataType) -> str:
    """Spark's `simpleString` of the type `t` maps to (decimal(10,2), array<string>, binary...)."""
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_list(t):
        return f"array<{simple_string(t.value_type)}>"
    if pa.types.is_integer(t):
        return {8: "tinyint", 16: "smallint", 32: "int", 64: "bigint"}[t.bit_width]
    if pa.types.is_timestamp(t):
        return "timestamp"
    if pa.types.is_date32(t):
        return "date"
    if pa.types.is_float32(t):
        return "float"
    if pa.types.is_float64(t):
        return "double"
    if pa.types.is_boolean(t):
        return "boolean"
    return str(t)  # string, binary


def value(raw: str, t: pa.DataType) -> Any:
    """The value of raw text `raw` in a column of type `t` (`supported`), or None when it does not fit."""
    if pa.types.is_decimal128(t):
        return decimal_value(raw, t)
    if pa.types.is_binary(t):
        return binary_value(raw)
    return array_value(raw, t)


def _fit(number: Decimal, t: pa.Decimal128Type) -> Decimal | None:
    """`number` rounded half up to the scale of `t`, or None when its precision cannot hold it."""
    if not number.is_finite():
        return None
    if number and number.adjusted() >= t.precision - t.scale + 1:  # too large even before rounding
        return None
    digits = len(number.as_tuple().digits)
    context = Context(prec=digits + t.precision + 2, Emax=MAX_EMAX, Emin=MIN_EMIN)
    try:
        rounded = number.quantize(Decimal(1).scaleb(-t.scale), rounding=ROUND_HALF_UP, context=context)
    except InvalidOperation:
        return None
    if rounded and rounded.adjusted() >= t.precision - t.scale:
        return None
    return rounded if rounded else rounded.copy_abs()  # no negative zero


def _big_decimal(text: str) -> Decimal | None:
    """Java's `new BigDecimal(text)`, or None where it throws."""
    match = _BIG_DECIMAL.fullmatch(text)
    if match is None:
        return None
    exponent = (match.group(2) or "0").lstrip("+-").lstrip("0")
    if len(exponent) > 10 or (exponent and int(exponent) > _MAX_EXPONENT):
        return None
    return Decimal(text)


def decimal_value(raw: str, t: pa.Decimal128Type) -> Decimal | None:
    """`try_cast(raw AS DECIMAL(p,s))`."""
    number = _big_decimal(raw.strip(_JAVA_TRIM))
    return None if number is None else _fit(number, t)


def _java_whitespace(c: str) -> bool:
    """Java's `Character.isWhitespace`."""
    return c in _JAVA_SPACE or (unicodedata.category(c) in ("Zs", "Zl", "Zp") and c not in _NO_BREAK)


def binary_value(raw: str) -> bytes | None:
    """`try_to_binary(raw, 'base64')`."""
    kept: list[str] = []
    padding = 0
    for c in raw:
        if c == "=":
            padding += 1
        elif padding:
            return None  # after the padding, only more of it
        elif c in _BASE64:
            kept.append(c)
        elif not _java_whitespace(c):
            return None
    length = len(kept)
    if padding > 2 or (padding == 0 and length % 4 == 1) or (padding and (length + padding) % 4):
        return None
    text = "".join(kept)
    return base64.b64decode(text + "=" * (-length % 4))


def array_value(raw: str, t: pa.ListType) -> list[Any] | None:
    """`from_json(raw, array<T>)` in PERMISSIVE mode."""
    try:
        parsed, _ = _ELEMENTS.raw_decode(raw.lstrip(_JSON_SPACE))
    except (ValueError, RecursionError):
        return None
    if not isinstance(parsed, list):
        return None
    element = t.value_type
    out: list[Any] = []
    for e in parsed:
        if e is None:
            out.append(None)
            continue
        converted = _element(e, element)
        if converted is None:
            return None
        out.append(converted)
    return out


def _element(e: Any, t: pa.DataType) -> Any:
    """One array element (not null) as Spark's JSON reader converts it to `t`, or None."""
    if pa.types.is_string(t):
        return spark_text(e)
    if pa.types.is_integer(t):
        low, high = lim.INT_RANGES[t.bit_width]
        return e if type(e) is int and low <= e <= high else None
    if pa.types.is_boolean(t):
        return e if type(e) is bool else None
    if pa.types.is_decimal128(t):
        if type(e) is int:
            return _fit(Decimal(e), t)
        if isinstance(e, Decimal):
            return _fit(e, t)
        if isinstance(e, str):
            number = _big_decimal(e.replace(",", ""))  # the en-US decimal parser of Spark's reader
            return None if number is None else _fit(number, t)
    return None
