"""Change events decoded a run at a time into Arrow columns (`EventRun`), for both encodings.

A run is a sequence of records with one schema: Avro records of one schema id (decode/avro/decoder.py
`read_run`, below) or JSON-converter messages with one schema head (decode/debezium/json_runs.py, which
parses them with pyarrow into the same columns). Both then go through this module's column rules
(`EventRun.add_to`), which are format-agnostic; what is said below of Avro holds for JSON runs
with decode/debezium/json_runs.py's own checks in place of the container reader's.

Per record, fastavro plus the JSON converter's value forms and `TableRows.add` cost about 13 µs
(docs/benchmarks.md). A run of records of one schema id is read in one go instead
(decode/avro/container.py: DuckDB's Avro reader, each body proven to be one record), and
Debezium's rules then apply to whole columns: about 3.6 µs per record.

The per-record decoder (decode/avro/decoder.py `AvroMessages.envelope` with decode/debezium/rows.py
`TableRows.add`) stays the specification: a run gives exactly the changes it would give, or
`NotColumnar` and the run is read record by record, which then decides. So this module takes
only what it can prove equal:

- every record an event `envelope_of` takes; ops c, r, u and d; no update that moves its key;
  every row a change needs; no null in a key or NOT NULL column;
- each column made by the column's own converter (decode/debezium/conversions.py): as a whole
  column where its form is known to be the converter's (strings, integers and dates in range,
  doubles, booleans, epoch millisecond and microsecond timestamps in years 0001-9999), else
  value by value from the JSON converter's value forms; a value the converter refuses refuses
  the run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from icetide.decode import limits as lim
from icetide.decode.avro.container import NotColumnar, present
from icetide.decode.avro.schema import base64_text, float32_text
from icetide.decode.debezium import connect_schema as C
from icetide.decode.debezium.conversions import Converter, storage_type
from icetide.decode.debezium.rows import NotHere, TableRows
from icetide.write.collapse import DELETE

__all__ = [
    "MIN_RUN",
    "EventRun",
    "NotColumnar",
    "changes_of",
    "column_of",
    "envelope_parts",
    "single_source_values",
    "source_orders",
]

MIN_RUN = 256  # shorter runs are read record by record: a run costs about 2-3 ms before its first record
_OPS = pa.array(["c", "r", "u", "d"])
_EXACT_DOUBLE = 2**53
_MIN_DAY, _MAX_DAY = -719_162, 2_932_896  # 0001-01-01 and 9999-12-31, in days from 1970-01-01


# -- Debezium's rules on columns -----------------------------------------------------------------


def _text_column(array: pa.Array | None, rows: int) -> pa.Array:
    """A source-block field as text, a column at a time: the rule of decode/debezium/rows.py's
    `source_order`, whose values it must equal (tests/test_event_runs.py). Strings as they are,
    integers in decimal; null where absent. NotColumnar for other types."""
    if array is None or pa.types.is_null(array.type):
        return pa.nulls(rows, pa.string())
    if pa.types.is_string(array.type):
        return array
    if pa.types.is_integer(array.type) or pa.types.is_boolean(array.type):
        return pc.cast(array, pa.string())
    raise NotColumnar(f"a source field of type {array.type}")


def _lpad_column(text: pa.Array, width: int) -> pa.Array:
    """Spark's lpad a column at a time (decode/debezium/rows.py pads one value): padded on the left
    with zeros, or cut to `width` (ASCII text only)."""
    if pc.any(pc.invert(pc.string_is_ascii(text))).as_py():
        raise NotColumnar("a source position that is not ASCII text")
    return pc.utf8_slice_codeunits(pc.utf8_lpad(text, width=width, padding="0"), 0, width)


def _join(*parts: pa.Array | str) -> pa.Array:
    return pc.binary_join_element_wise(*parts, "")


def source_orders(source: pa.StructArray | None, ts_ms: pa.Array | None, offsets: np.ndarray) -> pa.Array:
    """decode/debezium/rows.py `source_order` of every record: binlog file/pos/row, LSN or time,
    then the Kafka offset."""
    rows = len(offsets)

    def field(array: pa.StructArray | None, name: str) -> pa.Array | None:
        if array is None or array.type.get_field_index(name) < 0:
            return None
        child = array.field(name)
        return child if array.null_count == 0 else pc.if_else(array.is_valid(), child, pa.nulls(rows, child.type))

    file, pos, row = (_text_column(field(source, n), rows) for n in ("file", "pos", "row"))
    lsn = _text_column(field(source, "lsn"), rows)
    ts = pc.coalesce(_text_column(field(source, "ts_ms"), rows), _text_column(ts_ms, rows))
    row = pc.if_else(pc.greater(pc.utf8_length(row.fill_null("")), 0), row, "0")
    binlog = _join("m", file.fill_null(""), "/", _lpad_column(pos.fill_null(""), 20), "/", _lpad_column(row, 10))
    position = _join("p", _lpad_column(lsn.fill_null(""), 20))
    timed = pc.match_substring_regex(ts.fill_null(""), r"^[0-9]{1,15}$")
    when = pc.if_else(timed, _join("t", _lpad_column(ts.fill_null(""), 15)), "")
    head = pc.if_else(pc.and_(file.is_valid(), pos.is_valid()), binlog, pc.if_else(lsn.is_valid(), position, when))
    tail = _lpad_column(pc.cast(pa.array(offsets, pa.int64()), pa.string()), 20)
    return _join(head, "|", tail)


def column_of(
    values: pa.Array, field: C.ConnectField | None, t: pa.DataType, name: str, convert: Converter
) -> pa.Array:
    """Column `name` of Arrow type `t` from the record field's values, exactly as `convert` (the
    column's converter, decode/debezium/conversions.py) makes it value by value: in whole columns
    where their form is known to be the converter's, else by `convert` itself. NotColumnar where
    a value does not convert (the per-record decoder then decides)."""
    kind = values.type
    if pa.types.is_null(kind) or values.null_count == len(values):
        return pa.nulls(len(values), t)
    logical = field.logical if field is not None else None
    columnar = None
    # (bytes: base64 text, checked value by value, decode/debezium/declared.py)
    if (
        field is None
        or logical in (C.DECIMAL, C.VARIABLE_SCALE_DECIMAL)
        or pa.types.is_decimal(t)
        or field.type == "bytes"
    ):
        pass
    elif logical in C.TIMESTAMP_UNITS and pa.types.is_timestamp(t):
        columnar = _timestamp(values, C.TIMESTAMP_UNITS[logical])
    elif logical in C.TIME_MICROS:
        pass
    elif pa.types.is_date32(t) and pa.types.is_integer(kind) and (logical is None or logical in C.DATES):
        columnar = _within(values, _MIN_DAY, _MAX_DAY, pa.int32(), t)
    elif pa.types.is_string(t):
        if pa.types.is_string(kind):
            columnar = values
        elif pa.types.is_integer(kind) or pa.types.is_boolean(kind):
            columnar = pc.cast(values, t)
    elif pa.types.is_integer(t) and pa.types.is_integer(kind):
        low, high = lim.INT_RANGES[t.bit_width]
        columnar = _within(values, low, high, t, t)
    elif pa.types.is_float64(t) and pa.types.is_float64(kind):
        columnar = values
    elif pa.types.is_float64(t) and pa.types.is_integer(kind):
        columnar = _within(values, -_EXACT_DOUBLE, _EXACT_DOUBLE, t, t)
    elif pa.types.is_boolean(t) and pa.types.is_boolean(kind):
        columnar = values
    elif pa.types.is_timestamp(t) and logical is None:
        columnar = _timestamp(values, "ms")
    if columnar is not None:
        return columnar.cast(t) if columnar.type != t else columnar
    return _by_value(values, t, name, convert)


def _within(values: pa.Array, low: int, high: int, storage: pa.DataType, t: pa.DataType) -> pa.Array | None:
    """The integers as `t` (through `storage`) when all lie in [low, high]; None: convert them one by one."""
    if pc.min(values).as_py() < low or pc.max(values).as_py() > high:
        return None
    stored = pc.cast(values, storage)
    return stored if storage == t else stored.cast(t)


def _by_value(values: pa.Array, t: pa.DataType, name: str, convert: Converter) -> pa.Array:
    """The column made value by value by the per-record decoder's own converter, each value first
    in the JSON converter's form (decode/avro/schema.py): bytes as base64, a float32 as its shortest text."""
    kind = values.type
    if pa.types.is_struct(kind) or pa.types.is_list(kind) or pa.types.is_map(kind):
        raise NotColumnar(f"column {name}: a nested value")
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_fixed_size_binary(kind):
        form: Converter | None = base64_text
    elif pa.types.is_float32(kind):
        form = float32_text
    else:
        form = None
    out: list[Any] = []
    append = out.append
    try:
        for v in values.to_pylist():
            if v is None:
                append(None)
            else:
                append(convert(form(v) if form is not None else v))
    except NotHere as exc:
        raise NotColumnar(str(exc)) from None
    array = pa.array(out, type=storage_type(t))
    return array if array.type == t else array.cast(t)


