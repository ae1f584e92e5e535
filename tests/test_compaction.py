"""Compaction beside the stream: the planner's rules, seed 001's four scenarios, and a random race.

The scenarios stage each commit deterministically with the separable steps (plan at a
snapshot, rewrite, let other commits land, commit) and run with use_starting_sequence_number
true and false. After every commit that succeeded the table must equal the reference model.
"""

from __future__ import annotations

import os
import random
import threading
import time
from datetime import datetime, timedelta
from typing import Any

import pytest

import icetide
from icetide.errors import CommitFailedError, CommitStateUnknownError, ConfigError
from icetide.maintenance.compaction import CompactionConflictError, CompactionJob, compact, compaction
from icetide.maintenance.deletes import LiveDataFile, removable_deletes
from icetide.maintenance.planning import (
    CompactionOptions,
    DataFileRef,
    DeleteRef,
    combine_groups,
    output_file_count,
    plan_groups,
    split_size,
)
from icetide.table.iceberg import load_table
from tests.model import ReferenceModel, table_rows

SCHEMA = "id BIGINT NOT NULL, ts TIMESTAMP NOT NULL, v STRING, seq BIGINT"
APPEND_DDL = "id long not null, ts timestamp not null, v string, seq long"
UPSERT_DDL = "id long, ts timestamp, v string, seq long, _op string"
COLUMNS = ["id", "ts", "v", "seq"]
KEY = ["id", "ts"]
T0 = datetime(2026, 1, 1, 10)  # naive: the session time zone is UTC
MB = 1024 * 1024


# ---------------------------------------------------------------- planning rules, no Spark


def _file(path: str, size: int, *, part: str = "p=1", seq: int = 1, deletes: int = 0) -> DataFileRef:
    refs = tuple(DeleteRef(f"{path}.del{i}", "equality", seq + 1, (0, part), 1, 100) for i in range(deletes))
    return DataFileRef(path, size, 10, seq, (0, part), refs)


def _options(**kw: Any) -> CompactionOptions:
    return CompactionOptions.from_kwargs(kw, default_target=100 * MB)


def test_plan_groups_per_partition_and_keeps_only_groups_worth_rewriting() -> None:
    options = _options(min_input_files=3, group_order="worst")
    files = [
        *(_file(f"a{i}", MB, part="p=1") for i in range(3)),  # 3 small files: rewritten
        *(_file(f"b{i}", MB, part="p=2") for i in range(2)),  # 2 small files: left alone
        _file("c0", 100 * MB, part="p=3"),  # right-sized: not even a candidate
        _file("d0", 500 * MB, part="p=4"),  # too big: split on its own
    ]
    plan = plan_groups(files, options)
    assert [(g.partition[1], len(g.files)) for g in plan.groups] == [("p=1", 3), ("p=4", 1)]
    assert plan.groups[1].output_files == 5
    assert [(s.partition, s.kind) for s in plan.skipped] == [("p=2", "small")]
    assert "min_input_files=3" in plan.skipped[0].reason


def _vector_file(path: str, rows: int, marked: int, *, part: str = "p=1") -> DataFileRef:
    """A right-sized data file whose deletion vector marks `marked` of its `rows` (none: no DV)."""
    dv = DeleteRef(f"{path}.puffin#4", "position", 2, (0, part), marked, 100, referenced_data_file=path)
    return DataFileRef(path, 100 * MB, rows, 1, (0, part), (dv,) if marked else ())


