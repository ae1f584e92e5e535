"""Build a SparkSession with Iceberg: the runtime jar from the installed wheel, never downloaded."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from icetide.config import check_catalog_for_warehouse
from icetide.errors import CatalogUnavailableError, ConfigError, one_line
from icetide.secrets import redact
from icetide.spark.jars import iceberg_runtime_jar, icetide_jar, jdbc_driver_jar
from icetide.spark.java import check_java

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

DEFAULT_CATALOG = "lake"
ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
LOG4J_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")
# The embedded catalog's commit lock across processes (jvm/FileLockManager.java, docs/design.md).
COMMIT_LOCK_IMPL = "icetide.catalog.FileLockManager"


def catalog_conf(
    catalog: str,
    *,
    warehouse: str | None,
    options: Mapping[str, str] | None,
    lock_impl: str | None = None,
) -> dict[str, str]:
    """Spark conf entries for one Iceberg catalog.

    With `options` (REST, Hive, Glue, JDBC, ...) they are passed through unchanged under
    `spark.sql.catalog.<catalog>.`; without, an embedded Hadoop catalog on `warehouse`.
    A Hadoop catalog (the embedded one, or `type: hadoop` in `options`) gets `lock_impl` as its
    `lock-impl` unless `options` name one.
    A Hadoop catalog on an object-store warehouse (s3a://, gs://, abfs://, ...) is refused with
    a ConfigError: it cannot commit safely there.
    """
    check_catalog_for_warehouse(warehouse, options)
    prefix = f"spark.sql.catalog.{catalog}"
    conf = {prefix: "org.apache.iceberg.spark.SparkCatalog"}
    if options:
        for key, value in options.items():
            conf[f"{prefix}.{key}"] = str(value)
        if warehouse and "warehouse" not in options:
            conf[f"{prefix}.warehouse"] = _warehouse_uri(warehouse)
        if lock_impl and options.get("type") == "hadoop" and "lock-impl" not in options:
            conf[f"{prefix}.lock-impl"] = lock_impl
        return conf
    if not warehouse:
        raise ConfigError("warehouse: a folder for the embedded catalog is required without a catalog block")
    conf[f"{prefix}.type"] = "hadoop"
    conf[f"{prefix}.warehouse"] = _warehouse_uri(warehouse)
    if lock_impl:
        conf[f"{prefix}.lock-impl"] = lock_impl
    return conf


def _warehouse_uri(warehouse: str) -> str:
    if "://" in warehouse or warehouse.startswith("file:"):
        return warehouse
    return os.path.abspath(warehouse)


def spark_session(
    *,
    warehouse: str | None = "warehouse",
    catalog: str = DEFAULT_CATALOG,
    catalog_options: Mapping[str, str] | None = None,
    master: str | None = None,
    app_name: str = "icetide",
    conf: Mapping[str, str] | None = None,
    log_level: str = "ERROR",
) -> SparkSession:
    """A SparkSession with Iceberg's SQL extensions and one Iceberg catalog named `catalog`.

    The embedded default is a Hadoop catalog on the local folder `warehouse`, whose commits take
    icetide's file lock (`lock-impl`), so processes on one machine can commit to one table
    safely, provided each of them takes that lock (see docs/design.md).
    `catalog_options` are passed through unchanged, e.g. ``{"type": "rest", "uri": ...}``.
    A JDBC catalog's driver jar (PostgreSQL, SQLite: see `jdbc_driver_jar`) is put on the
    classpath. `conf` entries win over everything icetide sets, except `spark.jars`, which is
    added to icetide's jars rather than replacing them. The session time zone is UTC, so
    timestamps mean the same on every machine. An existing active session is reused. A catalog
    given by `catalog_options` is opened at once: one that cannot be (unreachable, refused)
    raises CatalogUnavailableError naming it.
    """
    check_java()
    from pyspark.sql import SparkSession

    # Python workers must see the driver's packages (pyarrow, icetide); PySpark reads only the env.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # The embedded default needs no network; binding to loopback also silences Spark's host warning.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    jars = [iceberg_runtime_jar()]
    own_jar = icetide_jar()
    if own_jar:
        jars.append(own_jar)
    driver = jdbc_driver_jar(catalog_options)
    if driver:
        jars.append(driver)
    extra = dict(conf or {})
    jars += [j for j in extra.pop("spark.jars", "").split(",") if j and j not in jars]
    settings: dict[str, str] = {
        "spark.jars": ",".join(jars),
        "spark.sql.extensions": ICEBERG_EXTENSIONS,
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(max(2, os.cpu_count() or 2)),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # Bigger Arrow batches into the writers: about 10% faster inserts than Spark's 10,000.
        "spark.sql.execution.arrow.maxRecordsPerBatch": "100000",
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={LOG4J_CONFIG}",
        "spark.executor.extraJavaOptions": f"-Dlog4j2.configurationFile={LOG4J_CONFIG}",
    }
    lock_impl = COMMIT_LOCK_IMPL if own_jar else None
    settings.update(catalog_conf(catalog, warehouse=warehouse, options=catalog_options, lock_impl=lock_impl))
    if own_jar is None and not catalog_options:
        log.warning(
            "javac not found, so icetide's commit lock is not built: the embedded catalog is safe for one process "
            "only (run icetide and any other Spark session on this warehouse one at a time)"
        )
    settings.update(extra)
    builder = SparkSession.builder.appName(app_name).master(
        master or os.environ.get("ICETIDE_SPARK_MASTER", "local[*]")
    )
    for key, value in settings.items():
        builder = builder.config(key, value)
    log.debug("starting Spark with %s", redact(settings))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    if catalog_options:
        _open_catalog(spark, catalog)
    return spark


def _open_catalog(spark: SparkSession, catalog: str) -> None:
    """Initialize a configured catalog now: Spark defers it to the first query, and a catalog
    that fails to initialize there (unreachable, unauthorized) surfaces as a confusing error
    about namespaces of `spark_catalog`."""
    try:
        spark._jsparkSession.sessionState().catalogManager().catalog(catalog)
    except Exception as exc:
        raise CatalogUnavailableError(f"catalog: cannot open catalog {catalog!r}: {one_line(exc)}") from exc
