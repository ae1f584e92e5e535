"""A whole database into Iceberg through one pipeline: one Kafka topic per source table on a real
broker (Apache Kafka), one Iceberg table each, checked against a reference model of every
source table (a dict key -> row) after each batch, across SIGKILLs, a topic created while the
pipeline runs, and a new column in one table only.

The change events are built from real Debezium messages: the MySQL `orders` and `customers`
messages (and their keys) of tests/data/debezium/debezium_server_iceberg_mysql_inventory.jsonl
(debezium-server-iceberg's test resources) and the `products` message of
tests/data/debezium/flink_mysql_products_schema.jsonl (Debezium's tutorial, via Flink); each
stream reuses its message's Connect schema, source block and key schema, with rows and binlog
positions of its own.
"""

from __future__ import annotations

import copy
import json
import random
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

import pytest
import yaml

from icetide.config.pipeline import PipelineConfig, load_config
from icetide.errors import ConfigError, IcetideError, one_line
from icetide.pipeline.batch_path import FallbackReason
from icetide.pipeline.sync.runner import SyncBatchMetrics, SyncRunner
from tests.commands import crash_tour, run_cli, warehouse_reader
from tests.debezium_messages import messages
from tests.kafka_broker import create_topic, produce
from tests.test_prometheus import _scrape

INVENTORY = "debezium_server_iceberg_mysql_inventory"  # line 1: orders (op r), line 2: customers (op d)
Record = tuple[int, bytes | None, bytes | None, None]


class TableStream:
    """Changes to one MySQL table in the schema, source block and key schema of a real message."""

    def __init__(self, message: dict[str, Any], key_schema: dict[str, Any]) -> None:
        self.schema = copy.deepcopy(message["schema"])
        self.source = message["payload"]["source"]
        self.table = self.source["table"]
        self.key_schema = key_schema
        self.key_field = key_schema["fields"][0]["field"]
        self.pos = 1000

    def add_column(self, name: str, connect_type: str) -> None:
        """The source table gains a nullable column (ALTER TABLE ... ADD COLUMN)."""
        for part in self.schema["fields"]:
            if part["field"] in ("before", "after"):
                part["fields"].append({"type": connect_type, "optional": True, "field": name})

    def change(self, op: str, before: dict[str, Any] | None, after: dict[str, Any] | None) -> bytes:
        self.pos += 100
        source = {**self.source, "file": "mysql-bin.000003", "pos": self.pos, "row": 0, "snapshot": "false"}
        payload = {"before": before, "after": after, "source": source, "op": op, "ts_ms": 1718486007972}
        return json.dumps({"schema": self.schema, "payload": payload}).encode()

    def key(self, value: int) -> bytes:
        return json.dumps({"schema": self.key_schema, "payload": {self.key_field: value}}).encode()


def inventory_streams() -> dict[str, TableStream]:
    """orders and customers from the debezium-server-iceberg messages, products from Flink's."""
    orders, customers = messages(INVENTORY)
    order_key, customer_key = (m["schema"] for m in messages(f"{INVENTORY}_keys"))
    products = messages("flink_mysql_products_schema")[0]
    product_key = {
        "type": "struct",
        "name": "dbserver1.inventory.products.Key",
        "optional": False,
        "fields": [{"type": "int32", "optional": False, "field": "id"}],
    }
    streams = [TableStream(orders, order_key), TableStream(customers, customer_key), TableStream(products, product_key)]
    return {s.table: s for s in streams}


def new_row(table: str, key: int, version: int) -> dict[str, Any]:
    if table == "orders":
        return {
            "order_number": key,
            "order_date": 16852 + version,
            "purchaser": 1001 + version % 4,
            "quantity": version % 7 + 1,
            "product_id": 101 + key % 9,
        }
    if table == "customers":
        return {
            "id": key,
            "first_name": f"f{key}",
            "last_name": f"l{version}",
            "email": f"c{key}.{version}@example.com",
        }
    return {
        "id": key,
        "name": f"p{key}",
        "description": None if version % 2 else f"v{version}",
        "weight": 0.5 + version,
    }


