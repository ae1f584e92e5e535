"""Format v3: deletion vectors from delete folding, merged and replaced, safe beside the stream.

The codec is checked against itself and against Iceberg's own Java writer (Spark's DELETE on a v3
table writes DVs, run-length encoded); every Spark test checks the table against the reference
model after each commit, with the concurrent commits staged deterministically (plan, write,
let another commit land, commit), as tests/test_position_deletes.py does on v2.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from datetime import timedelta
from typing import Any

import numpy as np
import pytest

import icetide
import tests.test_compaction as seed
from icetide.maintenance.compaction import CompactionConflictError, compact, compaction
from icetide.maintenance.health import HealthThresholds, table_health
from icetide.maintenance.maintain import MaintenancePolicy, maintain
from icetide.maintenance.position_deletes import convert_equality_deletes, equality_delete_conversion
from icetide.maintenance.upgrade import upgrade_format_version
from icetide.spark.py4j_collections import java_iter
from icetide.table.deletion_vectors import (
    DeletionVectorError,
    deserialize_positions,
    puffin_file,
    serialize_positions,
)
from icetide.table.iceberg import format_version, load_table
from tests.test_compaction import A_ROWS, B_ROWS, KEY, SCHEMA, Table, rows_of

# ---------------------------------------------------------------- the codec, no Spark


@pytest.mark.parametrize(
    "positions",
    [
        [],
        [0],
        [5, 3, 3, 70_000, 65_535, 65_536],  # unsorted, a duplicate, two containers
        list(range(0, 200_000, 3)),  # bitmap containers (more than 4096 values in one)
        [1, 2**32 - 1, 2**32, 2**33 + 7],  # several 32-bit bitmaps
    ],
    ids=["empty", "one", "arrays", "bitmaps", "high-keys"],
)
def test_positions_round_trip(positions: list[int]) -> None:
    blob = serialize_positions(positions)
    assert deserialize_positions(blob).tolist() == sorted(set(positions))


def test_random_positions_round_trip_and_corruption_is_refused() -> None:
    rng = np.random.default_rng(7)
    for size in (10, 5000, 70_000):
        positions = rng.integers(0, 300_000, size)
        assert deserialize_positions(serialize_positions(positions)).tolist() == sorted(set(positions.tolist()))
    blob = bytearray(serialize_positions([1, 2, 3]))
    blob[-5] ^= 0xFF  # a bitmap byte
    with pytest.raises(DeletionVectorError, match="CRC"):
        deserialize_positions(bytes(blob))
    with pytest.raises(DeletionVectorError):
        serialize_positions([-1])


def test_puffin_file_lays_out_blobs_and_footer() -> None:
    content, written = puffin_file([("a.parquet", np.array([1, 5])), ("b.parquet", np.array([2]))])
    assert content[:4] == b"PFA1" and content[-4:] == b"PFA1"
    for w, expected in zip(written, ([1, 5], [2]), strict=True):
        assert deserialize_positions(content[w.offset : w.offset + w.size]).tolist() == expected
        assert w.cardinality == len(expected)
    with pytest.raises(DeletionVectorError, match="two deletion vectors"):
        puffin_file([("a.parquet", np.array([1])), ("a.parquet", np.array([2]))])


# ---------------------------------------------------------------- against a real v3 table


def v3_table(spark: Any, name: str, **kw: Any) -> Table:
    """The compaction tests' table (and its model), created at format v3."""
    icetide.create_table(spark, name, schema=SCHEMA, key=KEY, partition_by=["hours(ts)"], format_version=3)
    t = Table(spark, name, **kw)
    assert format_version(load_table(spark, name)) == 3
    return t


def deletes_by_kind(t: Table) -> dict[str, int]:
    rows = t.spark.sql(f"SELECT content, file_format, count(*) FROM {t.name}.delete_files GROUP BY 1, 2").collect()
    names = {(1, "PUFFIN"): "dv", (1, "PARQUET"): "position", (2, "PARQUET"): "equality"}
    return {names[(int(r[0]), r[1])]: int(r[2]) for r in rows}


