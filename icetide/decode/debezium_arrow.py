"""Decode Debezium change events in Python, on the executor: the decoder of the sync fast path.

It follows the Spark decoder (decode/debezium.py) for what it supports and gives up otherwise:
a record it cannot decode exactly as the Spark decoder would raises `NotHere` with the reason,
and the whole batch then runs on the Spark path, which owns every truncate and every schema
change. A record the Spark decoder makes a dead letter is one here too, with the same error
(`TableRows.add` returns it), when this decoder can tell that error exactly; else it is
NotHere as well. It must never accept a
record differently.

Supported: the JSON converter's messages with their Connect schema (`{"schema":...,
"payload":...}`, the schema part named by its text and parsed once) and schemaless envelopes;
ops c, r, u and d (an update that changes the key is a DELETE of the old key and an UPSERT of
the new row); tombstones are skipped. Column types: those of the pyarrow JSON decoder
(decode/arrow_json.py) and DECIMAL. Connect conversions: precise decimals (base64 two's
complement with the schema's scale), Date, Timestamp, MicroTimestamp, NanoTimestamp,
ZonedTimestamp, Time, MicroTime, NanoTime, Year, and plain types, as `field_conversion` does
(decode/connect_conversions.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa

from icetide.decode import connect as C
from icetide.decode import limits as lim
from icetide.decode.arrow_json_values import checked_decimal
from icetide.decode.connect_conversions import (
    Conversions,
    Converter,
    DeadLetter,
    NotHere,
    storage_type,
    supported_column,
)
from icetide.decode.connect_values import decimal_number, field_text, rereadable, type_error
from icetide.decode.limits import PayloadLimits
from icetide.sink.changelog import DELETE, INSERT, UPSERT

__all__ = [
    "Conversions",
    "DeadLetter",
    "Envelope",
    "EnvelopeReader",
    "NotHere",
    "TableRows",
    "envelope_of",
    "head_schema",
    "source_millis",
    "source_order",
]

_PAYLOAD_KEY = b'"payload":'
_HEAD_START = b'{"schema"'
_SCHEMA_START = re.compile(r'\{"schema"\s*:\s*')
_LONE_SURROGATE = re.compile(lim.LONE_SURROGATE.encode())
_JSON_SPACE = " \t\n\r"  # the whitespace JSON allows between tokens
_SPACE_AFTER_QUOTE = re.compile(rb'"[ \t\n\r]')
_DIGITS_15 = re.compile(r"[0-9]{1,15}")
_MILLIS = re.compile(r"-?[0-9]{1,15}")
_OPS = ("c", "r", "u", "d")


# -- messages -----------------------------------------------------------------------------------


@dataclass(slots=True)
class Envelope:
    """One change event: its op, row parts, source block, time, and its schema (None: schemaless);
    or, with `error`, a message the Spark path makes a dead letter before reading its row."""

    op: str
    before: Mapping[str, Any] | None
    after: Mapping[str, Any] | None
    source: Mapping[str, Any]
    ts_ms: Any
    schema: C.EnvelopeSchema | None
    schema_id: int
    error: str | None = None


class EnvelopeReader:
    """Splits JSON-converter messages into schema and payload, parsing each distinct schema once."""

    def __init__(self, limits: PayloadLimits) -> None:
        self.limits = limits
        self.heads: dict[bytes, tuple[int, C.EnvelopeSchema | None]] = {}
        self._last: bytes | None = None

    def read(self, value: bytes) -> Envelope | None:
        """The message's event (one with an error: see `envelope_of`), None for a tombstone; NotHere
        for anything else the Spark path reads."""
        if len(value) > self.limits.max_record_bytes:
            raise NotHere("a message over the payload size limit")
        if b"\\" in value and _LONE_SURROGATE.search(value):
            raise NotHere("a message with a lone surrogate escape")
        if not value.isascii():  # json.loads would take the UTF-8 bytes of a surrogate (surrogatepass)
            try:
                value.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise NotHere("a message that is not valid UTF-8 (a dead letter on the Spark path)") from exc
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
        braces = body.count(b"{")
        if braces + body.count(b"[") > room and lim.nesting_depth(body.decode("utf-8", "replace")) > room:
            raise NotHere("a message nested beyond the limit")
        payload = _payload(body, braces)
        if payload is None:
            return None  # {"schema": ..., "payload": null}, or the value null
        if not isinstance(payload, dict):
            raise NotHere("a message that is not a JSON object")
        if schema_id == 0 and ("schema" in payload or "payload" in payload):
            raise NotHere("a message with a schema in another layout than the JSON converter's")
        return envelope_of(payload, schema, schema_id)


def _payload(body: bytes, braces: int) -> Any:
    """`json.loads(body)`, but numbers that are not integers, and the NaN and Infinity literals,
    as `Decimal` (connect_values.py); NotHere for text that is not JSON (or a number longer than
    Spark reads), or a key repeated in an object (`braces`: how many "{" bytes `body` has).

    Checking each object's keys as the parser makes it costs a Python call per object, so a UTF-8
    JSON object is first parsed without that check, and counting then proves that no object lost
    a key. Each key has its own colon after it, so `body` has at least as many colons as its
    objects have keys, and the parsed objects hold at most that many: when `_objects` found every
    object (one per "{") and their sizes add up to the colons, no key was repeated. Where values
    hold colons too, the colons right after a quote count as well, provided no quote is followed
    by whitespace (then every key's closing quote has its colon right after it). Whenever the
    counts cannot tell, or the quick parse fails, the checking parse decides: the result and the
    first error are always its own.
    """
    if body[:1] == b"{" and body[1:2] != b"\x00":  # json.detect_encoding: UTF-8 (so counting bytes counts characters)
        try:
            text = body.decode("utf-8")
            payload, end = _QUICK.raw_decode(text)
        except (ValueError, NotHere, RecursionError):
            pass  # the checking parse gives the error (a repeated key may come before it)
        else:
            objects = _objects(payload)
            if len(objects) == braces and not text[end:].strip(_JSON_SPACE):
                keys = sum(map(len, objects))
                if body.count(b":") == keys:
                    return payload
                if body.count(b'":') == keys and not _SPACE_AFTER_QUOTE.search(body):
                    return payload
    try:
        return json.loads(body, parse_float=checked_decimal, parse_constant=Decimal, object_pairs_hook=_object)
    except ValueError as exc:
        raise NotHere("a message that is not JSON") from exc


def _objects(payload: Any) -> list[dict[str, Any]]:
    """The payload's object and the objects among its values (the envelope's before, after, source...)."""
    if type(payload) is not dict:
        return []
    objects = [v for v in payload.values() if type(v) is dict]
    objects.append(payload)
    return objects


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object; NotHere when a key repeats (Spark's map of the row does not take it)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise NotHere("a message with a repeated key in an object")
    return obj


# Objects made in C; `_payload` proves their keys distinct. NaN and Infinity literals: Spark reads
# them, and its map of the row holds them as quoted text ('"NaN"'), as a number beyond a double.
_QUICK = json.JSONDecoder(parse_float=checked_decimal, parse_constant=Decimal)


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


def head_schema(head: bytes, limits: PayloadLimits) -> C.EnvelopeSchema | None:
    """The schema of a message head (`{"schema":<schema>,"payload":`) as `EnvelopeReader` reads it."""
    return _parse_head(head, limits)


def _holds(t: pa.DataType, f: C.ConnectField) -> bool:
    """Whether a column of Arrow type `t` takes Connect field `f` as it is, without the Spark path's
    widening (decode/debezium_changes.py `evolved_types`, with schema_evolution on)."""
    from icetide.decode.debezium_changes import fits_column

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
    return any(before.get(k) is not None and field_text(before[k]) != _text(after.get(k)) for k in key)


def _text(v: Any) -> str | None:
    """A source-block value as Spark's from_json reads it into a STRING field."""
    if type(v) is str:
        return v  # type: ignore[no-any-return]
    if type(v) is int:
        return str(v)
    return None if v is None else field_text(v)


