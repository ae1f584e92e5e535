"""The lake equals the database with Avro through a Schema Registry: Debezium's PostgreSQL and
MariaDB connectors in the session's Kafka Connect worker write keys and values with Apicurio's
Avro converter (`io.apicurio:apicurio-registry-utils-converter`, from Maven Central,
tests/connect_jars.py) in Confluent's wire format, registering their schemas as they go, and
`icetide run` reads them with `format: debezium-avro` through the registry's Confluent API.

The registry is tests/schema_registry_server.py, serving Apicurio's v2 API to the converter and
Confluent's API to icetide over one id space, as a real Apicurio Registry does (its content ids
are its Confluent schema ids). The workload is test_cdc_live's, shorter and without faults (the
JSON test covers kills and restarts): the initial snapshot, then, once it is in Kafka,
transactions across three tables, a column added and one widened (so new schema versions
mid-stream), a primary-key update, a TRUNCATE and a table created mid-stream. The check is
test_cdc_live's: every Iceberg table equals its database table, and the dead-letter table holds
exactly PostgreSQL's `edges` records no Iceberg column holds, each with its reason.
"""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.commands import warehouse_reader
from tests.connect_jars import APICURIO_AVRO_CONVERTER
from tests.kafka_broker import KafkaBroker
from tests.kafka_connect import KafkaConnect
from tests.mariadb_server import MariaDbServer
from tests.postgres_server import PostgresServer
from tests.schema_registry_server import GLOBAL_ID_BASE, SchemaRegistryServer
from tests.test_cdc_live import (
    LiveRun,
    Sync,
    Workload,
    assert_dead_letters,
    mariadb_connector,
    pipeline_doc,
    postgres_connector,
    tear_down,
    wait_until_the_lake_equals,
)


@pytest.fixture(scope="module")
def schema_registry() -> Iterator[SchemaRegistryServer]:
    server = SchemaRegistryServer().start()
    yield server
    server.stop()


def apicurio_avro_converters(registry_url: str) -> dict[str, str]:
    """The connector settings that make Apicurio's converter write Confluent's wire format, as
    docs/how-to/debezium-sync.md shows them: the schema id in the value (not in headers), 4 bytes
    (`as-confluent`), holding the content id, which is the id Apicurio's Confluent API serves."""
    settings = {
        "apicurio.registry.url": f"{registry_url}/apis/registry/v2",
        "apicurio.registry.auto-register": "true",
        "apicurio.registry.headers.enabled": "false",
        "apicurio.registry.as-confluent": "true",
        "apicurio.registry.use-id": "contentId",
    }
    converters: dict[str, str] = {}
    for side in ("key", "value"):
        converters[f"{side}.converter"] = APICURIO_AVRO_CONVERTER
        converters.update({f"{side}.converter.{name}": value for name, value in settings.items()})
    return converters


def row_count(work: Workload, table: str) -> int:
    with work.conn.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM {table}")
        return int(cur.fetchone()[0])


