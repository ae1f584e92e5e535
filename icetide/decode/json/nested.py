"""ARRAY, STRUCT and MAP values of the pyarrow JSON decoder (decode/json/records.py), one at a time.

the former Spark SQL JSON decoder reads such a column with `from_json(raw, T)` (PERMISSIVE) of the field's raw
text. The rules below are that, as Spark 3.5.7 does it (measured against decode_json in
tests/test_arrow_json_nested.py); no decoder reads by them alone any more (issue 49). The first
JSON value of the text counts (leading JSON whitespace skipped, the rest ignored). Then, by
Spark's JSON reader (JacksonParser) with partial results, which Spark 3.5 enables:
- ARRAY: must be a JSON array, every element fit its type; one element that does not makes the
  whole value not fit (at the top: the record is bad). Null elements stay null.
- STRUCT: any JSON value reads: a field matches a key by exact name (the last of repeated keys
  wins), a key no field has is skipped, a field whose value does not fit is null and the others
  are kept; text that is no JSON object gives a struct of nulls, and only blank text does not fit.
- MAP: must be a JSON object, every value fit; the last of repeated keys wins.
Elements and fields: STRING (text as it is, any other JSON value as Jackson writes it); TINYINT,
SMALLINT, INT, BIGINT (integral numbers in range; TINYINT, as Jackson's getByteValue, also
takes 128..255, wrapped to -128..-1); FLOAT, DOUBLE (numbers, or the text NaN, Infinity,
+Infinity, +INF, -Infinity, -INF); BOOLEAN (true or false); DECIMAL (numbers, or text without
its commas, rounded half up); DATE (date text, as `try_cast(... AS DATE)`); TIMESTAMP (an
integral number of epoch seconds, or timestamp text as the top-level column has it);
TIMESTAMP_NTZ (timestamp text without a zone); BINARY (base64 text, padded, whitespace only
between groups of four).

The JSON and Debezium decoders read such a column with `exact_value` instead (the Debezium
decoder's decode/debezium/conversions.py `_nested`, after checking each part against its declared
Connect type) (issue 49: a value read exactly,
or a dead letter, never one Spark repaired), by the rules above but that:
- the text is one JSON value (JSON whitespace around it only), and a STRUCT's an object: other
  text does not fit (Spark: a struct of nulls);
- a struct field whose value does not fit makes the record bad, naming it (`column s.x: 'abc' is
  not an INT`; in an array `column a[1].x`, in a map `column m["k"].x`), as an element of an
  array in a struct field does (`column s.tags: '["x"]' is not an array<int>`) (Spark: null);
- an object or array in a STRING element or field makes the record bad (`column s.note: object
  '{...}' is not a STRING`), unless the decoder's `nested_as_text` keeps its JSON text, counted
  (Spark: its JSON text);
- a DATE element or field takes no text after its date but a midnight (Spark ignores it);
- a DECIMAL takes no non-zero digit beyond its scale (Spark: rounded half up) and no text with a
  comma (Spark drops commas: "1,5" is 15), a FLOAT no number beyond FLOAT's range
  and a DOUBLE none beyond a double's (Spark: infinity; as at the top), a TINYINT no 128..255 (Spark
  wraps them to -128..-1);
- the keys no struct field has are still skipped, and counted by the decoder (`unknown_keys`).

Deliberate differences from decode_json, where Spark fails the whole batch or keeps a value no
other icetide path would (tests/test_arrow_json_nested.py asserts them; the repairs above are
deliberate differences too, their golden entries rewritten):
- text other than NaN/Infinity in an array<double>/array<float> element (Spark: internal error
  _LEGACY_ERROR_TEMP_2133) and date-shaped text that is no date ("2024-13-45", Spark:
  CAST_INVALID_INPUT) in an array<date> element or a struct's DATE field: here the value does not
  fit, so the record is a dead letter naming the column or the field;
- a nested TIMESTAMP or DATE outside years 0001-9999 (epoch seconds such as 1700000000000): Spark
  keeps it, here it does not fit, as for a top-level column (icetide.decode.limits);
- a MAP whose key type is not STRING: decode_json cannot read such a table (Spark's from_json
  refuses the schema); here a key is its text converted as an element of the key type.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import pyarrow as pa

from icetide.decode import limits as lim
from icetide.decode.spark_compat import json_values

_JSON_SPACE = " \t\n\r"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_NAIVE = datetime(1970, 1, 1)
TIMESTAMP_TEXT = re.compile(r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?)?(Z|[+-]\d{2}:?\d{2})?$")
_ZONED = re.compile(r"(Z|[+-]\d{2}:?\d{2})$")
# a date, and after it a midnight at most: Spark's casts drop any text after a space or T (issue 49)
_DATE_TEXT = re.compile(r"^\+?(\d{4})(?:-(\d{1,2})(?:-(\d{1,2})(?:[T ]00:00(?::00(?:\.0+)?)?)?)?)?$")
_INTEGER_TEXT = re.compile(r"^[+-]?[0-9]{1,20}$")
_INFINITE = {"NaN": float("nan"), "Infinity": float("inf"), "+Infinity": float("inf"), "+INF": float("inf")}
_INFINITE |= {"-Infinity": float("-inf"), "-INF": float("-inf")}


class _Object(list[tuple[str, Any]]):
    """A JSON object as its (key, value) pairs in order, repeated keys kept."""


class _Unfit(Exception):
    """The value does not fit its type (Spark's reader throws)."""


class Unfit(_Unfit):
    """In an exact reading (`exact_value`): the part of a value at `path` (".b", "[0]", '["k"]'
    after the column's name) does not fit; `raw` is its text, `t` the type it should have been.
    `shape` ("object", "array") when it is JSON that a STRING does not take; `beyond` when it is a
    finite number beyond FLOAT."""

    def __init__(self, path: str, raw: str, t: pa.DataType, *, shape: str | None = None, beyond: bool = False) -> None:
        super().__init__(path)
        self.path, self.raw, self.type, self.shape, self.beyond = path, raw, t, shape, beyond

    def within(self, outer: str) -> Unfit:
        """This, seen from the value that holds it at `outer`."""
        self.path = outer + self.path
        return self


class Reading:
    """How a record's nested values are read exactly (`exact_value`, the JSON and Debezium
    decoders' only reading since issue 49): timestamp text without a zone in `zone`, objects and
    arrays in STRING elements and fields kept as JSON text with `as_text` (nested_as_text). It
    counts, over the values read with it, the texts so kept (`kept`), and says whether a key no
    struct field has was skipped (`skipped`: then `unknown_keys` names them)."""

    __slots__ = ("as_text", "kept", "skipped", "zone")

    def __init__(self, zone: str, *, as_text: bool = False) -> None:
        self.zone, self.as_text, self.kept, self.skipped = zone, as_text, 0, False


_PAIRS = json.JSONDecoder(
    parse_int=json_values.checked_int, parse_float=json_values.checked_decimal, object_pairs_hook=_Object
)


def supported(t: pa.DataType) -> bool:
    """Whether this module converts values of type `t` (a list, struct or map of types it knows)."""
    if pa.types.is_list(t):
        return _element_supported(t.value_type)
    if pa.types.is_struct(t):
        return all(_element_supported(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_map(t):
        return _element_supported(t.key_type) and _element_supported(t.item_type)
    return False


def _element_supported(t: pa.DataType) -> bool:
    if pa.types.is_timestamp(t):
        return t.unit == "us"
    return (
        pa.types.is_string(t)
        or pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_boolean(t)
        or pa.types.is_decimal128(t)
        or pa.types.is_date32(t)
        or pa.types.is_binary(t)
        or supported(t)
    )


def exact_value(raw: str, t: pa.DataType, reading: Reading) -> Any:
    """The JSON and Debezium decoders' reading of a list, struct or map column (issue 49), with `reading` (made
    one per record, which counts what it keeps as text and sees skipped keys): the
    value, or None when it does not fit as a whole. Raises `Unfit` naming the part of it that
    does not fit: a struct field, or an object or array where a STRING is.

    Unlike Spark's from_json: `raw` must be one JSON value (JSON whitespace around it), a struct must be an
    object, no field is left null because its value does not fit, a DECIMAL takes no digit
    beyond its scale, a FLOAT no finite number beyond its range, and a STRING takes an object or
    array only with `as_text`. Keys no struct field has are skipped (`unknown_keys`)."""
    text = raw.strip(_JSON_SPACE)
    try:
        parsed, end = _PAIRS.raw_decode(text)
    except (ValueError, RecursionError):
        return None
    if end != len(text):
        return None  # text after the JSON value
    try:
        return _convert(parsed, t, reading)
    except Unfit:
        raise
    except _Unfit:
        return None


_STRUCT, _LIST, _MAP = 0, 1, 2
KeyPlan = tuple[int, Any]  # (_STRUCT, {field: KeyPlan or None}), (_LIST, KeyPlan) or (_MAP, KeyPlan)


def key_plan(t: pa.DataType) -> KeyPlan | None:
    """Where the structs of type `t` are, for `unknown_keys` (plain dicts: no pyarrow call per
    value); None when `t` holds no struct."""
    if pa.types.is_struct(t):
        return _STRUCT, {t.field(i).name: key_plan(t.field(i).type) for i in range(t.num_fields)}
    inner = key_plan(t.value_type) if pa.types.is_list(t) else key_plan(t.item_type) if pa.types.is_map(t) else None
    if inner is None:
        return None
    return (_LIST if pa.types.is_list(t) else _MAP), inner


def unknown_keys(v: Any, plan: KeyPlan, path: str) -> set[str]:
    """The keys of JSON value `v` (as json.loads reads it; text is read as JSON at the top, as
    `exact_value` reads it) that no field has of a struct in the type of `plan` (`key_plan`), each
    as a path from `path`: "column.key", "column.element.key" in a list, "column.value.key" in a map."""
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except (ValueError, RecursionError):
            return set()
    found: set[str] = set()
    _unknown_into(v, plan, path, found)
    return found


def _unknown_into(v: Any, plan: KeyPlan, path: str, found: set[str]) -> None:
    kind, inner = plan
    if kind == _STRUCT:
        if type(v) is dict:
            for k, x in v.items():
                if k not in inner:
                    found.add(f"{path}.{k}")
                elif x is not None and inner[k] is not None:
                    _unknown_into(x, inner[k], f"{path}.{k}", found)
    elif kind == _LIST:
        if type(v) is list:
            for x in v:
                if x is not None:
                    _unknown_into(x, inner, f"{path}.element", found)
    elif type(v) is dict:
        for x in v.values():
            if x is not None:
                _unknown_into(x, inner, f"{path}.value", found)


def _convert(e: Any, t: pa.DataType, r: Reading) -> Any:
    """One JSON value (not null) converted exactly to `t`; `Unfit` naming the part that does not
    fit, _Unfit when the value as a whole does not."""
    if pa.types.is_list(t):
        if type(e) is not list:
            raise _Unfit
        element = t.value_type
        out = []
        for i, v in enumerate(e):
            try:
                out.append(None if v is None else _convert(v, element, r))
            except Unfit as unfit:
                raise unfit.within(f"[{i}]") from None
        return out
    if pa.types.is_struct(t):
        if not isinstance(e, _Object):
            raise _Unfit
        return _struct(e, t, r)
    if pa.types.is_map(t):
        if not isinstance(e, _Object):
            raise _Unfit
        entries: dict[Any, Any] = {}
        for k, v in e:
            key = _key(k, t.key_type, r)
            try:
                entries[key] = None if v is None else _convert(v, t.item_type, r)
            except Unfit as unfit:
                raise unfit.within(f"[{json.dumps(k, ensure_ascii=False)}]") from None
        return list(entries.items())
    converted = _scalar(e, t, r)
    if converted is None:
        raise _Unfit
    return converted


def _struct(pairs: _Object, t: pa.StructType, r: Reading) -> dict[str, Any]:
    """A struct from an object's pairs; a field that does not fit raises `Unfit` naming it (Spark
    leaves it null). Of repeated keys, the last counts."""
    types = {t.field(i).name: t.field(i).type for i in range(t.num_fields)}
    row: dict[str, Any] = dict.fromkeys(types)
    for k, v in dict(pairs).items():
        if k not in types:
            r.skipped = True
            continue
        if v is None:
            row[k] = None
            continue
        try:
            row[k] = _convert(v, types[k], r)
        except Unfit as unfit:
            raise unfit.within(f".{k}") from None
        except _Unfit:
            raise Unfit(f".{k}", _shown(v), types[k], beyond=_beyond_float(v, types[k])) from None
    return row


def _shown(e: Any) -> str:
    """A JSON value's text as a dead letter quotes it: text as it is, else as Jackson writes it."""
    return e if isinstance(e, str) else _text(e)


def _beyond_float(e: Any, t: pa.DataType) -> bool:
    """Whether `e` is a finite number that a FLOAT or DOUBLE (`t`) would hold as infinity (issue 49)."""
    if not pa.types.is_floating(t) or not (type(e) is int or isinstance(e, Decimal)):
        return False
    if isinstance(e, Decimal) and not e.is_finite():
        return False
    try:
        x = abs(float(e))
    except OverflowError:  # an integer beyond a double
        return True
    return x == math.inf or (pa.types.is_float32(t) and x >= lim.FLOAT32_OUT)


def _key(k: str, t: pa.DataType, r: Reading) -> Any:
    """A map key (JSON object keys are text) of key type `t`; _Unfit when it does not convert."""
    if pa.types.is_string(t):
        return k
    converted: Any = None
    if pa.types.is_integer(t):
        if _INTEGER_TEXT.match(k.strip()):
            converted = _scalar(int(k), t, r)
    elif pa.types.is_floating(t) or pa.types.is_decimal128(t):
        number = json_values.big_decimal(k.strip())
        if number is not None:
            converted = _scalar(number, t, r)
        elif k.strip() in _INFINITE:
            converted = _scalar(k.strip(), t, r)
    elif pa.types.is_boolean(t):
        converted = {"true": True, "false": False}.get(k.strip().lower())
    else:
        converted = _scalar(k, t, r)
    if converted is None:
        raise _Unfit
    return converted


def _scalar(e: Any, t: pa.DataType, r: Reading) -> Any:
    """A scalar element converted exactly to `t`, or None when it does not fit."""
    if pa.types.is_string(t):
        if isinstance(e, str):
            return e
        if (
            isinstance(e, Decimal) and e.is_finite() and not json_values.double_holds(e)
        ):  # issue 49: not another number's text
            raise Unfit("", str(e), t, shape="number")
        if isinstance(e, list):  # an _Object is a list too
            if not r.as_text:
                raise Unfit("", _text(e), t, shape="object" if isinstance(e, _Object) else "array")
            r.kept += 1
        return _text(e)
    if pa.types.is_integer(t):
        if type(e) is not int:
            return None
        low, high = lim.INT_RANGES[t.bit_width]  # a TINYINT takes no 128..255 (Spark wraps them)
        return e if low <= e <= high else None
    if pa.types.is_floating(t):
        if type(e) is int or isinstance(e, Decimal):
            return None if _beyond_float(e, t) else float(e)
        return _INFINITE.get(e) if isinstance(e, str) else None
    if pa.types.is_boolean(t):
        return e if type(e) is bool else None
    if pa.types.is_decimal128(t):
        if type(e) is int:
            return json_values.exact_decimal(Decimal(e), t)
        if isinstance(e, Decimal):
            return json_values.exact_decimal(e, t)
        if isinstance(e, str):  # Spark's reader drops commas (its en-US parser: "1,5" is 15); here none
            number = json_values.big_decimal(e)
            return None if number is None else json_values.exact_decimal(number, t)
        return None
    if not isinstance(e, str):
        if pa.types.is_timestamp(t) and t.tz is not None and type(e) is int:
            return epoch_seconds(e)
        return None
    if pa.types.is_date32(t):
        return date_text(e)
    if pa.types.is_timestamp(t):
        if t.tz is None:  # TIMESTAMP_NTZ: text with a zone does not fit
            return wall_time_text(e)
        return timestamp_text(e, r.zone)
    if pa.types.is_binary(t):
        return _base64(e)
    return None


def _text(e: Any) -> str:
    """A JSON value (not text) as Jackson writes it: compact, doubles as Java writes them."""
    if isinstance(e, _Object):
        return "{" + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{_text(v)}" for k, v in e) + "}"
    if isinstance(e, list):
        return "[" + ",".join(_text(v) for v in e) + "]"
    return json_values.spark_text(e) if not isinstance(e, str) else json.dumps(e, ensure_ascii=False)


def _base64(text: str) -> bytes | None:
    """Jackson's getBinaryValue (MIME base64 without line feeds): padding required, whitespace
    only between groups of four characters."""
    chars: list[str] = []
    for c in text:
        if c > " " or len(chars) % 4:
            chars.append(c)
    kept = "".join(chars)
    if len(kept) % 4:
        return None
    try:
        return base64.b64decode(kept, validate=True)
    except (binascii.Error, ValueError):
        return None


def epoch_seconds(seconds: int) -> datetime | None:
    """The instant `seconds` after the epoch, in years 0001-9999 in UTC, or None."""
    micros = seconds * 1_000_000
    if not lim.MIN_EPOCH_MICROS <= micros <= lim.MAX_EPOCH_MICROS:
        return None
    return _EPOCH + timedelta(microseconds=micros)


def date_text(text: str) -> date | None:
    """Date text as `try_cast(text AS DATE)` reads it (years 0001-9999), or None."""
    match = _DATE_TEXT.match(text.strip())
    if not match:
        return None
    try:
        return date(int(match.group(1)), int(match.group(2) or 1), int(match.group(3) or 1))
    except ValueError:
        return None


def timestamp_text(text: str, time_zone: str) -> datetime | None:
    """ISO-8601 timestamp text as an instant in years 0001-9999 in UTC (no zone in the text: the
    session's `time_zone`), or None."""
    text = text.strip()
    if not TIMESTAMP_TEXT.match(text):
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=ZoneInfo(time_zone))
    try:
        return moment.astimezone(UTC)
    except OverflowError:  # before 0001-01-01 or after 9999-12-31 in UTC
        return None


def wall_time_text(text: str) -> datetime | None:
    """ISO-8601 timestamp text without a zone as a wall time (TIMESTAMP_NTZ), or None: a zone in
    the text would be dropped (Spark's reader ignored it; issue 49)."""
    text = text.strip()
    if not TIMESTAMP_TEXT.match(text) or _ZONED.search(text):
        return None
    try:
        return datetime.fromisoformat(text).replace(tzinfo=None)
    except ValueError:
        return None


def epoch_wall_time(millis: int) -> datetime | None:
    """TIMESTAMP_NTZ from epoch milliseconds: the UTC wall time, in years 0001-9999, or None."""
    micros = millis * 1000
    if not lim.MIN_EPOCH_MICROS <= micros <= lim.MAX_EPOCH_MICROS:
        return None
    return _EPOCH_NAIVE + timedelta(microseconds=micros)
