"""Readers of icetide's tables without Spark, as another team would use them: PyIceberg and DuckDB.

DuckDB's iceberg extension comes from the `duckdb-extension-iceberg`, `-avro` and `-httpfs`
wheels (dev extras) and is loaded from them, offline; it loads only into the DuckDB version it
was built for (1.5.5, pinned).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

Rows = dict[tuple[Any, ...], tuple[Any, ...]]


def _as_spark_reads(value: Any) -> Any:
    """A timestamp with a zone as Spark shows it in a UTC session: naive, in UTC."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    return value


def keyed(rows: list[dict[str, Any]], columns: list[str], key: list[str]) -> Rows:
    """key -> row tuple, failing on a duplicate key (a delete that did not apply)."""
    out: Rows = {}
    for r in rows:
        row = {c: _as_spark_reads(r[c]) for c in columns}
        k = tuple(row[c] for c in key)
        assert k not in out, f"duplicate key {k}"
        out[k] = tuple(row[c] for c in columns)
    return out


@contextmanager
def duckdb_with_iceberg() -> Iterator[Any]:
    """A DuckDB connection with the iceberg extension loaded from its wheel."""
    import duckdb

    con = duckdb.connect()
    try:
        for name in ("avro", "httpfs", "iceberg"):  # iceberg needs avro (and httpfs for a REST catalog) first
            package = importlib.import_module(f"duckdb_extension_{name}")
            root = os.path.dirname(package.__file__ or "")
            path = os.path.join(root, "extensions", f"v{duckdb.__version__}", f"{name}.duckdb_extension")
            con.execute(f"LOAD '{path}'")
        yield con
    finally:
        con.close()


def duckdb_rows(con: Any, relation: str, columns: list[str], key: list[str]) -> Rows:
    """What DuckDB reads from `relation` (a table of an attached catalog, or iceberg_scan(...))."""
    cursor = con.execute(f"SELECT {', '.join(columns)} FROM {relation}")
    rows = [dict(zip(columns, r, strict=True)) for r in cursor.fetchall()]
    return keyed(rows, columns, key)


def pyiceberg_rows(table: Any, columns: list[str], key: list[str]) -> Rows:
    """What PyIceberg reads from a table (it refuses equality deletes: fold them first)."""
    return keyed(table.scan(selected_fields=tuple(columns)).to_arrow().to_pylist(), columns, key)
