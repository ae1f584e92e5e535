"""Iceberg partition transforms computed in pyarrow, for writers that run without the JVM.

Covers identity, years, months, days, hours and truncate with Iceberg's exact semantics
(floor division before 1970, truncate by code points for strings, by the floored remainder for
integers). bucket needs Iceberg's Murmur3 of the value's binary form and is left to the JVM:
`computable` says which fields this module can produce.
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
    return False


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