def changes(
    stream: TableStream, seed: int, count: int, *, extra: Callable[[int], dict[str, Any]] | None = None
) -> list[Record]:
    """`count` change events (inserts, updates, deletes followed by their tombstones) of one table."""
    rng = random.Random(seed)
    live: dict[int, dict[str, Any]] = {}
    out: list[Record] = []
    next_key = 1000
    while len(out) < count:
        roll = rng.random()
        if not live or roll < 0.45:
            next_key += 1
            row = {**new_row(stream.table, next_key, len(out)), **(extra(len(out)) if extra else {})}
            live[next_key] = row
            out.append((0, stream.key(next_key), stream.change("c", None, row), None))
        elif roll < 0.8:
            key = rng.choice(sorted(live))
            row = {**new_row(stream.table, key, len(out)), **(extra(len(out)) if extra else {})}
            out.append((0, stream.key(key), stream.change("u", live[key], row), None))
            live[key] = row
        else:
            key = rng.choice(sorted(live))
            out.append((0, stream.key(key), stream.change("d", live.pop(key), None), None))
            out.append((0, stream.key(key), None, None))  # the tombstone after a delete
    return out


def model_of(records: list[Record], upto: int | None = None) -> dict[int, dict[str, Any]]:
    """The reference model: the source table after the records below offset `upto` (all by default)."""
    model: dict[int, dict[str, Any]] = {}
    for offset, (_, _, value, _) in enumerate(records):
        if upto is not None and offset >= upto:
            break
        key = records[offset][1]
        if value is None or key is None:
            continue  # a tombstone, or the dead-letter test's record that names no table
        event = json.loads(value)["payload"]
        key_field = next(iter(json.loads(key)["payload"]))
        if event["op"] == "d":
            model.pop(event["before"][key_field], None)
        else:
            model[event["after"][key_field]] = event["after"]
    return model


def rows_of(spark: Any, table: str, key: str) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for r in spark.table(table).collect():
        row = r.asDict()
        assert row[key] not in out, f"duplicate key {row[key]} in {table}"
        if isinstance(row.get("order_date"), date):
            row["order_date"] = (row["order_date"] - date(1970, 1, 1)).days
        out[row[key]] = row
    return out


def same(table_rows: dict[int, dict[str, Any]], model: dict[int, dict[str, Any]]) -> bool:
    """Equal, a column the model lacks reading NULL (rows written before the column existed)."""
    if set(table_rows) != set(model):
        return False
    return all({**{c: None for c in table_rows[k]}, **model[k]} == table_rows[k] for k in model)


def pipeline_doc(name: str, bootstrap: str, prefix: str, namespace: str, **extra: Any) -> dict[str, Any]:
    return {
        "pipeline": name,
        "source": {
            "kafka": {
                "bootstrap_servers": bootstrap,
                "topic_pattern": prefix.replace(".", "\\.") + r"\.inventory\..*",
                "starting_offsets": "earliest",
            }
        },
        "table": {"name": f"lake.{namespace}.{{table}}"},
        "tables": {f"lake.{namespace}.orders": {"partition_by": ["bucket(4, order_number)"]}},
        "schema_evolution": True,
        "mode": "upsert",
        "dead_letter": f"lake.{namespace}.dead_letter",
        **extra,
    }


def unique() -> str:
    return uuid.uuid4().hex[:8]


