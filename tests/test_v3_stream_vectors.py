"""`deletes="vectors"`: the stream commits deletion vectors itself; no equality delete reaches a snapshot.

After every batch the table equals the model in Spark, PyIceberg and DuckDB; compaction, Spark's
own DELETE (a DV from another writer) and a restarted sink (a new key index built from the table)
come between batches. tests/test_v3_vectors_crash.py kills a writing process at each new step.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import icetide
import tests.test_compaction as seed
from icetide.errors import ConfigError
from icetide.maintenance.compaction import compact
from icetide.spark.py4j_collections import java_strings
from icetide.table.iceberg import load_table
from icetide.write.vectors import earlier_positions
from tests.test_compaction import KEY, SCHEMA, Table
from tests.test_v3_deletes import deletes_by_kind, one_dv_per_data_file, v3_table
from tests.test_v3_readers import duckdb_connection, duckdb_rows, model_rows, pyiceberg_rows


def vectors_sink(spark: Any, name: str) -> Any:
    return icetide.UpsertSink(spark, name, pipeline_id="stream", order_by="seq", deletes="vectors")


def test_vectors_need_a_v3_table(spark: Any, table_name: str) -> None:
    icetide.create_table(spark, table_name, schema=SCHEMA, key=KEY, format_version=2)
    with pytest.raises(ConfigError, match="deletes: vectors needs a format v3 table"):
        vectors_sink(spark, table_name)
    with pytest.raises(ConfigError, match="deletes: 'positions' is not one of equality, vectors"):
        icetide.UpsertSink(spark, table_name, pipeline_id="p", deletes="positions")
    decimal_key = table_name + "_decimal"
    icetide.create_table(spark, decimal_key, schema="k DECIMAL(10, 2) NOT NULL, v STRING", key=["k"], format_version=3)
    with pytest.raises(ConfigError, match="integer, string, date or timestamp type; k is decimal"):
        vectors_sink(spark, decimal_key)


def index_knows_its_vectors(sink: Any) -> None:
    """The DV positions the key index keeps (its own DVs, not read back) are those in the blobs."""
    index = sink.committer.vectors.index
    if index is None:  # a sink that has written no batch yet (the restart below)
        return
    for path, known in index.vector_positions.items():
        assert path in index.vectors, path
        assert np.array_equal(known, earlier_positions(index.vectors[path], path)), path


def no_files_left_behind(t: Table) -> None:
    """Every file in the table's data folder is in some snapshot: the equality-delete files the
    DVs replaced are gone (the committer deletes them in one call)."""
    referenced = {
        r[0].removeprefix("file:")
        for table in ("all_data_files", "all_delete_files")
        for r in t.spark.sql(f"SELECT file_path FROM {t.name}.{table}").collect()
    }
    folder = Path(str(load_table(t.spark, t.name).location()).removeprefix("file:")) / "data"
    on_disk = {str(p) for p in folder.rglob("*") if p.is_file() and not p.name.startswith(".")}
    assert on_disk <= referenced, sorted(on_disk - referenced)[:5]


@pytest.mark.guarantee
def test_every_batch_reads_like_a_compacted_table_in_every_engine(spark: Any, table_name: str) -> None:
    t = v3_table(spark, table_name, distribution="key")
    t.sink = vectors_sink(spark, table_name)
    rng = random.Random(21)
    duck = duckdb_connection()
    try:
        for n in range(1, 15):
            t.upsert(seed._random_batch(rng, rng.randrange(1, 30)))
            if n == 6:
                assert compact(spark, table_name, min_input_files=2).groups >= 1  # the index follows it
            if n == 9:
                spark.sql(f"DELETE FROM {table_name} WHERE id % 7 = 0")  # another writer's DVs
                t.model.rows = {k: v for k, v in t.model.rows.items() if k[0] % 7 != 0}
            if n == 12:
                t.sink = vectors_sink(spark, table_name)  # a restart: the index is built from the table
            t.check()
            kinds = deletes_by_kind(t)
            assert "equality" not in kinds and "position" not in kinds, kinds
            one_dv_per_data_file(t)
            index_knows_its_vectors(t.sink)
            no_files_left_behind(t)
            expected = model_rows(t)
            assert pyiceberg_rows(t) == expected, f"batch {n}"
            assert duckdb_rows(t, duck) == expected, f"batch {n}"
    finally:
        duck.close()
    assert "dv" in deletes_by_kind(t)
    assert t.sink.committer.vectors.index.vector_positions, "the index knows the positions of its DVs"
    summaries = spark.sql(f"SELECT summary FROM {table_name}.snapshots").collect()
    assert not any(int(s[0].get("added-equality-deletes", "0")) for s in summaries)


def test_many_paths_go_to_the_jvm_in_one_list(spark: Any) -> None:
    paths = [f"file:/warehouse/db/t/data/part-{i:05d}.parquet" for i in range(500)]
    assert list(java_strings(spark, paths).toArray()) == paths
    with pytest.raises(ValueError, match="newline"):
        java_strings(spark, ["a\nb"])


def test_a_table_with_equality_deletes_turns_to_vectors(spark: Any, table_name: str) -> None:
    """Batches with equality deletes, then a `vectors` sink: its key index is built through Spark,
    which applies the equality deletes (a wrong index would leave a replaced row live, and the
    table would differ from the model); once they are folded into DVs, an index built file by
    file equals the one that followed every commit."""
    from icetide.maintenance.position_deletes import convert_equality_deletes
    from icetide.table.iceberg import load_table
    from icetide.write.key_index import KeyIndex

    t = v3_table(spark, table_name)
    rng = random.Random(8)
    for _ in range(4):
        t.upsert(seed._random_batch(rng, rng.randrange(5, 30)))
    assert "equality" in deletes_by_kind(t)
    t.sink = vectors_sink(spark, table_name)
    for _ in range(4):
        t.upsert(seed._random_batch(rng, rng.randrange(5, 30)))
        t.check()
    assert convert_equality_deletes(spark, table_name).committed  # into DVs
    assert "equality" not in deletes_by_kind(t)
    t.upsert(seed._random_batch(rng, 20))  # the index follows the conversion
    t.check()
    followed = t.sink.committer.vectors.index
    jtable = load_table(spark, table_name)
    jtable.refresh()
    built = KeyIndex.build(spark, table_name, jtable)
    assert built.snapshot_id == followed.snapshot_id

    def located(index: KeyIndex) -> list[tuple[Any, ...]]:
        rows = index.rows
        return sorted(zip(*(rows[n].to_pylist() for n in index.names), rows["pos"].to_pylist(), strict=True))

    assert located(built) == located(followed) and len(located(built)) == len(t.model.rows)


def test_a_vectors_table_beside_a_plain_table_stays_equal(spark: Any, table_name: str) -> None:
    """The same batches through `equality` and `vectors` sinks give the same rows."""
    plain = Table(spark, table_name + "_eq")
    t = v3_table(spark, table_name)
    t.sink = vectors_sink(spark, table_name)
    rng = random.Random(4)
    for _ in range(6):
        batch = seed._random_batch(rng, rng.randrange(1, 30))
        plain.upsert(batch)
        t.upsert(batch)
    plain.check()
    t.check()
    assert plain.model.rows == t.model.rows


def test_deletes_in_pipeline_files() -> None:
    from icetide.config.pipeline import PipelineConfig
    from tests.test_config import GOOD, with_
    from tests.test_v3_tables import SYNC

    table = PipelineConfig.from_dict(with_("table", {**GOOD["table"], "format_version": 3, "deletes": "vectors"}))
    assert table.table.deletes == "vectors"
    # Unset: the table's own mode (a new table: v3 and vectors; an existing one keeps its mode).
    assert PipelineConfig.from_dict(GOOD).table.deletes is None
    unset = PipelineConfig.from_dict(GOOD).table
    assert unset.created_for("upsert").deletes is None  # create_table's default: v3, vectors
    assert unset.created_for("append").deletes == "equality"  # INSERTs write no delete: no index
    assert table.table.created_for("append").deletes == "vectors"  # asked for: kept
    assert PipelineConfig.from_dict(with_("table.deletes", "vectors")).table.deletes == "vectors"  # v3 by default
    with pytest.raises(ConfigError, match=r"^table\.deletes: vectors needs format_version: 3"):
        PipelineConfig.from_dict(with_("table", {**GOOD["table"], "format_version": 2, "deletes": "vectors"}))
    with pytest.raises(ConfigError, match=r"^table\.deletes: must be one of equality, vectors"):
        PipelineConfig.from_dict(with_("table.deletes", "position"))
    sync = PipelineConfig.from_dict({**SYNC, "tables": {"lake.inventory.orders": {"deletes": "vectors"}}})
    assert sync.table_config("lake.inventory.orders").deletes == "vectors"  # v3 from the template
    assert sync.table_config("lake.inventory.customers").deletes is None
    with pytest.raises(ConfigError, match=r"^tables\.lake\.inventory\.legacy\.deletes: vectors needs"):
        PipelineConfig.from_dict({**SYNC, "table": {**SYNC["table"], "deletes": "vectors"}})  # legacy is v2


@pytest.mark.guarantee
def test_runner_with_deletes_vectors_killed_after_the_dv_write(spark: Any, tmp_path: Path) -> None:
    """A pipeline file with `deletes: vectors`, run by `icetide run`, killed -9 after a batch's DVs
    were written and before its commit, then run again: the table equals the model, DVs only."""
    import yaml

    from tests.commands import crash_tour, warehouse_reader
    from tests.model import table_rows
    from tests.test_runner_files import COLUMNS, KEY, expected, land_files, pipeline_doc

    warehouse = tmp_path / "warehouse"
    lines, _ = land_files(tmp_path / "landing", 6, seed=5)
    doc = pipeline_doc("vectors", tmp_path / "landing", str(warehouse))
    doc["table"] = {**doc["table"], "format_version": 3, "deletes": "vectors"}
    config_path = tmp_path / "pipeline.yaml"
    config_path.write_text(yaml.safe_dump(doc))
    crash_tour(config_path, [("after_dv_write", "2")])
    reader = warehouse_reader(spark, "vectorscheck", warehouse)
    table = "vectorscheck.runner.vectors"
    assert table_rows(reader, table, COLUMNS, KEY) == expected(lines)
    content = {int(r[0]) for r in reader.sql(f"SELECT content FROM {table}.delete_files").collect()}
    assert content == {1}, content  # deletion vectors only
