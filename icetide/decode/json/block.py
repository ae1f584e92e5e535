"""A block of JSON payloads in one pyarrow read, checked with vectorized kernels: the quick way
of decode/json/records.py's decoder, which looks at records one by one only where this gives up.

`PyarrowBlock.read` gives None, never a wrong row, whenever a record may need a closer look: a
payload that is not one JSON object on one line, a line past the payload limits
(icetide.decode.limits), a number longer than Spark's reader takes, an unknown op, a value of
another JSON type than the parse schema's (an object or array in a STRING column: pyarrow's read
refuses it), or a value that does not fit its column (out of range, a finite number beyond FLOAT,
text that is not a timestamp, a null key or NOT NULL column). The record-by-record look then
decides, with the dead letter naming the value. Text after a record's object fails the read, or
adds a row (a second object), so it goes to that look too.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from icetide.decode import limits as lim
from icetide.decode.json.scalars import MAX_EPOCH_MS, MIN_EPOCH_MS, TIMESTAMP_TEXT
from icetide.decode.limits import PayloadLimits
from icetide.decode.spark_compat.json_values import MAX_NUMBER_LENGTH
from icetide.write.collapse import INSERT, OP_COLUMN, OPS

_ZONED_TEXT = r"(Z|[+-]\d{2}:?\d{2})$"
_BLANK_LINE = re.compile(rb"\n[ \t]*\n")  # starts at a newline: quick to scan
_LONE_SURROGATE_BYTES = re.compile(lim.LONE_SURROGATE.encode())
# A block is searched for a number longer than Spark's reader takes as bytes: digits mapped to
# b"0", all else to b" ", then one substring search (about 15x faster on a 9 MB block than a
# regular expression, which tries every digit as a start).
_DIGITS_ONLY = bytes(48 if 48 <= b <= 57 else 32 for b in range(256))
_LONG_DIGIT_RUN = b"0" * (MAX_NUMBER_LENGTH + 1)


@dataclass(frozen=True)
class BadRecord:
    """A record that does not fit the table: raw payload, one-line error, "topic/partition@offset"."""

    payload: str | None
    error: str
    source_position: str


@dataclass(frozen=True)
class DecodedBlock:
    """A block's good rows (table schema, input order), its bad records, and whether a good row's
    `_op` is other than INSERT (which an append fast path cannot honour)."""

    rows: pa.Table
    bad: list[BadRecord]
    changes: bool = False
    unknown_fields: dict[str, int] = field(default_factory=dict)  # key that is no column -> good records with it
    op_values: pa.Array | None = None  # the `_op` of each good row; None: every row's is `default_op`
    default_op: str = INSERT
    nested_as_text: int = 0  # objects and arrays kept as their JSON text in STRING columns (good rows)

    def ops(self) -> pa.Array:
        """The `_op` of each good row (INSERT, UPSERT or DELETE), in row order."""
        if self.op_values is not None:
            return self.op_values
        return pa.array([self.default_op] * self.rows.num_rows, pa.string())

    def with_ops(self) -> pa.Table:
        """`rows` with the `_op` column after the table's, as decode_json's good rows have it."""
        return self.rows.append_column(pa.field(OP_COLUMN, pa.string(), nullable=False), self.ops())


class PyarrowBlock:
    """Reads blocks of payloads into a table's Arrow schema (one without `unsupported_columns`)."""

    def __init__(
        self, schema: pa.Schema, key: Sequence[str], default_op: str, time_zone: str, limits: PayloadLimits
    ) -> None:
        self.schema = schema
        self.key = tuple(key)
        self.default_op = default_op
        self.time_zone = time_zone
        self.limits = limits
        self._known = frozenset([*schema.names, OP_COLUMN])

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

    def read(self, joined: bytes, count: int) -> DecodedBlock | None:
        """The whole block (`count` payloads joined by newlines) in one pyarrow read, or None when
        any record needs a closer look."""
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
        return DecodedBlock(rows, [], changes, unknown, op_values, self.default_op)

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
        if pa.types.is_floating(t) and a.null_count < len(a) and pc.any(pc.is_inf(a)).as_py():
            # the Infinity literal, or an integer beyond a double that pyarrow reads as infinity
            # (a finite number, refused: issue 49): the record-by-record path tells them apart
            return None
        if pa.types.is_string(t) or pa.types.is_boolean(t) or pa.types.is_float64(t):
            return a
        if pa.types.is_float32(t):
            if a.null_count < len(a):
                mm = pc.min_max(a)  # a finite double beyond FLOAT is refused (issue 49), not infinity
                if not -lim.FLOAT32_OUT < mm["min"].as_py() <= mm["max"].as_py() < lim.FLOAT32_OUT:
                    beyond = pc.and_(pc.is_finite(a), pc.greater_equal(pc.abs(a), lim.FLOAT32_OUT))
                    if pc.any(beyond).as_py():
                        return None
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
