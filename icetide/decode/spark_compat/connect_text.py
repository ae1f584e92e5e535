"""A Debezium field's JSON value as the former Spark SQL decoder read it, for the Python
decoder (decode/debezium/conversions.py, decode/debezium/rows.py): its text, the numbers taken from
that text, and a dead letter's error.

The Spark decoder reads a row part into a map<string,string> with from_json, so each value reaches
its conversion as Jackson's text of it: text as it is, an integer's digits, any other number as
Java's `Double.toString` of its double ("1.0E7"), a number beyond a double and the literals NaN,
Infinity and -Infinity quoted ('"Infinity"', '"NaN"'), a nested value compact. The Python decoder
parses a JSON number that is not an integer, and those literals, as a `Decimal`: its exact value,
which a DECIMAL column's conversion reads (the Spark path reads the payload again for it). A
Python float comes from an Avro record (decode/avro/decoder.py): NaN and infinities as the JSON converter
sends them, as text.

A double is written with its shortest digits, as Java 19 on writes it, deliberately unlike Java 17
(which ran that decoder) for the few it wrote otherwise: 1e23 is "1.0E23", not "9.999999999999999E22".
"""

from __future__ import annotations

import math
import re
from decimal import MAX_EMAX, MIN_EMIN, Context, Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa

from icetide.decode.json.scalars import RAW_MESSAGE_CHARS, type_name
from icetide.decode.spark_compat import json_values

WIDE = Context(prec=80, Emax=MAX_EMAX, Emin=MIN_EMIN)  # decimal arithmetic that never rounds a DECIMAL(38)
_FLOAT32_LARGEST = Fraction(2**24 - 1, 2**24) * 2**128
_FLOAT32_OUT = 2**128 - 2**103  # halfway from the largest FLOAT to 2**128: from here on, infinity
# the former Spark SQL decoder `_number_or_base64`: text Spark reads as a number rather than base64 bytes
_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_HUGE_EXPONENT = re.compile(r"[eEpP][+-]?[0-9]{10,}")
_SPECIAL_DOUBLES = {w: math.inf for w in ("inf", "+inf", "infinity", "+infinity")}
_SPECIAL_DOUBLES |= {"-inf": -math.inf, "-infinity": -math.inf, "nan": math.nan}
_JAVA_DOUBLE = re.compile(
    r"[+-]?(?:(?P<word>NaN|Infinity)|(?P<dec>(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)[fFdD]?"
    r"|0[xX](?P<hex>[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP](?P<binexp>[+-]?[0-9]+)[fFdD]?)"
)
JAVA_LINE_ENDS = ("\n", "\r", "\x85", "\u2028", "\u2029")  # where Java's `$` also matches before the last one


class NotHere(Exception):
    """This record (or table) is for the Spark path; the message says why, for the debug log."""


class DeadLetter(NotHere):
    """A record the Spark path makes a dead letter, with `error`, the error it gives it (None: a
    value that does not convert; the caller, which knows the column and the value, words it).

    A NotHere too: code that does not record dead letters sends the batch to the Spark path."""

    def __init__(self, error: str | None = None, why: str = "") -> None:
        super().__init__(error or why or "a value that does not convert (a dead letter on the Spark path)")
        self.error = error


def field_text(v: Any) -> str:
    """The text of JSON value `v` (not None) as the Spark path's map of the row holds it, a double
    with its shortest digits as Java 19 on writes it (deliberately unlike Java 17: see above)."""
    kind = type(v)
    if kind is str:
        return v  # type: ignore[no-any-return]
    if kind is int:
        return str(v)
    if kind is bool:
        return "true" if v else "false"
    if kind is float and not math.isfinite(v):  # an Avro value: the JSON converter sends it as text
        return "NaN" if v != v else "Infinity" if v > 0 else "-Infinity"
    return json_values.spark_text(v)


def java_fullmatch(pattern: re.Pattern[str], text: str) -> bool:
    """`text RLIKE '^pattern$'` as Java's regular expressions match it: `$` also matches before a
    line terminator that ends the text."""
    if pattern.fullmatch(text):
        return True
    for end in ("\r\n", *JAVA_LINE_ENDS):
        if text.endswith(end):
            return pattern.fullmatch(text[: -len(end)]) is not None
    return False


