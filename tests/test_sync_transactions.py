"""Whole source transactions: with Debezium's transaction metadata on, a database sync commits no
part of a source transaction, and `icetide.read_consistent` never shows a torn one, also while
the sync is killed with SIGKILL mid-batch.

The messages are in Debezium's own format:
- change events: the JSON converter's envelope of the MySQL `orders` and `customers` messages of
  tests/data/debezium/debezium_server_iceberg_mysql_inventory.jsonl (Debezium 2.7, whose envelope
  schema has the `transaction` field, an `event.block` struct of `id`, `total_order`,
  `data_collection_order`) and of the `products` message of flink_mysql_products_schema.jsonl (given
  the same `transaction` field), with a `transaction` block as debezium/debezium's
  `TransactionMonitor` (debezium-core, io.debezium.pipeline.txmetadata) fills it: the transaction's
  id, the event's position in the transaction and within its data collection;
- the transaction topic `<topic.prefix>.transaction`: BEGIN and END events keyed by the
  transaction id (`TransactionMetadataKey`), valued as `TransactionMetadataValue` (`status`, `id`,
  `event_count`, `data_collections` of `event.collection` structs {`data_collection`,
  `event_count`}, `ts_ms`), the schemas of debezium-core's `SchemaFactory` and the example of
  documentation/modules/ROOT/pages/connectors/postgresql.adoc ("Transaction metadata"). A MySQL
  data collection is named `db.table`.
"""

from __future__ import annotations

import copy
import itertools
import json
import random
import select
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

import icetide
from icetide.config.pipeline import PipelineConfig
from icetide.errors import ConfigError
from icetide.pipeline.sync.state import SyncState, TableState
from icetide.pipeline.sync.transactions import (
    ChangeEvent,
    TransactionEnd,
    boundary,
    change_event,
    replay,
    transaction_floor,
    whole_transaction_ends,
)
from icetide.sources.kafka_reader import OffsetRange
from icetide.sources.kafka_topics import TopicsPlan
from tests.commands import ROOT, run_cli, warehouse_reader
from tests.debezium_messages import messages
from tests.kafka_broker import create_topic, produce

INVENTORY = "debezium_server_iceberg_mysql_inventory"
TABLES = ("customers", "orders", "products")
KEYS = {"orders": "order_number", "customers": "id", "products": "id"}


def _transaction_field() -> dict[str, Any]:
    """The envelope's `transaction` field as the real Debezium 2.7 message declares it."""
    schema = messages(INVENTORY)[0]["schema"]
    return copy.deepcopy(next(f for f in schema["fields"] if f["field"] == "transaction"))


TRANSACTION_KEY_SCHEMA = {
    "type": "struct",
    "fields": [{"type": "string", "optional": False, "field": "id"}],
    "optional": False,
    "name": "io.debezium.connector.common.TransactionMetadataKey",
    "version": 1,
}
TRANSACTION_VALUE_SCHEMA = {
    "type": "struct",
    "fields": [
        {"type": "string", "optional": False, "field": "status"},
        {"type": "string", "optional": False, "field": "id"},
        {"type": "int64", "optional": True, "field": "event_count"},
        {
            "type": "array",
            "items": {
                "type": "struct",
                "fields": [
                    {"type": "string", "optional": False, "field": "data_collection"},
                    {"type": "int64", "optional": False, "field": "event_count"},
                ],
                "optional": True,
                "name": "event.collection",
                "version": 1,
            },
            "optional": True,
            "field": "data_collections",
        },
        {"type": "int64", "optional": False, "field": "ts_ms"},
    ],
    "optional": False,
    "name": "io.debezium.connector.common.TransactionMetadataValue",
    "version": 1,
}