def test_config_names_the_bad_key() -> None:
    base = {
        "pipeline": "p",
        "source": {"kafka": {"bootstrap_servers": "b:9092", "topic_pattern": "db\\..*"}},
        "table": {"name": "lake.inventory.{table}"},
        "dead_letter": "lake.inventory.dead_letter",
    }
    config = PipelineConfig.from_dict(base)
    assert config.routes_tables and config.format == "debezium" and config.table.schema is None
    cases = [
        ({"source": {"kafka": {"bootstrap_servers": "b", "topic": "a", "topics": ["b"]}}}, "source.kafka.topics"),
        ({"source": {"kafka": {"bootstrap_servers": "b", "topic_pattern": "("}}}, "source.kafka.topic_pattern"),
        ({"source": {"kafka": {"bootstrap_servers": "b", "topics": "a"}}}, "source.kafka.topics"),
        ({"table": {"name": "lake.inventory.{tabel}"}}, "table.name"),
        ({"table": {"name": "{db}.inventory.{table}"}}, "table.name"),
        ({"format": "json"}, "format"),
        ({"dead_letter": None}, "dead_letter"),
        ({"tables": {"lake.inventory.orders": {"partition_by": "days(ts)"}}}, "tables.lake.inventory.orders"),
        ({"tables": {"orders": {}}}, "tables.orders"),
    ]
    for change, key in cases:
        with pytest.raises(ConfigError, match=f"^{key}"):
            PipelineConfig.from_dict({**base, **change})
    orders = config.table_config("lake.inventory.orders")
    assert orders.partition_by == ()
    override = PipelineConfig.from_dict(
        {**base, "tables": {"lake.inventory.orders": {"partition_by": ["bucket(4, id)"]}}}
    )
    assert override.table_config("lake.inventory.orders").partition_by == ("bucket(4, id)",)
    assert override.table_config("lake.inventory.customers").partition_by == ()
    example = load_config(Path(__file__).resolve().parent.parent / "examples" / "inventory-sync.yaml")
    assert example.routes_tables and example.dead_letter and example.table.name == "lake.inventory.{table}"


def test_each_table_equals_its_model_after_every_batch(spark: Any, kafka_broker: str, warehouse: str) -> None:
    prefix, namespace = f"db{unique()}", f"sync{unique()}"
    streams = inventory_streams()
    records = {t: changes(s, seed=i, count=20) for i, (t, s) in enumerate(sorted(streams.items()))}
    topics = {t: f"{prefix}.inventory.{t}" for t in streams}
    for t, recs in records.items():
        _create(kafka_broker, topics[t])
        produce(kafka_broker, topics[t], recs)
    config = PipelineConfig.from_dict(
        pipeline_doc("inv", kafka_broker, prefix, namespace, trigger={"interval": "1s", "max_records": 27})
    )
    runner = SyncRunner(config, spark)
    request_close = runner.topics.close
    reader = warehouse_reader(spark, "lake", warehouse)  # uncached: sees every commit at once
    keys = {"orders": "order_number", "customers": "id", "products": "id"}
    batches = 0
    while (metrics := runner.run_batch()) is not None:
        batches += 1
        for t in streams:
            name = f"lake.{namespace}.{t}"
            held = runner.state.tables[name].position[topics[t]]["0"]
            assert same(rows_of(reader, name, keys[t]), model_of(records[t], held)), (name, metrics.batch_id)
    assert batches >= 3
    assert sorted(runner.table_names()) == sorted(f"lake.{namespace}.{t}" for t in streams)
    partitioning = spark.sql(f"DESCRIBE TABLE EXTENDED lake.{namespace}.orders").collect()
    assert any("bucket(4, order_number)" in str(r) for r in partitioning)
    from icetide.pipeline.sync.status import pipeline_status

    statuses = {s.table: s for s in pipeline_status(spark, config)}
    for t in streams:
        s = statuses[f"lake.{namespace}.{t}"]
        assert s.lag == 0 and s.rows == len(model_of(records[t])) and s.data_files > 0 and s.last_commit
        assert s.position == {topics[t]: {"0": len(records[t])}}
    assert statuses[config.dead_letter or ""].rows == 0
    from icetide.maintenance.maintain import MaintenancePolicy, maintain_tables

    passed = maintain_tables(spark, sorted(statuses), MaintenancePolicy(time_budget_seconds=0.0))
    assert len(passed.reports) == 1 and passed.next_start == 1  # a spent budget still maintains one table
    # Beside a stream, a table that cannot be maintained is named and the pass goes on.
    missing = f"lake.{namespace}.missing"
    passed = maintain_tables(spark, [missing, config.dead_letter or ""], MaintenancePolicy(), keep_going=True)
    assert list(passed.failed) == [missing] and [r.table for r in passed.reports] == [config.dead_letter]
    for t in streams:
        assert same(rows_of(reader, f"lake.{namespace}.{t}", keys[t]), model_of(records[t]))
    request_close()


