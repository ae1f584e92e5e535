"""Decode JSON payloads with pyarrow and Python, on the executor: the JSON decoder of every path.

A field's JSON value is read as its raw text, then converted to the column type, as the Spark SQL
decoder icetide once ran did (its outputs are frozen in tests/golden/json/). A block of payloads
is first read in one `pyarrow.json.read_json` call with an explicit schema and checked with
vectorized kernels (decode/json/block.py); when that read gives up, the block is isolated
in pieces (`ArrowJsonDecoder._isolated`: the records that do not look like a JSON object alone,
the runs between read by pyarrow or halved) and decoded record by record, with the dead-letter
texts the golden files hold.

A payload is one JSON object, with JSON whitespace (space, tab, CR, LF) around it only: text
after the object makes the record bad (`malformed JSON: text after the object, at character N`,
issue 49), where Spark's reader ignored it.

Conversions (as in the former Spark SQL JSON decoder): integers from JSON numbers or integral text, in range;
FLOAT/DOUBLE from numbers or numeric text, a number within a double but beyond FLOAT making the
record bad (`column r: '1.0E39' is out of FLOAT range`, issue 49: Spark wrote infinity); so does a
number beyond a double, in FLOAT and DOUBLE alike (`column d: '1e400' is out of DOUBLE range`, as a
number, as text or as an integer: Spark read infinity), while the literals and texts NaN and
Infinity keep their meaning;
BOOLEAN from true/false or Spark's boolean words;
STRING from the raw text of any JSON scalar, as Spark keeps it (`json_values.spark_text`: a double
as Java writes it, 1e7 as "1.0E7", and so in error messages), but a number whose double's text
is another number makes the record bad (issue 49, `json_values.double_holds`: 1e400 was the text
'"Infinity"', 0.1000000000000000055511151231257827 was "0.1"), in a STRING element or field too
(the record read again, its numbers as sent, `_SENT_DECODER`); an object or array in a STRING
column makes the record bad (issue 49: its JSON text is no text the record held), unless the
decoder is built with `nested_as_text`, which keeps that JSON text, as Spark's reader does, and
counts each such value (`DecodedBlock.nested_as_text`); TIMESTAMP from integral epoch
milliseconds (up to 15 digits, also as text) or ISO-8601 text (a `Z` or offset, else the session
time zone); DATE from an integral count of days or ISO date text (after the date a midnight at
most); TIMESTAMP_NTZ as TIMESTAMP, the epoch read as UTC wall time, text without a zone (issue 49:
Spark's reader dropped what follows a date and a zone in TIMESTAMP_NTZ text; here the record is
bad). DECIMAL, BINARY and FIXED as decode/spark_compat/json_values.py
says (a DECIMAL exactly: a non-zero digit beyond the scale makes the record bad, where Spark
rounded), ARRAY, STRUCT and MAP as decode/json/nested.py `exact_value` says (exactly: a
struct field that does not fit, text that is no object for a STRUCT, an object or array in a
STRING element or field without `nested_as_text` make the record bad, the error naming the part,
as `column s.x: 'abc' is not an INT` or `column tags[1]: object '{...}' is not a STRING`; with
the deliberate differences from decode_json listed there); a table with such a column, or
TIMESTAMP_NTZ, is decoded record by record (see `unsupported_columns`). TIME alone is
`undecodable_columns` (Spark has no such type, so neither has a table icetide creates through
Spark, nor decode_json a rule for it).

Ops (as the former Spark SQL JSON decoder): a record's `_op` (spaces trimmed, any case) is INSERT, UPSERT or DELETE,
else the record is bad; without one it is INSERT in "append" mode and UPSERT in "upsert" mode. A
DELETE needs only its key: its other values go unread (a value that does not fit is null).
Keys of a good record that are no column (nor `_op`) are counted, null-valued ones too, as
decode_json counts them; so are the keys no field has in its struct values, which are skipped, as
"column.key" ("column.element.key" in an array, "column.value.key" in a map's values).
Payload limits and value ranges are icetide.decode.limits, as on the Spark path; a number
longer than 1000 characters is malformed JSON, as Spark's reader (Jackson) has it.
Known difference: timestamp text is read as ISO-8601 (`2024-05-01`, `2024-05-01 10:00`,
`2024-05-01T10:00:00.5+02:00`); Spark's extra spellings (zone region names, one-digit months)
make a record bad here.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from icetide.decode import limits as lim
from icetide.decode.frames import OpMode
from icetide.decode.json import nested
from icetide.decode.json.block import BadRecord, DecodedBlock, PyarrowBlock
from icetide.decode.json.scalars import (
    RAW_MESSAGE_CHARS,
    scalar_value,
    undecodable_columns,
    unfit_error,
    unsupported_columns,
)
from icetide.decode.limits import PayloadLimits
from icetide.decode.spark_compat import json_values
from icetide.decode.spark_compat.json_values import MAX_NUMBER_LENGTH
from icetide.errors import ConfigError
from icetide.write.collapse import DELETE, INSERT, OP_COLUMN, OPS, UPSERT

__all__ = ["ArrowJsonDecoder", "BadRecord", "DecodedBlock"]

_DECODER = json.JSONDecoder()
_JSON_SPACE = " \t\n\r"
_QUOTED_INFINITY = ('"Infinity"', '"-Infinity"')
# The texts that mean infinity (scalars._NUMBER_TEXT's), as against a number too large for a double.
_INFINITY_TEXT = re.compile(r"^\s*[+-]?(Infinity|inf)\s*$")
# A piece of a refused block this small goes record by record: a pyarrow read of a piece has a
# fixed cost of 0.4-1 ms (about 50-100 records' worth of the record-by-record look), and a piece
# with a bad record is read in vain (measured on 10,000-record blocks: 256 keeps a block with a
# bad record in every 50 or 100 as fast as before, and one in 300 or fewer 3-8x faster).
_SMALL_PIECE = 256
# A run between two records that do not look like a JSON object (read alone) is read by pyarrow
# from this size on: such a run holds no malformed record, so its read seldom fails. Measured on
# the 9-column events of bench/ingest.py (2026-11-26): the record-by-record look costs about
# 22 us a record, a run's read about 0.4 ms plus 2.4 us a record; with one malformed record in
# 50, 10 us a record against 22 with 256 here; with one in 20, runs of 19 records stay record by
# record (22 us; 25-31 us when read by pyarrow).
_SMALL_RUN = 32
# Spark's JSON reader (Jackson 2.15) refuses a number longer than MAX_NUMBER_LENGTH characters:
# the record is malformed JSON there, so it is here too (Python's int() refuses over 4300 digits).
_LONG_DIGITS_TEXT = re.compile(f"[0-9]{{{MAX_NUMBER_LENGTH + 1}}}")


def _checked_float(text: str) -> float:
    if len(text) > MAX_NUMBER_LENGTH:
        raise ValueError("number too long")
    return float(text)


_CHECKED_DECODER = json.JSONDecoder(parse_int=json_values.checked_int, parse_float=_checked_float)


class _SentNumber(str):
    """A JSON number's text as sent (`_SENT_DECODER`), told apart from JSON text."""


