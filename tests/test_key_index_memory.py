"""The memory bound of a process's key indexes (`deletes="vectors"`, `table.key_index_memory`).

Many tables written from one process each keep a key index; past the bound the least recently
used ones are dropped, after writing a copy, and their next batch loads the copy and catches up.
The tables stay equal to their models after every batch; the indexes held stay within the bound;
no index is built from the table again.
"""

from __future__ import annotations

import random
import threading
import time
from datetime import timedelta
from typing import Any

import pytest

import tests.test_compaction as seed
from icetide.config.pipeline import PipelineConfig
from icetide.config.table import KEY_INDEX_MEMORY_DEFAULT
from icetide.errors import ConfigError
from icetide.pipeline.sync.runner import SyncRunner
from icetide.write.key_index_memory import KeyIndexMemory, process_key_indexes
from tests.test_compaction import Table
from tests.test_key_index_copy import count_builds, vectors_sink
from tests.test_v3_deletes import one_dv_per_data_file, v3_table


class FakeHolder:
    def __init__(self, name: str) -> None:
        self.table_name = name
        self.lock = threading.Lock()
        self.dropped = 0

    def drop_index(self) -> bool:
        assert self.lock.locked()
        self.dropped += 1
        return True


def held_index(t: Table) -> Any:
    """The key index the table's sink holds now (None: dropped)."""
    vectors = t.sink.committer.vectors
    assert vectors is not None
    return vectors.index


def test_the_least_recently_used_indexes_are_dropped_never_the_one_in_use() -> None:
    memory = KeyIndexMemory(limit=250)
    a, b, c = FakeHolder("a"), FakeHolder("b"), FakeHolder("c")
    memory.hold(a, 100)
    memory.hold(b, 100)
    memory.hold(a, 100)  # a is now the most recently used
    memory.hold(c, 100)
    assert (a.dropped, b.dropped, c.dropped) == (0, 1, 0)
    stats = memory.stats()
    assert (stats.held_bytes, stats.indexes, stats.evictions, stats.copies_written) == (200, 2, 1, 1)
    with a.lock:  # a is in use by another thread: c's growth drops nothing, a later trim does
        memory.hold(c, 200)
        assert memory.held_bytes() == 300 and a.dropped == 0
    memory.trim(keep=c)
    assert a.dropped == 1 and memory.held_bytes() == 200
    memory.hold(c, 400)  # alone over the bound: kept while its table is written
    assert c.dropped == 0 and memory.held_bytes() == 400
    memory.release(c)
    assert memory.stats().indexes == 0
    memory.reloaded(from_copy=True)
    memory.reloaded(from_copy=False)
    assert (memory.stats().reloads, memory.stats().rebuilds) == (1, 1)


def test_key_index_memory_in_pipeline_files() -> None:
    table: dict[str, Any] = {"name": "lake.inventory.{table}", "format_version": 3, "deletes": "vectors"}
    base: dict[str, Any] = {
        "pipeline": "p",
        "source": {"kafka": {"bootstrap_servers": "b:9092", "topic_pattern": "db\\..*"}},
        "table": table,
        "dead_letter": "lake.inventory.dead_letter",
    }
    assert PipelineConfig.from_dict(base).table.key_index_memory == KEY_INDEX_MEMORY_DEFAULT == 1024**3
    sized = PipelineConfig.from_dict({**base, "table": {**table, "key_index_memory": "256MB"}})
    assert sized.table.key_index_memory == 256 * 1024**2
    for bad in ("lots", -1, "-1GB", True):
        with pytest.raises(ConfigError, match=r"^table\.key_index_memory"):
            PipelineConfig.from_dict({**base, "table": {**table, "key_index_memory": bad}})
    with pytest.raises(ConfigError, match=r"^tables\.lake\.inventory\.orders\.key_index_memory: unknown key"):
        PipelineConfig.from_dict({**base, "tables": {"lake.inventory.orders": {"key_index_memory": "1GB"}}})


