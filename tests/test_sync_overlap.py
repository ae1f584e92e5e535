"""Overlapped commits in a pipeline of many tables (trigger.overlap_commit): while a backlog drains
on the sync fast path, batch N's tables commit on the commit thread while batch N+1 is planned
from where N leaves them, read and written.

The change events are the real Debezium messages of tests/test_db_sync.py (the MySQL `orders` and
`customers` messages of debezium-server-iceberg's test resources, the `products` message of
Debezium's tutorial via Flink), with rows of their own. One topic carries two tables (products and
more customers), so the customers table is fed by two topics and each topic's next batch starts
at the lowest position of the tables it feeds: the case an early plan could get wrong.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from icetide.config.pipeline import PipelineConfig
from icetide.errors import CommitConflictError
from icetide.pipeline.sync.fast_path import SyncFastPath
from icetide.pipeline.sync.runner import SyncRunner
from icetide.sink.sink import UpsertSink
from tests.kafka_broker import produce
from tests.test_db_sync import (
    Record,
    _create,
    changes,
    inventory_streams,
    model_of,
    pipeline_doc,
    rows_of,
    same,
    unique,
)

KEYS = {"orders": "order_number", "customers": "id", "products": "id"}
SHIFT = 50_000  # the mixed topic's customers: keys of their own


def _shifted(records: list[Record], field: str) -> list[Record]:
    """The records with `field` moved by SHIFT in the key and in before/after: other rows."""
    out: list[Record] = []
    for partition, key, value, headers in records:
        k = json.loads(key) if key is not None else None
        if k is not None:
            k["payload"][field] += SHIFT
        v = json.loads(value) if value is not None else None
        if v is not None:
            for side in ("before", "after"):
                if v["payload"][side] is not None:
                    v["payload"][side][field] += SHIFT
        out.append((partition, json.dumps(k).encode() if k else None, json.dumps(v).encode() if v else None, headers))
    return out


def _database(bootstrap: str, prefix: str) -> dict[str, dict[int, dict[str, Any]]]:
    """Three topics into three tables (one bad record that names no table among the orders);
    the models of the tables."""
    streams = inventory_streams()
    orders = changes(streams["orders"], seed=1, count=40)
    customers = changes(streams["customers"], seed=2, count=40)
    more = _shifted(changes(streams["customers"], seed=3, count=30), "id")
    products = changes(streams["products"], seed=4, count=30)
    mixed = [r for pair in zip(products, more, strict=False) for r in pair]
    mixed += products[len(more) :] + more[len(products) :]
    bad = (0, None, json.dumps({"payload": {"op": "c", "after": {"id": 1}, "source": {"db": "x"}}}).encode(), None)
    orders.insert(30, bad)  # a batch with a dead letter runs on the Spark path, after the flight lands
    for name, records in (("orders", orders), ("customers", customers), ("mixed", mixed)):
        _create(bootstrap, f"{prefix}.inventory.{name}")
        produce(bootstrap, f"{prefix}.inventory.{name}", records)
    return {
        "orders": model_of(orders),
        "customers": {**model_of(customers), **model_of(more)},
        "products": model_of(products),
    }


def _batch_files(warehouse: Path, namespace: str, name: str, batch_id: int) -> list[Path]:
    return list((warehouse / namespace).rglob(f"icetide-{name}-b{batch_id:012d}-*.parquet"))


def _check_tables(spark: Any, namespace: str, models: dict[str, dict[int, dict[str, Any]]]) -> None:
    for t, model in models.items():
        assert same(rows_of(spark, f"lake.{namespace}.{t}", KEYS[t]), model), t
    dead = spark.table(f"lake.{namespace}.dead_letter").collect()
    assert len(dead) == 1 and "source.table is missing" in dead[0]["error"]


@pytest.mark.parametrize("overlap", [True, False])
def test_a_backlog_of_many_tables_is_written_while_the_batch_before_commits(
    spark: Any, kafka_broker: str, warehouse: str, overlap: bool
) -> None:
    """With a backlog, batch N+1's files are on disk by the time batch N is reported committed;
    with overlap_commit off, never. Either way batch ids run 1..N, every table equals its model,
    the dead letter is held once, and each table's commits come in batch order."""
    from tests.commands import warehouse_reader

    prefix, namespace = f"db{unique()}", f"ovl{unique()}"
    name = f"ovl_{str(overlap).lower()}"
    models = _database(kafka_broker, prefix)
    trigger = {"interval": "1s", "max_records": 24, "overlap_commit": overlap}
    runner = SyncRunner(
        PipelineConfig.from_dict(pipeline_doc(name, kafka_broker, prefix, namespace, trigger=trigger)), spark
    )
    next_written: list[bool] = []

    def on_batch(metrics: Any) -> None:
        next_written.append(bool(_batch_files(Path(warehouse), namespace, name, metrics.batch_id + 1)))

    summary = runner.run(once=True, handle_signals=False, on_batch=on_batch)
    runner.topics.close()
    batches = summary.batches
    assert [b.batch_id for b in batches] == list(range(1, len(batches) + 1))
    assert len(batches) >= 6 and all(b.committed for b in batches)
    paths = [b.path for b in batches]
    assert "sync_fast" in paths and "sync_spark" in paths, paths  # the dead letter's batch
    assert any(next_written) == overlap, next_written
    assert any(b.overlapped for b in batches) == overlap, batches  # the metrics line says so
    reader = warehouse_reader(spark, "lake", warehouse)
    _check_tables(reader, namespace, models)
    for t in models:
        ids = [
            r["batch"]
            for r in reader.sql(
                "SELECT CAST(summary['icetide.batch-id'] AS INT) AS batch "
                f"FROM lake.{namespace}.{t}.snapshots "
                "WHERE summary['icetide.batch-id'] IS NOT NULL ORDER BY committed_at"  # not maintenance's commits
            ).collect()
        ]
        assert ids, t
        assert ids == sorted(ids) and len(ids) == len(set(ids)), (t, ids)