def test_vector_policy_rewrites_files_by_deleted_share_and_by_rows_held() -> None:
    files = [
        _vector_file("a", 1000, 150),  # 15% deleted
        _vector_file("b", 1000, 50),  # 5%
        _vector_file("c", 1000, 0),  # no DV
        _vector_file("d", 3000, 30, part="p=2"),  # 1%, but 3000 rows held in files with a DV
    ]
    by_share = plan_groups(files, _options(vector_deleted_share=0.1))
    assert [[f.path for f in g.files] for g in by_share.groups] == [["a"]]
    by_rows = plan_groups(files, _options(vector_file_rows=2000, group_order="worst"))
    assert sorted(f.path for g in by_rows.groups for f in g.files) == ["a", "b", "d"]  # never "c": no DV
    assert plan_groups(files, _options()).groups == ()  # both rules off: right-sized files stay
    for bad in ({"vector_deleted_share": 0}, {"vector_deleted_share": 1.5}, {"vector_deleted_share": True}):
        with pytest.raises(ConfigError, match="vector_deleted_share"):
            _options(**bad)
    with pytest.raises(ConfigError, match="vector_file_rows"):
        _options(vector_file_rows=0)


def test_health_asks_for_compaction_of_deletion_vectors_by_share_and_rows() -> None:
    from icetide.maintenance.health import HealthThresholds, PartitionHealth, TableHealth, suggestions

    def part(label: str, held: int, deleted: int) -> PartitionHealth:
        return PartitionHealth(
            label, {}, 0, held, 1, MB, 0, 0, 0, 0, 0, None,
            deletion_vectors=1, deletion_vector_rows=deleted, vector_file_rows=held,
        )  # fmt: skip

    health = TableHealth(
        "t", 100 * MB, 1, None, None, [part("p3", 10, 5), part("p2", 2_000_000, 10), part("p1", 1000, 20)], []
    )
    due = suggestions(health, HealthThresholds())
    assert [s.split(":")[0] for s in due] == ["compact deletion vectors in p3", "compact deletion vectors in p2"]
    off = HealthThresholds(max_vector_deleted_share=None, max_vector_file_rows=None)
    assert suggestions(health, off) == []


def test_delete_threshold_rewrites_a_lone_file_and_orders_groups_by_deletes() -> None:
    options = _options(min_input_files=5, delete_file_threshold=2, group_order="worst")
    files = [
        _file("x", 100 * MB, part="p=1", deletes=2),  # right-sized but 2 deletes apply
        _file("y", MB, part="p=2", deletes=1),  # small, alone, too few deletes
        *(_file(f"z{i}", MB, part="p=3") for i in range(5)),
    ]
    plan = plan_groups(files, options)
    assert [g.partition[1] for g in plan.groups] == ["p=1", "p=3"]  # most deletes first
    assert [s.partition for s in plan.skipped] == ["p=2"]


def test_equality_threshold_rewrites_a_file_an_equality_delete_applies_to_and_no_other() -> None:
    positions = (DeleteRef("dv", "position", 3, (0, "p=2"), 1, 100, referenced_data_file="y"),)
    files = [
        _file("x", 100 * MB, part="p=1", deletes=1),  # right-sized, one equality delete: rewritten alone
        DataFileRef("y", 100 * MB, 10, 1, (0, "p=2"), positions),  # a DV only: readable, left alone
    ]
    plan = plan_groups(files, _options(min_input_files=5, equality_delete_file_threshold=1))
    assert [[f.path for f in g.files] for g in plan.groups] == [["x"]]
    with pytest.raises(ConfigError, match="equality_delete_file_threshold"):
        _options(equality_delete_file_threshold=0)


def test_groups_run_newest_partition_first_or_worst_first() -> None:
    files = [
        *(_file(f"old{i}", MB, part="h=2026-01-01-09", seq=1) for i in range(5)),  # most files, oldest
        *(_file(f"new{i}", MB, part="h=2026-01-01-08", seq=4) for i in range(2)),  # late data: written last
        *(_file(f"del{i}", MB, part="h=2026-01-01-10", seq=2, deletes=1) for i in range(2)),  # deletes at seq 3
        *(_file(f"tie{i}", MB, part="h=2026-01-01-11", seq=3) for i in range(2)),  # same recency as h=10
    ]
    newest = plan_groups(files, _options(min_input_files=2))
    assert [g.partition[1] for g in newest.groups] == [
        "h=2026-01-01-08",  # highest sequence number
        "h=2026-01-01-11",  # a tie at 3 goes to the newer hour
        "h=2026-01-01-10",
        "h=2026-01-01-09",
    ]
    worst = plan_groups(files, _options(min_input_files=2, group_order="worst"))
    assert [g.partition[1] for g in worst.groups][:2] == ["h=2026-01-01-10", "h=2026-01-01-09"]
    bounded = plan_groups(files, _options(min_input_files=2, max_groups=1))  # the bound keeps the newest
    assert [g.partition[1] for g in bounded.groups] == ["h=2026-01-01-08"]
    with pytest.raises(ConfigError, match="group_order"):
        _options(group_order="oldest")