def test_the_fast_path_writes_what_the_spark_path_writes(spark: Any, kafka_broker: str, warehouse: str) -> None:
    """The same topics through the sync fast path and through `fast_path: off`: after every batch
    each table equals its model, and in the end both pipelines' tables are equal. The products
    stream has a key-changing update (a DELETE of the old key and the new row) and a truncate,
    whose batch runs on the Spark path; the batches around it run on the fast path."""
    prefix = f"db{unique()}"
    streams = inventory_streams()
    records = {t: changes(s, seed=20 + i, count=24) for i, (t, s) in enumerate(sorted(streams.items()))}
    products = streams["products"]
    live = model_of(records["products"])
    old = min(live)
    moved = {**live[old], "id": 9000, "name": "renamed"}
    records["products"].append((0, products.key(9000), products.change("u", live[old], moved), None))
    records["products"] += changes(products, seed=99, count=6)[:6]
    truncate_at = len(records["products"])
    truncate = json.loads(products.change("c", None, None))
    truncate["payload"]["op"] = "t"
    records["products"].append((0, None, json.dumps(truncate).encode(), None))
    for i in range(3):
        row = new_row("products", 7000 + i, i)
        records["products"].append((0, products.key(7000 + i), products.change("c", None, row), None))
    records["products"] += changes(products, seed=7, count=30)[:30]

    def model(table: str, upto: int) -> dict[int, dict[str, Any]]:
        recs = records[table]
        if table != "products":
            return model_of(recs, upto)
        out: dict[int, dict[str, Any]] = {}
        for offset, (_, key, value, _) in enumerate(recs[:upto]):
            if value is None:
                continue
            event = json.loads(value)["payload"]
            if event["op"] == "t":
                out.clear()
            elif event["op"] == "d":
                out.pop(event["before"]["id"], None)
            else:
                if event["before"] is not None:
                    out.pop(event["before"]["id"], None)
                out[event["after"]["id"]] = event["after"]
            del offset, key
        return out

    assert truncate_at < len(records["products"])
    topics = {t: f"{prefix}.inventory.{t}" for t in streams}
    for t, recs in records.items():
        _create(kafka_broker, topics[t])
        produce(kafka_broker, topics[t], recs)
    reader = warehouse_reader(spark, "lake", warehouse)
    keys = {"orders": "order_number", "customers": "id", "products": "id"}
    paths: dict[str, list[tuple[str, str | None, str | None]]] = {}
    for kind, extra in (("fast", {}), ("spark", {"fast_path": "off"})):
        namespace = f"{kind}{unique()}"
        trigger = {"interval": "1s", "max_records": 30}
        doc = pipeline_doc(kind, kafka_broker, prefix, namespace, trigger=trigger, schema_evolution=False, **extra)
        runner = SyncRunner(PipelineConfig.from_dict(doc), spark)
        paths[kind] = []
        while (metrics := runner.run_batch()) is not None:
            assert isinstance(metrics, SyncBatchMetrics)
            paths[kind].append((metrics.path, metrics.fallback, metrics.fallback_detail))
            for t in streams:
                name = f"lake.{namespace}.{t}"
                held = runner.state.tables[name].position[topics[t]]["0"]
                assert same(rows_of(reader, name, keys[t]), model(t, held)), (kind, name, metrics.batch_id)
        runner.topics.close()
        for t in streams:
            assert same(rows_of(reader, f"lake.{namespace}.{t}", keys[t]), model(t, len(records[t])))
    assert set(paths["spark"]) == {("sync_spark", "fast_path_off", "fast_path: off")}
    assert ("sync_fast", None, None) in paths["fast"], paths["fast"]
    assert any(p[:2] == ("sync_spark", "record_for_spark") and "op 't'" in p[2] for p in paths["fast"]), paths["fast"]


