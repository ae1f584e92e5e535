"""Iceberg file metadata computed on the executor, so the driver never reads a Parquet footer.

A writer task knows everything Iceberg records about a file it wrote: record count, size,
per-column value, null and bound statistics. It sends them as Iceberg's own content-file JSON
(`ContentFileParser`), which the driver turns into a DataFile/DeleteFile in one JVM call.
Bounds follow Iceberg's single-value binary serialization and its default metrics mode,
truncate(16): strings and binaries keep a 16-unit prefix as lower bound and drop an upper
bound they cannot keep exactly. Float and double columns get counts but no bounds (NaN rules).

Nested columns, as Iceberg's Parquet metrics have them (`ParquetUtil.footerMetrics`): only leaf
fields are measured, by their own field ids. A field inside structs alone (no list or map on its
path) gets counts and bounds like a top-level column, a struct's null counting as null in each
of its fields (Parquet's definition levels). A field inside a list or map gets none here: Iceberg
keeps no bounds for it either, and its counts there are Parquet's level counts (a null or empty
list is one null "value"); no filter can name a list element or map entry, so no reader prunes
on them, and metrics left out never make a reader skip a file it needs.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Context, Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

TRUNCATE_LENGTH = 16
MAX_INFERRED_COLUMNS = 100  # Iceberg's write.metadata.metrics.max-inferred-column-defaults
FIELD_ID_KEY = b"PARQUET:field_id"
_EPOCH = datetime(1970, 1, 1)


def field_id(f: pa.Field) -> int:
    """The Iceberg field id an Arrow field carries."""
    return int((f.metadata or {})[FIELD_ID_KEY])


def _micros(value: datetime) -> int:
    naive = value.replace(tzinfo=None) - (value.utcoffset() or _EPOCH - _EPOCH)
    delta = naive - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def serialize_bound(dtype: pa.DataType, value: Any, *, upper: bool) -> bytes | None:
    """Iceberg's binary single-value form of a bound, or None when no valid bound can be kept."""
    if pa.types.is_boolean(dtype):
        return b"\x01" if value else b"\x00"
    if pa.types.is_int32(dtype) or pa.types.is_int16(dtype) or pa.types.is_int8(dtype):
        return struct.pack("<i", value)
    if pa.types.is_int64(dtype):
        return struct.pack("<q", value)
    if pa.types.is_date32(dtype):
        return struct.pack("<i", (value - date(1970, 1, 1)).days)
    if pa.types.is_timestamp(dtype):
        return struct.pack("<q", _micros(value))
    if pa.types.is_time64(dtype):
        return struct.pack("<q", ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond)
    if pa.types.is_decimal(dtype):
        exact = Context(prec=80)  # the default context keeps 28 digits; a DECIMAL has up to 38
        unscaled = int((value if isinstance(value, Decimal) else Decimal(value)).scaleb(dtype.scale, context=exact))
        # Java's BigInteger.toByteArray: the fewest bytes of two's complement (-128 is one byte, 0x80)
        length = (unscaled if unscaled >= 0 else ~unscaled).bit_length() // 8 + 1
        return unscaled.to_bytes(length, "big", signed=True)
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        if len(value) <= TRUNCATE_LENGTH:
            return str(value).encode()
        return None if upper else str(value)[:TRUNCATE_LENGTH].encode()
    if pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype) or pa.types.is_fixed_size_binary(dtype):
        raw = bytes(value)
        if len(raw) <= TRUNCATE_LENGTH:
            return raw
        return None if upper else raw[:TRUNCATE_LENGTH]
    return None


def _bounds_type(dtype: pa.DataType) -> bool:
    return not (pa.types.is_floating(dtype) or pa.types.is_nested(dtype))


