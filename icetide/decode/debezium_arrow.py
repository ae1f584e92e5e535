"""Decode Debezium change events in Python, on the executor: the decoder of the sync fast path.

It follows the Spark decoder (decode/debezium.py) for what it supports and gives up otherwise:
a record it cannot decode exactly as the Spark decoder would raises `NotHere` with the reason,
and the whole batch then runs on the Spark path, which owns every error (dead letters), every
truncate and every schema change. So this decoder needs no error messages of its own; it only
must never accept a record differently.

Supported: the JSON converter's messages with their Connect schema (`{"schema":...,
"payload":...}`, the schema part named by its text and parsed once) and schemaless envelopes;
ops c, r, u and d (an update that changes the key is a DELETE of the old key and an UPSERT of
the new row); tombstones are skipped. Column types: those of the pyarrow JSON decoder
(decode/arrow_json.py) and DECIMAL. Connect conversions: precise decimals (base64 two's
complement with the schema's scale), Date, Timestamp, MicroTimestamp, NanoTimestamp,
ZonedTimestamp, Time, MicroTime, NanoTime, Year, and plain types, as `field_conversion` does.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa

from icetide.decode import connect as C
from icetide.decode import limits as lim
from icetide.decode.arrow_json import ArrowJsonDecoder, raw_text, unsupported_columns
from icetide.decode.limits import PayloadLimits
from icetide.sink.changelog import DELETE, INSERT, UPSERT

_PAYLOAD_KEY = b'"payload":'
_HEAD_START = b'{"schema"'
_SCHEMA_START = re.compile(r'\{"schema"\s*:\s*')
_NUMBER = re.compile(r"^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$")
_MICROS_FROM = 100_000_000_000_000  # as decode/debezium.py: a larger schemaless epoch is microseconds
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_DAY = date(1970, 1, 1)
_MIN_MS, _MAX_MS = lim.MIN_EPOCH_MICROS // 1000, lim.MAX_EPOCH_MICROS // 1000
_LONE_SURROGATE = re.compile(lim.LONE_SURROGATE.encode())
_DECIMAL_38 = 10**38
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_SPARK_TRIMS = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f "  # the whitespace Spark trims off text it casts (ASCII only)
_INT_RANGES = {8: (-(2**7), 2**7 - 1), 16: (-(2**15), 2**15 - 1), 32: (-(2**31), 2**31 - 1), 64: (-(2**63), 2**63 - 1)}


class NotHere(Exception):
    """This record (or table) is for the Spark path; the message says why, for the debug log."""


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


Converter = Callable[[Any], Any]  # a JSON value (not None) -> the column's storage value; NotHere if it does not fit


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
            if raw.strip() != raw.strip(_SPARK_TRIMS):
                raise NotHere(f"column {name}: text with a space Spark does not trim")
            return json_value(raw, t)

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
            low, high = _INT_RANGES[t.bit_width]

            def integer(v: Any) -> Any:
                if type(v) is int and low <= v <= high:
                    return v
                return _fits(value_of(raw_text(v), t), name)

            return integer
        if pa.types.is_floating(t):
            single = pa.types.is_float32(t)

            def floating(v: Any) -> float:
                try:
                    x = float(v) if type(v) in (int, float) else _fits(value_of(raw_text(v), t), name)
                except OverflowError as exc:  # an integer beyond a double
                    raise NotHere(f"column {name}: a number beyond a DOUBLE") from exc
                if single and not (type(v) is int and int(x) == v):  # an integer that is its double: no doubt
                    return _single(x, name)
                return x

            return floating
        if pa.types.is_boolean(t):
            return lambda v: v if type(v) is bool else _fits(value_of(raw_text(v), t), name)
        if pa.types.is_timestamp(t):

            def timestamp(v: Any) -> Any:
                if type(v) is int and _MIN_MS <= v <= _MAX_MS:
                    return v * 1000
                moment = _fits(value_of(raw_text(v), t), name)
                return (moment - _EPOCH) // _MICRO

            return timestamp
        if pa.types.is_date32(t):
            return lambda v: (_fits(value_of(raw_text(v), t), name) - _EPOCH_DAY).days
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
                    raise NotHere(f"column {name}: a decimal that would be rounded")
                unscaled //= step
            if not -limit < unscaled < limit:
                raise NotHere(f"column {name}: a decimal beyond DECIMAL({precision},{target})")
            return Decimal(unscaled).scaleb(-target)

        return decimal


_MICRO = datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=UTC) - _EPOCH


def _single(x: float, name: str) -> float:
    """`x` for a FLOAT column. Spark parses the value's text straight to a FLOAT; Arrow rounds the
    double `x` to one. The two can differ only where `x` is halfway between two FLOATs (the text,
    Java's for a JSON number, may lie on either side of it), or beyond the largest FLOAT."""
    if not math.isfinite(x):
        return x
    if abs(x) > _FLOAT32_MAX:
        raise NotHere(f"column {name}: a number beyond a FLOAT")
    nearest = float(np.float32(x))
    if nearest != x:
        mirror = 2 * Fraction(x) - Fraction(nearest)  # a FLOAT too when x is halfway
        if abs(mirror) <= _FLOAT32_MAX and Fraction(float(np.float32(float(mirror)))) == mirror:
            raise NotHere(f"column {name}: a number halfway between two FLOATs")
    return x


def _fits(value: Any, name: str) -> Any:
    if value is None:
        raise NotHere(f"column {name}: a value that does not convert (a dead letter on the Spark path)")
    return value


def _in_range(micros: int, name: str) -> int:
    if not lim.MIN_EPOCH_MICROS <= micros <= lim.MAX_EPOCH_MICROS:
        raise NotHere(f"column {name}: a timestamp outside years 0001-9999")
    return micros


def _epoch_micros(unit: str, name: str) -> Converter:
    """MicroTimestamp ("us", up to 18 digits) and NanoTimestamp ("ns", divided toward zero)."""

    def micros(v: Any) -> Any:
        if type(v) is not int:
            raise NotHere(f"column {name}: an epoch timestamp that is not an integer")
        if unit == "ns":
            if not _INT_RANGES[64][0] <= v <= _INT_RANGES[64][1]:
                raise NotHere(f"column {name}: a nanosecond timestamp beyond a BIGINT")
            v = -(-v // 1000) if v < 0 else v // 1000
        elif not -(10**18) < v < 10**18:
            raise NotHere(f"column {name}: a microsecond timestamp beyond 18 digits")
        return _in_range(v, name)

    return micros


def _time_of_day(per_unit_micros: int, t: pa.DataType, name: str) -> Converter:
    """Time/MicroTime/NanoTime as `_time_of_day` of decode/debezium.py: text or integral micros."""

    low64, high64 = _INT_RANGES[64]

    def micros_of(v: Any) -> int:
        if type(v) is not int or not low64 <= v <= high64:
            raise NotHere(f"column {name}: a time of day that is not a BIGINT")
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
        low, high = _INT_RANGES[t.bit_width]

        def integral(v: Any) -> int:
            micros = micros_of(v)
            if not low <= micros <= high:
                raise NotHere(f"column {name}: a time of day beyond {t}")
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
        raise NotHere(f"column {name}: a decimal that is not base64") from exc
    if len(data) > 16 or not data:
        raise NotHere(f"column {name}: a decimal of {len(data)} bytes")
    unscaled = int.from_bytes(data, "big", signed=True)
    # Spark adds the high 8 bytes times 2**64 to the low 8 in DECIMAL(38,0): past 38 digits, on
    # the way (a negative value within 2**64 of -10**38) or at the end, its text is null.
    if abs(unscaled) >= _DECIMAL_38 or abs(unscaled >> 64 << 64) >= _DECIMAL_38:
        raise NotHere(f"column {name}: a decimal beyond 38 digits")
    return unscaled


def _decimal_text(unscaled: int, scale: int) -> str:
    """The decimal text of `_decimal_text` in decode/debezium.py."""
    digits = str(abs(unscaled)).rjust(scale + 1, "0")
    sign = "-" if unscaled < 0 else ""
    return sign + (digits[: len(digits) - scale] + "." + digits[len(digits) - scale :] if scale else digits)


# -- messages -----------------------------------------------------------------------------------


@dataclass
class Envelope:
    """One change event: its op, row parts, source block, time, and its schema (None: schemaless)."""

    op: str
    before: Mapping[str, Any] | None
    after: Mapping[str, Any] | None
    source: Mapping[str, Any]
    ts_ms: Any
    schema: C.EnvelopeSchema | None
    schema_id: int


class EnvelopeReader:
    """Splits JSON-converter messages into schema and payload, parsing each distinct schema once."""

    def __init__(self, limits: PayloadLimits) -> None:
        self.limits = limits
        self.heads: dict[bytes, tuple[int, C.EnvelopeSchema | None]] = {}
        self._last: bytes | None = None

    def read(self, value: bytes) -> Envelope | None:
        """The message's event, None for a tombstone; NotHere for anything else the Spark path reads."""
        if len(value) > self.limits.max_record_bytes:
            raise NotHere("a message over the payload size limit")
        if b"\\" in value and _LONE_SURROGATE.search(value):
            raise NotHere("a message with a lone surrogate escape")
        schema: C.EnvelopeSchema | None = None
        schema_id = 0
        if value.startswith(_HEAD_START):
            head = self._last
            if head is None or not value.startswith(head):
                cut = value.find(_PAYLOAD_KEY)
                if cut < 0:
                    raise NotHere("a message with a schema but no payload key")
                head = value[: cut + len(_PAYLOAD_KEY)]
                if head not in self.heads:
                    self.heads[head] = (len(self.heads) + 1, _parse_head(head, self.limits))
                self._last = head
            schema_id, schema = self.heads[head]
            body = value[len(head) :].rstrip()
            if not body.endswith(b"}"):
                raise NotHere("a message whose payload is not its last part")
            body = body[:-1]
        else:
            body = value
        room = self.limits.max_nesting_depth - (1 if schema_id else 0)  # a payload is inside the message
        if lim.openers(body) > room and lim.nesting_depth(body.decode("utf-8", "replace")) > room:
            raise NotHere("a message nested beyond the limit")
        try:
            payload = json.loads(body, parse_constant=_non_numeric, object_pairs_hook=_object)
        except ValueError as exc:
            raise NotHere("a message that is not JSON") from exc
        if payload is None:
            return None  # {"schema": ..., "payload": null}, or the value null
        if not isinstance(payload, dict):
            raise NotHere("a message that is not a JSON object")
        if schema_id == 0 and ("schema" in payload or "payload" in payload):
            raise NotHere("a message with a schema in another layout than the JSON converter's")
        return envelope_of(payload, schema, schema_id)


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object; NotHere when a key repeats (Spark's map of the row does not take it)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise NotHere("a message with a repeated key in an object")
    return obj


def _non_numeric(constant: str) -> Any:
    """NaN and Infinity literals: Spark reads them, then writes them as quoted text ('"NaN"')."""
    raise NotHere(f"a message with a {constant} literal")


def _parse_head(head: bytes, limits: PayloadLimits) -> C.EnvelopeSchema | None:
    """The schema of a message head (`{"schema":<schema>,"payload":`), as decode/debezium.py
    `_schema_of` reads it; NotHere for a head that one reads otherwise or that breaks a limit."""
    try:
        text = head[: -len(_PAYLOAD_KEY)].decode("utf-8")
        start = _SCHEMA_START.match(text)
        if start is None:
            raise NotHere("a message head that is not a schema")
        value, end = json.JSONDecoder().raw_decode(text, start.end())
    except (ValueError, UnicodeDecodeError) as exc:
        raise NotHere("a message head that is not JSON") from exc
    if text[end:].strip() != ",":
        raise NotHere("a message whose schema is not followed by its payload")
    if lim.nesting_depth(text + "}") > limits.max_nesting_depth:
        raise NotHere("a message schema nested beyond the limit")
    if value is None:
        return None
    try:
        return C.parse_envelope_schema(json.dumps(value))
    except ValueError as exc:
        raise NotHere(f"a schema that describes no row ({exc})") from exc


def _holds(t: pa.DataType, f: C.ConnectField) -> bool:
    """Whether a column of Arrow type `t` takes Connect field `f` as it is, without the Spark path's
    widening (decode/debezium.py `_evolved_types`, with schema_evolution on)."""
    from icetide.decode.debezium import fits_column

    if pa.types.is_integer(t):
        ddl = {8: "TINYINT", 16: "SMALLINT", 32: "INT", 64: "BIGINT"}[t.bit_width]
    elif pa.types.is_decimal128(t):
        ddl = f"DECIMAL({t.precision},{t.scale})"
    elif pa.types.is_date32(t):
        ddl = "DATE"
    elif pa.types.is_timestamp(t):
        ddl = "TIMESTAMP"
    else:
        ddl = {pa.float32(): "FLOAT", pa.float64(): "DOUBLE", pa.bool_(): "BOOLEAN", pa.string(): "STRING"}[t]
    return fits_column(_spark_type(C.column_ddl(f)), _spark_type(ddl))


def _spark_type(ddl: str) -> Any:
    """The Spark type of a DDL `column_ddl` gives, without a JVM (executors have none)."""
    from pyspark.sql import types as T

    decimal = re.fullmatch(r"DECIMAL\((\d+),(\d+)\)", ddl)
    if decimal:
        return T.DecimalType(int(decimal[1]), int(decimal[2]))
    simple = {
        "TINYINT": T.ByteType(),
        "SMALLINT": T.ShortType(),
        "INT": T.IntegerType(),
        "BIGINT": T.LongType(),
        "FLOAT": T.FloatType(),
        "DOUBLE": T.DoubleType(),
        "BOOLEAN": T.BooleanType(),
        "STRING": T.StringType(),
        "BINARY": T.BinaryType(),
        "DATE": T.DateType(),
        "TIMESTAMP": T.TimestampType(),
    }
    return simple[ddl]


def _key_moved(before: Mapping[str, Any], after: Mapping[str, Any], key: Sequence[str]) -> bool:
    """An update that changes the key (compared as text, as the Spark path's map values are)."""
    return any(before.get(k) is not None and raw_text(before[k]) != _text(after.get(k)) for k in key)


def _text(v: Any) -> str | None:
    """A source-block value as Spark's from_json reads it into a STRING field."""
    return None if v is None else raw_text(v)


def _lpad(text: str, width: int, pad: str = "0") -> str:
    """Spark's lpad: padded on the left, or cut to `width`."""
    return text.rjust(width, pad)[:width] if len(text) < width else text[:width]


def source_order(source: Mapping[str, Any], ts_ms: Any, offset: int) -> str:
    """The `_source_order` text of decode/debezium.py `_order`: binlog file/pos/row, LSN or time, then offset."""
    file, pos = _text(source.get("file")), _text(source.get("pos"))
    if file is not None and pos is not None:
        row = _text(source.get("row")) or "0"
        head = f"m{file}/{_lpad(pos, 20)}/{_lpad(row, 10)}"
    else:
        lsn = _text(source.get("lsn"))
        if lsn is not None:
            head = "p" + _lpad(lsn, 20)
        else:
            ts = _text(source.get("ts_ms"))
            if ts is None:
                ts = _text(ts_ms)
            head = "t" + _lpad(ts, 15) if ts is not None and re.fullmatch(r"[0-9]{1,15}", ts) else ""
    return f"{head}|{_lpad(str(offset), 20)}"


# -- one table's rows ---------------------------------------------------------------------------


SEALED_ROWS = 50_000  # changes held as Python values before they move into Arrow


class TableRows:
    """Collects one table's changes as columns: the table's, then `_op` and `_source_order`."""

    def __init__(self, schema: pa.Schema, key: Sequence[str], op_mode: str, conversions: Conversions) -> None:
        for f in schema:
            if not supported_column(f.type):
                raise NotHere(f"column {f.name}: type {f.type}")
        self.schema = schema
        self.key = tuple(key)
        self.upsert = INSERT if op_mode == "append" else UPSERT
        self.conversions = conversions
        self.names = schema.names
        self.known = frozenset(self.names)
        self.columns: list[list[Any]] = [[] for _ in self.names]
        self.ops: list[str] = []
        self.orders: list[str] = []
        self.unknown: dict[str, int] = {}
        self._plans: dict[int, list[tuple[str, Converter, bool]]] = {}
        self._sealed: list[pa.Table] = []  # earlier changes, already in Arrow

    def _plan(self, envelope: Envelope, evolving: bool) -> list[tuple[str, Converter, bool]]:
        plan = self._plans.get(envelope.schema_id)
        if plan is None:
            plan = []
            for f in self.schema:
                field = envelope.schema.field(f.name) if envelope.schema is not None else None
                if evolving and field is not None and not _holds(f.type, field):
                    raise NotHere(f"column {f.name}: the schema sends {C.column_ddl(field)}; the Spark path widens it")
                required = f.name in self.key or not f.nullable
                plan.append((f.name, self.conversions.converter(field, f.type, f.name), required))
            self._plans[envelope.schema_id] = plan
        return plan

    def add(self, envelope: Envelope, order: str, *, evolving: bool) -> None:
        """One event's change(s); NotHere when the Spark path must read it."""
        op = envelope.op.strip(" ").lower()  # Spark's trim(): spaces only
        before, after = envelope.before, envelope.after
        if op == "d":
            changes = [(DELETE, before)]
        elif op in ("c", "r", "u"):
            changes = [(self.upsert, after)]
            if (
                op == "u"
                and isinstance(before, dict)
                and isinstance(after, dict)
                and _key_moved(before, after, self.key)
            ):
                changes = [(DELETE, before), (self.upsert, after)]
        else:
            raise NotHere(f"op {envelope.op!r}")
        row_part = after if isinstance(after, dict) else before
        if isinstance(row_part, dict):
            extra = row_part.keys() - self.known
            if extra:
                if evolving:
                    raise NotHere(f"fields the table lacks ({', '.join(sorted(extra))}) and schema_evolution is on")
                for name in extra:
                    self.unknown[name] = self.unknown.get(name, 0) + 1
        plan = self._plan(envelope, evolving)
        for change_op, row in changes:
            if not isinstance(row, dict):
                raise NotHere(f"op {envelope.op!r} without its row")
            values: list[Any] = []
            for name, convert, required in plan:
                v = row.get(name)
                if v is None:
                    if required:
                        raise NotHere(f"column {name} is missing or null")
                    values.append(None)
                else:
                    values.append(convert(v))
            for column, value in zip(self.columns, values, strict=True):
                column.append(value)
            self.ops.append(change_op)
            self.orders.append(order)
        if len(self.ops) >= SEALED_ROWS:
            self._seal()

    def __len__(self) -> int:
        return sum(t.num_rows for t in self._sealed) + len(self.ops)

    def table(self) -> pa.Table:
        """The changes so far: the table's columns in its types, `_op` and `_source_order`."""
        self._seal()
        if len(self._sealed) == 1:
            return self._sealed[0]
        return pa.concat_tables(self._sealed) if self._sealed else self._arrow()

    def _seal(self) -> None:
        """Move the changes collected as Python values into Arrow (a tenth of the memory or less)."""
        if self.ops or not self._sealed:
            self._sealed.append(self._arrow())
            self.columns = [[] for _ in self.names]
            self.ops, self.orders = [], []

    def _arrow(self) -> pa.Table:
        arrays = []
        for f, values in zip(self.schema, self.columns, strict=True):
            array = pa.array(values, type=storage_type(f.type))
            arrays.append(array if array.type == f.type else array.cast(f.type))
        fields = [*self.schema, pa.field("_op", pa.string()), pa.field("_source_order", pa.string())]
        arrays += [pa.array(self.ops, pa.string()), pa.array(self.orders, pa.string())]
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def envelope_of(payload: dict[str, Any], schema: Any, schema_id: int) -> Envelope:
    """The change event of a Debezium payload (the JSON converter's `payload`, or an Avro record
    shaped as one) with its envelope schema; NotHere for one without an op, or whose before,
    after or source is not an object."""
    op = payload.get("op")
    if type(op) is not str:
        raise NotHere("a message without an op")
    before, after, source = payload.get("before"), payload.get("after"), payload.get("source")
    if any(part is not None and not isinstance(part, dict) for part in (before, after, source)):
        raise NotHere("a message whose before, after or source is not an object (malformed for Spark)")
    return Envelope(
        op=op,
        before=before,
        after=after,
        source=source or {},
        ts_ms=payload.get("ts_ms"),
        schema=schema,
        schema_id=schema_id,
    )
