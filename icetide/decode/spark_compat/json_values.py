"""DECIMAL and BINARY values of the pyarrow JSON decoder (decode/json/records.py), one at a time.

Each function is what the former Spark SQL JSON decoder does to a field's raw text, in Python, as Spark 3.5 does it:
- DECIMAL: `try_cast(raw AS DECIMAL(p,s))`: the text trimmed of characters up to U+0020 (Java's
  `String.trim`), then Java's BigDecimal grammar (Unicode digits count, no `NaN`, `Infinity` or
  `_`), rounded half up to the scale; more integral digits than `p - s` after rounding does not fit.
  The JSON decoder reads a DECIMAL exactly (`exact_decimal`, issue 49): a non-zero digit beyond the
  scale does not fit (2.345 into DECIMAL(10,2); 1.500 is 1.50), where Spark rounds. So does the
  Debezium decoder's (`exact_decimal_value`; a Connect Decimal's declared scale in
  decode/spark_compat/connect_text.py `decimal_unscaled`).
- BINARY: `try_to_binary(raw, 'base64')`: the base64 alphabet (not the URL-safe one), Java
  whitespace skipped before the padding and nothing but `=` after it, at most two `=`, and with
  them a multiple of four characters; without padding any length but 4n+1. Trailing bits are ignored.
- FIXED(n) (binary(n) in Arrow; BINARY to Spark): as BINARY, and exactly n bytes, else it does
  not fit (decode_json knows no FIXED; the Iceberg writer takes n bytes only).
ARRAY, STRUCT and MAP values: decode/json/nested.py.

The raw text is Spark's (Jackson's) text of a JSON value (`spark_text`): a number that is not
integral is written as Java's `Double.toString` writes it (`1.234567890125E11`), and one beyond a
double as the quoted text `"Infinity"`. A double is written with its shortest digits, as Java 19 on
writes it; Java 17 wrote a few with other digits (1e23 as "9.999999999999999E22"): a deliberate
difference.
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

MAX_NUMBER_LENGTH = 1000  # Spark's JSON reader (Jackson 2.15) refuses a longer number: malformed JSON
_BIG_DECIMAL = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)(?:[eE]([+-]?\d+))?")  # \d: any Unicode digit, as Java
JAVA_TRIM = "".join(chr(c) for c in range(0x21))  # String.trim: every character up to U+0020
_BASE64 = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
_JAVA_SPACE = frozenset("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f")
_NO_BREAK = frozenset("\u00a0\u2007\u202f")
_MAX_EXPONENT = 2**31 - 1  # BigDecimal's scale is an int
_CONTROL = re.compile("[\x00-\x1f]")
_HEX_ESCAPE = re.compile(r"((?<!\\)(?:\\\\)*\\u00)([0-9a-f]{2})")


def checked_int(text: str) -> int:
    """int(text) for Python's json: a number longer than Spark's reader takes raises ValueError."""
    if len(text.lstrip("-")) > MAX_NUMBER_LENGTH:
        raise ValueError("number too long")
    return int(text)


def checked_decimal(text: str) -> Decimal:
    """Decimal(text) for Python's json: a number longer than Spark's reader takes raises ValueError."""
    if len(text) > MAX_NUMBER_LENGTH:
        raise ValueError("number too long")
    return Decimal(text)


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


def double_holds(number: str | Decimal) -> bool:
    """Whether a JSON number (its text, or its Decimal) is the number its double's shortest text
    says: what a STRING column takes of it (Spark's text of a JSON number is its double's, as Java
    writes it), so that text is the number sent. Issue 49: beyond a double ("1e400" became the
    text '"Infinity"') or with digits a double does not hold ("0.1000000000000000055511151231257827"
    became "0.1"), it is refused. Integers are no doubles (their digits are kept)."""
    exact = Decimal(number)
    x = float(exact)
    return math.isfinite(x) and Decimal(repr(x)) == exact


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
        return _jackson_string(value)
    if isinstance(value, list):
        return "[" + ",".join(_jackson(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{_jackson_string(k)}:{_jackson(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def _jackson_string(text: str) -> str:
    """A JSON string as Jackson writes it: Python's escapes, but a control character's hex in capitals."""
    quoted = json.dumps(text, ensure_ascii=False)
    if _CONTROL.search(text) is None:
        return quoted
    # json.dumps (ensure_ascii off) writes \u escapes for control characters alone, and a
    # backslash as two: each escape is a backslash run of odd length followed by u00
    return _HEX_ESCAPE.sub(lambda m: m[1] + m[2].upper(), quoted)


def supported(t: pa.DataType) -> bool:
    """Whether this module converts values of type `t` (DECIMAL, BINARY, and FIXED as binary(n))."""
    return pa.types.is_decimal128(t) or pa.types.is_binary(t) or pa.types.is_fixed_size_binary(t)


def simple_string(t: pa.DataType) -> str:
    """Spark's `simpleString` of the type `t` maps to (decimal(10,2), array<string>, binary...)."""
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_list(t):
        return f"array<{simple_string(t.value_type)}>"
    if pa.types.is_struct(t):
        fields = (t.field(i) for i in range(t.num_fields))
        return "struct<" + ",".join(f"{f.name}:{simple_string(f.type)}" for f in fields) + ">"
    if pa.types.is_map(t):
        return f"map<{simple_string(t.key_type)},{simple_string(t.item_type)}>"
    if pa.types.is_integer(t):
        return {8: "tinyint", 16: "smallint", 32: "int", 64: "bigint"}[t.bit_width]
    if pa.types.is_timestamp(t):
        return "timestamp" if t.tz is not None else "timestamp_ntz"
    if pa.types.is_date32(t):
        return "date"
    if pa.types.is_float32(t):
        return "float"
    if pa.types.is_float64(t):
        return "double"
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_binary(t) or pa.types.is_fixed_size_binary(t):
        return "binary"  # FIXED is BINARY to Spark
    return str(t)  # string