def java_double(text: str) -> float | None:
    """Spark's cast of text to a DOUBLE (`Cast.castToDouble`): Java's `Double.parseDouble` (after
    its trim of characters up to U+0020: decimal or hexadecimal text, an `f`, `F`, `d` or `D`
    suffix, NaN, Infinity), else the words Spark reads as infinity or NaN; None where it gives null."""
    match = _JAVA_DOUBLE.fullmatch(text.strip(json_values.JAVA_TRIM))
    if match is None:
        return _SPECIAL_DOUBLES.get(text.strip(json_values.JAVA_TRIM).lower())
    sign = -1.0 if text.strip(json_values.JAVA_TRIM).startswith("-") else 1.0
    if match["word"]:
        return math.nan if match["word"] == "NaN" else sign * math.inf
    if match["hex"] is not None:
        try:
            return sign * float.fromhex(f"0x{match['hex']}p{match['binexp']}")
        except OverflowError:
            return sign * math.inf
    return sign * float(match["dec"])


def _java_exact(text: str) -> Fraction | None:
    """The exact value of text Java's `Double.parseDouble` reads as a finite number, else None."""
    match = _JAVA_DOUBLE.fullmatch(text.strip(json_values.JAVA_TRIM))
    if match is None or match["word"] or _HUGE_EXPONENT.search(text):
        return None
    sign = -1 if text.strip(json_values.JAVA_TRIM).startswith("-") else 1
    if match["hex"] is not None:
        whole, _, fraction = match["hex"].partition(".")
        mantissa = Fraction(int(whole + fraction or "0", 16))
        return sign * mantissa * Fraction(2) ** (int(match["binexp"]) - 4 * len(fraction))
    return sign * Fraction(match["dec"])


def exact_number(v: Any) -> Fraction | None:
    """The exact value of the text Spark casts for `v` (an int, a number, or text already trimmed
    as its cast trims) as Java parses it, or None when that is no finite number Java reads."""
    if type(v) is int:
        return Fraction(v)
    return _java_exact(field_text(v))


def float32_of(q: Fraction) -> float:
    """Java's `Float.parseFloat` of decimal text of value `q`: the nearest FLOAT (ties to even),
    infinity from halfway past the largest FLOAT on."""
    if abs(q) >= _FLOAT32_OUT:
        return math.copysign(math.inf, q)
    if abs(q) >= _FLOAT32_LARGEST:
        return math.copysign(float(_FLOAT32_LARGEST), q)
    near = np.float32(float(q))  # the double of q may round twice: the nearest is this or a neighbour
    candidates = [float(near), *(float(np.nextafter(near, np.float32(d))) for d in (-math.inf, math.inf))]
    best = min(candidates, key=lambda c: (abs(Fraction(c) - q), int(np.float32(c).view(np.uint32)) % 2))
    return best


# -- DECIMAL columns from a Connect Decimal -------------------------------------------------------


def decimal_number(v: Any, name: str = "", *, read_again: bool = True) -> Decimal | None:
    """The number the Spark path reads a Connect Decimal value as (the former Spark SQL decoder
    `_number_or_base64` with `_exact_number`: text that looks like a number, a JSON number or
    numeric text, is read again from the payload, exactly), or None for base64 bytes. Text that
    looks like a number only by Java's `$` (it ends a line) does not read again: DeadLetter, or
    without `read_again` (no schema: the text itself is cast), the number before the line end."""
    if type(v) is Decimal:
        return v if v.is_finite() and math.isfinite(float(v)) else None  # else quoted: not base64 either
    if type(v) is float:  # an Avro value: the JSON text of it is Python's
        return Decimal(repr(v)) if math.isfinite(v) else None
    text = field_text(v)
    # Text that is base64 as well (four-character groups of its alphabet, which has digits, `e`
    # and `E`: "77e4") is the JSON converter's base64, never a number: read as a number, "77e4"
    # (-10670.80 at scale 2) landed as 770000.00 (bench/cdc_live.py found it).
    if not (java_fullmatch(_NUMBER, text) and (any(c in text for c in ".-") or len(text) % 4)):
        return None
    if _NUMBER.fullmatch(text):
        return Decimal(text)
    if read_again:
        raise DeadLetter(why=f"column {name}: a decimal number whose text ends a line does not read again")
    return Decimal(text.rstrip("".join(JAVA_LINE_ENDS)))