def _timestamp(values: pa.Array, unit: str) -> pa.Array | None:
    """Epoch milliseconds or microseconds as microseconds, when all lie in years 0001-9999."""
    if not pa.types.is_integer(values.type) or unit not in ("ms", "us"):
        return None
    low, high = (lim.MIN_EPOCH_MS, lim.MAX_EPOCH_MS) if unit == "ms" else (lim.MIN_EPOCH_MICROS, lim.MAX_EPOCH_MICROS)
    micros = _within(values, low, high, pa.int64(), pa.int64())
    return pc.multiply(micros, 1000) if micros is not None and unit == "ms" else micros


def envelope_parts(records: pa.StructArray, *, envelope: bool) -> dict[str, pa.Array]:
    """The parts of the run's events (`before`, `after`, `source`, `op`, `ts_ms`, those it has),
    every record an event decode/debezium/rows.py `envelope_of` takes: a string op, and a
    before, after and source that are records. NotColumnar otherwise. A flat record (`avro`) is
    the `after` of its event."""
    if not envelope:
        return {"after": records}
    names = ("before", "after", "source", "op", "ts_ms")
    parts = {n: records.field(n) for n in names if records.type.get_field_index(n) >= 0}
    op = parts.get("op")
    if op is None or not pa.types.is_string(op.type) or op.null_count:
        raise NotColumnar("an event without an op")
    for name in ("before", "after", "source"):
        if name in parts and not isinstance(parts[name], pa.StructArray):
            raise NotColumnar(f"an event whose {name} is not a record")
    return parts