def _lpad(text: str, width: int, pad: str = "0") -> str:
    """Spark's lpad: padded on the left, or cut to `width`."""
    return text.rjust(width, pad)[:width]


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
            head = "t" + _lpad(ts, 15) if ts is not None and _DIGITS_15.fullmatch(ts) else ""
    return f"{head}|{_lpad(str(offset), 20)}"


def source_millis(source: Mapping[str, Any], ts_ms: Any) -> int | None:
    """The `_source_ts` of decode/debezium.py in epoch milliseconds: the source block's ts_ms, else
    the event's, when its text is an integer of up to 15 digits; else None."""
    ts = _text(source.get("ts_ms"))
    if ts is None:
        ts = _text(ts_ms)
    return int(ts) if ts is not None and _MILLIS.fullmatch(ts) else None


# -- one table's rows ---------------------------------------------------------------------------


SEALED_ROWS = 50_000  # changes held as Python values before they move into Arrow
_Step = tuple[str, Converter, bool, Callable[[Any], None]]  # column, converter, required, its list's append


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
        self._plans: dict[int, list[_Step]] = {}  # per envelope schema
        self._rereads: dict[int, list[tuple[str, int]]] = {}  # per envelope schema: Decimal columns, scales
        self._sealed: list[pa.Table] = []  # earlier changes, already in Arrow

    def converters(self, schema: C.EnvelopeSchema | None, schema_id: int, *, evolving: bool) -> list[Converter]:
        """Each column's converter for rows of envelope schema `schema_id` (`schema`), made as the
        first such row's `add` makes them; NotHere where that would raise it."""
        plan = self._plans.get(schema_id)
        if plan is None:
            plan = self._plan(schema, schema_id, evolving)
        return [convert for _, convert, _, _ in plan]

    def _plan(self, schema: C.EnvelopeSchema | None, schema_id: int, evolving: bool) -> list[_Step]:
        """Each column's step for rows of this envelope's schema, made once per schema."""
        plan = []
        self._rereads[schema_id] = []
        for f, column in zip(self.schema, self.columns, strict=True):
            field = schema.field(f.name) if schema is not None else None
            if field is not None and field.logical == C.DECIMAL and 0 <= (field.scale or 0) <= 38:
                self._rereads[schema_id].append((f.name, field.scale or 0))
            if evolving and field is not None and not _holds(f.type, field):
                raise NotHere(f"column {f.name}: the schema sends {C.column_ddl(field)}; the Spark path widens it")
            required = f.name in self.key or not f.nullable
            plan.append((f.name, self.conversions.converter(field, f.type, f.name), required, column.append))
        self._plans[schema_id] = plan
        return plan

    def add(self, envelope: Envelope, order: str, *, evolving: bool) -> list[str]:
        """One event's change(s). Returns the error of its dead letter, if a change is bad: one per
        event, the first bad change's (a key-moving update is a delete, then an upsert; a good one
        of the two is still added, as on the Spark path); NotHere when the Spark path must read the event."""
        op = envelope.op
        before, after = envelope.before, envelope.after
        row_part = after if isinstance(after, dict) else before
        if isinstance(row_part, dict) and not self.known.issuperset(row_part):
            extra = row_part.keys() - self.known
            if evolving:  # the Spark path adds columns for them, a dead letter's too
                raise NotHere(f"fields the table lacks ({', '.join(sorted(extra))}) and schema_evolution is on")
            for name in extra:
                self.unknown[name] = self.unknown.get(name, 0) + 1
        plan = self._plans.get(envelope.schema_id)
        if plan is None:  # first: the Spark path widens columns for a dead letter's schema too
            plan = self._plan(envelope.schema, envelope.schema_id, evolving)
        if envelope.error is not None:
            return [envelope.error]
        if op not in _OPS:
            op = op.strip(" ").lower()  # Spark's trim(): spaces only
        changes: tuple[tuple[str, Any], ...]
        if op == "d":
            changes = ((DELETE, before),)
        elif op in ("c", "r", "u"):
            changes = ((self.upsert, after),)
            if (
                op == "u"
                and isinstance(before, dict)
                and isinstance(after, dict)
                and _key_moved(before, after, self.key)
            ):
                changes = ((DELETE, before), (self.upsert, after))
        elif op == "t":
            raise NotHere(f"op {envelope.op!r}: a truncate (the Spark path applies it)")
        elif op == "m":
            return ["unsupported op 'm' (message)"]
        else:
            return [f"unknown op '{envelope.op}'"]
        if isinstance(before, dict) and isinstance(after, dict) and self._rereads[envelope.schema_id]:
            self._check_rereads(envelope.schema_id, [row for _, row in changes], before, after)
        errors: list[str] = []
        for change_op, row in changes:
            if not isinstance(row, dict):
                missing = "before is missing for op 'd' (a delete needs the key)"
                errors.append(missing if op == "d" else f"after is missing for op '{envelope.op}'")
                continue
            error = self._append(plan, row, delete=change_op == DELETE)
            if error is not None:
                errors.append(error)
                continue
            self.ops.append(change_op)
            self.orders.append(order)
        if len(self.ops) >= SEALED_ROWS:
            self._seal()
        return errors[:1]

    def _check_rereads(
        self, schema_id: int, rows: Sequence[Any], before: Mapping[str, Any], after: Mapping[str, Any]
    ) -> None:
        """NotHere where the Spark path's second, exact read of a Decimal sent as a number (decode/
        debezium.py `_exact_number`), for one of `rows` (the row parts converted), reads both row
        parts and the other one may fail it."""
        for name, scale in self._rereads[schema_id]:
            read_again = any(
                isinstance(row, dict) and row.get(name) is not None and decimal_number(row[name], name) is not None
                for row in rows
            )
            if read_again and not (rereadable(before.get(name), scale) and rereadable(after.get(name), scale)):
                raise NotHere(f"column {name}: a decimal number read again beside a value that may not read")

    def _append(self, plan: list[_Step], row: Mapping[str, Any], *, delete: bool) -> str | None:
        """The row's value in each column; or its dead letter's error (NotHere, or any error) in none."""
        get = row.get
        try:
            for name, convert, required, append in plan:
                v = get(name)
                if v is None:
                    if required:
                        raise DeadLetter()
                    append(None)
                else:
                    append(convert(v))
            return None
        except DeadLetter:
            self._drop_partial()
        except BaseException:
            self._drop_partial()
            raise
        checked = self._checked(plan, row, delete=delete)
        if isinstance(checked, str):
            return checked
        for (_, _, _, append), v in zip(plan, checked, strict=True):
            append(v)
        return None

    def _drop_partial(self) -> None:
        rows = len(self.ops)
        for column in self.columns:
            del column[rows:]

    def _checked(self, plan: list[_Step], row: Mapping[str, Any], *, delete: bool) -> list[Any] | str:
        """The row's values, or the error of its dead letter: the first the Spark path finds
        (decode/json.py `finish`: key columns first, then the others, each in table order; a
        delete's other values go unread, null where they do not convert)."""
        values: list[Any] = [None] * len(plan)
        keys = [i for i, (name, *_) in enumerate(plan) if name in self.key]
        for i in [*keys, *(i for i in range(len(plan)) if i not in keys)]:
            name, convert, required, _ = plan[i]
            key = name in self.key
            v = row.get(name)
            if v is None:
                if key:
                    return f"key column {name} is missing or null"
                if required:
                    if delete:
                        raise NotHere(f"a delete without column {name} (NOT NULL)")
                    return f"column {name} is missing or null (NOT NULL)"
                continue
            try:
                values[i] = convert(v)
            except DeadLetter:
                if delete and not key:
                    continue
                return type_error(name, v, self.schema.field(i).type)
        return values

    def add_changes(self, changes: pa.Table, unknown: Mapping[str, int]) -> None:
        """Changes already in this object's columns (`changes_schema`), after those added so far,
        with the counts of the fields they had that the table lacks."""
        self._seal()
        self._sealed.append(changes)
        for name, count in unknown.items():
            self.unknown[name] = self.unknown.get(name, 0) + count

    def changes_schema(self) -> pa.Schema:
        """The columns of `table()`: the table's, then `_op` and `_source_order`."""
        return pa.schema([*self.schema, pa.field("_op", pa.string()), pa.field("_source_order", pa.string())])

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
            for column in self.columns:
                column.clear()  # in place: the plans append to these lists
            self.ops, self.orders = [], []

    def _arrow(self) -> pa.Table:
        arrays = []
        for f, values in zip(self.schema, self.columns, strict=True):
            array = pa.array(values, type=storage_type(f.type))
            arrays.append(array if array.type == f.type else array.cast(f.type))
        arrays += [pa.array(self.ops, pa.string()), pa.array(self.orders, pa.string())]
        return pa.Table.from_arrays(arrays, schema=self.changes_schema())