def value(raw: str, t: pa.DataType) -> Any:
    """The value of raw text `raw` in a column of type `t` (`supported`), or None when it does not
    fit; a DECIMAL exactly (`exact_decimal`)."""
    if pa.types.is_decimal128(t):
        number = big_decimal(raw.strip(JAVA_TRIM))
        return None if number is None else exact_decimal(number, t)
    data = binary_value(raw)
    if pa.types.is_fixed_size_binary(t) and data is not None and len(data) != t.byte_width:
        return None  # FIXED(n): Spark sees BINARY, and the Iceberg writer takes n bytes only
    return data


def fit_decimal(number: Decimal, t: pa.Decimal128Type) -> Decimal | None:
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


def exact_decimal(number: Decimal, t: pa.Decimal128Type) -> Decimal | None:
    """`number` at the scale of `t` when that changes no digit of it (trailing zeros beyond the
    scale go), else None: the JSON decoder's DECIMAL, which never rounds (issue 49)."""
    fitted = fit_decimal(number, t)
    return fitted if fitted is not None and fitted == number else None


def big_decimal(text: str) -> Decimal | None:
    """Java's `new BigDecimal(text)`, or None where it throws."""
    match = _BIG_DECIMAL.fullmatch(text)
    if match is None:
        return None
    exponent = (match.group(2) or "0").lstrip("+-").lstrip("0")
    if len(exponent) > 10 or (exponent and int(exponent) > _MAX_EXPONENT):
        return None
    return Decimal(text)


def exact_decimal_value(raw: str, t: pa.Decimal128Type) -> Decimal | None:
    """`try_cast(raw AS DECIMAL(p,s))` without rounding: None where the text has a non-zero digit
    beyond the scale (Spark rounds it half up; issue 49)."""
    number = big_decimal(raw.strip(JAVA_TRIM))
    return None if number is None else exact_decimal(number, t)


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