# Reads a record again, its numbers kept as their text, when a STRING column, or an ARRAY, STRUCT
# or MAP column, holds a number that is not an integer (rare): that text is what `double_holds`
# checks (issue 49), not Jackson's text of its double.
_SENT_DECODER = json.JSONDecoder(parse_int=json_values.checked_int, parse_float=_SentNumber)


def _has_double(value: Any) -> bool:
    """Whether a JSON value (as json.loads reads it) holds a number that is not an integer."""
    stack = [value]
    while stack:
        v = stack.pop()
        if type(v) is float:
            return True
        if type(v) is dict:
            stack.extend(v.values())
        elif type(v) is list:
            stack.extend(v)
    return False


def _sent_json(v: Any) -> str:
    """A value of `_SENT_DECODER` as JSON text: numbers as sent, other scalars as Jackson writes them."""
    if isinstance(v, _SentNumber):
        return str.__str__(v)
    if type(v) is dict:
        return "{" + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{_sent_json(x)}" for k, x in v.items()) + "}"
    if type(v) is list:
        return "[" + ",".join(_sent_json(x) for x in v) + "]"
    return json.dumps(v, ensure_ascii=False) if isinstance(v, str) else json_values.spark_text(v)


class ArrowJsonDecoder:
    """Decodes blocks of JSON payloads into a table's Arrow schema; picklable, built on the driver."""

    def __init__(
        self,
        schema: pa.Schema,
        key: Sequence[str],
        *,
        op_mode: OpMode = "append",
        time_zone: str = "UTC",
        limits: PayloadLimits | None = None,
        nested_as_text: bool = False,
    ) -> None:
        """`op_mode` as decode_json's: the `_op` of a record without one (INSERT when "append",
        UPSERT when "upsert"). `nested_as_text`: an object or array in a STRING column, or in a
        STRING element or field of a nested column, is kept as its JSON text (counted), not a bad
        record. ValueError for a table with `undecodable_columns`."""
        if op_mode not in ("append", "upsert"):
            raise ConfigError(f"decode: op_mode {op_mode!r} is not one of upsert, append")
        missing = undecodable_columns(schema)
        if missing:
            raise ValueError(f"columns the pyarrow decoder cannot produce: {', '.join(missing)}")
        self.schema = schema
        self.key = tuple(key)
        self.op_mode = op_mode
        self.default_op = INSERT if op_mode == "append" else UPSERT
        self.time_zone = time_zone
        self.limits = limits or PayloadLimits()
        self.nested_as_text = nested_as_text
        self._known = frozenset([*schema.names, OP_COLUMN])
        self._floats = [i for i, f in enumerate(schema) if pa.types.is_float32(f.type)]
        plans = [(f.name, nested.key_plan(f.type)) for f in schema if nested.supported(f.type)]
        self._structs = [(name, plan) for name, plan in plans if plan is not None]
        self._record_by_record = bool(unsupported_columns(schema))
        self._block = PyarrowBlock(schema, key, self.default_op, time_zone, self.limits)

    def _read_block(self, joined: bytes, count: int) -> DecodedBlock | None:
        """The block in one pyarrow read (decode/json/block.py), or None when a record
        needs the record-by-record look."""
        return None if self._record_by_record else self._block.read(joined, count)

    # -- block decoding ----------------------------------------------------------------------

    def decode(self, values: Sequence[bytes | None], position: Callable[[int], str]) -> DecodedBlock:
        """Decode `values` (null ones, Kafka tombstones, are skipped); `position(i)` names record i."""
        present = [v for v in values if v is not None]
        if len(present) != len(values):
            index = [i for i, v in enumerate(values) if v is not None]
            return self._decode(present, lambda i: position(index[i]))
        return self._decode(present, position)

    def decode_joined(
        self,
        joined: bytes,
        count: int,
        values: Callable[[], list[bytes]],
        position: Callable[[int], str],
    ) -> DecodedBlock:
        """Decode `count` payloads given as `joined`, their `b"\\n".join` (none of them null).

        The same result as `decode(values(), position)`; `values()` is called only when the block
        needs a record-by-record look. A caller that can join its payloads in C (e.g.
        `b"\\n".join(map(Message.value, messages))`) so skips a Python list of them per block.
        """
        if count == 0:
            return DecodedBlock(self.schema.empty_table(), [], default_op=self.default_op)
        fast = self._read_block(joined, count)
        if fast is not None:
            return fast
        return self._isolated(values(), position)

    def _decode(self, values: list[bytes], position: Callable[[int], str]) -> DecodedBlock:
        if not values:
            return DecodedBlock(self.schema.empty_table(), [], default_op=self.default_op)
        fast = self._read_block(b"\n".join(values), len(values))
        if fast is not None:
            return fast
        return self._isolated(values, position)

    def _isolated(self, values: list[bytes], position: Callable[[int], str]) -> DecodedBlock:
        """A block the one pyarrow read refused, decoded as `_per_record` decodes it, in pieces:
        a record that does not look like one JSON object on one line is read alone, record by
        record; the runs between are read in one pyarrow read each, and a run pyarrow refuses is
        halved until its pieces read or are small enough to go record by record. The pieces are
        consecutive, so rows and dead letters keep input order."""
        if self._record_by_record or len(values) <= _SMALL_PIECE:
            return self._per_record(values, position)
        suspects = [i for i, v in enumerate(values) if v[:1] != b"{" or v[-1:] != b"}" or b"\n" in v or b"\r" in v]
        if not suspects:  # the whole block was just refused: halve it at once
            return self._pieces(values, 0, len(values), position, tried=True)
        runs: list[tuple[int, int, bool]] = []  # (start, end, read by pyarrow first), consecutive

        def add(start: int, end: int, vectorize: bool) -> None:
            if end <= start:
                return
            vectorize = vectorize and end - start > _SMALL_RUN
            if runs and not vectorize and not runs[-1][2]:  # one record-by-record look for both
                runs[-1] = (runs[-1][0], end, False)
            else:
                runs.append((start, end, vectorize))

        start = 0
        for i in suspects:
            add(start, i, True)
            add(i, i + 1, False)
            start = i + 1
        add(start, len(values), True)
        return self._concat(
            [
                self._pieces(values, s, e, position, smallest=_SMALL_RUN)
                if vectorize
                else self._records(values, s, e, position)
                for s, e, vectorize in runs
            ]
        )

    def _records(self, values: list[bytes], start: int, end: int, position: Callable[[int], str]) -> DecodedBlock:
        """Records `start` to `end` (exclusive) of `values`, record by record."""

        def at(i: int) -> str:
            return position(start + i)

        return self._per_record(values[start:end], at)

    def _pieces(
        self,
        values: list[bytes],
        start: int,
        end: int,
        position: Callable[[int], str],
        *,
        tried: bool = False,
        smallest: int = _SMALL_PIECE,
    ) -> DecodedBlock:
        """Records `start` to `end` (exclusive) of `values`: in one pyarrow read (unless `tried`
        already, or there are `smallest` or fewer), else as two halves, down to _SMALL_PIECE
        records read record by record."""
        if end - start <= smallest:
            return self._records(values, start, end, position)
        if not tried:
            fast = self._read_block(b"\n".join(values[start:end]), end - start)
            if fast is not None:
                return fast
        if end - start <= _SMALL_PIECE:
            return self._records(values, start, end, position)
        middle = (start + end) // 2
        return self._concat(
            [self._pieces(values, start, middle, position), self._pieces(values, middle, end, position)]
        )

    def _concat(self, parts: list[DecodedBlock]) -> DecodedBlock:
        """Consecutive pieces of a block as one, as the block decoded whole would be."""
        if len(parts) == 1:
            return parts[0]
        unknown: dict[str, int] = {}
        for part in parts:
            for name, count in part.unknown_fields.items():
                unknown[name] = unknown.get(name, 0) + count
        op_values = None
        if any(part.op_values is not None for part in parts):
            op_values = pa.concat_arrays([part.ops() for part in parts])
        return DecodedBlock(
            pa.concat_tables([part.rows for part in parts]),
            [b for part in parts for b in part.bad],
            any(part.changes for part in parts),
            unknown,
            op_values,
            self.default_op,
            sum(part.nested_as_text for part in parts),
        )

    # -- record by record --------------------------------------------------------------------

    def _per_record(self, payloads: list[bytes], position: Callable[[int], str]) -> DecodedBlock:
        names = self.schema.names
        columns: list[list[Any]] = [[] for _ in names]
        bad: list[BadRecord] = []
        ops: list[str] = []
        unknown: dict[str, int] = {}
        as_text: dict[str, int] = {}
        for i, raw in enumerate(payloads):
            text, error = lim.payload_error(raw, self.limits)
            if error is not None:
                bad.append(BadRecord(text, error, position(i)))
                continue
            row, error, op = self.record(text, unknown, as_text)
            if error is not None:
                bad.append(BadRecord(text, error, position(i)))
                continue
            assert row is not None
            ops.append(op)
            for j, v in enumerate(row):
                columns[j].append(v)
        arrays = [pa.array(c, type=f.type) for c, f in zip(columns, self.schema, strict=True)]
        changes = any(op != INSERT for op in ops)
        op_values = pa.array(ops, pa.string()) if any(op != self.default_op for op in ops) else None
        rows = pa.Table.from_arrays(arrays, schema=self.schema)
        return DecodedBlock(rows, bad, changes, unknown, op_values, self.default_op, sum(as_text.values()))

    def record(
        self, text: str, unknown: dict[str, int] | None = None, as_text: dict[str, int] | None = None
    ) -> tuple[list[Any] | None, str | None, str]:
        """One payload: (typed values in schema order, None, op) or (None, error, op). A good
        record's keys that are no column (null-valued ones too, as decode_json) are counted into
        `unknown`, and its objects and arrays kept as JSON text (`nested_as_text`) into `as_text`,
        by column."""
        default = self.default_op
        stripped = text.strip(_JSON_SPACE)
        if not stripped:
            return None, "malformed JSON: empty payload", default
        try:
            decoder = _CHECKED_DECODER if _LONG_DIGITS_TEXT.search(stripped) else _DECODER
            obj, end = decoder.raw_decode(stripped)
        except ValueError:
            obj, end = None, 0
        if not isinstance(obj, dict):
            return None, "malformed JSON" if stripped.startswith("{") else "malformed JSON: not an object", default
        if end != len(stripped):  # issue 49: no record read exactly (Spark's reader ignores such text)
            after = stripped[end:]  # where the text starts in the payload, as the Debezium decoder says
            at = len(text) - len(text.lstrip(_JSON_SPACE)) + len(stripped) - len(after.lstrip(_JSON_SPACE))
            return None, f"malformed JSON: text after the object, at character {at}", default
        op = default
        raw_op = obj.get(OP_COLUMN)
        if raw_op is not None:
            shown_op = json_values.spark_text(raw_op)
            op = shown_op.strip(" ").upper()  # Spark's trim: spaces only
            if op not in OPS:
                return None, f"unknown op '{shown_op}'", default
        typed: list[Any] = []
        errors: dict[str, str] = {}
        kept_as_text: list[str] = []
        deleting = op == DELETE  # a delete's values but its key go unread (a value that does not fit is null)
        reading: nested.Reading | None = None  # of its ARRAY, STRUCT and MAP values, made at the first
        sent: dict[str, Any] | None = None  # the record with its numbers' text, read at the first need
        for f in self.schema:
            value = obj.get(f.name)
            if value is None:
                typed.append(None)
                if f.name in self.key:
                    errors[f.name] = f"key column {f.name} is missing or null"
                elif not f.nullable and op != DELETE:  # a delete needs only its key, as before
                    errors[f.name] = f"column {f.name} is missing or null (NOT NULL)"
                continue
            raw = json_values.spark_text(value)  # as Spark keeps it: 1e7 is "1.0E7"
            quoted = raw  # what an error quotes
            if type(value) is float and pa.types.is_string(f.type) and (not deleting or f.name in self.key):
                if sent is None:
                    sent = _SENT_DECODER.raw_decode(stripped)[0]
                number = sent.get(f.name)
                if isinstance(number, _SentNumber) and not json_values.double_holds(
                    number
                ):  # not a NaN or Infinity literal
                    typed.append(None)
                    errors[f.name] = _unfit(f.name, number, f.type, "number")
                    continue
            if isinstance(value, dict | list) and pa.types.is_string(f.type):
                if deleting and f.name not in self.key:
                    typed.append(None)
                elif self.nested_as_text:
                    typed.append(raw)  # its JSON text, as Spark's reader keeps it
                    kept_as_text.append(f.name)
                else:
                    typed.append(None)
                    errors[f.name] = _unfit(f.name, raw, f.type, "object" if isinstance(value, dict) else "array")
                continue
            if json_values.supported(f.type):
                converted = json_values.value(raw, f.type)
            elif nested.supported(f.type):
                read = raw  # errors quote `raw`, Jackson's text, as before
                if type(value) in (dict, list) and _has_double(value):  # its numbers as sent (issue 49)
                    if sent is None:
                        sent = _SENT_DECODER.raw_decode(stripped)[0]
                    read = _sent_json(sent[f.name])
                    if "Infinity" in raw and "Infinity" not in read:
                        quoted = read  # Jackson's text of 1e400 is "Infinity", which a DOUBLE takes
                if reading is None:
                    reading = nested.Reading(self.time_zone, as_text=self.nested_as_text)
                kept = reading.kept
                try:
                    converted = nested.exact_value(read, f.type, reading)
                except nested.Unfit as part:  # a struct field, or JSON where a STRING is
                    typed.append(None)
                    if not deleting or f.name in self.key:
                        errors[f.name] = _unfit(f.name + part.path, part.raw, part.type, part.shape, part.beyond)
                    continue
                kept = reading.kept - kept
                if kept and deleting and f.name not in self.key:  # as an object in a STRING column of a delete
                    converted, kept = None, 0
                kept_as_text += [f.name] * kept
            elif pa.types.is_floating(f.type) and raw in _QUOTED_INFINITY:
                # The Infinity literal, or a number beyond a double (1e400): issue 49, that finite
                # number is no infinity. The record read again, its numbers as sent, tells them apart.
                if sent is None:
                    sent = _SENT_DECODER.raw_decode(stripped)[0]
                number = sent.get(f.name)
                if isinstance(number, _SentNumber):
                    typed.append(None)
                    if not deleting or f.name in self.key:
                        errors[f.name] = _unfit(f.name, str.__str__(number), f.type, beyond=True)
                    continue
                converted = scalar_value(raw[1:-1], f.type, self.time_zone)  # Jackson's text of the literal
            else:
                converted = scalar_value(raw, f.type, self.time_zone)
                if type(converted) is float and math.isinf(converted) and not _INFINITY_TEXT.match(raw):
                    # numeric text, or an integer, beyond a double (issue 49): no infinity either
                    typed.append(None)
                    if not deleting or f.name in self.key:
                        errors[f.name] = _unfit(f.name, raw, f.type, beyond=True)
                    continue
            typed.append(converted)
            if converted is None and (not deleting or f.name in self.key):
                errors[f.name] = _unfit(f.name, quoted, f.type)
        # a finite number a FLOAT would hold as infinity (issue 49): looked for here, at no cost per field
        for i in self._floats:
            v = typed[i]
            if v is not None and lim.FLOAT32_OUT <= abs(v) < math.inf:
                name = self.schema.names[i]
                typed[i] = None
                if not deleting or name in self.key:
                    errors[name] = _unfit(
                        name, json_values.spark_text(obj[name]), self.schema.field(i).type, beyond=True
                    )
        if errors:  # key columns first, then the others, each in schema order (as the former Spark SQL JSON decoder)
            ordered = [n for n in self.schema.names if n in self.key] + [n for n in self.schema.names]
            return None, next(errors[n] for n in ordered if n in errors), op
        if unknown is not None:
            # keys inside struct values are looked for where a struct skipped one (or a delete left
            # a value unread): the same keys, found at no cost for the other records
            inside = self._structs and (deleting or (reading is not None and reading.skipped))
            for name in self.unknown_keys(obj) if inside else obj.keys() - self._known:
                unknown[name] = unknown.get(name, 0) + 1
        if as_text is not None:
            for name in kept_as_text:
                as_text[name] = as_text.get(name, 0) + 1
        return typed, None, op

    def unknown_keys(self, obj: dict[str, Any]) -> list[str]:
        """A record's keys that are no column (nor `_op`), in its order, then the keys that no
        field has of the structs in its values, as "column.key" (decode/json/nested.py
        `unknown_keys`): skipped, and counted with the others."""
        found = [k for k in obj if k not in self._known]
        if not self._structs:
            return found
        for name, plan in self._structs:
            value = obj.get(name)
            if value is not None:
                found += sorted(nested.unknown_keys(value, plan, name))
        return list(dict.fromkeys(found))  # a top-level key "s.x" is the same name as s's key x


def _unfit(column: str, raw: str, t: pa.DataType, shape: str | None = None, beyond: bool = False) -> str:
    """The error of a value that does not fit column (or part of a column) `column` of type `t`
    (`unfit_error`)."""
    return unfit_error(column, raw, t, shape, beyond)


def _quoted(raw: str) -> str:
    """A bad value's text as an error message quotes it (as the former Spark SQL JSON decoder)."""
    return raw if len(raw) <= RAW_MESSAGE_CHARS else raw[:RAW_MESSAGE_CHARS] + "..."
