"""The RocksDB state store provider to name for a stateful query: Spark's own on Spark 4.1, icetide's on 3.5.

Spark 3.5 reloads a streaming aggregation's RocksDB state at every micro-batch (the read store's
abort forgets the loaded version; see jvm/ReusingRocksDBProvider.java and docs/stateful.md).
The provider here keeps the committed version loaded. It is part of icetide's jar, built from
source by `icetide.spark.jars` the first time a session needs it. Without `javac` (a JRE only)
sessions run with Spark's own provider and the stateful stage says so once. Spark 4.1 fixed the
reload (SPARK-51955), so there Spark's own provider is the one, and icetide's is not built.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

PROVIDER_CLASS = "icetide.state.ReusingRocksDBProvider"
SPARK_PROVIDER_CLASS = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def provider_loaded(spark: SparkSession) -> bool:
    """Whether this session's JVM can load icetide's provider (its jar was on the classpath at start)."""
    from py4j.java_gateway import JavaClass

    jvm: Any = spark._jvm  # type: ignore[attr-defined]
    return isinstance(jvm.icetide.state.ReusingRocksDBProvider, JavaClass)


def state_store_provider(spark: SparkSession) -> str:
    """The provider class for a new stateful query: icetide's when this session's JVM has it (Spark 3.5),
    Spark's own on Spark 4.1, which keeps the loaded state itself."""
    from icetide.spark.jars import spark_line

    if spark_line(spark.version) != "3.5":
        return SPARK_PROVIDER_CLASS
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
