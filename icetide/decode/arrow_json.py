"""Decode JSON payloads with pyarrow, on the executor: the decoder of the append fast path.

It follows the Spark decoder (decode/json.py) for the types it supports: a field's JSON value is
read as its raw text, then converted to the column type. A block of payloads is first decoded in
one `pyarrow.json.read_json` call with an explicit schema and checked with vectorized kernels;
when pyarrow rejects the block or a value does not fit, the bad records are isolated in pieces
(`ArrowJsonDecoder._isolated`: the records that do not look like a JSON object alone, the runs
between read by pyarrow or halved) and decoded record by record, with the same errors the Spark
decoder gives.

Conversions (as in decode/json.py): integers from JSON numbers or integral text, in range;
FLOAT/DOUBLE from numbers or numeric text; BOOLEAN from true/false or Spark's boolean words;
STRING from the raw text of any JSON value, as Spark keeps it (`json_values.spark_text`: a double
as Java writes it, 1e7 as "1.0E7", and so in error messages); TIMESTAMP from integral epoch
milliseconds (up to 15 digits, also as text) or ISO-8601 text (a `Z` or offset, else the session
time zone); DATE from an integral count of days or ISO date text; TIMESTAMP_NTZ as TIMESTAMP, the epoch read as UTC wall
time and a zone in the text ignored. DECIMAL, BINARY and FIXED as decode/arrow_json_values.py
says, ARRAY, STRUCT and MAP as decode/arrow_json_nested.py says (with the deliberate differences
from decode_json listed there); a table with such a column, or TIMESTAMP_NTZ, is decoded record
by record (see `unsupported_columns`). TIME alone is `undecodable_columns` (Spark has no such
type, so neither has a table icetide creates through Spark, nor decode_json a rule for it).

Ops (as decode/json.py): a record's `_op` (spaces trimmed, any case) is INSERT, UPSERT or DELETE,
else the record is bad; without one it is INSERT in "append" mode and UPSERT in "upsert" mode. A
DELETE needs only its key: its other values go unread (a value that does not fit is null).
Keys of a good record that are no column (nor `_op`) are counted, null-valued ones too, as
decode_json counts them.
Payload limits and value ranges are icetide.decode.limits, as on the Spark path; a number
longer than 1000 characters is malformed JSON, as Spark's reader (Jackson) has it.
Known difference: timestamp text is read as ISO-8601 (`2024-05-01`, `2024-05-01 10:00`,
`2024-05-01T10:00:00.5+02:00`); Spark's extra spellings (zone region names, one-digit months)
make a record bad here.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from icetide.decode import arrow_json_nested as nested
from icetide.decode import arrow_json_values as json_values
from icetide.decode import limits as lim
from icetide.decode.arrow_json_scalars import (
    MAX_EPOCH_MS,
    MIN_EPOCH_MS,
    RAW_MESSAGE_CHARS,
    TIMESTAMP_TEXT,
    scalar_value,
    type_name,
    undecodable_columns,
    unsupported_columns,
)
from icetide.decode.json import OpMode
from icetide.decode.limits import PayloadLimits
from icetide.errors import ConfigError
from icetide.sink.changelog import DELETE, INSERT, OP_COLUMN, OPS, UPSERT

EPOCH_MS_DIGITS = 15
_EPOCH_DAY = date(1970, 1, 1)
_ZONED_TEXT = r"(Z|[+-]\d{2}:?\d{2})$"
_BLANK_LINE = re.compile(rb"\n[ \t]*\n")  # starts at a newline: quick to scan
_DECODER = json.JSONDecoder()
_QUOTED_INFINITY = ('"Infinity"', '"-Infinity"')
# Spark's JSON reader (Jackson 2.15) refuses a number longer than 1000 characters: the record is
# malformed JSON there, so it is here too (and Python's int() refuses over 4300 digits anyway).
MAX_NUMBER_LENGTH = 1000
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
_LONG_DIGITS_TEXT = re.compile(f"[0-9]{{{MAX_NUMBER_LENGTH + 1}}}")
# A block is searched for such a run as bytes: digits mapped to b"0", all else to b" ", then one
# substring search (about 15x faster on a 9 MB block than the regular expression, which tries
# every digit as a start).
_DIGITS_ONLY = bytes(48 if 48 <= b <= 57 else 32 for b in range(256))
_LONG_DIGIT_RUN = b"0" * (MAX_NUMBER_LENGTH + 1)


def _checked_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_NUMBER_LENGTH:
        raise ValueError("number too long")
    return int(text)


def _checked_float(text: str) -> float:
    if len(text) > MAX_NUMBER_LENGTH:
        raise ValueError("number too long")
    return float(text)


_CHECKED_DECODER = json.JSONDecoder(parse_int=_checked_int, parse_float=_checked_float)
_LONE_SURROGATE_BYTES = re.compile(lim.LONE_SURROGATE.encode())


@dataclass(frozen=True)
class BadRecord:
    """A record that does not fit the table: raw payload, one-line error, "topic/partition@offset"."""

    payload: str | None
    error: str
    source_position: str


@dataclass(frozen=True)
class Decoded:
    """A block's good rows (table schema, input order), its bad records, and whether a good row's
    `_op` is other than INSERT (which an append fast path cannot honour)."""

    rows: pa.Table
    bad: list[BadRecord]
    changes: bool = False
    unknown_fields: dict[str, int] = field(default_factory=dict)  # key that is no column -> good records with it
    op_values: pa.Array | None = None  # the `_op` of each good row; None: every row's is `default_op`
    default_op: str = INSERT

    def ops(self) -> pa.Array:
        """The `_op` of each good row (INSERT, UPSERT or DELETE), in row order."""
        if self.op_values is not None:
            return self.op_values
        return pa.array([self.default_op] * self.rows.num_rows, pa.string())

    def with_ops(self) -> pa.Table:
        """`rows` with the `_op` column after the table's, as decode_json's good rows have it."""
        return self.rows.append_column(pa.field(OP_COLUMN, pa.string(), nullable=False), self.ops())


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
    ) -> None:
        """`op_mode` as decode_json's: the `_op` of a record without one (INSERT when "append",
        UPSERT when "upsert"). ValueError for a table with `undecodable_columns`."""
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
        self._known = frozenset([*schema.names, OP_COLUMN])
        self._record_by_record = bool(unsupported_columns(schema))

    # -- block decoding ----------------------------------------------------------------------

    def decode(self, values: Sequence[bytes | None], position: Callable[[int], str]) -> Decoded:
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
    ) -> Decoded:
        """Decode `count` payloads given as `joined`, their `b"\\n".join` (none of them null).

        The same result as `decode(values(), position)`; `values()` is called only when the block
        needs a record-by-record look. A caller that can join its payloads in C (e.g.
        `b"\\n".join(map(Message.value, messages))`) so skips a Python list of them per block.
        """
        if count == 0:
            return Decoded(self.schema.empty_table(), [], default_op=self.default_op)
        fast = self._vectorized(joined, count)
        if fast is not None:
            return fast
        return self._isolated(values(), position)

    def _decode(self, values: list[bytes], position: Callable[[int], str]) -> Decoded:
        if not values:
            return Decoded(self.schema.empty_table(), [], default_op=self.default_op)
        fast = self._vectorized(b"\n".join(values), len(values))
        if fast is not None:
            return fast
        return self._isolated(values, position)

    def _isolated(self, values: list[bytes], position: Callable[[int], str]) -> Decoded:
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

    def _records(self, values: list[bytes], start: int, end: int, position: Callable[[int], str]) -> Decoded:
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
    ) -> Decoded:
        """Records `start` to `end` (exclusive) of `values`: in one pyarrow read (unless `tried`
        already, or there are `smallest` or fewer), else as two halves, down to _SMALL_PIECE
        records read record by record."""
        if end - start <= smallest:
            return self._records(values, start, end, position)
        if not tried:
            fast = self._vectorized(b"\n".join(values[start:end]), end - start)
            if fast is not None:
                return fast
        if end - start <= _SMALL_PIECE:
            return self._records(values, start, end, position)
        middle = (start + end) // 2
        return self._concat(
            [self._pieces(values, start, middle, position), self._pieces(values, middle, end, position)]
        )

    def _concat(self, parts: list[Decoded]) -> Decoded:
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
        return Decoded(
            pa.concat_tables([part.rows for part in parts]),
            [b for part in parts for b in part.bad],
            any(part.changes for part in parts),
            unknown,
            op_values,
            self.default_op,
        )

    def _parse_schema(self, sample: Any) -> pa.Schema:
        """The schema pyarrow parses with: timestamps and dates as numbers or text, as the sample has them."""
        fields = []
        for f in self.schema:
            t = f.type
            if pa.types.is_integer(t):
                t = pa.int64()
            elif pa.types.is_floating(t):
                t = pa.float64()
            elif pa.types.is_timestamp(t) or pa.types.is_date32(t):
                value = sample.get(f.name) if isinstance(sample, dict) else None
                t = pa.string() if isinstance(value, str) else pa.int64()
            fields.append(pa.field(f.name, t))
        fields.append(pa.field(OP_COLUMN, pa.string()))
        return pa.schema(fields)

    def _vectorized(self, joined: bytes, count: int) -> Decoded | None:
        """The whole block (`count` payloads joined by newlines) in one pyarrow read, or None when
        any record needs a closer look."""
        if self._record_by_record:
            return None
        # Exactly one JSON object per line: no payload spans lines, none is blank (pyarrow skips
        # blank lines), and the row count matches (two objects on one line would add a row).
        if joined.count(b"\n") != count - 1 or b"\r" in joined or _BLANK_LINE.search(joined):
            return None
        first, last = joined.partition(b"\n")[0], joined.rpartition(b"\n")[2]
        if not first.strip() or not last.strip():
            return None
        if not self._within_limits(joined, count):
            return None
        try:
            sample = json.loads(first)
        except ValueError:
            return None
        try:
            parsed = pj.read_json(
                io.BytesIO(joined),
                # One block for a small read (a piece of a refused block): 1 MiB is allocated per block.
                read_options=pj.ReadOptions(use_threads=False, block_size=_block_size(len(joined))),
                # Keys that are no column are parsed too ("infer"), to be counted: free when
                # there are none; a block whose extra keys change type goes record by record.
                parse_options=pj.ParseOptions(
                    explicit_schema=self._parse_schema(sample), unexpected_field_behavior="infer"
                ),
            )
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            return None
        if parsed.num_rows != count:
            return None
        changes = self.default_op != INSERT
        op_values = None
        ops = parsed[OP_COLUMN]
        if ops.null_count != len(ops):
            upper = pc.utf8_upper(pc.utf8_trim(ops.combine_chunks(), characters=" "))  # Spark's trim: spaces only
            if not pc.all(pc.is_in(upper.drop_null(), value_set=pa.array(OPS))).as_py():
                return None  # unknown ops are bad records
            op_values = pc.fill_null(upper, self.default_op)
            changes = not pc.all(pc.equal(op_values, INSERT)).as_py()
        columns = []
        for f in self.schema:
            column = self._convert(parsed[f.name].combine_chunks(), f.type)
            if column is None:
                return None
            if column.null_count and (f.name in self.key or not f.nullable):
                return None
            columns.append(column)
        unknown = {}
        lines: list[bytes] | None = None
        for name in parsed.column_names:
            if name in self._known:
                continue
            column = parsed[name]
            present = len(column) - column.null_count
            if column.null_count:  # null: the key is absent, or present with null (which counts too)
                lines = lines if lines is not None else joined.split(b"\n")
                present += self._null_valued(name, column, lines)
            if present:
                unknown[name] = present
        rows = pa.Table.from_arrays(columns, schema=self.schema)
        return Decoded(rows, [], changes, unknown, op_values, self.default_op)

    @staticmethod
    def _null_valued(name: str, column: pa.ChunkedArray, lines: list[bytes]) -> int:
        """How many of the records where `column` (a key no column has) is null hold the key
        with a null value: the lines that hold its name at all are parsed, the others are not."""
        quoted = json.dumps(name, ensure_ascii=False).encode()
        count = 0
        for i in np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False)).tolist():
            line = lines[i]
            if (quoted in line or b"\\u" in line) and name in json.loads(line):
                count += 1
        return count

    def _within_limits(self, joined: bytes, count: int) -> bool:
        """Whether every line of the block (`count` lines) passes icetide.decode.limits.payload_error
        (cheap whole-block tests first; the lines themselves only when those cannot tell)."""
        limits = self.limits
        if not joined.isascii():
            try:
                joined.decode("utf-8")
            except UnicodeDecodeError:
                return False
        # memchr for the backslash first: a two-byte search costs 25x more on a block without one
        if b"\\" in joined and b"\\u" in joined and _LONE_SURROGATE_BYTES.search(joined):
            return False
        if _LONG_DIGIT_RUN in joined.translate(_DIGITS_ONLY):  # perhaps a number too long for Spark's reader
            return False
        big = len(joined) > limits.max_record_bytes
        openers = lim.openers(joined)
        if not big and openers <= limits.max_nesting_depth:
            return True
        data = np.frombuffer(joined, dtype=np.uint8)
        ends = np.append(np.flatnonzero(data == 10), len(data))
        starts = np.append(0, ends[:-1] + 1)
        if big and int((ends - starts).max()) > limits.max_record_bytes:
            return False
        if openers > limits.max_nesting_depth and bool((data[starts] == 123).all()):
            # Every line opens with "{": no line has more openers than the others leave over.
            openers -= count - 1
        deep = openers > limits.max_nesting_depth
        if deep:
            opened = np.append(0, np.cumsum((data == 91) | (data == 123)))
            for i in np.flatnonzero(opened[ends] - opened[starts] > limits.max_nesting_depth).tolist():
                line = joined[starts[i] : ends[i]].decode("utf-8")
                if lim.nesting_depth(line) > limits.max_nesting_depth:
                    return False
        return True

    def _convert(self, a: pa.Array, t: pa.DataType) -> pa.Array | None:
        """Vectorized conversion of a parsed column; None when some value does not fit (then
        the record-by-record path decides, with a dead letter naming the value)."""
        try:
            return self._convert_all(a, t)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            return None  # text that looks like a date or time and is none, say "2024-13-45"

    def _convert_all(self, a: pa.Array, t: pa.DataType) -> pa.Array | None:
        if pa.types.is_string(t) or pa.types.is_boolean(t) or pa.types.is_float64(t):
            return a
        if pa.types.is_float32(t):
            return a.cast(t, safe=False)
        if pa.types.is_integer(t):
            if t.bit_width < 64 and a.null_count < len(a):
                low, high = lim.INT_RANGES[t.bit_width]
                mm = pc.min_max(a)
                if mm["min"].as_py() < low or mm["max"].as_py() > high:
                    return None
            return a.cast(t)
        if a.null_count == len(a):
            return pa.nulls(len(a), t)
        if pa.types.is_timestamp(t):
            if pa.types.is_integer(a.type):
                mm = pc.min_max(a)
                if mm["min"].as_py() < MIN_EPOCH_MS or mm["max"].as_py() > MAX_EPOCH_MS:
                    return None
                return pc.multiply(a, 1000).cast(t)
            if not pc.all(pc.match_substring_regex(a.drop_null(), TIMESTAMP_TEXT)).as_py():
                return None
            zoned = pc.match_substring_regex(a, _ZONED_TEXT)
            if pc.all(zoned).as_py():
                return _within(a.cast(t), lim.MIN_EPOCH_MICROS, lim.MAX_EPOCH_MICROS)
            if pc.any(zoned).as_py():
                return None
            naive = a.cast(pa.timestamp("us"))
            if self.time_zone in ("UTC", "Z", "+00:00", "Etc/UTC"):
                return _within(naive.cast(pa.int64()).cast(t), lim.MIN_EPOCH_MICROS, lim.MAX_EPOCH_MICROS)
            # Out of range for the zone database: the per-record look decides.
            if not _within(naive, lim.MIN_EPOCH_MICROS + 2 * 86_400_000_000, lim.MAX_EPOCH_MICROS - 2 * 86_400_000_000):
                return None
            zoned_values = pc.assume_timezone(naive, self.time_zone, ambiguous="earliest", nonexistent="latest")
            return _within(zoned_values.cast(t), lim.MIN_EPOCH_MICROS, lim.MAX_EPOCH_MICROS)
        if pa.types.is_date32(t):
            if pa.types.is_integer(a.type):
                mm = pc.min_max(a)
                if mm["min"].as_py() < lim.MIN_EPOCH_DAYS or mm["max"].as_py() > lim.MAX_EPOCH_DAYS:
                    return None
                return a.cast(pa.int32()).cast(t)
            if not pc.all(pc.match_substring_regex(a.drop_null(), r"^\d{4}-\d{2}-\d{2}$")).as_py():
                return None
            return _within(a.cast(t), lim.MIN_EPOCH_DAYS, lim.MAX_EPOCH_DAYS)
        return None

    # -- record by record --------------------------------------------------------------------

    def _per_record(self, payloads: list[bytes], position: Callable[[int], str]) -> Decoded:
        names = self.schema.names
        columns: list[list[Any]] = [[] for _ in names]
        bad: list[BadRecord] = []
        ops: list[str] = []
        unknown: dict[str, int] = {}
        for i, raw in enumerate(payloads):
            text, error = lim.payload_error(raw, self.limits)
            if error is not None:
                bad.append(BadRecord(text, error, position(i)))
                continue
            row, error, op = self.record(text, unknown)
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
        return Decoded(rows, bad, changes, unknown, op_values, self.default_op)

    def record(self, text: str, unknown: dict[str, int] | None = None) -> tuple[list[Any] | None, str | None, str]:
        """One payload: (typed values in schema order, None, op) or (None, error, op). A good
        record's keys that are no column (null-valued ones too, as decode_json) are counted into `unknown`."""
        default = self.default_op
        stripped = text.strip()
        if not stripped:
            return None, "malformed JSON: empty payload", default
        try:
            decoder = _CHECKED_DECODER if _LONG_DIGITS_TEXT.search(stripped) else _DECODER
            obj, _ = decoder.raw_decode(stripped)  # text after the first JSON value is ignored
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            return None, "malformed JSON" if stripped.startswith("{") else "malformed JSON: not an object", default
        op = default
        raw_op = obj.get(OP_COLUMN)
        if raw_op is not None:
            shown_op = json_values.spark_text(raw_op)
            op = shown_op.strip(" ").upper()  # Spark's trim: spaces only
            if op not in OPS:
                return None, f"unknown op '{shown_op}'", default
        typed: list[Any] = []
        errors: dict[str, str] = {}
        for f in self.schema:
            value = obj.get(f.name)
            if value is None:
                typed.append(None)
                if f.name in self.key:
                    errors[f.name] = f"key column {f.name} is missing or null"
                elif not f.nullable and op != DELETE:  # a delete needs only its key (as decode/json.py)
                    errors[f.name] = f"column {f.name} is missing or null (NOT NULL)"
                continue
            raw = json_values.spark_text(value)  # as Spark keeps it: 1e7 is "1.0E7"
            if json_values.supported(f.type):
                converted = json_values.value(raw, f.type)
            elif nested.supported(f.type):
                converted = nested.value(raw, f.type, self.time_zone)
            elif pa.types.is_floating(f.type) and raw in _QUOTED_INFINITY:
                converted = scalar_value(
                    raw[1:-1], f.type, self.time_zone
                )  # Jackson's text of 1e400, read back (decode/json.py)
            else:
                converted = scalar_value(raw, f.type, self.time_zone)
            typed.append(converted)
            if converted is None and (op != DELETE or f.name in self.key):  # a delete's other values go unread
                shown = type_name(f.type)
                article = "an" if shown[:1].upper() in "AEIOU" else "a"
                quoted = raw if len(raw) <= RAW_MESSAGE_CHARS else raw[:RAW_MESSAGE_CHARS] + "..."
                errors[f.name] = f"column {f.name}: '{quoted}' is not {article} {shown}"
        if errors:  # key columns first, then the others, each in schema order (as decode/json.py)
            ordered = [n for n in self.schema.names if n in self.key] + [n for n in self.schema.names]
            return None, next(errors[n] for n in ordered if n in errors), op
        if unknown is not None:
            for name in obj.keys() - self._known:
                unknown[name] = unknown.get(name, 0) + 1
        return typed, None, op

    def _value(self, raw: str, t: pa.DataType) -> Any:
        """Spark's try_cast of the raw text to `t` (`scalar_value` in the session time zone)."""
        return scalar_value(raw, t, self.time_zone)


def _block_size(size: int) -> int:
    """pyarrow's block size for a read of `size` bytes: one block up to 1 MiB, else four or more."""
    return size + 1 if size < 1 << 20 else max(1 << 20, size // 4 + 1)


def _within(a: pa.Array, low: int, high: int) -> pa.Array | None:
    """`a` (timestamps in microseconds or dates in days) when all of it lies in [low, high], else None."""
    values = a.cast(pa.int64() if pa.types.is_timestamp(a.type) else pa.int32())
    if values.null_count == len(values):
        return a
    mm = pc.min_max(values)
    return a if low <= mm["min"].as_py() and mm["max"].as_py() <= high else None