def one_dv_per_data_file(t: Table) -> dict[str, int]:
    """referenced data file -> rows its DV marks; fails if a live data file has two DVs."""
    rows = t.spark.sql(
        f"SELECT referenced_data_file, record_count FROM {t.name}.delete_files WHERE file_format = 'PUFFIN'"
    ).collect()
    referenced = [r[0] for r in rows]
    assert len(referenced) == len(set(referenced)), "two DVs for one data file"
    return {r[0]: int(r[1]) for r in rows}


def row_ids(t: Table) -> dict[int, int]:
    load_table(t.spark, t.name).refresh()
    return {int(r[0]): int(r[1]) for r in t.spark.sql(f"SELECT id, _row_id FROM {t.name}").collect()}


def _upserts(t: Table) -> None:
    t.append(A_ROWS)
    t.append(B_ROWS)
    t.upsert(rows_of([2, 3], "updated", seq=1))
    t.upsert([{**r, "_op": "DELETE"} for r in rows_of([4, 9], "x", seq=2)])
    t.upsert(rows_of([2, 5], "again", seq=3))  # key 2 changes twice: positions in two files


def test_manifest_rewrite_keeps_every_row_id(spark: Any, table_name: str) -> None:
    """Iceberg 1.10's Spark action renumbered every row of a v3 table (apache/iceberg#16699; seen
    in CI with `icetide maintain` beside a stream); 1.12.0's keeps them, data and delete manifests
    both go through it."""
    from icetide.maintenance.actions import rewrite_manifests

    t = v3_table(spark, table_name)
    _upserts(t)
    spark.sql(f"DELETE FROM {table_name} WHERE id = 0")  # a DV: a second delete manifest
    t.model.rows = {k: v for k, v in t.model.rows.items() if k[0] != 0}
    convert_equality_deletes(spark, table_name)
    counts = "SELECT content, count(*) FROM {}.manifests GROUP BY content"
    before = dict(spark.sql(counts.format(table_name)).collect())
    assert before[0] > 1 and before[1] > 1, before
    ids = row_ids(t)
    result = rewrite_manifests(spark, table_name)
    assert result.rewritten == before[0] + before[1] and result.added == 2, result
    assert dict(spark.sql(counts.format(table_name)).collect()) == {0: 1, 1: 1}
    t.check()
    assert row_ids(t) == ids
    assert rewrite_manifests(spark, table_name).rewritten == 0  # nothing left to merge: no commit
    t.upsert(rows_of([3], "after manifests", seq=9))
    t.check()