def test_a_topic_of_two_tables_a_new_topic_while_running_and_a_column_added_to_one_table(
    spark: Any, kafka_broker: str, warehouse: str
) -> None:
    prefix, namespace = f"db{unique()}", f"sync{unique()}"
    streams = inventory_streams()
    first = {t: changes(streams[t], seed=3, count=12) for t in ("orders", "customers")}
    # One topic that carries two tables: the source blocks route them.
    mixed = [r for pair in zip(first["orders"], first["customers"], strict=False) for r in pair]
    mixed += first["orders"][len(first["customers"]) :] + first["customers"][len(first["orders"]) :]
    _create(kafka_broker, f"{prefix}.inventory.mixed")
    produce(kafka_broker, f"{prefix}.inventory.mixed", mixed)
    # Served metrics and maintenance on a thread of its own, over every table, beside the stream.
    doc = pipeline_doc("live", kafka_broker, prefix, namespace, trigger={"interval": "0.3s", "max_records": 1000})
    doc.update(metrics={"prometheus_port": 0}, maintenance={"every": "2s"})
    config = PipelineConfig.from_dict(doc)
    runner = SyncRunner(config, spark)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            runner.run(handle_signals=False)
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        _wait(lambda: all(_committed(runner, f"lake.{namespace}.{t}", len(mixed)) for t in first), errors)
        products = streams["products"]
        before = changes(products, seed=5, count=6)
        products.add_column("color", "string")
        after = changes(products, seed=6, count=6, extra=lambda v: {"color": f"c{v}"})
        after = [(p, k, v, ts) for p, k, v, ts in after]
        topic = f"{prefix}.inventory.products"
        _create(kafka_broker, topic)  # a topic created while the pipeline runs
        produce(kafka_broker, topic, before + after)
        _wait(lambda: _committed(runner, f"lake.{namespace}.products", len(before) + len(after)), errors)
        _wait(lambda: len({r.table for r in runner.maintenance_runs}) >= 2, errors)
        assert runner.prometheus is not None and runner.prometheus.port
        port = runner.prometheus.port
        # The series count the thread's passes between batches: wait for the next loop to count them.
        _wait(
            lambda: sum(n for (name, _), n in _scrape(port).items() if name == "icetide_maintenance_runs_total") >= 2,
            errors,
        )
        scraped = _scrape(port)
    finally:
        runner.stop()
        thread.join(60)
    assert not errors, errors
    for t in first:
        labels = (("pipeline", "live"), ("table", f"lake.{namespace}.{t}"))
        routed = sum(1 for _, _, value, _ in first[t] if value is not None)  # tombstones route nowhere
        assert scraped[("icetide_records_in_total", labels)] == routed
        assert scraped[("icetide_rows_written_total", labels)] > 0
        assert scraped[("icetide_commit_seconds_count", labels)] >= 1
    mixed_lag = (("partition", f"{prefix}.inventory.mixed/0"), ("pipeline", "live"), ("source", "kafka"))
    assert scraped[("icetide_source_lag", mixed_lag)] == 0
    fed = {f"lake.{namespace}.{t}" for t in streams} | {config.dead_letter}
    runs = "icetide_maintenance_runs_total"
    maintained = {dict(labels)["table"]: n for (name, labels), n in scraped.items() if name == runs}
    assert {r.table for r in runner.maintenance_runs} <= fed and sum(maintained.values()) >= 2
    reader = warehouse_reader(spark, "lake", warehouse)
    columns = {t: reader.table(f"lake.{namespace}.{t}").columns for t in streams}
    assert "color" in columns["products"]
    assert "color" not in columns["orders"] and "color" not in columns["customers"]
    products_model = model_of(before + after)
    # The two product streams share ids: the model replays both in order, as the table did.
    assert same(rows_of(reader, f"lake.{namespace}.products", "id"), products_model)
    for t in first:
        assert same(
            rows_of(reader, f"lake.{namespace}.{t}", "order_number" if t == "orders" else "id"), model_of(first[t])
        )


# after_write: batches.commit_tables, the registry committed, every table's files written, no table
# committed. A batch whose dead letters committed is read again under the next batch id.
TOUR = [
    ("after_dead_letter", "1"),  # the first batch, which creates the tables
    ("after_write", "2"),  # the first batch's records read again
    ("after_table_commit", "3"),  # one table committed, the other not
]