def test_bounds_on_work_defer_groups() -> None:
    files = [_file(f"{p}{i}", MB, part=f"p={p}") for p in "abc" for i in range(2)]
    plan = plan_groups(files, _options(min_input_files=2, max_groups=2))
    assert len(plan.groups) == 2 and [s.kind for s in plan.skipped] == ["deferred"]
    plan = plan_groups(files, _options(min_input_files=2, max_bytes=3 * MB))
    assert len(plan.groups) == 1 and len(plan.skipped) == 2
    # A group never exceeds the per-run byte bound: the partition is cut into bins that fit.
    big = [_file(f"q{i}", 40 * MB) for i in range(4)]
    plan = plan_groups(big, _options(min_input_files=2, max_group_bytes="80MB"))
    assert sorted(len(g.files) for g in plan.groups) == [2, 2]


def test_output_file_count_and_split_size_follow_iceberg() -> None:
    options = _options(target_file_size="100MB")
    assert output_file_count(10 * MB, options) == 1
    assert output_file_count(250 * MB, options) == 3  # a 50MB remainder is not spread (over 10%)
    assert output_file_count(205 * MB, options) == 2  # a 5MB remainder is spread over two files
    assert split_size(10 * MB, options) == 100 * MB
    assert split_size(205 * MB, options) > 100 * MB


def test_options_are_validated_once_naming_the_key() -> None:
    with pytest.raises(ConfigError, match="min_input_files"):
        _options(min_input_files=0)
    with pytest.raises(ConfigError, match="target_file_size"):
        _options(target_file_size="big")
    with pytest.raises(ConfigError, match="use_starting_sequence_number"):
        _options(use_starting_sequence_number="yes")
    with pytest.raises(ConfigError, match="min_inputs_files: not a compaction option"):
        _options(min_inputs_files=2)
    assert _options(target_file_size="128MB").target_file_size == 128 * MB


def test_removable_deletes_follow_iceberg_scoping() -> None:
    eq = DeleteRef("eq", "equality", 5, (0, "p=1"), 1, 1)
    pos = DeleteRef("pos", "position", 5, (0, "p=1"), 1, 1)
    glob = DeleteRef("glob", "equality", 5, None, 1, 1)
    live = [
        LiveDataFile("old", 3, (0, "p=1")),  # being replaced
        LiveDataFile("same-seq", 5, (0, "p=1")),  # equality deletes skip it, position deletes do not
        LiveDataFile("other-partition", 1, (0, "p=2")),
    ]
    kept = removable_deletes([eq, pos, glob], live, {"old"})
    assert [d.path for d in kept] == ["eq"]
    assert removable_deletes([eq], live, set()) == []  # "old" still needs it


# ---------------------------------------------------------------- scenario helpers (Spark)


