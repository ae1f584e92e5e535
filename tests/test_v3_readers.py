"""Other engines read icetide's v3 tables: PyIceberg and DuckDB, each compared with the model.

The stream writes equality deletes, which PyIceberg refuses; a maintenance pass that folds them
into deletion vectors (`fold_deletes="position"` on v3) leaves a table both read. Both engines
run offline from the dev extras: PyIceberg reads the current metadata file (it has no Hadoop
catalog), DuckDB loads its iceberg extension (avro first) from the extension wheels.
"""

from __future__ import annotations

import os
import random
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest

from icetide.maintenance.health import HealthThresholds
from icetide.maintenance.maintain import MaintenancePolicy, maintain
from icetide.table.iceberg import load_table
from tests.test_compaction import COLUMNS, KEY, Table, _random_batch
from tests.test_v3_deletes import deletes_by_kind, one_dv_per_data_file, v3_table

EPOCH = datetime(1970, 1, 1)
DUCKDB_VERSION = "1.5.5"
Rows = dict[tuple[Any, ...], tuple[Any, ...]]


def metadata_location(t: Table) -> str:
    """The table's current metadata file, as another engine opens it."""
    jtable = load_table(t.spark, t.name)
    jtable.refresh()
    return str(jtable.operations().current().metadataFileLocation())


def _micros(ts: datetime) -> int:
    return (ts.replace(tzinfo=None) - EPOCH) // timedelta(microseconds=1)


def model_rows(t: Table) -> Rows:
    """The model with timestamps as microseconds since the epoch (UTC), as the readers give them."""
    out = {}
    for row in t.model.rows.values():
        values = dict(zip(COLUMNS, row, strict=True))
        values["ts"] = _micros(values["ts"])
        out[tuple(values[k] for k in KEY)] = tuple(values[c] for c in COLUMNS)
    return out


def _keyed(records: list[dict[str, Any]]) -> Rows:
    out: Rows = {}
    for r in records:
        key = tuple(r[k] for k in KEY)
        assert key not in out, f"duplicate key {key}"
        out[key] = tuple(r[c] for c in COLUMNS)
    return out


def pyiceberg_rows(t: Table) -> Rows:
    from pyiceberg.table import StaticTable

    table = StaticTable.from_metadata(metadata_location(t)).scan(selected_fields=tuple(COLUMNS)).to_arrow()
    ts = table["ts"].cast(pa.timestamp("us")).cast(pa.int64())
    return _keyed(table.set_column(table.schema.get_field_index("ts"), "ts", ts).to_pylist())


def duckdb_connection() -> Any:
    import duckdb
    import duckdb_extension_avro
    import duckdb_extension_iceberg

    assert duckdb.__version__ == DUCKDB_VERSION, "the iceberg extension wheel loads only into its own DuckDB"
    con = duckdb.connect()
    for module, name in ((duckdb_extension_avro, "avro"), (duckdb_extension_iceberg, "iceberg")):
        folder = os.path.dirname(module.__file__ or "")
        con.execute(f"LOAD '{os.path.join(folder, 'extensions', f'v{DUCKDB_VERSION}', f'{name}.duckdb_extension')}'")
    return con


def duckdb_rows(t: Table, con: Any) -> Rows:
    cursor = con.execute(f"SELECT id, epoch_us(ts) AS ts, v, seq FROM iceberg_scan('{metadata_location(t)}')")
    names = [d[0] for d in cursor.description]
    return _keyed([dict(zip(names, r, strict=True)) for r in cursor.fetchall()])


def readers_agree(spark: Any, name: str, model: Any) -> None:
    """PyIceberg and DuckDB both read the table `name` as the reference `model` holds it."""
    view: Any = SimpleNamespace(spark=spark, name=name, model=model)  # what the helpers above take
    expected = model_rows(view)
    assert pyiceberg_rows(view) == expected
    con = duckdb_connection()
    try:
        assert duckdb_rows(view, con) == expected
    finally:
        con.close()


@pytest.fixture(scope="module")
def duck() -> Any:
    con = duckdb_connection()
    yield con
    con.close()


def test_pyiceberg_and_duckdb_read_the_table_after_maintenance(spark: Any, table_name: str, duck: Any) -> None:
    t = v3_table(spark, table_name)
    rng = random.Random(11)
    policy = MaintenancePolicy(thresholds=HealthThresholds(max_delete_files=1), fold_deletes="position")
    for rounds in range(2):  # the second round's DVs merge the first's
        for _ in range(6):
            t.upsert(_random_batch(rng, rng.randrange(5, 30)))
        assert "equality" in deletes_by_kind(t)
        with pytest.raises(ValueError, match="equality deletes"):  # why the stream alone is not enough
            pyiceberg_rows(t)
        assert duckdb_rows(t, duck) == model_rows(t)  # DuckDB reads equality deletes too
        report = maintain(spark, table_name, policy)
        assert report.conversion is not None and report.conversion.vectors, report.lines()
        t.check()
        kinds = deletes_by_kind(t)
        assert "equality" not in kinds and "position" not in kinds, kinds
        one_dv_per_data_file(t)
        expected = model_rows(t)
        assert pyiceberg_rows(t) == expected, f"round {rounds}"
        assert duckdb_rows(t, duck) == expected, f"round {rounds}"
