"""Rows of a data file that equality deletes remove, found by exact value (no Spark): the
conversion of equality deletes into position deletes, and compaction's rewrite on the driver."""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc

_POS = "__icetide_pos"


def convertible(keys: pa.Table) -> str | None:
    """None if equality-delete keys can be matched exactly by value, else why not."""
    for name, column in zip(keys.column_names, keys.columns, strict=True):
        if pa.types.is_floating(column.type) or pa.types.is_nested(column.type):
            return f"column {name} is {column.type}: left for compaction"
        if column.null_count:
            return f"column {name} holds nulls: left for compaction"
    return None


def deleted_positions(data_keys: pa.Table, delete_keys: Iterable[pa.Table]) -> pa.Array:
    """Sorted, distinct row positions of `data_keys` whose key equals a row of any `delete_keys`.

    `data_keys` holds a data file's equality columns in file order (row i is position i);
    every `delete_keys` table has the same columns. Rows with a null key match nothing here
    (`convertible` keeps null-bearing deletes out).
    """
    tables = [t for t in delete_keys if t.num_rows]
    if not tables or data_keys.num_rows == 0:
        return pa.array([], pa.int64())
    deletes = pa.concat_tables(tables).combine_chunks()
    names = data_keys.column_names
    indexed = data_keys.append_column(_POS, pa.array(range(data_keys.num_rows), pa.int64()))
    if len(names) == 1:
        mask = pc.is_in(indexed[names[0]], value_set=deletes[names[0]].combine_chunks())
        matched = indexed.filter(mask)[_POS]
    else:
        matched = indexed.join(deletes.group_by(names).aggregate([]), keys=names, join_type="left semi")[_POS]
    return sorted_unique(matched)


def sorted_unique(values: pa.ChunkedArray | pa.Array) -> pa.Array:  # type: ignore[type-arg]
    """The distinct values, sorted."""
    unique = pc.unique(values)
    return unique.take(pc.sort_indices(unique))