class Table:
    """A test table with its reference model, an upsert stream and plain appends."""

    def __init__(
        self,
        spark: Any,
        name: str,
        partition_by: list[str] | None = None,
        distribution: str = "dynamic",
        deletes: str | None = "equality",
    ) -> None:
        self.spark = spark
        self.name = name
        # These tests are about folding and compacting equality deletes: the stream writes them
        # (deletes="equality"; None: the table's own mode), on a v2 table unless the test made
        # the table first (v3_table).
        icetide.create_table(
            spark,
            name,
            schema=SCHEMA,
            key=KEY,
            partition_by=["hours(ts)"] if partition_by is None else partition_by,
            format_version=2,
        )
        self.model = ReferenceModel(KEY, COLUMNS, "seq")
        self.sink = icetide.UpsertSink(
            spark, name, pipeline_id="stream", order_by="seq", distribution=distribution, deletes=deletes
        )
        self.model_batch = 0
        self.stream_batch = 0

    def append(self, rows: list[dict[str, Any]]) -> None:
        """A plain Iceberg append (no equality deletes), like Flink's append-only writes."""
        df = self.spark.createDataFrame([tuple(r[c] for c in COLUMNS) for r in rows], APPEND_DDL)
        df.writeTo(self.name).append()
        self.model_batch += 1
        self.model.apply(self.model_batch, rows)

    def upsert(self, rows: list[dict[str, Any]]) -> None:
        """A batch of the stream: equality deletes plus rows, committed by the sink."""
        self.stream_batch += 1
        df = self.spark.createDataFrame([tuple(r.get(c) for c in [*COLUMNS, "_op"]) for r in rows], UPSERT_DDL)
        result = self.sink.write(df, batch_id=self.stream_batch)
        assert result.committed, result
        self.model_batch += 1
        self.model.apply(self.model_batch, rows)

    def check(self) -> None:
        # Spark reads the catalog's cached Table, which only sees commits made through it; the
        # sink commits through its own instance once the cache entry expired (30 s idle).
        load_table(self.spark, self.name).refresh()
        assert table_rows(self.spark, self.name, COLUMNS, KEY) == self.model.rows

    def snapshot(self) -> tuple[int, int]:
        jtable = load_table(self.spark, self.name)
        jtable.refresh()
        s = jtable.currentSnapshot()
        return int(s.snapshotId()), int(s.sequenceNumber())

    def added_sequence_numbers(self, snapshot_id: int) -> set[int]:
        rows = self.spark.sql(
            f"SELECT sequence_number FROM {self.name}.entries WHERE status = 1 AND snapshot_id = {snapshot_id}"
        ).collect()
        return {int(r[0]) for r in rows}

    def data_files(self) -> int:
        return int(self.spark.sql(f"SELECT count(*) FROM {self.name}.data_files").first()[0])

    def delete_files(self) -> int:
        return int(self.spark.sql(f"SELECT count(*) FROM {self.name}.delete_files").first()[0])


def rows_of(ids: list[int], value: str, *, minutes: list[int] | None = None, seq: int = 0) -> list[dict[str, Any]]:
    """Rows in one hour partition; by default key (id, T0 + 5*id minutes)."""
    mins = minutes if minutes is not None else [5 * i for i in ids]
    return [
        {"id": i, "ts": T0 + timedelta(minutes=m), "v": value, "seq": seq, "_op": None}
        for i, m in zip(ids, mins, strict=True)
    ]


A_ROWS = rows_of([0, 2, 4, 6, 8], "a")  # key bounds id 0..8, ts 10:00..10:40
B_ROWS = rows_of([1, 3, 5, 7, 9], "b")  # key bounds id 1..9, ts 10:05..10:45
# New keys whose bounds fall inside a's and b's: Iceberg cannot tell their deletes apart.
C_ROWS = rows_of([4, 5], "c", minutes=[22, 23])


def plan(t: Table, use_start: bool) -> CompactionJob:
    return compaction(t.spark, t.name, use_starting_sequence_number=use_start, min_input_files=2)