def decimal_unscaled(number: Decimal, scale: int, name: str) -> int:
    """The unscaled value of `number` read as DECIMAL(38, scale), exactly: DeadLetter naming
    column `name` when it does not fit, or has a non-zero digit beyond `scale` (issue 49: the
    Spark SQL decoder rounded it half up; the scale is the one the message's schema declares)."""
    fitted = json_values.fit_decimal(number, pa.decimal128(38, scale))
    if fitted is None:
        raise DeadLetter(why=f"column {name}: a decimal number beyond DECIMAL(38,{scale})")
    if fitted != number:
        shown = str(number)
        quoted = shown if len(shown) <= RAW_MESSAGE_CHARS else shown[:RAW_MESSAGE_CHARS] + "..."
        raise DeadLetter(f"column {name}: '{quoted}' has digits beyond the scale {scale} its schema declares")
    return int(fitted.scaleb(scale, context=WIDE))


def java_decimal_text(unscaled: int, scale: int) -> str:
    """Java's `BigDecimal.toString` of unscaled / 10**scale (`scale` >= 0), as Spark casts a
    DECIMAL to text: plain, or in E notation when the exponent of its first digit is below -6."""
    digits = str(abs(unscaled))
    sign = "-" if unscaled < 0 else ""
    adjusted = len(digits) - 1 - scale
    if adjusted >= -6:
        whole = digits.rjust(scale + 1, "0")
        return sign + (whole[: len(whole) - scale] + "." + whole[len(whole) - scale :] if scale else whole)
    return f"{sign}{digits[0]}{'.' + digits[1:] if len(digits) > 1 else ''}E{adjusted:+d}"


# -- times of day -----------------------------------------------------------------------------


def time_of_day_text(micros: int) -> str:
    """The text of a time of day of `micros` (a long above -2**63; the decoders refuse that one):
    hours beyond a day and a sign as they are, as the former Spark SQL decoder `_time_of_day` wrote it."""
    a, sign = abs(micros), "-" if micros < 0 else ""
    hours = a // 3_600_000_000
    minutes, seconds = a // 60_000_000 % 60, a // 1_000_000 % 60
    return f"{sign}{hours:02d}:{minutes:02d}:{seconds:02d}.{a % 1_000_000:06d}"


# -- dead letters -----------------------------------------------------------------------------


def type_error(name: str, value: Any, t: pa.DataType) -> str:
    """The Spark path's error for a value of column `name` that does not convert to `t`
    (the former Spark SQL JSON decoder `_type_error`): the value's text as its map of the row holds it."""
    raw = field_text(value)
    shown = spark_type_name(t)
    article = "an" if shown[:1].upper() in "AEIOU" else "a"
    quoted = raw if len(raw) <= RAW_MESSAGE_CHARS else raw[:RAW_MESSAGE_CHARS] + "..."
    return f"column {name}: '{quoted}' is not {article} {shown}"


def spark_type_name(t: pa.DataType) -> str:
    """How the Spark path's errors name the column type of Arrow type `t` (as the former JSON decoder did)."""
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision},{t.scale})"
    if pa.types.is_integer(t):
        return {8: "TINYINT", 16: "SMALLINT", 32: "INT", 64: "BIGINT"}[t.bit_width]
    if pa.types.is_timestamp(t):
        return "TIMESTAMP" if t.tz is not None else "TIMESTAMP_NTZ"
    names = {pa.float32(): "FLOAT", pa.float64(): "DOUBLE", pa.bool_(): "BOOLEAN", pa.string(): "STRING"}
    return names.get(t) or {pa.date32(): "DATE", pa.binary(): "BINARY"}.get(t) or type_name(t)
