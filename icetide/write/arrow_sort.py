"""`sort_indices` with one null placement for every key, on each pyarrow icetide supports.

pyarrow 17 takes it as `null_placement=`; newer releases take it per sort key, and warn about the
argument (a FutureWarning a user of `icetide run` would see on every batch).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc


def _keys_take_placement() -> bool:
    try:
        pc.SortOptions(sort_keys=[("k", "ascending", "at_end")])
    except (TypeError, ValueError):
        return False
    return True


PER_KEY = _keys_take_placement()


def sort_indices(table: pa.Table, columns: Sequence[str], nulls: str) -> pa.Array:
    """The row order of `table` by `columns`, ascending, nulls `at_start` or `at_end`."""
    if PER_KEY:
        return pc.sort_indices(table, sort_keys=[(c, "ascending", nulls) for c in columns])
    return pc.sort_indices(table, sort_keys=[(c, "ascending") for c in columns], null_placement=nulls)
