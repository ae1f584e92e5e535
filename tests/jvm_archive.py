"""A class-data-sharing archive of Spark's classes for every driver JVM the suite starts.

A driver JVM spends most of its start loading and verifying Spark's, Scala's and Hadoop's classes
from the jars. The JVM can map them, already parsed, from an archive (CDS, JDK 17: a dynamic
archive written at the exit of one run with -XX:ArchiveClassesAtExit, then mapped with
-XX:SharedArchiveFile). Measured here: a subprocess that starts a session, creates a table,
inserts a row and counts it took 26 s without, 12-18 s with the archive (docs/testing.md).

`archive_options()` writes the archive once for this venv's PySpark and this Java (about 30 s,
a training run in a subprocess), then returns the JVM options that map it. The options go into
SPARK_SUBMIT_OPTS, which every driver the suite starts inherits: the test processes' sessions and
every `icetide` subprocess. A JVM whose classpath or Java differs from the archive's ignores it
silently (-Xshare:auto, the default) and loads the classes from the jars as before.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# The training run: what most tests do first (a session, an Iceberg table, a write, a read).
TRAINING = """
import sys, tempfile
import icetide
with tempfile.TemporaryDirectory() as warehouse:
    spark = icetide.spark_session(warehouse=warehouse, master="local[2]")
    spark.sql("CREATE TABLE lake.t.x (id bigint, v string) USING iceberg PARTITIONED BY (bucket(2, id))")
    spark.createDataFrame([(1, "a"), (2, "b")], "id bigint, v string").writeTo("lake.t.x").append()
    spark.sql("DELETE FROM lake.t.x WHERE id = 1")
    assert spark.table("lake.t.x").count() == 1
    spark.stop()
"""


def _key(base_options: str) -> str:
    """What the archive depends on: the Java, the JVM options and PySpark's jars."""
    import pyspark

    jars = sorted((p.name, p.stat().st_size) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar"))
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
    digest = hashlib.sha256(repr((java, base_options, jars)).encode()).hexdigest()
    return digest[:16]


def archive_options(base_options: str) -> str:
    """`base_options` plus the option that maps the archive, written first if missing; only
    `base_options` when it cannot be written (the suite then runs as before, slower)."""
    folder = Path(sys.prefix) / "icetide-test-cds"
    archive = folder / f"spark-{_key(base_options)}.jsa"
    if not archive.exists():
        folder.mkdir(exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, suffix=".jsa.tmp", delete=False) as tmp:
            partial = Path(tmp.name)
        env = {**os.environ, "SPARK_SUBMIT_OPTS": f"{base_options} -XX:ArchiveClassesAtExit={partial}"}
        done = subprocess.run([sys.executable, "-c", TRAINING], env=env, capture_output=True, text=True, timeout=600)
        if done.returncode != 0 or partial.stat().st_size == 0:
            partial.unlink(missing_ok=True)
            print(f"note: no class archive for the suite's JVMs: {done.stderr.strip()[-500:]}", file=sys.stderr)
            return base_options
        partial.replace(archive)
    return f"{base_options} -XX:SharedArchiveFile={archive}"