@pytest.mark.parametrize("stops", [TOUR, [("random", "")]], ids=["tour", "random"])
def test_every_table_equals_its_source_after_kill_9(
    spark: Any, kafka_broker: str, tmp_path: Path, stops: list[tuple[str, str]]
) -> None:
    prefix, namespace = f"db{unique()}", f"kill{unique()}"
    streams = {t: s for t, s in inventory_streams().items() if t != "products"}  # two tables keep it short
    records = {t: changes(s, seed=10 + i, count=24) for i, (t, s) in enumerate(sorted(streams.items()))}
    # One record per batch that names no table: the dead-letter table must hold each exactly once.
    bad = (
        0,
        None,
        json.dumps({"payload": {"op": "c", "after": {"id": 1}, "source": {"db": "inventory"}}}).encode(),
        None,
    )
    # The last 8 changes of each table arrive after the last kill, so the final run has batches after
    # the one with the bad records whatever the plans' sizes (the broker's ends are exact: without
    # them, what was left after the last kill fitted in one batch, the one with the bad records).
    later = {t: recs[16:] for t, recs in records.items()}
    for t, recs in records.items():
        recs.insert(8, bad)
        _create(kafka_broker, f"{prefix}.inventory.{t}")
        produce(kafka_broker, f"{prefix}.inventory.{t}", recs[:17])

    def grow() -> None:
        for t, recs in later.items():
            produce(kafka_broker, f"{prefix}.inventory.{t}", recs)

    warehouse = tmp_path / "wh"
    doc = pipeline_doc("kill", kafka_broker, prefix, namespace, warehouse=str(warehouse))
    # A random kill needs a run that goes on for a while after its first batch: smaller batches.
    doc["trigger"] = {"interval": "1s", "max_records": 5 if stops[0][0] == "random" else 14}
    config_path = tmp_path / "pipeline.yaml"
    config_path.write_text(yaml.safe_dump(doc))
    restarted = crash_tour(config_path, stops, between=grow)
    lines = [json.loads(line) for line in restarted.stdout.splitlines() if line.startswith("{")]
    paths = [line.get("path") for line in lines]
    if stops[0][0] != "random":  # a random kill may come when only the Spark path's batch is left, or none
        assert "sync_fast" in paths, [(b.get("batch_id"), b.get("path"), b.get("fallback_detail")) for b in lines]
    other = warehouse_reader(spark, "killcheck", warehouse)
    keys = {"orders": "order_number", "customers": "id", "products": "id"}
    for t in streams:
        assert same(rows_of(other, f"killcheck.{namespace}.{t}", keys[t]), model_of(records[t])), t
    dead = other.table(f"killcheck.{namespace}.dead_letter").collect()
    assert len(dead) == len(streams) and all("source.table is missing" in r["error"] for r in dead)
    status = run_cli("status", "--pipeline", str(config_path), "--json")
    assert status.returncode == 0, status.stderr[-2000:]
    listed = {s["table"]: s for s in json.loads(status.stdout)}
    assert {f"lake.{namespace}.{t}" for t in streams} < set(listed)
    assert all(listed[f"lake.{namespace}.{t}"]["lag"] == 0 for t in streams)
    # How each table's last batch ran, from its state: the fast path, or the Spark path and why.
    ran = {
        (listed[f"lake.{namespace}.{t}"]["batch_path"], listed[f"lake.{namespace}.{t}"]["fallback"]) for t in streams
    }
    reasons = {r.value for r in FallbackReason}
    assert all(
        ran_as in {("sync_fast", None)} or (ran_as[0] == "sync_spark" and ran_as[1] in reasons) for ran_as in ran
    ), ran
    assert listed[f"lake.{namespace}.dead_letter"]["batch_path"] is None  # written by the pipeline's dead letters


