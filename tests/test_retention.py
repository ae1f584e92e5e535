"""Bounded metadata and usable history: old metadata.json files go after each commit, expiry
follows the table's `history.expire.*` properties, and pipeline positions survive it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from icetide.maintenance.expire import expire_snapshots
from icetide.maintenance.maintain import MaintenancePolicy, maintain
from icetide.sink.sink import UpsertSink
from icetide.table.create import (
    MAX_SNAPSHOT_AGE_MS,
    METADATA_PREVIOUS_VERSIONS_MAX,
    MIN_SNAPSHOTS_TO_KEEP,
    RETENTION_DEFAULTS,
    create_table,
)
from icetide.table.iceberg import load_table

SCHEMA = "id BIGINT NOT NULL, v STRING"


def _metadata_files(warehouse: str, table: str) -> list[Path]:
    folder = Path(warehouse).joinpath(*table.split(".")[1:]) / "metadata"
    return sorted(folder.glob("*.metadata.json"))


def _properties(spark: Any, table: str) -> dict[str, str]:
    jtable = load_table(spark, table)
    jtable.refresh()
    return {str(k): str(v) for k, v in dict(jtable.properties()).items()}


def _snapshot_ids(spark: Any, table: str) -> list[int]:
    jtable = load_table(spark, table)
    jtable.refresh()
    return [int(s.snapshotId()) for s in jtable.snapshots()]


def _write(spark: Any, sink: UpsertSink, batch: int) -> None:
    df = spark.createDataFrame([(batch % 3, f"b{batch}"), (100 + batch, "new")], SCHEMA)
    assert sink.write(df, batch_id=batch, source_position={"n": batch}).committed


def test_many_commits_leave_a_bounded_number_of_metadata_files(spark: Any, table_name: str, warehouse: str) -> None:
    create_table(spark, table_name, schema=SCHEMA, key=["id"])
    assert {k: _properties(spark, table_name)[k] for k in RETENTION_DEFAULTS} == RETENTION_DEFAULTS
    sink = UpsertSink(spark, table_name, pipeline_id="meta")
    jtable = load_table(spark, table_name)
    for n in range(1, 61):  # metadata-only commits, a new metadata.json each, as a fast stream makes
        jtable.updateProperties().set("test.counter", str(n)).commit()
    for batch in range(1, 4):
        _write(spark, sink, batch)
    keep = int(RETENTION_DEFAULTS[METADATA_PREVIOUS_VERSIONS_MAX])
    files = _metadata_files(warehouse, table_name)
    assert len(files) == keep + 1, [f.name for f in files]  # the current one and `keep` before it
    assert sorted(r[0] for r in spark.table(table_name).select("id").collect()) == [0, 1, 2, 101, 102, 103]
    assert sink.last_committed().source_position == {"n": 3}  # type: ignore[union-attr]


def test_expiry_keeps_young_snapshots_and_at_least_min_to_keep(spark: Any, table_name: str) -> None:
    create_table(spark, table_name, schema=SCHEMA, key=["id"])
    sink = UpsertSink(spark, table_name, pipeline_id="hist")
    for batch in range(1, 6):
        _write(spark, sink, batch)
    old = _snapshot_ids(spark, table_name)
    # The defaults keep an hour: nothing is due, and nothing is committed.
    files_before = _metadata_files_count(spark, table_name)
    result = expire_snapshots(spark, table_name)
    assert result.expired_snapshots == 0 and result.snapshots_left == 5 and result.retained == 10
    assert _metadata_files_count(spark, table_name) == files_before
    time.sleep(3)
    mark = time.time()
    for batch in range(6, 10):
        _write(spark, sink, batch)
    young = [s for s in _snapshot_ids(spark, table_name) if s not in old]
    assert len(young) == 4
    # Max age reaches back to 1.5 s before `mark`: the 5 old snapshots are older, the 4 young ones not.
    age_ms = int((time.time() - mark) * 1000) + 1500
    load_table(spark, table_name).updateProperties().set(MAX_SNAPSHOT_AGE_MS, str(age_ms)).set(
        MIN_SNAPSHOTS_TO_KEEP, "2"
    ).commit()
    result = expire_snapshots(spark, table_name)
    assert sorted(_snapshot_ids(spark, table_name)) == sorted(young)
    assert result.expired_snapshots == 5 and result.snapshots_left == 4
    # min-snapshots-to-keep wins over age: with every snapshot old enough, 2 stay.
    load_table(spark, table_name).updateProperties().set(MAX_SNAPSHOT_AGE_MS, "1").commit()
    time.sleep(0.01)
    result = expire_snapshots(spark, table_name)
    assert result.snapshots_left == 2 and _snapshot_ids(spark, table_name) == young[-2:]
    # The pipeline's position is a table property: expiry never loses it, and replays stay no-ops.
    state = sink.last_committed()
    assert state is not None and state.batch_id == 9 and state.source_position == {"n": 9}
    df = spark.createDataFrame([(7, "replayed")], SCHEMA)
    assert not sink.write(df, batch_id=9).committed
    assert sorted(r[0] for r in spark.table(table_name).select("id").collect()) == [0, 1, 2, *range(101, 110)]


def _metadata_files_count(spark: Any, table: str) -> int:
    jtable = load_table(spark, table)
    jtable.refresh()
    return int(jtable.operations().current().previousFiles().size())


def test_maintain_sets_retention_defaults_on_an_older_table(spark: Any, table_name: str) -> None:
    spark.sql(f"CREATE TABLE {table_name} (id BIGINT NOT NULL, v STRING) USING iceberg")
    for n in range(3):
        spark.sql(f"INSERT INTO {table_name} VALUES ({n}, 'x')")
    load_table(spark, table_name).updateProperties().set(METADATA_PREVIOUS_VERSIONS_MAX, "5").commit()
    assert MAX_SNAPSHOT_AGE_MS not in _properties(spark, table_name)
    report = maintain(spark, table_name, MaintenancePolicy())
    props = _properties(spark, table_name)
    assert props[METADATA_PREVIOUS_VERSIONS_MAX] == "5"  # the table's own setting stays
    missing = {k: v for k, v in RETENTION_DEFAULTS.items() if k != METADATA_PREVIOUS_VERSIONS_MAX}
    assert report.properties_set == missing and {k: props[k] for k in missing} == missing
    assert report.expiry is not None and report.expiry.expired_snapshots == 0  # all younger than an hour
    assert len(_snapshot_ids(spark, table_name)) == 3
    assert any(line.startswith("set history.expire.max-snapshot-age-ms=3600000") for line in report.lines())
    again = maintain(spark, table_name, MaintenancePolicy())
    assert again.properties_set == {}