def measured_fields(schema: pa.Schema) -> list[tuple[tuple[str, ...], pa.Field]]:
    """The leaf fields a file's metrics cover, each with its path of names from the top: every
    primitive column and every primitive field inside structs alone. Iceberg's MetricsConfig,
    for a table of more than MAX_INFERRED_COLUMNS columns, measures only that many primitive
    fields, the top-level ones first (checked with Iceberg 1.10: a struct's fields before the
    101st top-level INT column are not measured); then this takes the first MAX_INFERRED_COLUMNS
    top-level primitive columns and no nested field, all of them fields Iceberg measures."""
    columns = list(schema)
    if len(columns) > MAX_INFERRED_COLUMNS:
        primitive: list[tuple[tuple[str, ...], pa.Field]] = [
            ((f.name,), f) for f in columns if not pa.types.is_nested(f.type)
        ]
        return primitive[:MAX_INFERRED_COLUMNS]
    out: list[tuple[tuple[str, ...], pa.Field]] = []

    def visit(path: tuple[str, ...], f: pa.Field) -> None:
        if pa.types.is_struct(f.type):
            for child in f.type:
                visit((*path, child.name), child)
        elif not pa.types.is_nested(f.type):  # lists and maps: nothing (see the module's docstring)
            out.append((path, f))

    for f in columns:
        visit((f.name,), f)
    return out


def _leaf(table: pa.Table, path: tuple[str, ...]) -> pa.ChunkedArray:
    """A leaf field's values, null wherever it or a struct above it is null."""
    column = table[path[0]]
    for name in path[1:]:
        column = pa.chunked_array(
            [pc.struct_field(chunk, [name]) for chunk in column.chunks], column.type.field(name).type
        )
    return column


@dataclass
class FileStats:
    """Column statistics of one file, accumulated over the chunks written to it."""

    schema: pa.Schema
    records: int = 0
    nulls: dict[int, int] = field(default_factory=dict)
    lower: dict[int, Any] = field(default_factory=dict)
    upper: dict[int, Any] = field(default_factory=dict)
    no_bounds: set[int] = field(default_factory=set)

    def add(self, table: pa.Table) -> None:
        """Fold a chunk's statistics in."""
        self.records += table.num_rows
        for path, f in measured_fields(self.schema):
            fid = field_id(f)
            column = _leaf(table, path)
            self.nulls[fid] = self.nulls.get(fid, 0) + column.null_count
            if not _bounds_type(f.type) or fid in self.no_bounds or column.null_count == len(column):
                continue
            mm = pc.min_max(column)
            lo, hi = mm["min"].as_py(), mm["max"].as_py()
            if fid not in self.lower or lo < self.lower[fid]:
                self.lower[fid] = lo
            if fid not in self.upper or hi > self.upper[fid]:
                self.upper[fid] = hi

    def metrics_json(self) -> dict[str, Any]:
        """The metric members of Iceberg's content-file JSON."""
        columns = [f for _, f in measured_fields(self.schema)]
        types = {field_id(f): f.type for f in columns}
        ids = [field_id(f) for f in columns]

        def pairs(values: dict[int, Any]) -> dict[str, list[Any]]:
            keys = sorted(values)
            return {"keys": keys, "values": [values[k] for k in keys]}

        lowers, uppers = {}, {}
        for fid, value in self.lower.items():
            b = serialize_bound(types[fid], value, upper=False)
            if b is not None:
                lowers[fid] = b.hex().upper()
        for fid, value in self.upper.items():
            b = serialize_bound(types[fid], value, upper=True)
            if b is not None:
                uppers[fid] = b.hex().upper()
        return {
            "value-counts": pairs(dict.fromkeys(ids, self.records)),
            "null-value-counts": pairs({i: self.nulls.get(i, 0) for i in ids}),
            "lower-bounds": pairs(lowers),
            "upper-bounds": pairs(uppers),
        }


def partition_json_value(value: Any, result_type: str) -> Any:
    """A partition value in Iceberg's single-value JSON form."""
    if value is None:
        return None
    if result_type == "date":
        return value.isoformat() if isinstance(value, date) else str(value)
    if result_type in ("decimal", "uuid", "string"):
        return str(value)
    return value


def content_file_json(
    *,
    content: str,
    path: str,
    spec_id: int,
    partition: dict[int, Any],
    file_size: int,
    stats: FileStats,
    equality_ids: list[int] | None = None,
) -> str:
    """One content file as Iceberg's `ContentFileParser` reads it."""
    doc: dict[str, Any] = {
        "spec-id": spec_id,
        "content": content,
        "file-path": path,
        "file-format": "PARQUET",
        "partition": {str(k): v for k, v in partition.items()},
        "file-size-in-bytes": file_size,
        "record-count": stats.records,
        **stats.metrics_json(),
    }
    if equality_ids is not None:
        doc["equality-ids"] = equality_ids
    return json.dumps(doc)
