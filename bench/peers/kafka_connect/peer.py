"""Running Iceberg's Kafka Connect sink beside icetide: its plugin, its worker, its connector.

The sink (`org.apache.iceberg.connect.IcebergSinkConnector`, Iceberg 1.12.0, jars pinned in
bench/peers/kafka_connect/jars.py) runs as a plugin of its own folder in a distributed Kafka
Connect worker of Apache Kafka's own runtime, of the broker's release (tests/kafka_connect.py, the
worker the Debezium tests run), with JVM options for a benchmark rather than a test. The worker is
the system: one JVM, whose CPU and memory the harness measures.

The connector is set up as the sink's docs set it up for a table that exists:
- `iceberg.tables` names the one table; it is created first, in Spark, in the same Hadoop catalog
  (the same warehouse folder) as icetide's, partitioned as icetide's is. The sink's
  `iceberg.tables.auto-create-enabled` stays off (its default): from JSON without a schema it would
  infer the columns from the values, so epoch milliseconds would become `long` columns, not
  timestamps, and there would be no `hours(event_time)` to partition by;
- `iceberg.control.commit.interval-ms` = icetide's trigger interval: every interval the
  coordinator (in one of the tasks) asks every task for the files it wrote and commits them in one
  snapshot;
- the control topic (`iceberg.control.topic`), through which the tasks and the coordinator talk,
  created beforehand with one partition;
- values by the JSON converter without schemas (the workload's JSON has no schema envelope), keys
  as strings;
- a Hadoop catalog on the local warehouse folder (`iceberg.catalog.type=hadoop`);
- `tasks.max` = the machine's cores, as the Flink job's parallelism.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.peers.kafka_connect.jars import ICEBERG_KAFKA_CONNECT_VERSION, fetch_sink_jars

CONNECTOR = "iceberg-sink"
PLUGIN = "iceberg-kafka-connect"
# A benchmark's worker: C2 and G1 as production runs them (the tests' worker runs C1 and the serial GC).
JVM_OPTIONS = ("-Xms256m", "-Xmx2g", "-XX:+UseG1GC", "-Duser.timezone=UTC")

__all__ = ["ICEBERG_KAFKA_CONNECT_VERSION", "KafkaConnectSink", "KafkaConnectSinkSpec", "create_sink_table"]


@dataclass(frozen=True)
class KafkaConnectSinkSpec:
    """One connector: a Kafka topic of schemaless JSON into an existing Iceberg table of a Hadoop catalog."""

    bootstrap: str
    topic: str
    warehouse: str  # the Hadoop catalog's folder, as a URI
    table: str  # namespace.table in that catalog
    commit_interval_seconds: float
    tasks: int

    def connector_config(self, control_topic: str) -> dict[str, str]:
        return {
            "connector.class": "org.apache.iceberg.connect.IcebergSinkConnector",
            "tasks.max": str(self.tasks),
            "topics": self.topic,
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter.schemas.enable": "false",
            "iceberg.tables": self.table,
            "iceberg.tables.auto-create-enabled": "false",
            "iceberg.catalog.type": "hadoop",
            "iceberg.catalog.warehouse": self.warehouse,
            "iceberg.control.topic": control_topic,
            "iceberg.control.commit.interval-ms": str(int(self.commit_interval_seconds * 1000)),
            # The sink finds the broker in the worker's properties file (from the JVM's command
            # line); named here as well, so nothing depends on how the worker was started.
            "iceberg.kafka.bootstrap.servers": self.bootstrap,
        }


class KafkaConnectSink:
    """The sink as a process: a Connect worker with the sink's plugin, and the connector on it.
    `start` returns the worker's pid (the system's process tree); `stop` stops the worker."""

    def __init__(self, spec: KafkaConnectSinkSpec, work: Path) -> None:
        from tests.kafka_connect import KafkaConnect

        self.spec = spec
        self.work = work / "kafka-connect"
        self.worker = KafkaConnect(
            self.work,
            spec.bootstrap,
            group="iceberg-sink-peer",
            plugins={PLUGIN: fetch_sink_jars()},
            jvm_options=JVM_OPTIONS,
        )

    def start(self) -> int:
        """Start the worker and the connector; returns once its tasks run."""
        from tests.kafka_broker import create_topic

        control = create_topic(self.spec.bootstrap, 1, prefix="control-iceberg")
        self.worker.start()
        try:
            self.worker.create_connector(CONNECTOR, self.spec.connector_config(control), timeout=120)
        except Exception:
            self.worker.stop()
            raise
        assert self.worker.proc is not None
        return self.worker.proc.pid

    def running(self) -> bool:
        """The worker runs and no task of the connector has failed."""
        if not self.worker.running:
            return False
        status: Any = None
        with contextlib.suppress(RuntimeError, OSError):
            status = self.worker.request("GET", f"/connectors/{CONNECTOR}/status")
        if not status:
            return True  # the REST API busy for a moment is not a failure
        states = [status["connector"]["state"], *(t["state"] for t in status.get("tasks") or [])]
        return "FAILED" not in states

    def stop(self) -> None:
        self.worker.stop()

    def tail(self, lines: int = 30) -> str:
        """The end of the worker's log, for errors."""
        log = self.worker.log_path
        text = log.read_text(errors="replace") if log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def create_sink_table(spark: Any, table: str, columns: str, *, partition_by: str) -> None:
    """The sink's table, created in Spark before the connector starts: format v2, partitioned as
    icetide's table is (the sink's auto-create cannot declare timestamps from schemaless JSON)."""
    spark.sql(
        f"CREATE TABLE {table} ({columns}) USING iceberg PARTITIONED BY ({partition_by}) "
        "TBLPROPERTIES ('format-version'='2')"
    )
