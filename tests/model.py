"""The reference model every write path is checked against: a plain dict of key -> row."""

from __future__ import annotations

from typing import Any

Key = tuple[Any, ...]
Row = tuple[Any, ...]


class ReferenceModel:
    """Applies batches of (row, op) the way the upsert contract says, one key at a time."""

    def __init__(self, key: list[str], columns: list[str], order_by: str | None) -> None:
        self.key = key
        self.columns = columns
        self.order_by = order_by
        self.rows: dict[Key, Row] = {}
        self.applied: set[int] = set()

    def key_of(self, row: dict[str, Any]) -> Key:
        return tuple(row[k] for k in self.key)

    def apply(self, batch_id: int, rows: list[dict[str, Any]]) -> None:
        """rows in arrival order, each with the table columns and `_op` (None = UPSERT)."""
        if self.applied and batch_id <= max(self.applied):
            return  # a replayed or older batch lands nowhere
        self.applied.add(batch_id)
        last: dict[Key, tuple[Any, int, dict[str, Any]]] = {}
        for arrival, row in enumerate(rows):
            order = row.get(self.order_by) if self.order_by else None
            rank = (order is not None, order if order is not None else 0, arrival)
            k = self.key_of(row)
            if k not in last or rank >= last[k][0]:
                last[k] = (rank, arrival, row)
        for k, (_, _, row) in last.items():
            if (row.get("_op") or "UPSERT").upper() == "DELETE":
                self.rows.pop(k, None)
            else:
                self.rows[k] = tuple(row.get(c) for c in self.columns)


def table_rows(spark: Any, table: str, columns: list[str], key: list[str]) -> dict[Key, Row]:
    """What Spark reads from the table, as key -> row; fails on a duplicate key."""
    out: dict[Key, Row] = {}
    for r in spark.table(table).select(*columns).collect():
        row = tuple(r[c] for c in columns)
        k = tuple(r[c] for c in key)
        assert k not in out, f"duplicate key {k} in {table}"
        out[k] = row
    return out
