"""A pipeline whose file declares `table.schema` restarts after its table evolved (issue 25, item 1).

Both cases run as a user would: a pipeline file, `icetide run --once` over a real Kafka-protocol
broker (Apache Kafka), restarted after every step (the Debezium case's middle steps as a new runner of the
same file in the test's Spark, sharing its warehouse: a driver JVM each spared, the first and last
step still separate processes). The Debezium steps are apache/paimon's schema-evolution
messages (tests/data/debezium/SOURCES.md: paimon_mysql_products_schema_evolution.jsonl); the
partition case replaces `days(ts)` by `hours(ts)` with Spark's own `ALTER TABLE`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from tests.commands import run_cli, warehouse_reader
from tests.kafka_broker import create_topic, produce

DATA = Path(__file__).resolve().parent / "data" / "debezium"


def paimon_messages() -> list[str]:
    return (DATA / "paimon_mysql_products_schema_evolution.jsonl").read_text().splitlines()


def run_once(config_path: Path) -> None:
    done = run_cli("run", str(config_path), "--once")
    assert done.returncode == 0, done.stderr[-3000:]


def run_in_test(config_path: Path, spark: Any) -> None:
    """`icetide run --once` of the file as a new runner in the test's Spark (its warehouse)."""
    from icetide.pipeline.entry import run

    run(str(config_path), once=True, spark=spark)


def test_debezium_pipeline_restarts_after_each_new_column(
    spark: Any, kafka_broker: str, tmp_path: Path, warehouse: str
) -> None:
    """Paimon's steps: `age` appears (int32), widens (int64), comes back as int32; then a delete.
    Every step is a new run of the same file, whose schema never mentions `age`."""
    topic = create_topic(kafka_broker, prefix="evolve")
    config_path = tmp_path / "pipeline.yaml"
    schema = "id INT NOT NULL, name STRING NOT NULL, description STRING, weight DOUBLE"
    doc = {
        "pipeline": "products",
        "warehouse": warehouse,
        "source": {"kafka": {"bootstrap_servers": kafka_broker, "topic": topic, "starting_offsets": "earliest"}},
        "format": "debezium",
        "table": {"name": "lake.db.products", "schema": schema, "key": ["id"]},
        "schema_evolution": True,
        "trigger": {"interval": "1s"},
        "dead_letter": "lake.db.products_dead_letter",
    }
    config_path.write_text(yaml.safe_dump(doc))
    messages = paimon_messages()
    model: dict[int, tuple[Any, ...]] = {}
    steps = [*messages[:4], messages[5]]  # the fifth turns `age` into a string: refused, see test_debezium_schemas
    for i, value in enumerate(steps):
        payload = json.loads(value)["payload"]
        row = payload["after"] or payload["before"]
        produce(kafka_broker, topic, [(0, json.dumps({"id": row["id"]}).encode(), value.encode(), None)])
        if i in (0, len(steps) - 1):
            run_once(config_path)
        else:
            run_in_test(config_path, spark)
        if payload["op"] == "d":
            model.pop(row["id"])
        else:
            model[row["id"]] = (row["name"], row["weight"], row.get("age"))
        reader = warehouse_reader(spark, "evolved", warehouse)
        got = {
            r["id"]: (r["name"], r["weight"], r.asDict().get("age"))
            for r in reader.table("evolved.db.products").collect()
        }
        assert got == model
    age = reader.table("evolved.db.products").schema["age"]
    assert age.dataType.simpleString() == "bigint" and age.nullable
    assert reader.table("evolved.db.products_dead_letter").count() == 0


def test_json_pipeline_restarts_after_its_partition_spec_evolved(spark: Any, kafka_broker: str, tmp_path: Path) -> None:
    """`partition_by: ["days(ts)"]` in the file; the table moves to hours(ts); the pipeline restarts,
    and its upserts still reach rows written under the old spec."""
    topic = create_topic(kafka_broker, prefix="respec")
    warehouse = tmp_path / "wh"
    config_path = tmp_path / "pipeline.yaml"
    doc = {
        "pipeline": "ev",
        "warehouse": str(warehouse),
        "source": {"kafka": {"bootstrap_servers": kafka_broker, "topic": topic, "starting_offsets": "earliest"}},
        "table": {
            "name": "lake.db.ev",
            "schema": "id BIGINT NOT NULL, ts TIMESTAMP NOT NULL, v STRING",
            "key": ["id", "ts"],
            "partition_by": ["days(ts)"],
        },
        "trigger": {"interval": "1s"},
        "dead_letter": "lake.db.ev_dead_letter",
    }
    config_path.write_text(yaml.safe_dump(doc))

    def send(version: str, ids: range) -> None:
        rows = [{"id": i, "ts": f"2026-01-0{1 + i % 3}T{i % 24:02d}:00:00", "v": f"{version}{i}"} for i in ids]
        produce(kafka_broker, topic, [(0, None, json.dumps(r).encode(), None) for r in rows])

    send("a", range(20))
    run_once(config_path)
    reader = warehouse_reader(spark, "respec", warehouse)
    reader.sql("ALTER TABLE respec.db.ev REPLACE PARTITION FIELD days(ts) WITH hours(ts)")
    send("b", range(10, 30))  # 10..19 replace rows written under days(ts)
    run_once(config_path)
    reader = warehouse_reader(spark, "respec", warehouse)
    got = {r["id"]: r["v"] for r in reader.table("respec.db.ev").collect()}
    assert got == {i: ("a" if i < 10 else "b") + str(i) for i in range(30)}
    fields = reader.sql("SELECT * FROM respec.db.ev.partitions").schema["partition"].dataType.fieldNames()
    assert "ts_hour" in fields
