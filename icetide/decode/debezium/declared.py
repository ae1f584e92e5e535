"""A Connect field's value against the type its message's schema declares for it.

With `schemas.enable=true` every field of a Debezium message is declared by its Connect type and
logical name, and the JSON converter writes each type in one JSON form: integers as JSON integers
within their width, float and double as JSON numbers (a non-finite one as the text `NaN`,
`Infinity` or `-Infinity`, as Jackson writes it), booleans as `true`/`false`, string and bytes
(base64: other text is no bytes) as text, a struct as an object, an array as an array, a map as an object (or, with keys
that are not strings, an array of pairs). A Connect Decimal is declared `bytes` but is a number or
text with `decimal.format=NUMERIC` or `string` (Flink CDC sends numbers too). Avro records reach
the decoder in the same forms (decode/avro/schema.py), their types fixed by the writer schema.

A value in another form contradicts its schema: the record is a dead letter naming the column,
never a row read by the table column's type (text in an `int32` field landing in a STRING column,
an object in a `string` field landing as its JSON text). So is a part of a struct, array or map
whose schema declares its parts (`column geo.srid: text 'x' where the message's schema declares
int32`), the JSON converter's form checked down to every element (Kafka's JsonConverter writes
each part by its own schema, `convertToJson`).

Checked against Kafka's JsonConverter (connect/json, `convertToJson`, and the Jackson
`ObjectMapper` its JsonSerializer writes with): Float.NaN, Float.POSITIVE_INFINITY and
Float.NEGATIVE_INFINITY come out as the texts "NaN", "Infinity" and "-Infinity" (Jackson's
QUOTE_NON_NUMERIC_NUMBERS, on by default; run on jackson-databind 2.21.2), so those texts keep
their meaning in a float or double field; a finite float32 is at most 3.4028235E38.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from icetide.decode import limits as lim
from icetide.decode.debezium import connect_schema as C
from icetide.decode.json.scalars import RAW_MESSAGE_CHARS
from icetide.decode.spark_compat import json_values
from icetide.decode.spark_compat.connect_text import DeadLetter, field_text

__all__ = ["declared_check"]

_INTEGER_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
_NUMBERS = (int, float, Decimal)
# The JSON converter (Jackson, WRITE_NAN_AS_STRINGS) writes a non-finite float or double as text.
_NON_FINITE = frozenset({"NaN", "Infinity", "-Infinity"})
# The Python types of the JSON forms each Connect type takes (bool is no int here: `type(v)`).
_FORMS: dict[str, tuple[type, ...]] = {
    "float": _NUMBERS,
    "float32": _NUMBERS,
    "double": _NUMBERS,
    "float64": _NUMBERS,
    "boolean": (bool,),
    "string": (str,),
    "bytes": (str,),
    "struct": (dict,),
    "array": (list,),
    "map": (dict, list),
}
_DECIMAL_FORMS = (str, *_NUMBERS)  # base64, or decimal.format=NUMERIC / string / double


def _kind(v: Any) -> str:
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, _NUMBERS):
        return "number"
    if isinstance(v, str):
        return "text"
    return "object" if isinstance(v, dict) else "array" if isinstance(v, list) else type(v).__name__


def _refused(name: str, v: Any, declared: str) -> DeadLetter:
    shown = field_text(v)
    quoted = shown if len(shown) <= RAW_MESSAGE_CHARS else shown[:RAW_MESSAGE_CHARS] + "..."
    return DeadLetter(f"column {name}: {_kind(v)} '{quoted}' where the message's schema declares {declared}")


def declared_check(f: C.ConnectField, name: str) -> Callable[[Any], None] | None:
    """A function that raises DeadLetter (its error naming column `name`) for a JSON value (not
    None) that is not in a form Connect field `f`'s declared type and logical name takes; None
    for a type this module does not know (no check).

    Inside a struct, array or map whose schema declares its parts (`fields`, `items`, `keys`,
    `values`), each part not null is checked the same way, the error naming its place: `name.x`
    for a struct's field, `name[1]` for an array's element, `name["k"]` for a map's value; a map
    whose keys are not strings, which the JSON converter writes as an array of [key, value]
    pairs, `name[1].key` and `name[1].value`. A struct's key its schema lacks is no contradiction
    (the JSON converter's reader skips it): the column's reading decides what becomes of it."""
    declared = f.type if f.logical is None else f"{f.type} ({f.logical})"
    bits = _INTEGER_BITS.get(f.type)
    if bits is not None:
        low, high = lim.INT_RANGES[bits]

        def integer(v: Any) -> None:
            if type(v) is not int or not low <= v <= high:
                raise _refused(name, v, declared)

        return integer
    if f.type == "struct" and f.fields:
        return _struct_check(f, name, declared)
    if f.type == "array" and f.items is not None:
        return _array_check(f.items, name, declared)
    if f.type == "map" and f.values is not None:
        return _map_check(f, name, declared)
    forms = _DECIMAL_FORMS if f.logical == C.DECIMAL else _FORMS.get(f.type)
    if forms is None:
        return None
    if f.type == "bytes" and f.logical != C.DECIMAL:
        return _bytes_check(name, declared)
    non_finite = forms is _NUMBERS

    def form(v: Any) -> None:
        if type(v) not in forms and not (non_finite and type(v) is str and v in _NON_FINITE):
            raise _refused(name, v, declared)

    return form


def _bytes_check(name: str, declared: str) -> _Check:
    """`bytes` (a Connect Decimal aside) is base64 text: other text contradicts it, whatever the
    column (issue 49: a STRING column took any text before; a BINARY column refused it)."""

    def base64_text(v: Any) -> None:
        if type(v) is not str or json_values.binary_value(v) is None:
            raise _refused(name, v, declared)

    return base64_text


_Check = Callable[[Any], None]


def _part(f: C.ConnectField, name: str) -> _Check:
    """The check of a part declared by `f` at place `name` (a type not known here: none)."""
    return declared_check(f, name) or _no_check


def _no_check(v: Any) -> None:
    return None


def _struct_check(f: C.ConnectField, name: str, declared: str) -> _Check:
    parts = {p.name: _part(p, f"{name}.{p.name}") for p in f.fields}

    def struct(v: Any) -> None:
        if type(v) is not dict:
            raise _refused(name, v, declared)
        for key, check in parts.items():
            x = v.get(key)
            if x is not None:
                check(x)

    return struct


def _array_check(items: C.ConnectField, name: str, declared: str) -> _Check:
    checks: list[_Check] = []  # one per place, made as long arrays first reach it

    def array(v: Any) -> None:
        if type(v) is not list:
            raise _refused(name, v, declared)
        while len(checks) < len(v):
            checks.append(_part(items, f"{name}[{len(checks)}]"))
        for check, x in zip(checks, v, strict=False):
            if x is not None:
                check(x)

    return array


def _map_check(f: C.ConnectField, name: str, declared: str) -> _Check:
    assert f.values is not None
    values, keys = f.values, f.keys
    if keys is None or keys.type == "string":  # the JSON converter's object: string keys

        def map_object(v: Any) -> None:
            if type(v) is not dict:
                raise _refused(name, v, declared)
            for k, x in v.items():
                if x is not None:
                    _part(values, f"{name}[{json.dumps(k, ensure_ascii=False)}]")(x)

        return map_object
    key_declared = keys.type if keys.logical is None else f"{keys.type} ({keys.logical})"

    def map_pairs(v: Any) -> None:
        if type(v) is not list:
            raise _refused(name, v, declared)
        for i, pair in enumerate(v):
            if type(pair) is not list or len(pair) != 2:
                raise _refused(f"{name}[{i}]", pair, f"a [key, value] pair of a map with {key_declared} keys")
            k, x = pair
            if k is not None:
                _part(keys, f"{name}[{i}].key")(k)
            if x is not None:
                _part(values, f"{name}[{i}].value")(x)

    return map_pairs
