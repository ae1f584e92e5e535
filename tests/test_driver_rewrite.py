"""Compaction's small units rewritten on the driver with Arrow (maintenance/driver_rewrite.py).

The data are the tests' own upsert batches, checked against the reference model. What the driver
writes is compared with what Spark's rewrite (`driver_rewrite_bytes=0`) writes for the same
batches in a twin table: the same rows, and on format v3 the same row lineage (`_row_id`,
`_last_updated_sequence_number`), which Spark reads back. PyIceberg and DuckDB read the result.
Units the driver cannot rewrite exactly as Spark does go to Spark, and their rows are correct too.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Any

import pytest

from icetide.maintenance.compaction import compact
from icetide.table.iceberg import load_table
from tests.test_compaction import COLUMNS, Table
from tests.test_v3_maintain_beside_stream import Stream
from tests.test_v3_readers import readers_agree

KEYS = 60
DRIVER_LOG = "icetide.maintenance.driver_rewrite"


def _batches(seed: int, count: int) -> list[list[dict[str, Any]]]:
    """Upserts over both hour partitions, some deletes: every file gets a delete after the first batch."""
    rng = random.Random(seed)
    out = [[Stream.row(i, 1, "first") for i in range(KEYS)]]
    for seq in range(2, count + 1):
        updated = rng.sample(range(KEYS), KEYS // 3)
        deleted = rng.sample(sorted(set(range(KEYS)) - set(updated)), 3)
        out.append(
            [Stream.row(i, seq, f"b{seq}") for i in updated]
            + [{**Stream.row(i, seq, "gone"), "_op": "DELETE"} for i in deleted]
        )
    return out


def _lineage(spark: Any, table: str) -> list[tuple[Any, ...]]:
    load_table(spark, table).refresh()
    cols = ", ".join(COLUMNS)
    return sorted(
        tuple(r) for r in spark.sql(f"SELECT {cols}, _row_id, _last_updated_sequence_number FROM {table}").collect()
    )


def _driver_messages(caplog: pytest.LogCaptureFixture) -> tuple[int, list[str]]:
    """(units the driver rewrote, reasons it left a unit to Spark) in the captured log."""
    records = [r.getMessage() for r in caplog.records if r.name == DRIVER_LOG]
    return sum(m.startswith("driver rewrite:") for m in records), [m for m in records if "left to Spark" in m]


@pytest.mark.guarantee
def test_the_driver_writes_what_sparks_rewrite_writes_on_a_v3_vectors_table(
    spark: Any, table_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    driver, sparks = Stream(spark, table_name, "vectors"), Stream(spark, table_name + "_spark", "vectors")
    for batch in _batches(48, 5):
        for stream in (driver, sparks):
            stream.check(stream.write(batch))
    before = _lineage(spark, driver.name)
    assert before == _lineage(spark, sparks.name)  # the same commits: the same row ids

    caplog.set_level(logging.DEBUG, logger=DRIVER_LOG)
    ours = compact(spark, driver.name, min_input_files=2)
    rewritten, declined = _driver_messages(caplog)
    assert rewritten == 2 and not declined, (rewritten, declined)  # one file per hour partition
    theirs = compact(spark, sparks.name, min_input_files=2, driver_rewrite_bytes=0)
    assert _driver_messages(caplog)[0] == rewritten  # Spark's, not the driver's
    assert (ours.groups, ours.files_rewritten, ours.files_added) == (theirs.groups, theirs.files_rewritten, 2)
    assert ours.delete_files_removed == theirs.delete_files_removed > 0

    driver.check(set())  # the model, and every row kept its _row_id
    after = _lineage(spark, driver.name)
    assert after == before == _lineage(spark, sparks.name)  # _last_updated_sequence_number kept too
    files = spark.sql(f"SELECT count(*) FROM {driver.name}.delete_files").first()
    assert files is not None and files[0] == 0
    readers_agree(spark, driver.name, driver.model)

    # The stream goes on over the driver's files: its DVs land on them.
    for batch in _batches(49, 3)[1:]:
        driver.check(driver.write(batch))
    readers_agree(spark, driver.name, driver.model)


def test_the_driver_applies_equality_deletes_of_a_v2_stream(
    spark: Any, table_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    t = Table(spark, table_name)  # format v2, the stream writes equality deletes
    for batch in _batches(50, 4):
        t.upsert(batch)
    t.check()
    equality = spark.sql(f"SELECT count(*) FROM {table_name}.delete_files WHERE content = 2").first()
    assert equality is not None and equality[0] > 0

    caplog.set_level(logging.DEBUG, logger=DRIVER_LOG)
    result = compact(spark, table_name, min_input_files=2, delete_file_threshold=1)
    rewritten, declined = _driver_messages(caplog)
    assert rewritten and not declined, (rewritten, declined)
    assert result.rows_removed > 0
    t.check()
    readers_agree(spark, table_name, t.model)


def test_units_the_driver_cannot_rewrite_exactly_go_to_spark(
    spark: Any, table_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=DRIVER_LOG)
    sorted_table = Stream(spark, table_name, "vectors")
    spark.sql(f"ALTER TABLE {table_name} WRITE ORDERED BY id")
    for batch in _batches(51, 3):
        sorted_table.check(sorted_table.write(batch))
    compact(spark, table_name, min_input_files=2)
    rewritten, declined = _driver_messages(caplog)
    assert rewritten == 0 and declined and "sort order" in declined[0], declined
    sorted_table.check(set())

    caplog.clear()
    evolved = Table(spark, table_name + "_evolved")
    t0 = _batches(52, 3)
    evolved.upsert(t0[0])
    spark.sql(f"ALTER TABLE {evolved.name} ADD COLUMN note STRING")  # older files lack it
    for batch in t0[1:]:
        evolved.upsert(batch)
    compact(spark, evolved.name, min_input_files=2, delete_file_threshold=1)
    rewritten, declined = _driver_messages(caplog)
    assert declined and any("does not hold column note" in m for m in declined), declined
    evolved.check()


def test_a_failed_driver_rewrite_leaves_no_file_and_spark_does_the_unit(
    spark: Any, table_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import icetide.maintenance.driver_rewrite as driver_rewrite

    stream = Stream(spark, table_name, "vectors")
    for batch in _batches(53, 3):
        stream.check(stream.write(batch))
    calls: list[int] = []

    def failing(self: Any, docs: list[str]) -> list[Any]:
        calls.append(len(docs))  # both partitions' files are written by now, none staged
        raise OSError("injected: the driver's rewrite failed")

    monkeypatch.setattr(driver_rewrite.DriverRewrite, "_data_files", failing)
    result = compact(spark, table_name, min_input_files=2)
    assert calls == [2] and result.groups == 2 and result.files_added == 2
    stream.check(set())
    live = {r[0] for r in spark.sql(f"SELECT file_path FROM {table_name}.files").collect()}
    location = str(load_table(spark, table_name).location())
    on_disk = {str(p) for p in Path(location.removeprefix("file:")).rglob("icetide-compaction-*.parquet")}
    assert on_disk == {p.removeprefix("file:") for p in live if "icetide-compaction-" in p} == set()