def test_small_groups_are_combined_into_units_of_work_in_plan_order() -> None:
    files = [
        *(_file(f"{p}{i}", 10 * MB, part=f"p={p}") for p in "abcde" for i in range(2)),
        *(_file(f"big{i}", 300 * MB, part="p=f") for i in range(2)),  # writes several files: alone
        *(_file(f"old{i}", MB, part="p=g") for i in range(2)),
    ]
    files = [f if f.partition[1] != "p=g" else DataFileRef(f.path, f.size, 10, 1, (1, "p=g")) for f in files]
    plan = plan_groups(files, _options(min_input_files=2, group_order="worst"))
    labels = [g.partition[1] for g in plan.groups]
    units = [
        [labels[i] for i in unit] for unit in combine_groups(plan.groups, _options(combine_groups_bytes="64MB"), 0)
    ]
    # 20 MB a group: three fit in 64 MB; a group of an older spec (p=g) and one that writes
    # several files (p=f) run alone.
    assert sorted(map(sorted, units)) == sorted(
        [["p=a", "p=b", "p=c"], ["p=d", "p=e"], ["p=f"], ["p=g"]], key=lambda u: u[0]
    )
    assert [i for unit in combine_groups(plan.groups, _options(), 0) for i in unit] == list(range(len(labels)))
    alone = combine_groups(plan.groups, _options(combine_groups_bytes=0), 0)
    assert alone == [[i] for i in range(len(labels))]


USE_START = pytest.mark.parametrize("use_start", [True, False], ids=["starting-seq", "new-seq"])


# ---------------------------------------------------------------- seed 001's four scenarios


@USE_START
@pytest.mark.guarantee
def test_scenario_1_append_lands_between_plan_and_commit(spark: Any, table_name: str, use_start: bool) -> None:
    t = Table(spark, table_name)
    t.append(A_ROWS)
    t.append(B_ROWS)
    b_snapshot, b_seq = t.snapshot()
    job = plan(t, use_start)
    assert job.planned_snapshot_id == b_snapshot and len(job.plan.groups) == 1
    staged = job.rewrite()
    assert len(staged) == 1 and staged[0].output_records == 10
    t.check()  # rewritten files are invisible before the commit
    t.append(rows_of([20, 21], "c", minutes=[50, 52]))  # snapshot c
    result = job.commit()
    assert result.groups == 1 and result.files_rewritten == 2 and result.files_added == 1
    t.check()
    added = t.added_sequence_numbers(result.snapshot_ids[0])
    if use_start:
        assert added == {b_seq} and result.data_sequence_number == b_seq
    else:
        assert added == {b_seq + 2} and result.data_sequence_number is None  # after c's


@USE_START
@pytest.mark.guarantee
def test_scenario_2_two_identical_compactions_never_double_the_data(
    spark: Any, table_name: str, use_start: bool
) -> None:
    t = Table(spark, table_name)
    t.append(A_ROWS)
    t.append(B_ROWS)
    t.append(rows_of([20, 21], "c", minutes=[50, 52]))
    first, second = plan(t, use_start), plan(t, use_start)
    first.rewrite()
    second_staged = second.rewrite()
    assert first.commit().files_rewritten == 3
    t.check()
    result = second.commit()  # its files are gone: commits nothing and says so
    assert result.groups == 0 and result.snapshot_ids == ()
    assert [s.kind for s in result.skipped] == ["already_rewritten"]
    assert "already replaced by snapshot" in result.skipped[0].reason
    assert not any(os.path.exists(p) for p in second_staged[0].output_paths)  # its new files deleted
    t.check()
    assert t.data_files() == 1


@USE_START
@pytest.mark.guarantee
def test_scenario_3_upsert_of_planned_rows_commits_first(spark: Any, table_name: str, use_start: bool) -> None:
    t = Table(spark, table_name)
    t.append(A_ROWS)
    t.append(B_ROWS)
    job = plan(t, use_start)
    staged = job.rewrite()
    t.upsert(rows_of([2, 3], "updated", seq=1))  # c: deletes rows inside a's and b's files
    t.check()
    if use_start:
        result = job.commit()
        assert result.groups == 1
        t.check()  # c's equality deletes still apply to the rewritten rows
    else:
        with pytest.raises(CompactionConflictError, match="found new delete for replaced data file") as err:
            job.commit()
        assert err.value.result.groups == 0
        assert [s.kind for s in err.value.result.skipped] == ["conflict"]
        assert not any(os.path.exists(p) for p in staged[0].output_paths)
        t.check()