def changes_of(
    records: pa.StructArray,
    *,
    envelope: bool,
    schema: C.EnvelopeSchema,
    columns: pa.Schema,
    key: Sequence[str],
    upsert: str,
    orders: np.ndarray | None,
    evolving: bool,
    converters: Sequence[Converter],
) -> tuple[pa.Table, dict[str, int]]:
    """The changes of a run's records (every one at or past the table's held offset) in
    decode/debezium/rows.py TableRows' columns, and the counts of fields the table lacks;
    `orders`: the records' offsets, when the table orders by source. NotColumnar otherwise."""
    rows = len(records)
    parts = envelope_parts(records, envelope=envelope)
    if envelope:
        if not pc.all(pc.is_in(parts["op"], value_set=_OPS)).as_py():
            raise NotColumnar("an op other than c, r, u and d")
        deletes = np.asarray(pc.equal(parts["op"], "d"))
    else:
        deletes = np.zeros(rows, bool)
    before, after, source = parts.get("before"), parts.get("after"), parts.get("source")
    has_before = present(before) if before is not None else np.zeros(rows, bool)
    has_after = present(after) if after is not None else np.zeros(rows, bool)
    if not np.all(np.where(deletes, has_before, has_after)):
        raise NotColumnar("an op without its row")
    if envelope and before is not None and after is not None:
        updates = np.asarray(pc.equal(parts["op"], "u")) & has_before
        if updates.any() and _key_moves(before, after, key, updates):
            raise NotColumnar("an update that moves its key")
    known = set(columns.names)
    unknown: dict[str, int] = {}
    for part, counted in ((after, has_after), (before, ~has_after & has_before)):
        if part is not None and counted.any():
            for name in (f.name for f in part.type if f.name not in known):
                unknown[name] = unknown.get(name, 0) + int(counted.sum())
    if unknown and evolving:
        raise NotColumnar("fields the table lacks, and schema_evolution is on")
    mask = pa.array(deletes)
    arrays = []
    for f, convert in zip(columns, converters, strict=True):
        values = _row_values(before, after, mask, f.name, rows)
        if values.null_count and (f.name in key or not f.nullable):
            raise NotColumnar(f"column {f.name} is missing or null")
        arrays.append(column_of(values, schema.field(f.name), f.type, f.name, convert))
    ops = pc.if_else(mask, DELETE, upsert)
    order = source_orders(source, parts.get("ts_ms"), orders) if orders is not None else pa.array([""] * rows)
    fields = [*columns, pa.field("_op", pa.string()), pa.field("_source_order", pa.string())]
    return pa.Table.from_arrays([*arrays, ops, order], schema=pa.schema(fields)), unknown