def envelope_of(payload: dict[str, Any], schema: Any, schema_id: int) -> Envelope:
    """The change event of a Debezium payload (the JSON converter's `payload`, or an Avro record
    shaped as one) with its envelope schema. One with the Spark path's `error` (a dead letter)
    when its before, after or source is not an object (Spark cannot parse it: malformed, no row,
    no source; the parts that are objects are kept, as Spark's from_json keeps them, for the
    fields the table lacks) or it has no op; NotHere for an op that is not text, and for a
    malformed truncate (the Spark path applies it)."""
    before, after, source = payload.get("before"), payload.get("after"), payload.get("source")
    op = payload.get("op")
    for part in (before, after, source):
        if part is not None and not isinstance(part, dict):
            if type(op) is str and op.strip(" ").lower() == "t":  # the Spark path applies it all the same
                raise NotHere("a truncate whose before, after or source is not an object")
            # Spark's from_json keeps the parts that are objects: their fields the table lacks count
            return Envelope(
                op if type(op) is str else "",
                before if isinstance(before, dict) else None,
                after if isinstance(after, dict) else None,
                {},
                None,
                schema,
                schema_id,
                error="malformed JSON",
            )
    if op is None:
        op, error = "", "not a Debezium change event: op is missing"
    elif type(op) is str:
        error = None
    else:
        raise NotHere("a message whose op is not text")
    return Envelope(
        op=op,
        before=before,
        after=after,
        source=source or {},
        ts_ms=payload.get("ts_ms"),
        schema=schema,
        schema_id=schema_id,
        error=error,
    )