@USE_START
@pytest.mark.guarantee
def test_scenario_4_append_then_upsert_of_the_appended_rows(spark: Any, table_name: str, use_start: bool) -> None:
    t = Table(spark, table_name)
    t.append(A_ROWS)
    t.append(B_ROWS)
    job = plan(t, use_start)
    job.rewrite()
    t.append(C_ROWS)  # c
    t.upsert([{**r, "v": "changed", "seq": 1} for r in C_ROWS])  # d: changes only c's rows
    if use_start:
        assert job.commit().groups == 1
    else:
        # No row of the plan was touched, but d's delete bounds overlap the planned files.
        with pytest.raises(CompactionConflictError, match="found new delete for replaced data file"):
            job.commit()
    t.check()


def test_scenario_4_new_seq_commits_when_delete_bounds_do_not_overlap(spark: Any, table_name: str) -> None:
    """Iceberg 1.10 prunes deletes by key bounds, which the seed's Iceberg did not."""
    t = Table(spark, table_name)
    t.append(A_ROWS)
    t.append(B_ROWS)
    job = plan(t, use_start=False)
    job.rewrite()
    c_rows = rows_of([50, 51], "c", minutes=[55, 56])  # outside a's and b's id and ts ranges
    t.append(c_rows)
    t.upsert([{**r, "v": "changed", "seq": 1} for r in c_rows])
    assert job.commit().groups == 1
    t.check()


def test_run_replans_a_conflicting_group(spark: Any, table_name: str) -> None:
    """run() retries a conflicting group from a fresh plan instead of failing."""
    t = Table(spark, table_name)
    t.append(A_ROWS)
    t.append(B_ROWS)
    job = plan(t, use_start=False)
    job.rewrite()
    t.upsert(rows_of([2, 3], "updated", seq=1))  # scenario 3: conflicts without starting seq
    result = job.run()
    assert result.retries == 1 and not result.conflicts
    assert result.groups == 1 and result.files_rewritten == 3  # a, b and the upsert's data file
    assert result.planned_snapshot_id == job.planned_snapshot_id
    t.check()


# ---------------------------------------------------------------- options against a real table


def test_deletes_are_folded_and_dangling_delete_files_dropped(spark: Any, table_name: str) -> None:
    t = Table(spark, table_name)
    t.append(A_ROWS)
    t.append(B_ROWS)
    t.upsert([{**r, "_op": "DELETE"} for r in rows_of([2, 3], "x")])  # only delete files
    assert t.delete_files() == 1
    result = compact(spark, table_name, min_input_files=2)
    assert result.groups == 1 and result.rows_removed == 2
    assert result.delete_files_removed == 1 and result.delete_records_removed == 2
    assert t.delete_files() == 0
    t.check()
    t.upsert(rows_of([4], "again", seq=2))
    t.check()


def test_delete_threshold_rewrites_a_lone_file(spark: Any, table_name: str) -> None:
    t = Table(spark, table_name)
    t.append(A_ROWS)
    t.upsert([{**r, "_op": "DELETE"} for r in rows_of([4], "x")])
    assert compact(spark, table_name, min_input_files=5).groups == 0
    result = compact(spark, table_name, min_input_files=5, delete_file_threshold=1)
    assert result.groups == 1 and result.files_rewritten == 1 and result.delete_files_removed == 1
    t.check()