def test_a_failed_fast_path_job_names_the_tables_of_the_batch(spark: Any, kafka_broker: str, warehouse: str) -> None:
    """A batch whose fast path job fails for real (a table's data directory is a file: no task can
    write under it, not even as root) fails with one line naming the pipeline and the tables the
    batch feeds, and the root cause; nothing is committed."""
    prefix, namespace = f"db{unique()}", f"sync{unique()}"
    streams = inventory_streams()
    records = {t: changes(streams[t], seed=i, count=8) for i, t in enumerate(["customers", "products"])}
    topics = {t: f"{prefix}.inventory.{t}" for t in records}
    for t, recs in records.items():
        _create(kafka_broker, topics[t])
        produce(kafka_broker, topics[t], recs[:4])
    config = PipelineConfig.from_dict(pipeline_doc("unwritable_sync", kafka_broker, prefix, namespace))
    runner = SyncRunner(config, spark)
    assert runner.run_batch() is not None  # creates both tables
    data = Path(warehouse) / namespace / "products" / "data"
    shutil.rmtree(data)
    data.write_text("a file where the table's data directory was")
    produce(kafka_broker, topics["products"], records["products"][4:])  # only products is in batch 2
    with pytest.raises(IcetideError) as failed:
        runner.run_batch()
    line = one_line(failed.value)
    assert line.startswith(f"pipeline unwritable_sync, table lake.{namespace}.products: writing batch 2 failed: "), line
    assert str(data) in line and "\n" not in line, line
    runner.close()
    again = SyncRunner(config, spark)  # what the tables hold
    assert again.last_committed_batch() == 1
    again.close()


def bad_changes(stream: TableStream, *, utf8: bool = False) -> list[tuple[bytes, str]]:
    """Change events of the stream's table that the Spark path makes dead letters, each with its
    error (a key the good changes never use; no message key, so the models skip them). `utf8`:
    also one whose source block's `table`, which the route reads, holds bytes that are not UTF-8
    (issue 49: a dead letter naming it, never a table named from U+FFFD); the sync fast path,
    which routes by the parsed source block, hands its batch to the Spark path."""
    key = stream.key_field
    row = new_row(stream.table, 5000, 0)
    out = [
        (stream.change("c", None, {**row, key: "x"}), f"column {key}: 'x' is not an INT"),
        (stream.change("x", None, row), "unknown op 'x'"),
        (stream.change("m", None, None), "unsupported op 'm' (message)"),
        (stream.change("d", None, None), "before is missing for op 'd' (a delete needs the key)"),
        (stream.change("u", row, None), "after is missing for op 'u'"),
    ]
    if utf8:  # (bytes that are not UTF-8 in a value: tests/test_cdc_runner.py, on the one-table runner)
        table = stream.source["table"].encode()
        in_route = stream.change("c", None, row).replace(b'"table": "%s"' % table, b'"table": "%s\xff"' % table)
        assert in_route.count(b"\xff") == 1
        at = in_route.index(b"\xff")
        error = f"payload is not valid UTF-8 at byte {at}, source.table among its bad bytes: cannot route the record"
        out.append((in_route, error + " to a table"))
    return out


def with_bad(records: list[Record], bad: list[tuple[bytes, str]], every: int) -> list[Record]:
    """`records` with a bad record after every `every` of them (the rest at the end)."""
    out: list[Record] = []
    rest = [(0, None, value, None) for value, _ in bad]
    for i, record in enumerate(records):
        if i % every == every - 1 and rest:
            out.append(rest.pop(0))
        out.append(record)
    return out + rest


def dead_letters(reader: Any, table: str) -> list[tuple[str, str, str]]:
    return sorted((r["payload"], r["error"], r["source_position"]) for r in reader.table(table).collect())


