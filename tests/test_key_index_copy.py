"""The persisted copy of the key index (`deletes="vectors"`): a restart loads it instead of
reading the table, and any copy that cannot be trusted falls back to building the index.

Every test counts `KeyIndex.build` calls and checks the table against the model after each
batch. `python -m tests.test_key_index_copy WAREHOUSE TABLE FIRST LAST` is the separate process
of the first test: it writes batches FIRST..LAST and prints how often it built the index.
"""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import icetide
import tests.test_compaction as seed
from icetide.errors import ConfigError
from icetide.filesystems import filesystem_for
from icetide.maintenance.compaction import compact
from icetide.table.iceberg import load_table
from icetide.write.key_index import KeyIndex
from icetide.write.key_index_copy import COPY_EVERY_BATCHES, copy_folder
from tests.commands import ROOT
from tests.test_compaction import COLUMNS, UPSERT_DDL, Table
from tests.test_v3_deletes import one_dv_per_data_file, v3_table


def vectors_sink(spark: Any, name: str) -> Any:
    return icetide.UpsertSink(spark, name, pipeline_id="stream", order_by="seq", deletes="vectors")


def copying_table(spark: Any, name: str, every: int) -> Table:
    t = v3_table(spark, name, distribution="key")
    spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('{COPY_EVERY_BATCHES}' = '{every}')")
    t.sink = vectors_sink(spark, name)
    return t


def count_builds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    original = KeyIndex.build

    def counting(spark: Any, table_name: str, jtable: Any) -> KeyIndex:
        calls.append(table_name)
        return original(spark, table_name, jtable)

    monkeypatch.setattr(KeyIndex, "build", staticmethod(counting))
    return calls


def copies(t: Table) -> dict[int, str]:
    """snapshot id -> path of each copy of the table's key index."""
    jtable = load_table(t.spark, t.name)
    jtable.refresh()
    folder = Path(filesystem_for(copy_folder(jtable))[1])
    found = {int(p.name[len("key-index-") : -len(".parquet")]): str(p) for p in folder.glob("key-index-*.parquet")}
    assert not list(folder.glob(".*")), "a temporary file was left behind"
    return found


def stream(t: Table, rng: random.Random, batches: int) -> None:
    for _ in range(batches):
        t.upsert(seed._random_batch(rng, rng.randrange(5, 30)))
        t.check()