def wait_for_records(bootstrap: str, counts: Mapping[str, int], timeout: float = 120.0) -> None:
    """Until each topic (of one partition) holds at least its count of records."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"snapshot-wait-{uuid.uuid4().hex[:8]}"})

    def held(topic: str, listed: Mapping[str, Any]) -> int:
        # A topic's end only once a fresh listing shows it: a watermark query on a topic the
        # client did not know yet stayed unknown to it here for minutes (librdkafka's metadata cache).
        if topic not in listed or not listed[topic].partitions:
            return 0
        try:
            return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=5, cached=False)[1])
        except KafkaException:
            return 0

    try:
        deadline = time.monotonic() + timeout
        short = dict(counts)
        while True:
            listed = consumer.list_topics(timeout=10).topics
            short = {t: n for t, n in short.items() if held(t, listed) < n}
            if not short:
                return
            assert time.monotonic() < deadline, f"topics short of their records after {timeout:g}s: {short}"
            time.sleep(0.25)
    finally:
        consumer.close()


def test_an_apicurio_content_id_is_a_confluent_schema_id(schema_registry: SchemaRegistryServer) -> None:
    """The stand-in as the converter and icetide meet in it: an artifact created through Apicurio's
    API (as the converter's serializer sends it) is read by its content id through the Confluent
    API under /apis/ccompat/v7 with confluent-kafka's client (icetide's), and a version with the
    same schema is the same version."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    schema = json.dumps({"type": "record", "name": "K", "fields": [{"name": "id", "type": "int"}]})
    subject = f"t{uuid.uuid4().hex[:8]}.public.items-key"

    def create() -> dict[str, Any]:
        request = urllib.request.Request(
            f"{schema_registry.url}/apis/registry/v2/groups/default/artifacts?ifExists=RETURN_OR_UPDATE&canonical=false",
            data=schema.encode(),
            method="POST",
            headers={"X-Registry-ArtifactId": subject, "X-Registry-ArtifactType": "AVRO"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            answer: dict[str, Any] = json.loads(response.read())
        return answer

    first, again = create(), create()
    assert first == again
    assert (first["id"], first["groupId"], first["version"]) == (subject, "default", "1")
    assert first["globalId"] > GLOBAL_ID_BASE  # apart from content ids
    client = SchemaRegistryClient({"url": f"{schema_registry.url}/apis/ccompat/v7"})
    assert json.loads(str(client.get_schema(first["contentId"]).schema_str)) == json.loads(schema)
    assert client.get_latest_version(subject).schema_id == first["contentId"]


def test_the_lake_equals_postgresql_and_mariadb_through_apicurios_avro_converter(
    spark: Any,
    postgres: PostgresServer,
    mariadb: MariaDbServer,
    kafka_server: KafkaBroker,
    kafka_connect: KafkaConnect,
    schema_registry: SchemaRegistryServer,
    tmp_path: Path,
) -> None:
    run = LiveRun.begin(postgres, mariadb, seed=146)
    tag, namespace, mark = run.tag, run.namespace, run.mark
    pg, maria, works = run.pg, run.maria, run.works
    pg_database, maria_database = run.pg_database, run.maria_database
    avro = apicurio_avro_converters(schema_registry.url)
    connectors = {
        f"pg-{tag}": {**postgres_connector(postgres, pg_database, f"pg{tag}", tag), **avro},
        f"maria-{tag}": {**mariadb_connector(mariadb, maria_database, f"maria{tag}", kafka_server.bootstrap), **avro},
    }
    doc = pipeline_doc(kafka_server.bootstrap, tag, tmp_path / "wh")
    doc["format"] = "debezium-avro"
    doc["schema_registry"] = {"url": f"{schema_registry.url}/apis/ccompat/v7"}
    config_path = tmp_path / "pipeline.yaml"
    config_path.write_text(yaml.safe_dump(doc, sort_keys=False))
    sync = Sync(config_path, tmp_path / "sync.log")
    try:
        for name, config in connectors.items():
            kafka_connect.create_connector(name, config)
        sync.start()
        # Debezium does not support schema changes while a connector takes its snapshot (a table
        # created then was never captured here), so the workload waits until the snapshots are in.
        snapshot = {f"pg{tag}.public.{t}": row_count(pg, t) for t in pg.tables}
        snapshot |= {f"maria{tag}.{maria_database}.{t}": row_count(maria, t) for t in maria.tables}
        wait_for_records(kafka_server.bootstrap, snapshot)
        mark("snapshots in Kafka")
        for work in works:
            work.run(10)
            work.schema_changes()
            work.key_update()
            work.truncate_and_create()
            work.run(10)
            work.last_changes()
        mark("workload done")
        reader = warehouse_reader(spark, "cdcavro", tmp_path / "wh")
        databases = {pg.name: pg_database, maria.name: maria_database}
        tables = [(w, t, f"cdcavro.{namespace}.{databases[w.name]}_{t}") for w in works for t in w.tables]
        wait_until_the_lake_equals(reader, tables, sync)
        mark("the lake equals the databases")
        assert_dead_letters(reader, f"cdcavro.{namespace}", pg, tag)
        # Every table's keys and values went through the registry: the converter registered them
        # (Apicurio's API) and icetide read the ids it wrote (Confluent's API).
        subjects = {s for s in schema_registry.subjects if tag in s}
        topics = {f"pg{tag}.public.{t}" for t in pg.tables} | {f"maria{tag}.{maria_database}.{t}" for t in maria.tables}
        assert subjects == {f"{topic}-{side}" for topic in topics for side in ("key", "value")}
        assert len(schema_registry.subjects[f"pg{tag}.public.orders-value"].versions) >= 2  # qty widened
        counts = {f"{w.name}.{t}": len(w.rows(t)[1]) for w, t, _ in tables}
        assert all(counts.values()), counts
        print(f"rows {counts}; {run.timeline()}")
    finally:
        tear_down(sync, kafka_connect, connectors, works, postgres, pg_database, tag)
