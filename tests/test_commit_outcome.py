"""Commit outcome: only the catalog's commit call decides it; an unknown one is resolved by
re-reading the pipeline's committed batch, and files are never deleted while it is unknown.

Failures are injected with ICETIDE_FAIL_AT (icetide.faults) at real points of the committer, so
the catalog and the table are the real ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import icetide
from icetide import faults
from tests.test_sink import T0, make_table, naive, to_df


def _files(warehouse: str, table: str, pipeline: str, batch_id: int) -> list[Path]:
    folder = Path(warehouse).joinpath(*table.split(".")[1:])
    return list(folder.rglob(f"icetide-{pipeline}-b{batch_id:012d}-*.parquet"))


def _rows(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [{"id": i, "ts": naive(T0), "v": f"v{i}", "seq": 1, "_op": None} for i in range(start, start + n)]


@pytest.fixture
def fail_at(monkeypatch: pytest.MonkeyPatch) -> Any:
    def arm(point: str, times: int = 1) -> None:
        monkeypatch.setenv(faults.FAIL_AT, point)
        monkeypatch.setenv(faults.FAIL_TIMES, str(times))
        faults._failed.clear()

    yield arm
    faults._failed.clear()


def test_failure_after_the_commit_call_keeps_the_batch(
    spark: Any, table_name: str, warehouse: str, fail_at: Any
) -> None:
    make_table(spark, table_name)
    sink = icetide.UpsertSink(spark, table_name, pipeline_id="po")
    fail_at("after_commit_call")
    result = sink.write(to_df(spark, _rows(5)), batch_id=1)
    assert result.committed and result.commit_attempts == 1
    assert faults._failed == {"after_commit_call": 1}  # the fault did fire
    assert len(_files(warehouse, table_name, "po", 1)) == 2  # data + equality deletes, kept
    assert sorted(r["id"] for r in spark.table(table_name).collect()) == [0, 1, 2, 3, 4]
    assert sink.last_committed().batch_id == 1  # type: ignore[union-attr]


def test_unknown_outcome_that_landed_is_success(spark: Any, table_name: str, warehouse: str, fail_at: Any) -> None:
    make_table(spark, table_name)
    sink = icetide.UpsertSink(spark, table_name, pipeline_id="po")
    fail_at("commit_call_landed")
    result = sink.write(to_df(spark, _rows(4)), batch_id=1)
    assert result.committed and faults._failed == {"commit_call_landed": 1}
    assert len(_files(warehouse, table_name, "po", 1)) == 2
    assert sorted(r["id"] for r in spark.table(table_name).collect()) == [0, 1, 2, 3]
    # exactly once: one snapshot for the batch, not a retried duplicate
    summaries = [r["summary"] for r in spark.sql(f"SELECT summary FROM {table_name}.snapshots").collect()]
    assert sum(1 for s in summaries if s.get("icetide.batch-id") == "1") == 1


def test_unknown_outcome_that_did_not_land_is_retried(
    spark: Any, table_name: str, warehouse: str, fail_at: Any
) -> None:
    make_table(spark, table_name)
    sink = icetide.UpsertSink(spark, table_name, pipeline_id="po")
    fail_at("before_commit_call", times=2)
    result = sink.write(to_df(spark, _rows(3)), batch_id=1)
    assert result.committed and faults._failed == {"before_commit_call": 2}
    assert result.commit_attempts == 3  # two failed calls, then the one that landed (the metrics line's count)
    assert sorted(r["id"] for r in spark.table(table_name).collect()) == [0, 1, 2]
    assert sink.last_committed().batch_id == 1  # type: ignore[union-attr]


def test_still_unknown_raises_and_deletes_nothing(
    spark: Any, table_name: str, warehouse: str, fail_at: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_table(spark, table_name)
    sink = icetide.UpsertSink(spark, table_name, pipeline_id="po")
    sink.write(to_df(spark, _rows(2)), batch_id=1)
    # the batch lands, the catalog's answer is lost, and reading the table back fails too
    fail_at("commit_call_landed")
    resolve = sink.committer._batch_landed

    def unreadable(batch_id: int, **_: Any) -> bool | None:
        monkeypatch.setenv(faults.FAIL_AT, "resolve_read")
        monkeypatch.setenv(faults.FAIL_TIMES, "100")
        return resolve(batch_id, reads=2)

    monkeypatch.setattr(sink.committer, "_batch_landed", unreadable)
    with pytest.raises(icetide.CommitStateUnknownError, match=r"state unknown.*no file was deleted"):
        sink.write(to_df(spark, _rows(2, start=10)), batch_id=2)
    assert faults._failed == {"commit_call_landed": 1, "resolve_read": 2}
    assert len(_files(warehouse, table_name, "po", 2)) == 2  # nothing deleted
    monkeypatch.delenv(faults.FAIL_AT)
    # it did land: the table says so and reads back the batch
    assert sink.last_committed().batch_id == 2  # type: ignore[union-attr]
    assert sorted(r["id"] for r in spark.table(table_name).collect()) == [0, 1, 10, 11]