def test_manifest_rewrite_of_a_v3_table_is_skipped_on_a_runtime_that_renumbers_rows(
    spark: Any, table_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On an Iceberg runtime without the fix of apache/iceberg#16699 (a user's own session), the
    rewrite of a v3 table is skipped, saying why, and no row changes its `_row_id`."""
    from icetide.maintenance import actions
    from icetide.table.iceberg import declares_method

    assert actions._action_keeps_row_ids(spark)  # the pinned runtime has the fix
    assert not declares_method(spark, "org.apache.iceberg.spark.SparkContentFile", "noSuchMethod")
    assert not declares_method(spark, "org.example.NoSuchClass", "firstRowId")
    t = v3_table(spark, table_name)
    t.append(A_ROWS)
    t.append(B_ROWS)
    ids = row_ids(t)
    snapshot = load_table(spark, table_name).currentSnapshot().snapshotId()
    monkeypatch.setattr(actions, "_action_keeps_row_ids", lambda s: False)
    result = actions.rewrite_manifests(spark, table_name)
    assert result.rewritten == 0 and "apache/iceberg#16699" in result.skipped, result
    table = load_table(spark, table_name)
    table.refresh()
    assert table.currentSnapshot().snapshotId() == snapshot
    assert row_ids(t) == ids


def test_spark_reads_our_dvs_and_we_read_sparks(spark: Any, table_name: str) -> None:
    t = v3_table(spark, table_name)
    t.append(A_ROWS)
    t.append(B_ROWS)
    spark.sql(f"DELETE FROM {table_name} WHERE id IN (0, 1)")  # Iceberg's own writer: a DV per file
    for key in [(0,), (1,)]:
        t.model.rows = {k: v for k, v in t.model.rows.items() if k[0] != key[0]}
    t.check()
    assert deletes_by_kind(t) == {"dv": 2}
    t.upsert(rows_of([2, 3, 6], "updated", seq=1))
    result = convert_equality_deletes(spark, table_name)  # merges Spark's DVs with the new positions
    assert result.committed and result.vectors and result.earlier_deletes_replaced == 2
    assert result.positions_added == 5  # 0, 2, 6 in a's file; 1, 3 in b's
    t.check()
    assert deletes_by_kind(t) == {"dv": 2}
    assert sorted(one_dv_per_data_file(t).values()) == [2, 3]


def test_conversion_writes_dvs_merges_them_and_compaction_keeps_lineage(spark: Any, table_name: str) -> None:
    t = v3_table(spark, table_name)
    _upserts(t)
    assert deletes_by_kind(t) == {"equality": 3}
    result = convert_equality_deletes(spark, table_name)
    assert result.committed and result.vectors and result.conflict is None
    assert result.equality_files_removed == 3 and result.positions_added == 6
    t.check()
    assert deletes_by_kind(t) == {"dv": result.position_files_added}
    first = one_dv_per_data_file(t)
    t.upsert(rows_of([0, 1, 3], "later", seq=4))  # rows in files that already have a DV
    result = convert_equality_deletes(spark, table_name)
    assert result.committed and result.earlier_deletes_replaced >= 2
    t.check()
    merged = one_dv_per_data_file(t)
    assert deletes_by_kind(t) == {"dv": len(merged)}
    assert sum(merged.values()) == sum(first.values()) + 3  # each row replaced once more
    ids = row_ids(t)
    assert compact(spark, table_name, min_input_files=2).groups == 1  # compaction folds the DVs away
    t.check()
    assert deletes_by_kind(t) == {} and row_ids(t) == ids  # and keeps every row's _row_id


def test_compacting_one_partition_keeps_the_other_dvs_of_a_shared_puffin_file(spark: Any, table_name: str) -> None:
    t = v3_table(spark, table_name)
    later = [{**r, "ts": r["ts"] + timedelta(hours=1)} for r in A_ROWS]  # hour 11
    t.append(A_ROWS)
    t.append(B_ROWS)
    t.append(later)
    t.append([{**r, "id": r["id"] + 100} for r in later])
    t.upsert([*rows_of([2, 3], "updated", seq=1), {**later[0], "v": "updated", "seq": 1}])
    result = convert_equality_deletes(spark, table_name)
    assert result.position_files_added == 3
    puffins = {p for (p,) in spark.sql(f"SELECT DISTINCT file_path FROM {table_name}.delete_files").collect()}
    assert len(puffins) == 1  # the three DVs, of two partitions, in one Puffin file
    t.check()
    hour_10 = "ts < timestamp'2026-01-01 11:00:00'"
    assert compact(spark, table_name, min_input_files=2, partition_filter=hour_10).groups == 1
    t.check()  # removing hour 10's DVs left hour 11's (same file, other offset) in place
    assert deletes_by_kind(t) == {"dv": 1}


def test_upgraded_table_merges_its_v2_position_deletes(spark: Any, table_name: str) -> None:
    t = Table(spark, table_name)  # format v2
    _upserts(t)
    assert convert_equality_deletes(spark, table_name).position_files_added > 0  # Parquet position deletes
    assert set(deletes_by_kind(t)) == {"position"}
    assert upgrade_format_version(spark, table_name).upgraded
    t.upsert(rows_of([0, 2, 7], "v3", seq=4))  # the stream goes on; equality deletes on v3
    t.check()
    result = convert_equality_deletes(spark, table_name)
    assert result.vectors and result.earlier_deletes_replaced > 0
    t.check()
    kinds = deletes_by_kind(t)
    assert "equality" not in kinds and kinds["dv"] == len(one_dv_per_data_file(t))


def test_stream_commit_between_plan_and_commit_is_kept(spark: Any, table_name: str) -> None:
    t = v3_table(spark, table_name)
    _upserts(t)
    job = equality_delete_conversion(spark, table_name)
    assert job.write() > 0
    t.upsert(rows_of([3, 6], "meanwhile", seq=5))  # new equality deletes on rows the plan touched
    result = job.commit()
    assert result.committed and result.equality_files_removed == 3
    t.check()
    assert deletes_by_kind(t)["equality"] == 1  # only the stream's new delete is left
    assert convert_equality_deletes(spark, table_name).equality_files_removed == 1
    t.check()
    assert "equality" not in deletes_by_kind(t)
    one_dv_per_data_file(t)


def test_a_concurrent_dv_on_a_planned_file_makes_the_conversion_conflict(spark: Any, table_name: str) -> None:
    t = v3_table(spark, table_name)
    _upserts(t)
    job = equality_delete_conversion(spark, table_name)
    job.write()
    written = {s.path for s in job._staged}
    spark.sql(f"DELETE FROM {table_name} WHERE id = 0")  # Iceberg's writer adds a DV to a's file
    t.model.rows = {k: v for k, v in t.model.rows.items() if k[0] != 0}
    result = job.commit()
    assert not result.committed and result.conflict is not None
    assert not any(os.path.exists(p.removeprefix("file:")) for p in written)  # its Puffin file deleted
    t.check()
    assert convert_equality_deletes(spark, table_name).committed  # the next run plans again
    t.check()
    one_dv_per_data_file(t)


def test_compaction_between_plan_and_commit_makes_the_conversion_conflict(spark: Any, table_name: str) -> None:
    t = v3_table(spark, table_name)
    _upserts(t)
    job = equality_delete_conversion(spark, table_name)
    job.write()
    assert compact(spark, table_name, min_input_files=2, remove_deletes=False).groups == 1
    result = job.commit()
    assert not result.committed and "missing data files" in str(result.conflict).lower()
    t.check()


@pytest.mark.parametrize("carry_attempts", [5, 0])
def test_compaction_planned_before_a_conversion_carries_its_dvs_or_conflicts_never_resurrecting_rows(
    spark: Any, table_name: str, carry_attempts: int
) -> None:
    """The conversion commits DVs on the files the compaction read: the compaction carries them
    onto its new files by row lineage (the default), or, with carrying off, conflicts."""
    t = v3_table(spark, table_name)
    t.append(A_ROWS)
    t.append(B_ROWS)
    job = compaction(spark, table_name, min_input_files=2, carry_attempts=carry_attempts)
    job.rewrite()
    t.upsert([{**r, "_op": "DELETE"} for r in rows_of([2, 3], "x", seq=1)])
    assert convert_equality_deletes(spark, table_name).equality_files_removed == 1
    t.check()
    if carry_attempts:
        job.commit()
    else:
        with pytest.raises(CompactionConflictError, match="found new position delete for replaced data file"):
            job.commit()
    t.check()


def test_maintain_folds_into_dvs(spark: Any, table_name: str) -> None:
    t = v3_table(spark, table_name)
    _upserts(t)
    policy = MaintenancePolicy(thresholds=HealthThresholds(max_delete_files=1), fold_deletes="position")
    report = maintain(spark, table_name, policy)
    assert report.conversion is not None and report.conversion.vectors
    assert any("deletion vector(s)" in line for line in report.lines())
    t.check()
    assert "equality" not in deletes_by_kind(t)


def test_a_dv_goes_with_its_data_file(spark: Any, table_name: str) -> None:
    """Iceberg drops a DV in the commit that removes its data file (ManifestFilterManager's dangling
    DV filter; compaction and engines' overwrites remove files so). `maintain` relies on it: on a
    table whose delete files are all DVs, each referencing a live data file, it runs no
    dangling-delete action (that action's Spark jobs were a fixed cost of every pass)."""
    t = v3_table(spark, table_name, deletes="vectors")
    no_compaction = MaintenancePolicy(vector_deleted_share=None, vector_file_rows=None)
    t.upsert(rows_of([0, 1, 2], "a"))
    t.upsert(rows_of([3, 4], "b", seq=1))
    t.upsert(rows_of([1, 4], "c", seq=2))  # a DV on each earlier file
    assert sorted(one_dv_per_data_file(t).values()) == [1, 1]
    jtable = load_table(spark, table_name)
    jtable.refresh()
    [first] = [task.file() for task in java_iter(jtable.newScan().planFiles()) if task.file().recordCount() == 3]
    delete = jtable.newDelete()
    delete.deleteFile(first)
    delete.commit()
    assert deletes_by_kind(t) == {"dv": 1}
    health = table_health(spark, table_name)
    assert health.deletion_vectors == 1 and not health.may_have_dangling_deletes
    assert maintain(spark, table_name, no_compaction).dangling_deletes_removed == 0
    rows = spark.sql(f"SELECT id, v FROM {table_name} ORDER BY id").collect()
    assert [(r.id, r.v) for r in rows] == [(1, "c"), (3, "b"), (4, "c")]


# ---------------------------------------------------------------- seed 001 on v3, and a random race


@pytest.mark.parametrize(
    "scenario",
    [
        seed.test_scenario_1_append_lands_between_plan_and_commit,
        seed.test_scenario_2_two_identical_compactions_never_double_the_data,
        seed.test_scenario_3_upsert_of_planned_rows_commits_first,
        seed.test_scenario_4_append_then_upsert_of_the_appended_rows,
    ],
    ids=["1-append", "2-two-compactions", "3-upsert-planned-rows", "4-append-then-upsert"],
)
@seed.USE_START
def test_seed_001_scenarios_on_v3(spark: Any, table_name: str, scenario: Any, use_start: bool) -> None:
    icetide.create_table(spark, table_name, schema=SCHEMA, key=KEY, partition_by=["hours(ts)"], format_version=3)
    scenario(spark, table_name, use_start)  # each checks the table against the model after every commit
    assert format_version(load_table(spark, table_name)) == 3


def test_stream_with_conversion_and_compaction_between_batches(spark: Any, table_name: str) -> None:
    """Random batches, with DV folding and compaction planned before a batch and committed after it."""
    t = v3_table(spark, table_name, distribution="key")
    rng = random.Random(3)
    conversions = 0
    for n in range(1, 16):
        step = rng.choice(["convert", "compact", "none"]) if n > 2 else "none"
        job: Any = None
        if step == "convert":
            job = equality_delete_conversion(spark, table_name)
            job.write()
        elif step == "compact":
            job = compaction(spark, table_name, min_input_files=2)
            job.rewrite()
        t.upsert(seed._random_batch(rng, rng.randrange(1, 20)))
        if step == "convert":
            conversions += bool(job.commit().committed)
        elif step == "compact":
            with contextlib.suppress(CompactionConflictError):  # a DV on one of its files landed meanwhile
                job.commit()
        t.check()
        one_dv_per_data_file(t)
    assert conversions > 0


def test_stream_upserts_while_maintenance_folds_into_dvs_on_a_thread(spark: Any, table_name: str) -> None:
    """Real concurrency: a thread converts and compacts in a loop while batches commit."""
    t = v3_table(spark, table_name, distribution="key")
    rng = random.Random(5)
    done = threading.Event()
    conversions: list[Any] = []
    errors: list[BaseException] = []

    def maintenance_loop() -> None:
        loop_rng = random.Random(6)
        try:
            while not done.is_set():
                if loop_rng.random() < 0.7:
                    conversions.append(convert_equality_deletes(spark, table_name))
                else:
                    compact(spark, table_name, min_input_files=2, partial_progress=True)
                time.sleep(loop_rng.random())
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=maintenance_loop)
    worker.start()
    try:
        batches = 0
        # 12 batches at least, then until a conversion wrote a DV beside them (a condition, not a
        # duration: 60 batches at most)
        while batches < 60 and (batches < 12 or not any(c.committed and c.positions_added for c in list(conversions))):
            t.upsert(seed._random_batch(rng, rng.randrange(1, 25)))  # asserts the commit landed
            batches += 1
            if batches % 6 == 0:
                t.check()
    finally:
        done.set()
        worker.join()
    assert not errors, errors
    t.check()
    one_dv_per_data_file(t)
    assert any(c.committed and c.positions_added for c in conversions), "no conversion wrote a DV"
    assert convert_equality_deletes(spark, table_name).conflict is None  # quiet now: folds the rest
    t.check()
    assert "equality" not in deletes_by_kind(t)