def test_partition_filter_partial_progress_and_bounds(spark: Any, table_name: str) -> None:
    t = Table(spark, table_name)
    for hour in range(3):
        for part in range(2):
            ids = [100 * hour + 10 * part + i for i in range(3)]
            t.append([{**r, "ts": T0 + timedelta(hours=hour, minutes=r["id"] % 60)} for r in rows_of(ids, "p")])
    result = compact(spark, table_name, min_input_files=2, partition_filter="ts < timestamp'2026-01-01 11:00:00'")
    assert [g.partition for g in result.committed] == ["2026-01-01 10:00"]
    t.check()
    job = compaction(spark, table_name, min_input_files=2, partial_progress=True, max_groups=1)
    result = job.run()
    assert result.groups == 1 and [s.kind for s in result.skipped if s.kind != "small"] == ["deferred"]
    result = compact(spark, table_name, min_input_files=2, partial_progress=True)
    assert result.groups == 1 and len(set(result.snapshot_ids)) == 1
    assert t.data_files() == 3
    t.check()
    # Small groups share one Spark job and, with partial progress, one commit; each group
    # gets its own partition's new file back.
    for hour in range(3):
        t.append(rows_of([900 + hour], "late", minutes=[60 * hour + 30]))
    result = compact(spark, table_name, min_input_files=2, partial_progress=True)
    assert result.groups == 3 and len(set(result.snapshot_ids)) == 1
    assert [g.files_added for g in result.committed] == [1, 1, 1]
    assert t.data_files() == 3
    t.check()
    for hour in range(3):
        t.append(rows_of([950 + hour], "later", minutes=[60 * hour + 31]))
    alone = compact(spark, table_name, min_input_files=2, partial_progress=True, combine_groups_bytes=0)
    assert alone.groups == 3 and len(set(alone.snapshot_ids)) == 3
    t.check()
    with pytest.raises(ConfigError, match="partition_filter"):
        compaction(spark, table_name, partition_filter="no_such_column > 1")


