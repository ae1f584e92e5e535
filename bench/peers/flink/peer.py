"""Running the Flink Iceberg sink beside icetide: its venv, its jars, its job, its process.

Versions, pinned here and in bench/peers/requirements-flink.txt only:
- Flink 2.0 (PyPI `apache-flink` 2.0.2). Iceberg ships Flink runtimes for 1.20, 2.0 and 2.1 (none
  for 2.2/2.3), the newest being Iceberg 1.11.0 for all three. Flink's Kafka SQL connector exists
  on Maven Central for Flink 2.0 (4.0.1-2.0) but its 1.20 line (3.x-1.20) is not reachable from
  these machines, and Iceberg 1.11.0's runtime for 2.1 is its first for that line; so 2.0, the line
  that has both a Kafka connector and an Iceberg runtime here, with a patch release (2.0.2) behind it.
- Iceberg 1.11.0 (`iceberg-flink-runtime-2.0`): icetide's Spark side runs 1.12.0, which ships no
  Flink runtime. Both write format v2 tables that both read.
- Hadoop's shaded client 3.4.1 (`hadoop-client-api`, `hadoop-client-runtime`) for the Hadoop
  catalog and the local file system, on the gateway JVM's classpath through HADOOP_CLASSPATH.

The jars are fetched from Maven Central by icetide.spark.maven (the project's own fetcher: pinned
digests, a cache in $ICETIDE_CACHE). The venv is created on first use, from the pinned
requirements, at bench/peers/.venv-flink (gitignored).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from icetide.spark.maven import Artifact, fetch

PEERS = Path(__file__).resolve().parent.parent
VENV = PEERS / ".venv-flink"
REQUIREMENTS = PEERS / "requirements-flink.txt"
JOB = Path(__file__).resolve().parent / "job.py"
FLINK_VERSION = "2.0.2"
ICEBERG_FLINK_VERSION = "1.11.0"

ICEBERG_FLINK_RUNTIME = Artifact(
    "org.apache.iceberg",
    "iceberg-flink-runtime-2.0",
    ICEBERG_FLINK_VERSION,
    "2b154935000b855f36abf5b8f404ed0dd76392992d51e3ba23901067ca2038a1",
)
FLINK_KAFKA_CONNECTOR = Artifact(
    "org.apache.flink",
    "flink-sql-connector-kafka",
    "4.0.1-2.0",
    "c7127a6518fba5d6b75eb4692229192e7147ea378e69c7b7cf16d0494057b0c3",
)
HADOOP_CLIENT = (
    Artifact(
        "org.apache.hadoop",
        "hadoop-client-api",
        "3.4.1",
        "a964d4daa054c9615bbafb4553efbb140fa7fb9ac6f358a24393f183a5703438",
    ),
    Artifact(
        "org.apache.hadoop",
        "hadoop-client-runtime",
        "3.4.1",
        "f6a800a159f918670db533606d33560d6c13b7e13f14eda493280ae33b9eeb2f",
    ),
)


def flink_python() -> Path:
    """The Python of PyFlink's venv, created from the pinned requirements on first use."""
    python = VENV / "bin" / "python"
    stamp = VENV / ".installed"
    if stamp.exists() and stamp.read_text() == REQUIREMENTS.read_text():
        return python
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "-r", str(REQUIREMENTS)], check=True)
    stamp.write_text(REQUIREMENTS.read_text())
    return python


@dataclass(frozen=True)
class FlinkSinkSpec:
    """One Flink job: a Kafka topic of JSON into an existing Iceberg table of a Hadoop catalog."""

    bootstrap: str
    topic: str
    warehouse: str  # the Hadoop catalog's folder
    table: str  # catalog.namespace.table; the catalog name is Flink's own
    source_columns: list[tuple[str, str]]  # the JSON fields, as Flink SQL types
    select: list[str]  # the INSERT's expressions, in the table's column order
    upsert: bool
    checkpoint_seconds: float
    parallelism: int
    format: str = "json"  # or debezium-json: Connect's JSON envelope with its schema
    checkpoint_dir: str = ""  # the checkpoints' folder (file://...): Flink's file-system checkpoint storage
    end_offsets: dict[int, int] | None = None  # read up to these offsets, commit, exit
    group: str = field(default="")

    def to_json(self, jars: list[str]) -> str:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["group"] = self.group or f"flink-{self.topic}"
        d["jars"] = jars
        d["checkpoint_seconds"] = int(self.checkpoint_seconds) if self.checkpoint_seconds >= 1 else 1
        return json.dumps(d)


class FlinkSink:
    """The Flink job as a process: started by `start`, stopped by `stop` (SIGTERM, then SIGKILL).

    PyFlink's client runs the job on a local mini cluster inside the JVM it launches, so the
    system's processes are this Python process and its JVM child (found by walking the tree)."""

    def __init__(self, spec: FlinkSinkSpec, work: Path, *, heap: str = "2g") -> None:
        self.spec = spec
        self.work = work
        self.heap = heap
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = work / "flink-job.log"

    def start(self) -> int:
        """Start the job; returns the client's pid (the root of the system's process tree)."""
        python = flink_python()
        jars = [fetch(ICEBERG_FLINK_RUNTIME), fetch(FLINK_KAFKA_CONNECTOR)]
        hadoop = [fetch(a) for a in HADOOP_CLIENT]
        self.work.mkdir(parents=True, exist_ok=True)
        spec_path = self.work / "flink-spec.json"
        spec_path.write_text(self.spec.to_json(jars))
        env = dict(os.environ)
        env["HADOOP_CLASSPATH"] = os.pathsep.join(hadoop)
        env["JVM_ARGS"] = f"-Xmx{self.heap} -Duser.timezone=UTC"
        env["TZ"] = "UTC"
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [str(python), str(JOB), str(spec_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        return self.proc.pid

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait(self, timeout: float) -> int | None:
        """The exit code, or None when still running after `timeout` seconds."""
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> None:
        """Stop the client and its JVM (their own process group)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and self.proc.poll() is None:
            time.sleep(0.2)
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def tail(self, lines: int = 30) -> str:
        """The end of the job's log, for errors."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def create_iceberg_table(
    spark: Any, table: str, columns: str, *, key: list[str], partition_by: str, upsert: bool
) -> None:
    """The Flink sink's table, created in Spark (Flink's DDL has no hidden partition transforms):
    format v2, `write.distribution-mode=hash`, the key as identifier fields, as the sink's docs set
    it up for upserts."""
    props = {"format-version": "2", "write.distribution-mode": "hash"}
    if upsert:
        props["write.upsert.enabled"] = "true"
    text = ", ".join(f"'{k}'='{v}'" for k, v in props.items())
    spark.sql(f"CREATE TABLE {table} ({columns}) USING iceberg PARTITIONED BY ({partition_by}) TBLPROPERTIES ({text})")
    if key:
        spark.sql(f"ALTER TABLE {table} SET IDENTIFIER FIELDS {', '.join(key)}")
