"""Equality deletes converted to position deletes: same rows, equality files gone, safe beside the stream.

Every Spark test checks the table against the reference model after each commit, and stages
the concurrent commits deterministically with the separable steps (plan, write, commit).
"""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from icetide.executor.file_metrics import FIELD_ID_KEY
from icetide.maintenance.compaction import CompactionConflictError, compact, compaction
from icetide.maintenance.equality_match import convertible, deleted_positions
from icetide.maintenance.health import HealthThresholds
from icetide.maintenance.maintain import MaintenancePolicy, maintain
from icetide.maintenance.position_deletes import (
    DELETE_FILE_PATH_ID,
    DELETE_FILE_POS_ID,
    convert_equality_deletes,
    equality_delete_conversion,
)
from icetide.write.keys import columns_by_field_id
from tests.test_compaction import A_ROWS, B_ROWS, Table, rows_of

# ---------------------------------------------------------------- pure rules, no Spark


def _keyed(**columns: list[Any]) -> pa.Table:
    return pa.table(columns)


def test_deleted_positions_single_and_compound_keys() -> None:
    data = _keyed(f1=[5, 1, 5, 7, 3])
    assert deleted_positions(data, [_keyed(f1=[5]), _keyed(f1=[3, 5, 99])]).to_pylist() == [0, 2, 4]
    compound = _keyed(f1=[1, 1, 2, 2], f2=["a", "b", "a", "b"])
    deletes = _keyed(f1=[1, 2, 2, 3], f2=["b", "a", "a", "a"])  # a duplicate key and a key not in the file
    assert deleted_positions(compound, [deletes]).to_pylist() == [1, 2]
    assert deleted_positions(compound, []).to_pylist() == []


def test_columns_are_found_by_field_id_and_compared_in_one_form() -> None:
    def field(name: str, dtype: pa.DataType, fid: int) -> pa.Field:
        return pa.field(name, dtype, metadata={FIELD_ID_KEY: str(fid)})

    data = pa.table(
        [pa.array([0, 3_600_000_000], pa.timestamp("us", tz="UTC")), pa.array(["x", "y"])],
        schema=pa.schema([field("ts", pa.timestamp("us", tz="UTC"), 2), field("renamed", pa.string(), 1)]),
    )
    deletes = pa.table(
        [pa.array(["y"], pa.large_string()), pa.array([3_600_000_000], pa.timestamp("us"))],
        schema=pa.schema([field("id", pa.large_string(), 1), field("ts", pa.timestamp("us"), 2)]),
    )
    keys = columns_by_field_id(deletes, [1, 2])
    assert deleted_positions(columns_by_field_id(data, [1, 2]), [keys]).to_pylist() == [1]
    assert convertible(keys) is None
    assert "nulls" in str(convertible(pa.table({"f1": pa.array([None, 1])})))
    assert "double" in str(convertible(pa.table({"f1": pa.array([1.5])})))


# ---------------------------------------------------------------- against a real table


def _delete_files(t: Table) -> dict[str, int]:
    rows = t.spark.sql(f"SELECT content, count(*) FROM {t.name}.delete_files GROUP BY 1").collect()
    names = {1: "position", 2: "equality"}
    return {names[int(r[0])]: int(r[1]) for r in rows}


def _equality_paths(t: Table) -> set[str]:
    return {r[0] for r in t.spark.sql(f"SELECT file_path FROM {t.name}.delete_files WHERE content = 2").collect()}


def _upserts(t: Table) -> None:
    t.append(A_ROWS)
    t.append(B_ROWS)
    t.upsert(rows_of([2, 3], "updated", seq=1))
    t.upsert([{**r, "_op": "DELETE"} for r in rows_of([4, 9], "x", seq=2)])
    t.upsert(rows_of([2, 5], "again", seq=3))  # key 2 changes twice: positions in two files


