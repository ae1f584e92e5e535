"""icetide's RocksDB state store provider: built once from its Java source, cached as a jar.

Spark 3.5 reloads a streaming aggregation's RocksDB state at every micro-batch (the read store's
abort forgets the loaded version; see jvm/ReusingRocksDBProvider.java and docs/changelog.md).
The provider here keeps the committed version loaded. It is compiled with the JDK's `javac`
against the installed PySpark's jars the first time a session needs it, into
`$ICETIDE_CACHE` (default `~/.cache/icetide`), keyed by the source and Spark's version, so a
changed source or another Spark builds a new jar. Without `javac` (a JRE only) sessions run with
Spark's own provider and the stateful stage says so once.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import tempfile
import zipfile
from typing import TYPE_CHECKING, Any

from icetide.spark.java import jdk_tool

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

PROVIDER_CLASS = "icetide.state.ReusingRocksDBProvider"
SPARK_PROVIDER_CLASS = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jvm", "ReusingRocksDBProvider.java")
CACHE_ENV = "ICETIDE_CACHE"


def cache_dir() -> str:
    """Where built jars are kept: $ICETIDE_CACHE, else ~/.cache/icetide."""
    return os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "icetide")


def _spark_jars() -> tuple[str, str]:
    """(folder of the installed PySpark's jars, PySpark's version)."""
    import pyspark

    return os.path.join(os.path.dirname(os.path.abspath(pyspark.__file__)), "jars"), pyspark.__version__


def provider_jar() -> str | None:
    """Path of the provider's jar, built now if needed; None when it cannot be built (no javac,
    or javac failed: the reason goes to the debug log)."""
    jars, spark_version = _spark_jars()
    with open(SOURCE, "rb") as f:
        digest = hashlib.sha256(f.read() + spark_version.encode()).hexdigest()[:16]
    target = os.path.join(cache_dir(), f"icetide-state-{digest}.jar")
    if os.path.exists(target):
        return target
    javac = jdk_tool("javac")
    if javac is None:
        log.debug("javac not found: the stateful stage uses Spark's own RocksDB provider")
        return None
    try:
        _build(javac, jars, target)
    except (OSError, subprocess.SubprocessError) as exc:
        log.debug("building %s failed: %s", target, exc)
        return None
    return target


def _build(javac: str, jars: str, target: str) -> None:
    """Compile the source and zip the classes into `target`, atomically (tests build concurrently)."""
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="icetide-javac-") as work:
        classes = os.path.join(work, "classes")
        done = subprocess.run(
            [javac, "-nowarn", "-d", classes, "-cp", os.path.join(jars, "*"), SOURCE],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            raise subprocess.SubprocessError(done.stderr.strip() or f"javac exited with {done.returncode}")
        staged = os.path.join(os.path.dirname(target), f".{os.path.basename(target)}.{os.getpid()}")
        with zipfile.ZipFile(staged, "w", zipfile.ZIP_DEFLATED) as jar:
            for root, _, names in os.walk(classes):
                for name in names:
                    path = os.path.join(root, name)
                    jar.write(path, os.path.relpath(path, classes))
        os.replace(staged, target)
    log.debug("built %s", target)


def provider_loaded(spark: SparkSession) -> bool:
    """Whether this session's JVM can load icetide's provider (its jar was on the classpath at start)."""
    from py4j.java_gateway import JavaClass

    jvm: Any = spark._jvm  # type: ignore[attr-defined]
    return isinstance(jvm.icetide.state.ReusingRocksDBProvider, JavaClass)


def state_store_provider(spark: SparkSession) -> str:
    """The provider class for a new stateful query: icetide's when this session's JVM has it."""
    if provider_loaded(spark):
        return PROVIDER_CLASS
    global _warned
    if not _warned:
        _warned = True
        log.warning(
            "icetide's RocksDB state provider is not on this session's classpath (needs javac once, or a session "
            "from icetide.spark_session): Spark's own reloads the state at every micro-batch"
        )
    return SPARK_PROVIDER_CLASS


_warned = False


if __name__ == "__main__":  # `make install` builds the jar once, so tests and the demo find it
    import sys

    if provider_jar() is None:
        print("note: javac not found, so the stateful stage will use Spark's own RocksDB provider", file=sys.stderr)