def test_a_failed_combined_rewrite_falls_back_to_one_group_at_a_time(
    spark: Any, table_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Spark job that rewrites several groups at once and fails (injected: the job raises) costs
    no group: each is rewritten alone, and the table still equals the model."""
    import icetide.maintenance.rewrite_files as rewrites

    t = Table(spark, table_name)
    for hour in range(3):
        for n in range(2):
            t.append(rows_of([10 * hour + n], "p", minutes=[60 * hour + n]))

    combined_jobs: list[int] = []

    def failing(spark: Any, table: Any, tasks: list[Any], **kwargs: Any) -> list[Any]:
        combined_jobs.append(len(tasks))
        raise RuntimeError("injected: the combined job failed")

    monkeypatch.setattr(rewrites, "rewrite_files", failing)  # the combined path only
    result = compact(spark, table_name, min_input_files=2, partial_progress=True, driver_rewrite_bytes=0)
    assert combined_jobs == [6]  # tried once, with every group's files
    assert result.groups == 3 and len(set(result.snapshot_ids)) == 1  # the unit still commits as one
    assert [g.files_added for g in result.committed] == [1, 1, 1]
    assert t.data_files() == 3
    t.check()


class _FailingCommits:
    """Wraps the Java table so the compaction's commit throws `java_class` from the JVM."""

    def __init__(self, spark: Any, jtable: Any, java_class: str) -> None:
        self._spark, self._jtable, self._java_class = spark, jtable, java_class

    def __getattr__(self, name: str) -> Any:
        return getattr(self._jtable, name)

    def newRewrite(self) -> Any:
        outer = self

        class Rewrite:
            def __init__(self, real: Any) -> None:
                self._real = real

            def __getattr__(self, name: str) -> Any:
                def call(*args: Any) -> Any:
                    getattr(self._real, name)(*args)
                    return self

                return call

            def commit(self) -> None:
                jvm = outer._spark._jvm
                cause = jvm.java.lang.RuntimeException("socket closed")
                exc = (
                    jvm.org.apache.iceberg.exceptions.CommitStateUnknownException(cause)
                    if outer._java_class == "unknown"
                    else jvm.java.lang.IllegalStateException("catalog refused")
                )
                jvm.org.apache.iceberg.util.ExceptionUtil.castAndThrow(exc, exc.getClass())

        return Rewrite(self._jtable.newRewrite())


def test_unknown_commit_state_keeps_new_files_failure_and_abort_delete_them(spark: Any, table_name: str) -> None:
    t = Table(spark, table_name)
    t.append(A_ROWS)
    t.append(B_ROWS)
    for kind, error, kept in (("unknown", CommitStateUnknownError, True), ("refused", CommitFailedError, False)):
        job = plan(t, use_start=True)
        staged = job.rewrite()
        job.table = _FailingCommits(spark, job.table, kind)
        with pytest.raises(error):
            job.commit()
        assert all(os.path.exists(p) == kept for p in staged[0].output_paths)
        t.check()
        if kept:
            for p in staged[0].output_paths:
                os.remove(p)
    job = plan(t, use_start=True)  # abort(): a rewritten job that will never commit cleans up
    staged = job.rewrite()
    assert job.abort() == len(staged[0].output_paths) > 0
    assert not any(os.path.exists(p) for p in staged[0].output_paths)
    result = job.commit()
    assert result.groups == 0 and [s.kind for s in result.skipped] == ["aborted"]
    t.check()


# ---------------------------------------------------------------- random race with the stream


def _random_batch(rng: random.Random, size: int) -> list[dict[str, Any]]:
    return [
        {
            "id": rng.randrange(40),
            "ts": T0 + timedelta(hours=rng.choice([0, 1]), minutes=rng.choice([0, 30])),
            "v": rng.choice(["a", "b", None, f"v{rng.randrange(100)}"]),
            "seq": rng.randrange(4),
            "_op": rng.choice(["UPSERT", "UPSERT", "INSERT", "DELETE", None]),
        }
        for _ in range(size)
    ]


# Not on Spark 3.5: maintenance beside the stream is proven there in another process
# (test_v3_maintain_beside_stream.py).
def test_stream_upserts_while_compaction_loops(spark: Any, table_name: str) -> None:
    t = Table(spark, table_name, distribution="key")  # the cheapest layout: more batches per second
    rng = random.Random(1)
    done = threading.Event()
    results: list[Any] = []
    errors: list[BaseException] = []

    def compaction_loop() -> None:
        loop_rng = random.Random(2)
        try:
            while not done.is_set():
                options = {"min_input_files": loop_rng.choice([2, 3]), "partial_progress": loop_rng.random() < 0.5}
                if loop_rng.random() < 0.5:
                    results.append(compact(spark, table_name, **options))
                else:  # separable steps, with a pause that lets stream commits land before ours
                    job = compaction(spark, table_name, **options)
                    job.rewrite()
                    time.sleep(loop_rng.random())
                    results.append(job.commit())  # starting sequence numbers: must not conflict
                time.sleep(0.5 + loop_rng.random())
        except BaseException as exc:
            errors.append(exc)

    def raced() -> list[Any]:
        """The compactions that committed with a stream commit between their plan and commit."""
        done_so_far = list(results)  # before the history: a compaction that commits meanwhile waits a turn
        # The catalog's cached table may be an instance loaded after the compaction's own: refresh it.
        load_table(spark, table_name).refresh()
        parents = {
            int(r["snapshot_id"]): r["parent_id"]
            for r in spark.sql(f"SELECT snapshot_id, parent_id FROM {table_name}.snapshots").collect()
        }
        return [r for r in done_so_far if r.groups and parents[r.snapshot_ids[0]] != r.planned_snapshot_id]

    worker = threading.Thread(target=compaction_loop)
    worker.start()
    try:
        batches = 0
        # 12 batches at least, then until a compaction that folded deletes raced a stream commit
        # (a condition, not a duration: 100 batches at most)
        while batches < 100 and (batches < 12 or not (raced() and sum(r.rows_removed for r in list(results)))):
            t.upsert(_random_batch(rng, rng.randrange(1, 25)))  # asserts the commit landed
            batches += 1
            if batches % 6 == 0:
                t.check()
    finally:
        done.set()
        worker.join()
    assert not errors, errors
    t.check()
    final = compact(spark, table_name, min_input_files=2)
    assert not final.conflicts
    t.check()
    committed = [r for r in results if r.groups]
    assert committed, "no compaction committed while the stream ran"
    assert not [c for r in results for c in r.conflicts], "starting sequence numbers: no conflict expected"
    assert sum(r.rows_removed for r in results) > 0  # deletes were folded into the rewritten files
    assert raced(), "no stream commit landed between a compaction's plan and its commit"
    assert sum(r.delete_files_removed for r in results) > 0
