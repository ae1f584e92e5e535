"""A Connect field's value against the type its message's schema declares for it.

With `schemas.enable=true` every field of a Debezium message is declared by its Connect type and
logical name, and the JSON converter writes each type in one JSON form: integers as JSON integers
within their width, float and double as JSON numbers (a non-finite one as the text `NaN`,
`Infinity` or `-Infinity`, as Jackson writes it), booleans as `true`/`false`, string and bytes
(base64) as text, a struct as an object, an array as an array, a map as an object (or, with keys
that are not strings, an array of pairs). A Connect Decimal is declared `bytes` but is a number or
text with `decimal.format=NUMERIC` or `string` (Flink CDC sends numbers too). Avro records reach
the decoder in the same forms (decode/avro/schema.py), their types fixed by the writer schema.

A value in another form contradicts its schema: the record is a dead letter naming the column,
never a row read by the table column's type (text in an `int32` field landing in a STRING column,
an object in a `string` field landing as its JSON text).
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

from icetide.decode import limits as lim
from icetide.decode.debezium import connect_schema as C
from icetide.decode.json.scalars import RAW_MESSAGE_CHARS
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
    for a type this module does not know (no check)."""
    declared = f.type if f.logical is None else f"{f.type} ({f.logical})"
    bits = _INTEGER_BITS.get(f.type)
    if bits is not None:
        low, high = lim.INT_RANGES[bits]

        def integer(v: Any) -> None:
            if type(v) is not int or not low <= v <= high:
                raise _refused(name, v, declared)

        return integer
    forms = _DECIMAL_FORMS if f.logical == C.DECIMAL else _FORMS.get(f.type)
    if forms is None:
        return None
    non_finite = forms is _NUMBERS

    def form(v: Any) -> None:
        if type(v) not in forms and not (non_finite and type(v) is str and v in _NON_FINITE):
            raise _refused(name, v, declared)

    return form