def test_conversion_keeps_rows_and_replaces_equality_deletes(spark: Any, table_name: str) -> None:
    t = Table(spark, table_name)
    _upserts(t)
    assert _delete_files(t) == {"equality": 3}
    result = convert_equality_deletes(spark, table_name)
    assert result.committed and result.conflict is None
    assert result.equality_files_removed == 3 and result.equality_rows_removed == 6
    assert result.positions_added == 6  # 2,3 in a/b; 4,9 deleted; 2 (batch 1's row) and 5 replaced again
    t.check()
    files = _delete_files(t)
    assert "equality" not in files and files["position"] == result.position_files_added > 0
    # Each position-delete file references one data file, with Iceberg's reserved field ids.
    for path, referenced in t.spark.sql(
        f"SELECT file_path, referenced_data_file FROM {table_name}.delete_files"
    ).collect():
        written = pq.ParquetFile(path.removeprefix("file:")).read()
        ids = [int(f.metadata[FIELD_ID_KEY]) for f in written.schema]
        assert ids == [DELETE_FILE_PATH_ID, DELETE_FILE_POS_ID]
        assert set(written["file_path"].to_pylist()) == {referenced}
        assert written["pos"].to_pylist() == sorted(set(written["pos"].to_pylist()))
    t.upsert(rows_of([5, 6], "after", seq=4))  # the stream goes on over position deletes
    t.check()
    assert compact(spark, table_name, min_input_files=2).groups == 1  # and compaction folds them
    t.check()
    assert _delete_files(t) == {}


def test_stream_commit_between_plan_and_commit_is_kept(spark: Any, table_name: str) -> None:
    t = Table(spark, table_name)
    _upserts(t)
    converted = _equality_paths(t)
    job = equality_delete_conversion(spark, table_name)
    assert job.write() > 0
    t.upsert(rows_of([3, 6], "meanwhile", seq=5))  # new equality deletes on rows the plan touched
    result = job.commit()
    assert result.committed and result.equality_files_removed == 3
    t.check()
    left = _equality_paths(t)
    assert len(left) == 1 and not left & converted  # only the stream's new delete is left
    assert convert_equality_deletes(spark, table_name).equality_files_removed == 1
    t.check()
    assert "equality" not in _delete_files(t)


def test_compaction_between_plan_and_commit_makes_the_conversion_conflict(spark: Any, table_name: str) -> None:
    t = Table(spark, table_name)
    _upserts(t)
    job = equality_delete_conversion(spark, table_name)
    job.write()
    written = [s.path for s in job._staged]
    assert compact(spark, table_name, min_input_files=2, remove_deletes=False).groups == 1
    t.check()
    result = job.commit()
    assert not result.committed and result.conflict is not None
    assert "missing data files" in result.conflict.lower() or "cannot commit" in result.conflict.lower()
    assert not any(os.path.exists(p.removeprefix("file:")) for p in written)  # its new files deleted
    t.check()


def test_compaction_planned_before_a_conversion_conflicts_instead_of_resurrecting_rows(
    spark: Any, table_name: str
) -> None:
    t = Table(spark, table_name)
    t.append(A_ROWS)
    t.append(B_ROWS)
    job = compaction(spark, table_name, min_input_files=2)  # planned before the delete: reads rows 2 and 3
    job.rewrite()
    t.upsert([{**r, "_op": "DELETE"} for r in rows_of([2, 3], "x", seq=1)])
    assert convert_equality_deletes(spark, table_name).equality_files_removed == 1
    t.check()
    # The equality delete that would have applied to the compaction's output is gone; the
    # position deletes name the replaced files, so Iceberg must refuse the compaction.
    with pytest.raises(CompactionConflictError, match="found new position delete for replaced data file"):
        job.commit()
    t.check()


def test_maintain_with_fold_deletes_position(spark: Any, table_name: str) -> None:
    t = Table(spark, table_name)
    _upserts(t)
    policy = MaintenancePolicy(thresholds=HealthThresholds(max_delete_files=1), fold_deletes="position")
    report = maintain(spark, table_name, policy)
    assert report.conversion is not None and report.conversion.equality_files_removed == 3
    assert any(line.startswith("converted 3 equality-delete file(s)") for line in report.lines())
    t.check()
    assert "equality" not in _delete_files(t)
