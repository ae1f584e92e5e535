"""Format v3 tables: asked for in code and in pipeline files, checked at load, upgraded beside a stream."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import pytest

import icetide
from icetide.config.pipeline import PipelineConfig
from icetide.errors import ConfigError, SchemaError
from icetide.maintenance.upgrade import upgrade_format_version
from icetide.table.delete_modes import DELETES_PROPERTY
from icetide.table.iceberg import format_version, load_table
from tests.commands import ROOT
from tests.test_compaction import KEY, SCHEMA, Table, rows_of
from tests.test_config import GOOD, with_

SYNC: dict[str, Any] = {
    "pipeline": "p",
    "source": {"kafka": {"bootstrap_servers": "b:9092", "topic_pattern": "db\\..*"}},
    "table": {"name": "lake.inventory.{table}", "format_version": 3},
    "tables": {"lake.inventory.legacy": {"format_version": 2}},
    "dead_letter": "lake.inventory.dead_letter",
}


def test_format_version_in_pipeline_files() -> None:
    assert PipelineConfig.from_dict(GOOD).table.format_version is None  # unset: a new table is v3
    table = PipelineConfig.from_dict(with_("table.format_version", 3)).table
    assert table.format_version == 3 and table.properties["format-version"] == "3"
    as_property = PipelineConfig.from_dict(with_("table.properties", {"format-version": 3})).table
    assert as_property.format_version == 3
    sync = PipelineConfig.from_dict(SYNC)  # the template, and a per-table override
    assert sync.table_config("lake.inventory.orders").format_version == 3
    assert sync.table_config("lake.inventory.legacy").format_version == 2


@pytest.mark.parametrize(
    ("change", "key"),
    [
        (with_("table.format_version", 4), "table.format_version: must be one of 2, 3"),
        (with_("table.format_version", True), "table.format_version"),
        (with_("table.properties", {"format-version": "1"}), "table.properties.format-version"),
        (
            {**GOOD, "table": {**GOOD["table"], "format_version": 3, "properties": {"format-version": "2"}}},
            "table.format_version: 3 disagrees",
        ),
        (
            {**SYNC, "tables": {"lake.inventory.x": {"format_version": "three"}}},
            "tables.lake.inventory.x.format_version",
        ),
    ],
)
def test_a_bad_format_version_fails_at_load_naming_the_key(change: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError, match=f"^{key}"):
        PipelineConfig.from_dict(change)


def test_create_table_at_v3_and_an_existing_table_below_it(spark: Any, table_name: str) -> None:
    define = {"schema": SCHEMA, "key": KEY}
    assert format_version(icetide.create_table(spark, table_name, **define, format_version=3)) == 3
    assert format_version(icetide.create_table(spark, table_name, **define)) == 3  # no version asked: loads
    assert format_version(icetide.create_table(spark, table_name, **define, format_version=2)) == 3  # v3 serves
    old = table_name + "_v2"
    assert format_version(icetide.create_table(spark, old, **define, format_version=2)) == 2
    with pytest.raises(
        SchemaError, match=r"is format v2, asked for v3: upgrade it with `icetide maintain --upgrade-v3"
    ):
        icetide.create_table(spark, old, **define, properties={"format-version": "3"})
    with pytest.raises(ConfigError, match="format_version"):
        icetide.create_table(spark, old, **define, format_version=1)
    with pytest.raises(ConfigError, match="cannot be lowered"):
        upgrade_format_version(spark, table_name, 2)


def test_upgrade_beside_a_running_stream_from_another_process(spark: Any, table_name: str, warehouse: str) -> None:
    """`icetide maintain --upgrade-v3` in its own process while this one commits batches."""
    t = Table(spark, table_name)
    t.upsert(rows_of(list(range(10)), "v2", seq=1))
    upgrade = subprocess.Popen(
        [sys.executable, "-m", "icetide.cli", "maintain", "--upgrade-v3", table_name, "--warehouse", warehouse],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seq = 2
    while upgrade.poll() is None or seq < 6:  # batches before, during and after the upgrade
        t.upsert(rows_of([seq % 10, (seq * 3) % 10], f"b{seq}", seq=seq))
        seq += 1
        time.sleep(1)  # leaves the 2 cores to the upgrading process's start
    _, err = upgrade.communicate()
    assert upgrade.returncode == 0, err[-2000:]
    assert f"{table_name}: upgraded from format v2 to v3" in err
    t.check()
    jtable = load_table(spark, table_name)
    jtable.refresh()
    assert format_version(jtable) == 3
    t.upsert(rows_of([1, 2], "v3", seq=seq))  # the stream goes on, now with row lineage
    t.check()
    lineage = spark.sql(f"SELECT count(*) FROM {table_name} WHERE id IN (1, 2) AND _row_id IS NOT NULL").first()[0]
    assert lineage == 2
    again = subprocess.run(
        [sys.executable, "-m", "icetide.cli", "maintain", "--upgrade-v3", table_name, "--warehouse", warehouse],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert again.returncode == 0 and "already format v3: nothing to upgrade" in again.stderr


def _unmarked(spark: Any, name: str, version: int) -> None:
    """A table as icetide made it before new tables defaulted to v3 with deletion vectors: no
    `icetide.deletes` property."""
    icetide.create_table(spark, name, schema=SCHEMA, key=KEY, partition_by=["hours(ts)"], format_version=version)
    spark.sql(f"ALTER TABLE {name} UNSET TBLPROPERTIES ('{DELETES_PROPERTY}')")


def test_new_tables_default_to_v3_with_vectors_and_existing_tables_keep_theirs(spark: Any, table_name: str) -> None:
    """A table `create_table` makes at its defaults is v3 with `icetide.deletes=vectors`, and a sink
    at its defaults (as a pipeline's runner makes it: `deletes` unset) commits DVs into it; a v2
    table and a v3 table made before that default keep their format and equality deletes."""
    from tests.test_v3_deletes import deletes_by_kind

    fresh = icetide.create_table(spark, table_name, schema=SCHEMA, key=KEY, partition_by=["hours(ts)"])
    assert format_version(fresh) == 3 and str(fresh.properties().get(DELETES_PROPERTY)) == "vectors"
    decimal_key = icetide.create_table(spark, table_name + "_dec", schema="k DECIMAL(10, 2) NOT NULL", key=["k"])
    assert str(decimal_key.properties().get(DELETES_PROPERTY)) == "equality"  # a key the index cannot hold
    with pytest.raises(ConfigError, match="deletes: vectors needs format_version 3"):
        icetide.create_table(spark, table_name + "_bad", schema=SCHEMA, key=KEY, format_version=2, deletes="vectors")
    _unmarked(spark, table_name + "_old2", 2)
    _unmarked(spark, table_name + "_old3", 3)
    expected = {table_name: (3, "dv"), table_name + "_old2": (2, "equality"), table_name + "_old3": (3, "equality")}
    for name, (version, kind) in expected.items():
        t = Table(spark, name, deletes=None)  # the table exists: the sink at its defaults, as a runner makes it
        t.upsert(rows_of([1, 2, 3], "a", seq=1))
        t.upsert(rows_of([2, 3], "b", seq=2))
        t.check()
        assert format_version(load_table(spark, name)) == version, name
        assert set(deletes_by_kind(t)) == {kind}, name
