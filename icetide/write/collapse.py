"""Changelog operations and the in-batch collapse of several changes to one key.

`collapse` runs on executors, on the rows of one writer task (distribution guarantees that all
changes to a key reach the same task). It is plain pyarrow, no Spark, so it is unit-tested alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from icetide.errors import BadOperationError
from icetide.write.arrow_sort import sort_indices

OP_COLUMN = "_op"
ARRIVAL_COLUMN = "_icetide_arrival"
INSERT, UPSERT, DELETE = "INSERT", "UPSERT", "DELETE"
OPS = (INSERT, UPSERT, DELETE)


@dataclass(frozen=True)
class Collapsed:
    """One task's rows after collapsing: what to insert, and which keys get an equality delete."""

    rows: pa.Table  # INSERT/UPSERT rows to write as data, one per key
    deletes: pa.Table  # key columns of the rows whose older versions must be deleted


def normalize_ops(ops: pa.Array | pa.ChunkedArray) -> pa.ChunkedArray | pa.Array:
    """Upper-case the ops; null means UPSERT. Raises BadOperationError naming an unknown value."""
    upper = pc.fill_null(pc.utf8_upper(pc.utf8_trim_whitespace(ops)), UPSERT)
    bad = pc.invert(pc.is_in(upper, value_set=pa.array(OPS)))
    if pc.any(bad).as_py():
        first = pc.filter(ops, bad)[0].as_py()
        raise BadOperationError(f"_op has the unknown value {first!r}; expected INSERT, UPSERT or DELETE")
    return upper


def collapse(
    table: pa.Table,
    *,
    key: list[str],
    order_by: str | None,
    changelog: bool,
    keep_inserts: bool = False,
) -> Collapsed:
    """Collapse each key's changes to the last by (order_by, arrival) and split rows from deletes.

    Every surviving UPSERT or DELETE deletes the key's older rows. An INSERT does too unless
    `changelog` is set (the producer promises the key is new); even then, if the batch held any
    UPSERT or DELETE for that key before the INSERT, its delete is kept, so DELETE-then-INSERT
    never leaves two rows. Null `order_by` values sort as oldest. With `keep_inserts` (append
    mode), a key whose changes are all INSERTs keeps every one of them as a row.
    """
    if table.num_rows == 0:
        return Collapsed(table, table.select(key))
    ops = normalize_ops(table[OP_COLUMN])
    table = table.set_column(table.schema.get_field_index(OP_COLUMN), OP_COLUMN, ops)
    if table.select(key).group_by(key, use_threads=False).aggregate([]).num_rows == table.num_rows:
        return _split(table, had_change=None, changelog=changelog)  # no key repeats: nothing to collapse
    if keep_inserts and not pc.any(pc.not_equal(ops, INSERT)).as_py():
        return _split(table, had_change=None, changelog=changelog)  # an append batch: every row stays
    order = sort_indices(table, [order_by, ARRIVAL_COLUMN] if order_by else [ARRIVAL_COLUMN], "at_start")
    table = table.take(order)
    position = pa.array(np.arange(table.num_rows, dtype=np.int64))
    not_insert = pc.not_equal(table[OP_COLUMN], INSERT)
    helper = table.select(key).append_column("_pos", position).append_column("_ni", not_insert)
    groups = helper.group_by(key, use_threads=False).aggregate([("_pos", "max"), ("_ni", "any")])
    if keep_inserts:
        return _keep_inserts(table, helper, groups, key, changelog)
    last = groups["_pos_max"]
    return _split(table.take(last), had_change=groups["_ni_any"], changelog=changelog)


def _keep_inserts(table: pa.Table, helper: pa.Table, groups: pa.Table, key: list[str], changelog: bool) -> Collapsed:
    """Every row of the keys with only INSERTs, and the last change of each other key."""
    marked = helper.join(groups.select([*key, "_ni_any"]), keys=key, use_threads=False)
    inserts_only = marked.filter(pc.invert(marked["_ni_any"]))["_pos"]
    changed = groups.filter(groups["_ni_any"])
    positions = pa.chunked_array([*inserts_only.chunks, *changed["_pos_max"].chunks], pa.int64())
    had_change = pa.chunked_array(
        [pa.array(np.zeros(len(inserts_only), dtype=bool)), pa.array(np.ones(changed.num_rows, dtype=bool))]
    )
    return _split(table.take(positions), had_change=had_change, changelog=changelog)


def _split(survivors: pa.Table, *, had_change: pa.ChunkedArray | None, changelog: bool) -> Collapsed:
    """Rows to insert and keys to delete, from one surviving change per key."""
    op = survivors[OP_COLUMN]
    is_row = pc.not_equal(op, DELETE)
    if not changelog:
        return Collapsed(rows=survivors.filter(is_row), deletes=survivors)
    needs_delete = pc.not_equal(op, INSERT)
    if had_change is not None:
        needs_delete = pc.or_(needs_delete, had_change)
    return Collapsed(rows=survivors.filter(is_row), deletes=survivors.filter(needs_delete))
