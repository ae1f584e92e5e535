"""Iceberg partition transforms computed in pyarrow, for writers that run without the JVM.

Covers identity, years, months, days, hours, truncate and bucket with Iceberg's exact semantics
(floor division before 1970, truncate by code points for strings, by the floored remainder for
integers; bucket: Murmur3 x86 32-bit, seed 0, of the value's 8-byte little-endian long for
integers, dates and timestamps, of its UTF-8 bytes for strings). bucket of other types (decimal,
binary, uuid) is left to the JVM: `computable` says which fields this module can produce.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from icetide.table.spec import PartitionTransform

_MICROS_PER_HOUR = 3_600_000_000
_MICROS_PER_DAY = 86_400_000_000


def computable(transform: PartitionTransform | None, source: pa.DataType) -> bool:
    """Can `arrow_partition_values` compute this field from a column of type `source`?"""
    if transform is None:  # a void field: always null
        return True
    name = transform.transform
    time_like = pa.types.is_timestamp(source) or pa.types.is_date32(source)
    if name == "identity":
        return not (pa.types.is_timestamp(source) or pa.types.is_nested(source))
    if name in ("years", "months", "days"):
        return time_like
    if name == "hours":
        return pa.types.is_timestamp(source)
    if name == "truncate":
        return pa.types.is_integer(source) or pa.types.is_string(source)
    if name == "bucket":
        return pa.types.is_integer(source) or time_like or pa.types.is_string(source)
    return False


_C1, _C2 = np.uint32(0xCC9E2D51), np.uint32(0x1B873593)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _mix(h: np.ndarray, k: np.ndarray) -> np.ndarray:
    k = _rotl(k * _C1, 15) * _C2
    return _rotl(h ^ k, 13) * np.uint32(5) + np.uint32(0xE6546B64)


def _finish(h: np.ndarray, length: int) -> np.ndarray:
    h = h ^ np.uint32(length)
    h ^= h >> np.uint32(16)
    h *= np.uint32(0x85EBCA6B)
    h ^= h >> np.uint32(13)
    h *= np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


def murmur3_longs(values: np.ndarray) -> np.ndarray:
    """Murmur3 x86 32-bit (seed 0) of each int64 as 8 little-endian bytes: Iceberg's hashLong."""
    words = values.astype("<i8").view("<u4").reshape(-1, 2)
    with np.errstate(over="ignore"):
        h = _mix(np.zeros(len(words), dtype=np.uint32), words[:, 0].copy())
        h = _mix(h, words[:, 1].copy())
        return _finish(h, 8)


def murmur3_bytes(data: bytes) -> int:
    """Murmur3 x86 32-bit (seed 0) of `data`, unsigned: Iceberg's hash of a string's UTF-8 bytes."""
    with np.errstate(over="ignore"):
        blocks = len(data) // 4
        h = np.zeros(1, dtype=np.uint32)
        if blocks:
            for k in np.frombuffer(data[: blocks * 4], dtype="<u4"):
                h = _mix(h, np.array([k], dtype=np.uint32))
        tail = data[blocks * 4 :]
        if tail:
            k = np.array([int.from_bytes(tail, "little")], dtype=np.uint32)
            h ^= _rotl(k * _C1, 15) * _C2
        return int(_finish(h, len(data))[0])


def _bucket(column: pa.Array, buckets: int) -> pa.Array:
    mask = column.is_null().to_numpy(zero_copy_only=False)
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        hashes = np.array(
            [0 if v is None else murmur3_bytes(v.encode("utf-8")) for v in column.to_pylist()], dtype=np.uint32
        )
    else:
        if pa.types.is_date32(column.type):
            column = column.cast(pa.int32())
        longs = pc.fill_null(column.cast(pa.int64()), 0).to_numpy(zero_copy_only=False)  # no float detour
        hashes = murmur3_longs(longs)
    values = (hashes & np.uint32(0x7FFFFFFF)).astype(np.int64) % buckets
    return pa.array(values.astype(np.int32), mask=mask, type=pa.int32())


def _floor_div(values: pa.Array, divisor: int) -> pa.Array:
    """Floor division of an integer array (nulls kept), as Iceberg's transforms round before 1970."""
    data = values.to_numpy(zero_copy_only=False)
    mask = values.is_null().to_numpy(zero_copy_only=False)
    filled = np.where(mask, 0, data).astype(np.int64)
    return pa.array(np.floor_divide(filled, divisor), mask=mask, type=pa.int64())


def arrow_partition_values(column: pa.Array | pa.ChunkedArray, transform: PartitionTransform | None) -> pa.Array:
    """The partition field's values for each row of `column` (the transform's source column)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if transform is None:
        return pa.nulls(len(column), pa.int32())
    name = transform.transform
    if name == "identity":
        return column
    if name == "bucket":
        return _bucket(column, int(transform.width or 1))
    if name == "truncate":
        width = int(transform.width or 1)
        if pa.types.is_string(column.type):
            return pc.utf8_slice_codeunits(column, 0, width)
        values = column.cast(pa.int64())
        return pc.multiply(_floor_div(values, width), width).cast(column.type)
    if pa.types.is_date32(column.type):
        days = column.cast(pa.int32()).cast(pa.int64())
        if name == "days":
            return column
        micros = pc.multiply(days, _MICROS_PER_DAY)
    else:
        micros = column.cast(pa.int64())
    if name == "hours":
        return _floor_div(micros, _MICROS_PER_HOUR).cast(pa.int32())
    if name == "days":
        return _floor_div(micros, _MICROS_PER_DAY).cast(pa.int32()).cast(pa.date32())
    naive = micros.cast(pa.timestamp("us"))
    years = pc.subtract(pc.year(naive), 1970)
    if name == "years":
        return years.cast(pa.int32())
    months = pc.add(pc.multiply(years, 12), pc.subtract(pc.month(naive), 1))
    return months.cast(pa.int32())