def test_bad_records_stay_on_the_sync_fast_path_with_the_spark_paths_dead_letters(
    spark: Any, kafka_broker: str, warehouse: str
) -> None:
    """Bad records of two tables in most batches: every batch runs on the sync fast path (but the
    one with a record whose bytes are not UTF-8, which it hands to the Spark path), which
    commits the dead letters the Spark path (`fast_path: off`) commits for the same topics,
    payload, error and position alike, and the bad-record counts of the metrics; each table
    equals its model after every batch."""
    prefix = f"db{unique()}"
    streams = {t: s for t, s in inventory_streams().items() if t != "products"}
    records = {t: changes(s, seed=40 + i, count=20) for i, (t, s) in enumerate(sorted(streams.items()))}
    bad = {t: bad_changes(s, utf8=t == "customers") for t, s in streams.items()}
    topics = {t: f"{prefix}.inventory.{t}" for t in streams}
    for t, recs in records.items():
        _create(kafka_broker, topics[t])
        produce(kafka_broker, topics[t], with_bad(recs, bad[t], every=4))
    reader = warehouse_reader(spark, "lake", warehouse)
    keys = {"orders": "order_number", "customers": "id"}
    letters: dict[str, list[tuple[str, str, str]]] = {}
    for kind, extra in (("fast", {}), ("spark", {"fast_path": "off"})):
        namespace = f"{kind}{unique()}"
        doc = pipeline_doc(
            kind, kafka_broker, prefix, namespace, trigger={"interval": "1s", "max_records": 12}, **extra
        )
        runner = SyncRunner(PipelineConfig.from_dict(doc), spark)
        batches: list[SyncBatchMetrics] = []
        while (metrics := runner.run_batch()) is not None:
            assert isinstance(metrics, SyncBatchMetrics)
            batches.append(metrics)
            for t in streams:
                name = f"lake.{namespace}.{t}"
                read = runner.state.tables[name].position[topics[t]]["0"]
                good = [r for r in with_bad(records[t], bad[t], every=4)[:read] if r[1] is not None or r[2] is None]
                assert same(rows_of(reader, name, keys[t]), model_of(good)), (kind, name, metrics.batch_id)
        runner.topics.close()
        expected = ("sync_fast", None) if kind == "fast" else ("sync_spark", "fast_path_off")
        handed = {("sync_spark", "record_for_spark")} if kind == "fast" else set()
        assert expected in {(b.path, b.fallback) for b in batches} <= {expected, *handed}, batches
        assert sum(b.bad_records for b in batches) == sum(len(b) for b in bad.values()), batches
        assert sum(1 for b in batches if b.bad_records) >= 3, batches
        letters[kind] = dead_letters(reader, f"lake.{namespace}.dead_letter")
    assert letters["fast"] == letters["spark"]
    assert sorted(e for _, e, _ in letters["fast"]) == sorted(e for b in bad.values() for _, e in b)


def test_fast_path_dead_letters_are_written_once_across_kill_9(spark: Any, kafka_broker: str, tmp_path: Path) -> None:
    """A kill after batch 2 committed its dead letters (before any table), and in the restart
    (which reads those records again as batch 3) after one table committed: the batch read again
    on the fast path leaves out the dead letters already committed, so each bad record is in the
    dead-letter table exactly once, and every table equals its model."""
    prefix, namespace = f"db{unique()}", f"kill{unique()}"
    streams = {t: s for t, s in inventory_streams().items() if t != "products"}
    records = {t: changes(s, seed=50 + i, count=16) for i, (t, s) in enumerate(sorted(streams.items()))}
    bad = {t: bad_changes(s) for t, s in streams.items()}
    for t, recs in records.items():
        _create(kafka_broker, f"{prefix}.inventory.{t}")
        produce(kafka_broker, f"{prefix}.inventory.{t}", with_bad(recs, bad[t], every=3))
    warehouse = tmp_path / "wh"
    doc = pipeline_doc("kill", kafka_broker, prefix, namespace, warehouse=str(warehouse))
    doc["trigger"] = {"interval": "1s", "max_records": 14}
    config_path = tmp_path / "pipeline.yaml"
    config_path.write_text(yaml.safe_dump(doc))
    restarted = crash_tour(config_path, [("after_dead_letter", "2"), ("after_table_commit", "3")])
    paths = [json.loads(line).get("path") for line in restarted.stdout.splitlines() if line.startswith("{")]
    assert paths and set(paths) == {"sync_fast"}, paths
    other = warehouse_reader(spark, "killcheck", warehouse)
    keys = {"orders": "order_number", "customers": "id"}
    for t in streams:
        assert same(rows_of(other, f"killcheck.{namespace}.{t}", keys[t]), model_of(records[t])), t
    dead = dead_letters(other, f"killcheck.{namespace}.dead_letter")
    assert len({where for _, _, where in dead}) == len(dead)
    assert sorted(e for _, e, _ in dead) == sorted(e for b in bad.values() for _, e in b)


def _create(bootstrap: str, name: str) -> None:
    create_topic(bootstrap, 1, name=name)  # returns once the partition has its leader


def _committed(runner: SyncRunner, table: str, offsets: int) -> bool:
    state = runner.state.tables.get(table)
    return state is not None and any(p.get("0", 0) >= offsets for p in state.position.values())


def _wait(done: Callable[[], bool], errors: list[BaseException], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert not errors, errors
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.3)
