"""The peer: Apache Iceberg's Flink sink, as its users run it from PyFlink's Table API.

    <flink venv>/bin/python bench/peers/flink/job.py SPEC.json

Runs in PyFlink's own venv (bench/peers/requirements-flink.txt), never in icetide's: PyFlink pins
its own pyarrow and pandas. It imports nothing from icetide. The harness (bench/peers/flink/peer.py)
writes SPEC.json, fetches the jars by their Maven coordinates, and puts Hadoop's client jars on
the gateway JVM's classpath through HADOOP_CLASSPATH.

The job is one SQL statement: Kafka source (JSON) -> INSERT INTO an Iceberg table of a Hadoop
catalog. The table is created beforehand by the harness (Flink's DDL cannot declare Iceberg's
hidden partition transforms such as hours(ts), seed 000), with its identifier fields (the primary
key), `write.distribution-mode=hash` and format v2. With `upsert` the INSERT carries the
`upsert-enabled` write option: the sink writes an equality delete on the key before every row.
A checkpoint every `checkpoint_seconds` commits what the writers wrote since the last one;
checkpoints are kept in files (`checkpoint_dir`).
The job runs until the process is stopped (SIGTERM), or, with `end_offsets`, until it has read
the topic up to those offsets, and then commits a last time and exits (the harness names the
offsets it produced: the in-memory test broker of the time had a high watermark that lagged what was produced).
"""

from __future__ import annotations

import json
import sys
from typing import Any


def quoted(value: str) -> str:
    """A Flink SQL string literal."""
    return "'" + value.replace("'", "''") + "'"


def statements(spec: dict[str, Any]) -> list[str]:
    """The catalog, the Kafka source table and the INSERT, as Flink SQL."""
    columns = ",\n  ".join(f"`{name}` {sql_type}" for name, sql_type in spec["source_columns"])
    kafka = {
        "connector": "kafka",
        "topic": spec["topic"],
        "properties.bootstrap.servers": spec["bootstrap"],
        "properties.group.id": spec["group"],
        "scan.startup.mode": "earliest-offset",
    }
    if spec.get("format", "json") == "debezium-json":
        kafka.update({"format": "debezium-json", "debezium-json.schema-include": "true"})
        kafka["debezium-json.ignore-parse-errors"] = "true"
    else:
        kafka.update({"format": "json", "json.fail-on-missing-field": "false", "json.ignore-parse-errors": "true"})
    if spec.get("end_offsets"):  # stop there: {partition: offset}, exclusive
        kafka["scan.bounded.mode"] = "specific-offsets"
        kafka["scan.bounded.specific-offsets"] = ";".join(
            f"partition:{p},offset:{o}" for p, o in sorted(spec["end_offsets"].items(), key=lambda po: int(po[0]))
        )
    options = ",\n  ".join(f"{quoted(k)} = {quoted(v)}" for k, v in kafka.items())
    hints = {"upsert-enabled": "true"} if spec["upsert"] else {}
    hint = " /*+ OPTIONS(" + ", ".join(f"{quoted(k)}={quoted(v)}" for k, v in hints.items()) + ") */" if hints else ""
    catalog, namespace, table = spec["table"].split(".")
    return [
        f"CREATE CATALOG `{catalog}` WITH ('type' = 'iceberg', 'catalog-type' = 'hadoop', "
        f"'warehouse' = {quoted(spec['warehouse'])}, 'property-version' = '1')",
        f"CREATE TEMPORARY TABLE kafka_source (\n  {columns}\n) WITH (\n  {options}\n)",
        f"INSERT INTO `{catalog}`.`{namespace}`.`{table}`{hint}\nSELECT {', '.join(spec['select'])} FROM kafka_source",
    ]


def main(path: str) -> None:
    from pyflink.table import EnvironmentSettings, TableEnvironment

    with open(path) as f:
        spec = json.load(f)
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    conf = env.get_config()
    for key, value in {
        "pipeline.jars": ";".join(f"file://{jar}" for jar in spec["jars"]),
        "parallelism.default": str(spec["parallelism"]),
        "execution.checkpointing.interval": f"{spec['checkpoint_seconds']}s",
        "execution.checkpointing.mode": "EXACTLY_ONCE",
        # Checkpoints in files, as a deployment keeps them: the JobManager's memory storage
        # (the default without a folder) refuses any operator state over 5 MB.
        **({"execution.checkpointing.dir": spec["checkpoint_dir"]} if spec.get("checkpoint_dir") else {}),
        # A changelog source (debezium-json) into a keyed sink gets a SinkUpsertMaterializer by
        # default: state holding every row in flight per key, re-ordering what could arrive out of
        # order. Here each key's changes come in order through one Kafka partition and one writer
        # (hash distribution by partition, and the key holds the partition's column), so it is
        # not needed; its state outgrew the default checkpoint storage and stalled the commits.
        **({"table.exec.sink.upsert-materialize": "NONE"} if spec.get("format") == "debezium-json" else {}),
        "pipeline.name": f"iceberg-sink-{spec['table']}",
    }.items():
        conf.set(key, value)
    *setup, insert = statements(spec)
    for statement in setup:
        env.execute_sql(statement)
    print(insert, flush=True)
    result = env.execute_sql(insert)
    print("flink job submitted", flush=True)
    result.wait()  # a streaming job returns only when stopped, or at the end of a bounded source
    print("flink job finished", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
