"""Decode Debezium change events in Python, on the executor: the one Debezium decoder, run by the
sync fast path's tasks and by the Spark path's (decode/debezium/tasks.py).

Its rules are those of the Spark SQL decoder icetide ran until issue 23, whose outputs are frozen
in tests/golden/debezium*/ (the deliberate differences are listed in docs/design.md). A record it
cannot decode exactly raises `NotHere` with the reason: the fast path then hands the batch to the
Spark path, which owns every truncate and every schema change, and where such a record is a dead
letter saying why. A record that is a dead letter has its error returned by `TableRows.add`.

Supported: the JSON converter's messages with their Connect schema (`{"schema":...,
"payload":...}`, the schema part named by its text and parsed once) and schemaless envelopes,
read by decode/debezium/message.py;
ops c, r, u and d (an update that changes the key is a DELETE of the old key and an UPSERT of
the new row); tombstones are skipped. Column types: those of the pyarrow JSON decoder
(decode/json/records.py), DECIMAL, BINARY, TIMESTAMP_NTZ, ARRAY, STRUCT and MAP. Connect
conversions: decimals (base64 two's complement with the schema's scale, or numbers; also
VariableScaleDecimal and without a schema), Date, Timestamp, MicroTimestamp, NanoTimestamp,
ZonedTimestamp, Time, MicroTime, NanoTime, Year, and plain types, as `field_conversion` does
(decode/debezium/conversions.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from icetide.decode.debezium import connect_schema as C
from icetide.decode.debezium.conversions import (
    Conversions,
    Converter,
    DeadLetter,
    NotHere,
    storage_type,
    supported_column,
)
from icetide.decode.debezium.message import Envelope
from icetide.decode.spark_compat.connect_text import field_text, type_error
from icetide.write.collapse import DELETE, INSERT, UPSERT

__all__ = [
    "Conversions",
    "DeadLetter",
    "NotHere",
    "TableRows",
    "source_millis",
    "source_order",
]

_DIGITS_15 = re.compile(r"[0-9]{1,15}")
_MILLIS = re.compile(r"-?[0-9]{1,15}")
_OPS = ("c", "r", "u", "d")


def _holds(t: pa.DataType, f: C.ConnectField) -> bool:
    """Whether a column of Arrow type `t` takes Connect field `f` as it is, without the Spark path's
    widening (decode/debezium/changes.py `evolved_types`, with schema_evolution on)."""
    from pyspark.errors import PySparkTypeError
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import from_arrow_type

    from icetide.decode.debezium.changes import fits_column

    try:
        column = from_arrow_type(t)
    except PySparkTypeError:  # time, uuid, fixed: only a binary field goes in as it is
        column = T.BinaryType()
    return fits_column(_spark_type(C.column_ddl(f)), column)


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
    """The `_source_order` text (the former Spark SQL decoder's `_order`): binlog file/pos/row, LSN
    or time, then offset."""
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
    """The `_source_ts` of the former Spark SQL decoder in epoch milliseconds: the source block's ts_ms, else
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
        for f, column in zip(self.schema, self.columns, strict=True):
            field = schema.field(f.name) if schema is not None else None
            if evolving and field is not None and not _holds(f.type, field):
                raise NotHere(f"column {f.name}: the schema sends {C.column_ddl(field)}; the Spark path widens it")
            required = f.name in self.key or not f.nullable
            plan.append((f.name, self.conversions.converter(field, f.type, f.name), required, column.append))
        self._plans[schema_id] = plan
        return plan

    def add(self, envelope: Envelope, order: str, *, evolving: bool) -> list[str]:
        """One event's change(s). Returns the error of its dead letter, if a change is bad: one per
        event, the first bad change's (a key-moving update is a delete, then an upsert; a good one
        of the two is still added, as on the Spark path); NotHere for an event the fast path hands
        to the Spark path (a truncate, fields to evolve the table with) or that it cannot read exactly."""
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
            if op.strip(" ").lower() == "t":  # a truncate over a limit, or malformed: applied all the same
                raise NotHere(f"op {envelope.op!r}: a truncate (the Spark path applies it)")
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

    def mark(self) -> tuple[int, int]:
        """Where the changes end: `undo(mark)` drops every change added after it, within one
        event's `add` (which seals only once it returns, so an `add` that raised sealed nothing)."""
        return len(self._sealed), len(self.ops)

    def undo(self, mark: tuple[int, int]) -> None:
        """Drop the changes added since `mark`: an event that raised part way (a key-moving
        update whose delete was added before its upsert failed)."""
        sealed, held = mark
        if len(self._sealed) != sealed:  # changes moved into Arrow since: an `add` that returned
            raise RuntimeError("TableRows.undo after a seal: the changes to drop are no longer held")
        del self.ops[held:], self.orders[held:]
        for column in self.columns:
            del column[held:]

    def _drop_partial(self) -> None:
        rows = len(self.ops)
        for column in self.columns:
            del column[rows:]

    def _checked(self, plan: list[_Step], row: Mapping[str, Any], *, delete: bool) -> list[Any] | str:
        """The row's values, or the error of its dead letter: the first the Spark path finds
        (the former Spark SQL JSON decoder `finish`: key columns first, then the others, each in table order; a
        delete's other values go unread, null where they do not convert or are missing, NOT NULL
        columns too: a delete writes its key alone)."""
        values: list[Any] = [None] * len(plan)
        keys = [i for i, (name, *_) in enumerate(plan) if name in self.key]
        for i in [*keys, *(i for i in range(len(plan)) if i not in keys)]:
            name, convert, required, _ = plan[i]
            key = name in self.key
            v = row.get(name)
            if v is None:
                if key:
                    return f"key column {name} is missing or null"
                if required and not delete:
                    return f"column {name} is missing or null (NOT NULL)"
                continue
            try:
                values[i] = convert(v)
            except DeadLetter as exc:
                if delete and not key:
                    continue
                return exc.error or type_error(name, v, self.schema.field(i).type)
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