def test_tables_beyond_the_bound_reload_their_index_from_a_copy_and_stay_equal(
    spark: Any, table_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    builds = count_builds(monkeypatch)
    memory = KeyIndexMemory(limit=10**9)
    tables: list[Table] = []
    for n in range(6):
        t = v3_table(spark, f"{table_name}_{n}", distribution="key")
        t.sink = vectors_sink(spark, t.name)
        vectors = t.sink.committer.vectors
        assert vectors is not None
        vectors.memory = memory  # this test's bound, not the process's
        tables.append(t)
    rng = random.Random(24)
    every_key = [
        {"id": i, "ts": seed.T0 + h, "v": "first", "seq": 0, "_op": "UPSERT"}
        for i in range(40)
        for h in (timedelta(hours=0), timedelta(hours=1, minutes=30))
    ]
    for t in tables:  # every key of the seed's batches, so an index is about as large as it gets
        t.upsert(every_key)
    assert sorted(builds) == sorted(t.name for t in tables) and memory.stats().evictions == 0
    largest = max(held_index(t).nbytes() for t in tables)
    memory.set_limit(int(3.5 * largest))  # about two indexes (they grow by the paths of new files)
    seconds: dict[bool, list[float]] = {True: [], False: []}  # a batch's time, with and without a reload
    for _round in range(4):
        for t in rng.sample(tables, len(tables)):
            before = memory.stats()
            started = time.monotonic()
            t.upsert(seed._random_batch(rng, rng.randrange(5, 30)))
            after = memory.stats()
            seconds[after.reloads > before.reloads].append(time.monotonic() - started)
            t.check()
            assert after.held_bytes <= after.limit, after
            assert held_index(t) is not None  # the table just written keeps its index
    stats = memory.stats()
    assert stats.evictions >= 6 and stats.reloads >= 6 and stats.rebuilds == 0, stats
    assert stats.copies_written >= 6, stats
    assert sorted(builds) == sorted(t.name for t in tables)  # never built from the table again
    for t in tables:
        t.check()
        one_dv_per_data_file(t)
    mean = {k: sum(v) / len(v) if v else 0.0 for k, v in seconds.items()}
    print(
        f"index {largest} bytes, limit {stats.limit}: {stats}; batch {mean[True]:.2f}s with a reload, "
        f"{mean[False]:.2f}s without ({len(seconds[True])}/{len(seconds[False])} batches)"
    )


def test_a_database_sync_within_the_bound_equals_its_models(
    spark: Any, kafka_broker: str, warehouse: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.commands import warehouse_reader
    from tests.kafka_broker import produce
    from tests.test_db_sync import _create, changes, inventory_streams, model_of, pipeline_doc, rows_of, same, unique

    builds = count_builds(monkeypatch)
    prefix, namespace = f"db{unique()}", f"kim{unique()}"
    streams = inventory_streams()
    records = {t: changes(s, seed=i, count=40) for i, (t, s) in enumerate(sorted(streams.items()))}
    topics = {t: f"{prefix}.inventory.{t}" for t in streams}
    for t, recs in records.items():
        _create(kafka_broker, topics[t])
        produce(kafka_broker, topics[t], recs)
    doc = pipeline_doc("kim", kafka_broker, prefix, namespace, trigger={"interval": "1s", "max_records": 30})
    doc["table"] = {**doc["table"], "format_version": 3, "deletes": "vectors", "key_index_memory": "64MB"}
    memory = process_key_indexes()
    runner = SyncRunner(PipelineConfig.from_dict(doc), spark)
    try:
        assert memory.limit == 64 * 1024**2
        reader = warehouse_reader(spark, "lake", warehouse)
        keys = {"orders": "order_number", "customers": "id", "products": "id"}
        start = memory.stats()
        batches = 0
        while (metrics := runner.run_batch()) is not None:
            batches += 1
            if batches == 1:  # now a bound that holds about two of the three indexes
                largest = max(s.committer.vectors.index.nbytes() for s in runner.sinks.values())  # type: ignore[union-attr]
                memory.set_limit(int(2.2 * largest))
            for t in streams:
                name = f"lake.{namespace}.{t}"
                held = runner.state.tables[name].position[topics[t]]["0"]
                assert same(rows_of(reader, name, keys[t]), model_of(records[t], held)), (name, metrics.batch_id)
            # The bound is set from the indexes after batch 1; the index a batch uses is never
            # dropped, so a table that grew past the bound since (a loaded broker may show batch 1
            # little of its topic) is held alone above it.
            stats = memory.stats()
            assert stats.held_bytes <= stats.limit or stats.indexes == 1, stats
        end = memory.stats()
        assert batches >= 3
        assert end.evictions > start.evictions and end.reloads > start.reloads and end.rebuilds == start.rebuilds
        assert sorted(builds) == sorted(f"lake.{namespace}.{t}" for t in streams)  # each built once, at its start
        print(f"sync: {batches} batches, {end}")
    finally:
        runner.topics.close()
        memory.set_limit(KEY_INDEX_MEMORY_DEFAULT)