class Source:
    """Three MySQL tables changed by transactions, as Debezium writes them to Kafka."""

    def __init__(self, prefix: str) -> None:
        orders, customers = messages(INVENTORY)
        order_key, customer_key = (m["schema"] for m in messages(f"{INVENTORY}_keys"))
        products = messages("flink_mysql_products_schema")[0]
        product_key = {
            "type": "struct",
            "name": "dbserver1.inventory.products.Key",
            "optional": False,
            "fields": [{"type": "int32", "optional": False, "field": "id"}],
        }
        self.prefix = prefix
        self.streams: dict[str, tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = {}
        for message, key_schema in ((orders, order_key), (customers, customer_key), (products, product_key)):
            schema = copy.deepcopy(message["schema"])
            if not any(f["field"] == "transaction" for f in schema["fields"]):
                schema["fields"].insert(3, _transaction_field())
            source = message["payload"]["source"]
            self.streams[source["table"]] = (schema, source, key_schema)
        self.pos = 1000

    def topic(self, table: str) -> str:
        return f"{self.prefix}.inventory.{table}"

    @property
    def transaction_topic(self) -> str:
        return f"{self.prefix}.transaction"

    def row(self, table: str, key: int, version: int) -> dict[str, Any]:
        if table == "orders":
            return {"order_number": key, "order_date": 16852, "purchaser": 1001, "quantity": version, "product_id": 101}
        if table == "customers":
            return {"id": key, "first_name": f"f{key}", "last_name": f"v{version}", "email": f"c{key}@example.com"}
        return {"id": key, "name": f"p{key}", "description": None, "weight": version + 0.5}

    def event(
        self, table: str, op: str, key: int, before: int | None, after: int | None, txn: dict[str, Any] | None
    ) -> tuple[int, bytes, bytes, None]:
        schema, source, key_schema = self.streams[table]
        self.pos += 100
        source = {**source, "file": "mysql-bin.000003", "pos": self.pos, "row": 0, "snapshot": "false"}
        payload = {
            "before": self.row(table, key, before) if before is not None else None,
            "after": self.row(table, key, after) if after is not None else None,
            "source": source,
            "transaction": txn,
            "op": op,
            "ts_ms": 1718486007972,
        }
        key_field = key_schema["fields"][0]["field"]
        key_bytes = json.dumps({"schema": key_schema, "payload": {key_field: key}}).encode()
        return (0, key_bytes, json.dumps({"schema": schema, "payload": payload}).encode(), None)

    def boundary(self, status: str, txn: str, counts: dict[str, int] | None) -> tuple[int, bytes, bytes, None]:
        value = {
            "status": status,
            "id": txn,
            "event_count": sum(counts.values()) if counts else None,
            "data_collections": [{"data_collection": c, "event_count": n} for c, n in counts.items()]
            if counts
            else None,
            "ts_ms": 1718486007972,
        }
        key = {"schema": TRANSACTION_KEY_SCHEMA, "payload": {"id": txn}}
        return (
            0,
            json.dumps(key).encode(),
            json.dumps({"schema": TRANSACTION_VALUE_SCHEMA, "payload": value}).encode(),
            None,
        )

    def snapshot(self, keys: range) -> dict[str, list[tuple[int, bytes, bytes, None]]]:
        """The initial snapshot's reads (op r), which belong to no transaction."""
        return {t: [self.event(t, "r", k, None, 0, None) for k in keys] for t in TABLES}

    def transaction(self, k: int) -> tuple[str, dict[str, list[tuple[int, bytes, bytes, None]]], dict[str, int]]:
        """Transaction k: in each table, key k-1 updated to version k and key k inserted at version k."""
        txn = f"file=mysql-bin.000003,pos={self.pos}"
        events: dict[str, list[tuple[int, bytes, bytes, None]]] = {}
        total = 0
        for t in TABLES:
            changes = [("u", k - 1, k - 1, k)] if k > 1 else []
            changes.append(("c", k, None, k))
            events[t] = []
            for order, (op, key, before, after) in enumerate(changes, 1):
                total += 1
                block = {"id": txn, "total_order": total, "data_collection_order": order}
                events[t].append(self.event(t, op, key, before, after, block))
        return txn, events, {f"inventory.{t}": len(events[t]) for t in TABLES}


def expected(applied: int, snapshot_keys: range) -> dict[int, int]:
    """Every table's key -> version once the first `applied` transactions landed."""
    out = dict.fromkeys(snapshot_keys, 0)
    for k in range(1, applied + 1):
        if k > 1:
            out[k - 1] = k
        out[k] = k
    return out


def versions(frame: Any, table: str) -> dict[int, int]:
    out = {}
    for r in frame.collect():
        if table == "orders":
            out[int(r["order_number"])] = int(r["quantity"])
        elif table == "customers":
            out[int(r["id"])] = int(str(r["last_name"])[1:])
        else:
            out[int(r["id"])] = int(r["weight"])
    return out


# -- the cut, on the driver ---------------------------------------------------------------------


def test_a_batch_ends_before_the_first_record_of_a_transaction_it_cannot_land_whole() -> None:
    source = Source("dbserver1")
    txn, events, counts = source.transaction(2)
    parsed = change_event(7, events["orders"][0][2])
    assert parsed == ChangeEvent(7, txn, ("inventory.orders",))
    assert change_event(8, None) == ChangeEvent(8, None)  # a tombstone
    assert change_event(9, source.snapshot(range(1))["orders"][0][2]).transaction is None
    status, found, end = boundary(source.boundary("END", txn, counts)[2]) or ("", "", None)
    assert (status, found) == ("END", txn) and end == TransactionEnd(txn, 6, counts)
    assert boundary(source.boundary("BEGIN", txn, None)[2]) == ("BEGIN", txn, None)

    def e(offset: int, t: str | None, table: str) -> ChangeEvent:
        return ChangeEvent(offset, t, (f"inventory.{table}",))

    ends = {
        "t1": TransactionEnd("t1", 2, {"inventory.a": 1, "inventory.b": 1}),
        "t3": TransactionEnd("t3", 2, {"inventory.a": 1, "inventory.b": 1}),
        "t4": TransactionEnd("t4", 2, {"inventory.a": 2}),
    }
    batch = {
        ("a", 0): [e(0, None, "a"), e(1, "t1", "a"), e(2, "t2", "a"), e(3, "t3", "a")],
        ("b", 0): [e(5, "t1", "b"), e(6, "t3", "b"), e(7, "t4", "b")],
    }
    planned = {("a", 0): 4, ("b", 0): 8}
    # t2 has no END: a ends before it; t3 has an event past that end, so b ends before t3; t4
    # counts two events of inventory.a and the batch has one of inventory.b.
    assert whole_transaction_ends(batch, ends, planned) == ({("a", 0): 2, ("b", 0): 6}, {"t2", "t3", "t4"})
    ends["t2"] = TransactionEnd("t2", 1, {"inventory.a": 1})
    assert whole_transaction_ends(batch, ends, planned) == ({("a", 0): 4, ("b", 0): 7}, {"t4"})


def test_the_transaction_topic_is_read_again_from_the_first_transaction_not_landed() -> None:
    begins = {"t0": (0, 10), "t1": (0, 12), "t2": (0, 14), "t3": (0, 16)}
    ends = {
        "t0": TransactionEnd("t0", 1, {"inventory.c": 1}),
        "t1": TransactionEnd("t1", 1, {"inventory.a": 1}),
        "t2": TransactionEnd("t2", 1, {"inventory.a": 1}),
    }
    # t1 is in the batch; t0 changed another table: maybe not read yet, so kept; t3 has no END yet.
    assert transaction_floor(begins, ends, {"t1"}, {"0": 18}) == {"0": 10}
    # t0 and t1 landed in an earlier batch (a later transaction on their tables is in this one).
    ends["t3"] = TransactionEnd("t3", 2, {"inventory.a": 1, "inventory.c": 1})
    assert transaction_floor(begins, ends, {"t3"}, {"0": 18}) == {"0": 18}
    # Nothing read of them yet (a batch of snapshot reads): from the first one.
    assert transaction_floor(begins, ends, set(), {"0": 18}) == {"0": 10}


def test_a_batch_some_table_missed_is_read_again_to_the_same_ends_under_its_id() -> None:
    state = SyncState(
        tables={"a": TableState("a", 4, {"ta": {"0": 9}}), "b": TableState("b", 3, {"tb": {"0": 5}})},
        dead_letter_position={"ta": {"0": 9}, "tb": {"0": 8}, "tx": {"0": 6}},
        dead_letter_batch=4,
    )
    assert state.unfinished_batch() is None  # without whole transactions, tables commit when fed
    state.whole_transactions = True
    assert state.unfinished_batch() == 4 and state.due(set(), set()) == ["a", "b"]
    # The next plan reads more than batch 4 did (its budget); the replay stops at batch 4's ends.
    plan = TopicsPlan(
        ranges=[OffsetRange("ta", 0, 9, 12), OffsetRange("tb", 0, 5, 11)],
        starts={"ta": {"0": 9}, "tb": {"0": 5}},
        ends={"ta": {"0": 12}, "tb": {"0": 11}},
        full=False,
    )
    again = replay(plan, state.dead_letter_position, "tx")
    assert again.ranges == [OffsetRange("ta", 0, 9, 9), OffsetRange("tb", 0, 5, 8)]
    assert again.ends == {"ta": {"0": 9}, "tb": {"0": 8}, "tx": {"0": 6}} and again.topics_read() == {"tb"}
    state.tables["b"].batch_id = 4
    assert state.unfinished_batch() is None


def test_config_refuses_transaction_metadata_without_its_topic_or_outside_a_sync() -> None:
    base = {
        "pipeline": "p",
        "source": {"kafka": {"bootstrap_servers": "b:9092", "topic_pattern": "db\\.inventory\\..*"}},
        "table": {"name": "lake.inventory.{table}"},
        "dead_letter": "lake.inventory.dead_letter",
        "debezium": {"provide.transaction.metadata": True, "topic.prefix": "db"},
    }
    assert PipelineConfig.from_dict(base).debezium.transaction_topic == "db.transaction"
    with pytest.raises(ConfigError, match=r"^debezium\.topic\.prefix"):
        PipelineConfig.from_dict({**base, "debezium": {"provide.transaction.metadata": True}})
    with pytest.raises(ConfigError, match=r"^debezium\.provide\.transaction\.metadata"):
        PipelineConfig.from_dict({**base, "debezium": {"provide.transaction.metadata": "yes", "topic.prefix": "d"}})
    one_table = {
        **base,
        "source": {"kafka": {"bootstrap_servers": "b", "topic": "t"}},
        "table": {"name": "lake.a.b"},
        "format": "debezium",
    }
    with pytest.raises(ConfigError, match=r"^debezium\.provide\.transaction\.metadata"):
        PipelineConfig.from_dict({k: v for k, v in one_table.items() if k != "dead_letter"})
    assert (
        PipelineConfig.from_dict({k: v for k, v in base.items() if k != "debezium"}).debezium.transaction_topic is None
    )


# -- the sync, killed, with a reader throughout ---------------------------------------------------


def test_no_torn_transaction_is_visible_through_kill_9(spark: Any, kafka_broker: str, tmp_path: Path) -> None:
    prefix, namespace = f"tx{uuid.uuid4().hex[:8]}", f"txn{uuid.uuid4().hex[:8]}"
    source = Source(prefix)
    for t in TABLES:
        create_topic(kafka_broker, 1, name=source.topic(t))
    create_topic(kafka_broker, 1, name=source.transaction_topic)
    snapshot_keys = range(-2, 0)
    for t, records in source.snapshot(snapshot_keys).items():
        produce(kafka_broker, source.topic(t), records)
    count = 10
    produced = threading.Event()
    errors: list[BaseException] = []

    def produce_transactions() -> None:
        # Each transaction: BEGIN, its events table by table (a plan may see some tables' and not
        # others'), then END a little later, as Debezium writes END when the transaction commits.
        try:
            rng = random.Random(7)
            for k in range(1, count + 1):
                txn, events, counts = source.transaction(k)
                produce(kafka_broker, source.transaction_topic, [source.boundary("BEGIN", txn, None)])
                for t in TABLES:
                    produce(kafka_broker, source.topic(t), events[t])
                    time.sleep(rng.uniform(0, 0.15))
                produce(kafka_broker, source.transaction_topic, [source.boundary("END", txn, counts)])
                time.sleep(rng.uniform(0, 0.3))
        except BaseException as exc:
            errors.append(exc)
        finally:
            produced.set()

    warehouse = tmp_path / "wh"
    doc = {
        "pipeline": "txn",
        "source": {
            "kafka": {
                "bootstrap_servers": kafka_broker,
                "topic_pattern": prefix + r"\..*",  # the transaction topic too: the sync leaves it out
                "starting_offsets": "earliest",
            }
        },
        "table": {"name": f"lake.{namespace}.{{table}}"},
        "mode": "upsert",
        "dead_letter": f"lake.{namespace}.dead_letter",
        "trigger": {"interval": "0.3s", "max_records": 12},
        "debezium": {"provide.transaction.metadata": True, "topic.prefix": prefix},
        "warehouse": str(warehouse),
    }
    config_path = tmp_path / "pipeline.yaml"
    config_path.write_text(yaml.safe_dump(doc))
    config = PipelineConfig.from_dict(doc)
    reader = warehouse_reader(spark, "lake", warehouse)
    seen: list[tuple[int, int]] = []  # (batch id, transactions visible) of every consistent read
    stop_reading = threading.Event()

    def read_throughout() -> None:
        # Spark resolves catalogs through the thread's active session: make it the reader's here.
        reader._jvm.org.apache.spark.sql.SparkSession.setActiveSession(reader._jsparkSession)
        try:
            while not stop_reading.is_set():
                view = icetide.read_consistent(reader, config)
                if len(view.tables) < len(TABLES):
                    time.sleep(0.2)
                    continue
                # The snapshot's reads belong to no transaction: only the transactions' rows are compared.
                states = {
                    t: {k: v for k, v in versions(view[f"lake.{namespace}.{t}"], t).items() if k > 0} for t in TABLES
                }
                applied = max(states["orders"].values(), default=0)
                for t, state in states.items():
                    assert state == expected(applied, range(0)), (view.batch_id, t, state)
                seen.append((view.batch_id, applied))
                time.sleep(0.3)
        except BaseException as exc:
            errors.append(RuntimeError(f"reader: {exc}"))

    producer = threading.Thread(target=produce_transactions, daemon=True)
    reading = threading.Thread(target=read_throughout, daemon=True)
    producer.start()
    reading.start()
    try:
        # A kill after batch 2 committed to the dead-letter table (with its ends) and to no table,
        # then one at random.
        began = time.monotonic()
        crashed = run_cli(
            "run", str(config_path), env={"ICETIDE_CRASH_AT": "after_dead_letter", "ICETIDE_CRASH_BATCH": "2"}
        )
        assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
        print("crash at batch 2 after", time.monotonic() - began)
        for i in range(1):
            proc = subprocess.Popen(
                [sys.executable, "-m", "icetide.cli", "run", str(config_path)],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=(tmp_path / f"kill{i}.err").open("w"),
                text=True,
            )
            assert proc.stdout is not None
            # After its first batch (or a while, if the source has nothing new for it), then at random.
            select.select([proc.stdout], [], [], 90)
            time.sleep(random.uniform(0, 1.5))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            print("random kill after", time.monotonic() - began)
        assert produced.wait(120), "the producer did not finish"
        print("produced after", time.monotonic() - began)
        done = run_cli("run", str(config_path), "--once")
        assert done.returncode == 0, done.stderr[-3000:]
        print("drained after", time.monotonic() - began, "reads", len(seen))
    finally:
        stop_reading.set()
        reading.join(60)
        producer.join(60)
    assert not errors, errors
    final = icetide.read_consistent(reader, config)
    for t in TABLES:
        assert versions(final[f"lake.{namespace}.{t}"], t) == expected(count, snapshot_keys), t
    # Every table committed every batch, each once, the dead-letter table first: the batch the
    # first kill cut short after the dead-letter commit was read again under its own id.
    batches = {
        name: [
            int(r[0])
            for r in reader.sql(
                f"SELECT summary['icetide.batch-id'] FROM {name}.snapshots "
                "WHERE summary['icetide.batch-id'] IS NOT NULL ORDER BY committed_at"  # not maintenance's
            ).collect()
        ]
        for name in [*final.tables, config.dead_letter]
    }
    assert all(ids == list(range(1, final.batch_id + 1)) for ids in batches.values()), batches
    # The reader saw the sync make progress, and never a torn transaction (checked in the thread).
    assert len({applied for _, applied in seen}) >= 3, seen
    assert all(a <= b for (_, a), (_, b) in itertools.pairwise(seen)), seen