def test_a_failed_commit_in_flight_discards_the_batch_written_after_it(
    spark: Any, kafka_broker: str, warehouse: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batch 2's commit of the orders table fails on the commit thread (a conflict past its
    retries, injected at the sink's commit) while batch 3 is written from where batch 2 would
    leave the tables: batch 3's files are deleted, the run restarts from what the tables hold,
    and every table ends equal to its model."""
    from tests.commands import warehouse_reader

    prefix, namespace = f"db{unique()}", f"ovlf{unique()}"
    name = "ovl_fail"
    models = _database(kafka_broker, prefix)
    doc = pipeline_doc(
        name,
        kafka_broker,
        prefix,
        namespace,
        trigger={"interval": "1s", "max_records": 24},
        restart={"max_attempts": 2, "backoff": "0.1s"},
    )
    failed: list[int] = []
    commit_files = UpsertSink.commit_files

    def failing(sink: UpsertSink, batch_id: int, files: Any, *args: Any, **kwargs: Any) -> Any:
        if batch_id == 2 and sink.table_name.endswith(".orders") and not failed:
            failed.append(batch_id)
            raise CommitConflictError(f"batch 2 of {sink.table_name}: injected conflict past the retries")
        return commit_files(sink, batch_id, files, *args, **kwargs)

    monkeypatch.setattr(UpsertSink, "commit_files", failing)
    discarded: list[int] = []
    discard = SyncFastPath.discard

    def recording(batch_id: int, sinks: Any) -> None:
        discarded.append(batch_id)
        discard(batch_id, sinks)

    monkeypatch.setattr(SyncFastPath, "discard", staticmethod(recording))
    runner = SyncRunner(PipelineConfig.from_dict(doc), spark)
    written_when_failed: list[int] = []
    summary = runner.run(
        once=True,
        handle_signals=False,
        on_restart=lambda _: written_when_failed.append(len(_batch_files(Path(warehouse), namespace, name, 3))),
    )
    runner.topics.close()
    assert failed == [2] and len(summary.restarts) == 1 and "injected conflict" in summary.restarts[0].error
    assert discarded == [3] and written_when_failed == [0]  # batch 3 was written from batch 2's ends, then deleted
    reader = warehouse_reader(spark, "lake", warehouse)
    _check_tables(reader, namespace, models)
    for t in models:  # no file left behind that no snapshot references
        location = Path(warehouse) / namespace / t / "data"
        referenced = {
            r[0].replace("file:", "")
            for r in reader.sql(f"SELECT file_path FROM lake.{namespace}.{t}.all_files").collect()
        }
        assert {str(p) for p in location.rglob("*.parquet")} <= referenced, t


def test_a_backlog_that_feeds_no_table_commits_without_a_restart(spark: Any, kafka_broker: str) -> None:
    """A topic the pattern matches whose backlog is only tombstones (a compacted topic's deletes,
    as Debezium sends after each delete: value null) feeds no table: each full batch commits the
    dead-letter table's position alone, and, with nothing to overlap, never reads as a commit
    another writer took (which would restart the run)."""
    prefix, namespace = f"db{unique()}", f"ovlt{unique()}"
    customers = inventory_streams()["customers"]
    tombstones: list[Record] = [(0, customers.key(1000 + i), None, None) for i in range(40)]
    topic = f"{prefix}.inventory.customers"
    _create(kafka_broker, topic)
    produce(kafka_broker, topic, tombstones)
    trigger = {"interval": "1s", "max_records": 10}
    doc = pipeline_doc("ovl_tomb", kafka_broker, prefix, namespace, trigger=trigger)
    runner = SyncRunner(PipelineConfig.from_dict(doc), spark)
    summary = runner.run(once=True, handle_signals=False)
    lag = runner.lag()
    runner.topics.close()
    assert summary.restarts == [] and len(summary.batches) >= 4
    assert [b.batch_id for b in summary.batches] == list(range(1, len(summary.batches) + 1))
    assert runner.table_names() == [] and lag == 0
    assert runner.state.dead_letter_position == {topic: {"0": len(tombstones)}}  # every tombstone passed once


def test_a_table_that_fails_to_write_leaves_no_file_of_the_batch(
    spark: Any, kafka_broker: str, warehouse: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """On the Spark path (`fast_path: off`) every table of a batch writes its files before any
    commits. Batch 1's writes of orders and products fail (a full disk, injected at the sink's
    `stage`): the run stops with the first error, the second is logged, the files the customers
    table wrote are deleted and no table commits. The next run lands every table equal to its
    model, the dead letter once."""
    from tests.commands import warehouse_reader

    prefix, namespace = f"db{unique()}", f"ovlw{unique()}"
    name = "ovl_write"
    models = _database(kafka_broker, prefix)
    doc = pipeline_doc(name, kafka_broker, prefix, namespace, trigger={"interval": "1s", "max_records": 100})
    doc["fast_path"] = "off"
    stage, delete_files = UpsertSink.stage, UpsertSink.delete_files
    deleted: list[tuple[str, int, str]] = []

    def failing(sink: UpsertSink, df: Any, *, batch_id: int, **kwargs: Any) -> Any:
        if batch_id == 1 and sink.table_name.endswith((".orders", ".products")):
            raise OSError(f"injected: no space left on device writing {sink.table_name}")
        return stage(sink, df, batch_id=batch_id, **kwargs)

    def recording(sink: UpsertSink, files: Any, *, reason: str) -> None:
        deleted.append((sink.table_name.rsplit(".", 1)[-1], len(files), reason))
        delete_files(sink, files, reason=reason)

    monkeypatch.setattr(UpsertSink, "stage", failing)
    monkeypatch.setattr(UpsertSink, "delete_files", recording)
    runner = SyncRunner(PipelineConfig.from_dict(doc), spark)
    with caplog.at_level("WARNING", logger="icetide.pipeline.sync.spark_path"), pytest.raises(OSError, match="orders"):
        runner.run(once=True, handle_signals=False)
    runner.topics.close()
    assert f"writing lake.{namespace}.products failed too: injected" in caplog.text
    reason = "another table of the batch failed to write"
    assert [(t, why) for t, n, why in deleted if n] == [("customers", reason)]
    for t in models:  # the dead-letter table may hold batch 1's; no table of the model does
        assert not list((Path(warehouse) / namespace / t).rglob(f"icetide-{name}-b{1:012d}-*")), t
    monkeypatch.undo()
    again = SyncRunner(PipelineConfig.from_dict(doc), spark)
    summary = again.run(once=True, handle_signals=False)
    again.topics.close()
    # Batch 1's dead-letter commit came first (it holds the registry): the tables' batch 1 runs as 2.
    assert summary.batches[0].batch_id == 2 and summary.restarts == []
    _check_tables(warehouse_reader(spark, "lake", warehouse), namespace, models)