def _row_values(
    before: pa.StructArray | None, after: pa.StructArray | None, deletes: pa.Array, name: str, rows: int
) -> pa.Array:
    """Column `name` of each change's row: `before` for a delete, `after` otherwise."""
    sides: list[pa.Array | None] = []
    for part in (before, after):
        if part is None or part.type.get_field_index(name) < 0:
            sides.append(None)
        else:
            sides.append(part.field(name))
    old, new = sides
    if old is None and new is None:
        return pa.nulls(rows)
    kind = (new if new is not None else old).type  # type: ignore[union-attr]
    old = old if old is not None else pa.nulls(rows, kind)
    new = new if new is not None else pa.nulls(rows, kind)
    if old.type != new.type:
        raise NotColumnar(f"column {name}: before and after of different types")
    return pc.if_else(deletes, old, new)


def _key_moves(before: pa.StructArray, after: pa.StructArray, key: Sequence[str], updates: np.ndarray) -> bool:
    """Does any update change its key? (compared as text, where the old key is not null)"""
    for name in key:
        if before.type.get_field_index(name) < 0:
            continue
        old = before.field(name)
        new = after.field(name) if after.type.get_field_index(name) >= 0 else pa.nulls(len(old), old.type)
        if old.type != new.type or not (pa.types.is_string(old.type) or pa.types.is_integer(old.type)):
            raise NotColumnar(f"key column {name} of type {old.type}")
        differs = pc.or_kleene(pc.not_equal(old, new), new.is_null()).fill_null(False)
        if np.any(np.asarray(differs) & present(old) & updates):
            return True
    return False


@dataclass(frozen=True)
class EventRun:
    """A run of records of one schema id, as columns."""

    records: pa.StructArray
    schema_id: int
    schema: C.EnvelopeSchema
    envelope: bool  # debezium-avro: Debezium's envelope; avro: flat records

    def source_fields(self, names: Sequence[str]) -> dict[str, str]:
        """The one value of each source field in `names` that every event of the run has, as
        text (what a table name template is filled with); NotColumnar otherwise, or when any
        record is not an event `envelope_of` takes."""
        return single_source_values(envelope_parts(self.records, envelope=self.envelope).get("source"), names)

    def add_to(self, rows: TableRows, offsets: np.ndarray, *, held: int, by_source: bool, evolving: bool) -> None:
        """Add the run's changes to `rows`, exactly as `AvroMessages.envelope` and `TableRows.add`
        would one by one, those below offset `held` skipped; NotColumnar when they must."""
        records = self.records
        if held > offsets[0]:
            keep = offsets >= held
            records, offsets = records.filter(pa.array(keep)), offsets[keep]
        if not len(records):
            return
        try:
            converters = rows.converters(self.schema, self.schema_id, evolving=evolving)
        except NotHere as exc:
            raise NotColumnar(str(exc)) from None
        changes, unknown = changes_of(
            records,
            envelope=self.envelope,
            schema=self.schema,
            columns=rows.schema,
            key=rows.key,
            upsert=rows.upsert,
            orders=offsets if by_source else None,
            evolving=evolving,
            converters=converters,
        )
        rows.add_changes(changes, unknown)


def single_source_values(source: pa.Array | None, names: Sequence[str]) -> dict[str, str]:
    """The one value every event's source block has for each field in `names` (but "topic"), as
    text (a string as it is, an integer in decimal); NotColumnar where events differ or lack it."""
    out: dict[str, str] = {}
    for name in names:
        if name == "topic":
            continue
        if not isinstance(source, pa.StructArray) or source.type.get_field_index(name) < 0 or source.null_count:
            raise NotColumnar(f"a source block without {name}")
        values = source.field(name)
        if not (pa.types.is_string(values.type) or pa.types.is_integer(values.type)) or values.null_count:
            raise NotColumnar(f"a source {name} of type {values.type}, or missing")
        distinct = pc.unique(values)
        if len(distinct) != 1:
            raise NotColumnar(f"events of several {name}s in one run")
        out[name] = str(distinct[0].as_py())
    return out