def test_a_restart_loads_the_copy_instead_of_building(
    spark: Any, table_name: str, monkeypatch: pytest.MonkeyPatch, warehouse: str
) -> None:
    builds = count_builds(monkeypatch)
    t = copying_table(spark, table_name, every=2)
    rng = random.Random(11)
    stream(t, rng, 1)
    assert copies(t) == {} and builds == [table_name]
    stream(t, rng, 1)
    assert list(copies(t)) == [t.snapshot()[0]]  # after 2 batches, named by the snapshot it describes

    t.sink = vectors_sink(spark, table_name)  # a restart in this process
    stream(t, rng, 5)
    assert builds == [table_name]  # the copy was loaded and caught up, never the table read
    assert len(copies(t)) == 2  # written after batches 4 and 6: 3 written, 2 kept
    one_dv_per_data_file(t)

    # A separate process: loads the newest copy (batch 6's) and catches up batch 7.
    done = subprocess.run(
        [sys.executable, "-m", "tests.test_key_index_copy", warehouse, table_name, "8", "9"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "builds=0", done.stderr[-3000:]
    t.stream_batch += 2
    for b in (8, 9):
        t.model_batch += 1
        t.model.apply(t.model_batch, driver_rows(b))
    t.check()


def test_a_corrupt_or_foreign_copy_falls_back(spark: Any, table_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    builds = count_builds(monkeypatch)
    t = copying_table(spark, table_name, every=2)
    rng = random.Random(5)
    stream(t, rng, 4)
    assert len(copies(t)) == 2
    newer = copies(t)[t.snapshot()[0]]  # after batch 4, at the current snapshot
    data = Path(newer).read_bytes()
    Path(newer).write_bytes(data[: len(data) // 2])  # truncated: the older copy (an ancestor) is used
    t.sink = vectors_sink(spark, table_name)
    stream(t, rng, 1)
    assert len(builds) == 1

    for path in copies(t).values():  # every copy truncated: built from the table
        Path(path).write_bytes(Path(path).read_bytes()[:100])
    t.sink = vectors_sink(spark, table_name)
    stream(t, rng, 2)
    assert len(builds) == 2
    (snapshot,) = (s for s, p in copies(t).items() if Path(p).stat().st_size > 100)  # the fresh copy

    # The copy under the name of a snapshot that is not an ancestor (another branch, rolled
    # back), and under the name of an ancestor it does not describe: both ignored.
    fresh = Path(copies(t)[snapshot])
    for path in copies(t).values():
        if Path(path) != fresh:
            Path(path).unlink()
    ancestor = int(load_table(spark, table_name).snapshot(snapshot).parentId())
    fresh.rename(fresh.with_name(f"key-index-{ancestor}.parquet"))
    t.sink = vectors_sink(spark, table_name)
    stream(t, rng, 1)
    assert len(builds) == 3
    (path,) = copies(t).values()
    Path(path).rename(Path(path).with_name("key-index-1234567890.parquet"))
    t.sink = vectors_sink(spark, table_name)
    stream(t, rng, 1)
    assert len(builds) == 4
    one_dv_per_data_file(t)


def test_compaction_between_the_copy_and_the_restart(
    spark: Any, table_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    builds = count_builds(monkeypatch)
    t = copying_table(spark, table_name, every=4)
    rng = random.Random(8)
    stream(t, rng, 4)
    assert len(copies(t)) == 1
    assert compact(spark, table_name, min_input_files=2).groups >= 1
    spark.sql(f"DELETE FROM {table_name} WHERE id % 5 = 0")  # another writer's DVs
    t.model.rows = {k: v for k, v in t.model.rows.items() if k[0] % 5 != 0}
    t.check()
    t.sink = vectors_sink(spark, table_name)
    stream(t, rng, 3)
    assert builds == [table_name]  # the copy caught up through the compaction and the DELETE
    one_dv_per_data_file(t)


def test_the_copy_interval_is_a_table_property(spark: Any, table_name: str) -> None:
    t = copying_table(spark, table_name, every=0)
    stream(t, random.Random(3), 2)
    assert copies(t) == {}  # 0: never
    spark.sql(f"ALTER TABLE {table_name} SET TBLPROPERTIES ('{COPY_EVERY_BATCHES}' = 'often')")
    with pytest.raises(ConfigError, match=f"^{COPY_EVERY_BATCHES}: must be a whole number >= 0"):
        vectors_sink(spark, table_name)


# -- the separate process of the first test ----------------------------------------------------


def driver_rows(batch_id: int) -> list[dict[str, Any]]:
    return seed._random_batch(random.Random(1000 + batch_id), 20)


def main() -> None:
    warehouse, table, first, last = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    spark = icetide.spark_session(warehouse=warehouse, master="local[1]", conf={"spark.sql.shuffle.partitions": "2"})
    builds = 0
    original = KeyIndex.build

    def counting(spark: Any, table_name: str, jtable: Any) -> KeyIndex:
        nonlocal builds
        builds += 1
        return original(spark, table_name, jtable)

    KeyIndex.build = staticmethod(counting)  # type: ignore[method-assign,assignment]
    sink = vectors_sink(spark, table)
    for b in range(first, last + 1):
        rows = driver_rows(b)
        df = spark.createDataFrame([tuple(r.get(c) for c in [*COLUMNS, "_op"]) for r in rows], UPSERT_DDL)
        assert sink.write(df, batch_id=b).committed
    spark.stop()
    print(f"builds={builds}")


if __name__ == "__main__":
    main()
