"""A SparkSession with Iceberg, and the settings icetide needs for one's own session (`spark_conf`)."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from icetide.catalog.settings import COMMIT_LOCK_IMPL, DEFAULT_CATALOG, catalog_conf
from icetide.config.secrets import redact
from icetide.errors import CatalogUnavailableError, ConfigError, one_line
from icetide.filesystems import S3Settings, use_s3_settings
from icetide.spark.jars import iceberg_runtime, icetide_jar, jdbc_driver_artifact, needs_aws_bundle, session_jars
from icetide.spark.java import check_java
from icetide.spark.jvm_stderr import filtered_jvm_stderr
from icetide.spark.maven import ICEBERG_AWS_BUNDLE

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
LOG4J_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")
EXECUTOR_ENV = "spark.executorEnv."


def spark_conf(
    *,
    warehouse: str | None = "warehouse",
    catalog: str = DEFAULT_CATALOG,
    catalog_options: Mapping[str, str] | None = None,
    packages: bool = False,
) -> dict[str, str]:
    """The Spark settings icetide needs, to add to one's own session, `spark-submit` or cluster.

    Iceberg's SQL extensions, one Iceberg catalog named `catalog` (the embedded Hadoop catalog on
    the folder `warehouse`, or `catalog_options` passed through; see `catalog_conf`), the UTC
    session time zone, and the jars: with `packages=False` the local paths of Iceberg's runtime
    for the installed PySpark, of a JDBC catalog's driver, of Iceberg's AWS bundle for a catalog
    on S3 and of icetide's own jar (fetched and built now) in `spark.jars`; with `packages=True`
    their Maven coordinates in `spark.jars.packages`, for Spark to resolve (icetide's own jar
    stays a local path, as it is built on this machine). The catalog's S3 settings (endpoint,
    region, path style, keys: `icetide.filesystems.S3Settings`) go to the executors' environment
    (`spark.executorEnv.ICETIDE_S3_*`), for icetide's own files on S3. `spark_session` starts
    with these and its tuning defaults.
    """
    check_java()
    own_jar = icetide_jar()
    settings: dict[str, str] = {
        "spark.sql.extensions": ICEBERG_EXTENSIONS,
        "spark.sql.session.timeZone": "UTC",
    }
    if packages:
        coordinates = [iceberg_runtime().coordinates]
        driver = jdbc_driver_artifact(catalog_options)
        if driver is not None:
            coordinates.append(driver.coordinates)
        if needs_aws_bundle(warehouse, catalog_options):
            coordinates.append(ICEBERG_AWS_BUNDLE.coordinates)
        settings["spark.jars.packages"] = ",".join(coordinates)
        if own_jar:
            settings["spark.jars"] = own_jar
    else:
        settings["spark.jars"] = ",".join(session_jars(catalog_options, own_jar=own_jar, warehouse=warehouse))
    # icetide's own S3 reads and writes in Spark's Python workers use the catalog's S3 settings.
    for name, value in S3Settings.from_catalog(catalog_options).environment().items():
        settings[EXECUTOR_ENV + name] = value
    lock_impl = COMMIT_LOCK_IMPL if own_jar else None
    settings.update(catalog_conf(catalog, warehouse=warehouse, options=catalog_options, lock_impl=lock_impl))
    if own_jar is None and not catalog_options:
        log.warning(
            "javac not found, so icetide's commit lock is not built: the embedded catalog is safe for one process "
            "only (run icetide and any other Spark session on this warehouse one at a time)"
        )
    return settings


# Settings icetide's own sessions start with, beside `spark_conf`'s; a user's session may differ.
TUNING_DEFAULTS = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # Bigger Arrow batches into the writers: about 10% faster inserts than Spark's 10,000.
    "spark.sql.execution.arrow.maxRecordsPerBatch": "100000",
    # The driver's logging only: an executor of a cluster runs on another machine, where this
    # path (of the driver's machine) need not exist; a local master's executors are the driver.
    "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={LOG4J_CONFIG}",
}
MASTER_ENV = "ICETIDE_SPARK_MASTER"


def is_local_master(master: str | None) -> bool:
    """Does `master` run the executors inside the driver's JVM (`local`, `local[N]`, `local[*]`)?
    None, Spark's default, is local[*] in a plain Python process."""
    return master is None or master == "local" or master.startswith("local[")


def session_master(master: str | None, conf: Mapping[str, str] | None) -> str | None:
    """The master a session starts with: `spark.master` in `conf`, else `master`, else
    $ICETIDE_SPARK_MASTER, else None: Spark's default, which is local[*] in a plain Python process
    and spark-submit's `--master` in a job it started."""
    return (conf or {}).get("spark.master") or master or os.environ.get(MASTER_ENV) or None


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
    Iceberg's runtime for the installed PySpark and a JDBC catalog's driver (PostgreSQL, SQLite)
    are fetched by their Maven coordinates once and put on the classpath (`spark_conf`).
    `conf` entries win over everything icetide sets, except `spark.jars`, which is added to
    icetide's jars rather than replacing them. The session time zone is UTC, so timestamps mean
    the same on every machine. The master is `spark.master` in `conf`, else `master`, else
    $ICETIDE_SPARK_MASTER, else Spark's default: local[*], or spark-submit's `--master` in a job
    it started (docs/how-to/cluster.md).

    An active session (a notebook's, say) is reused when it fits: Iceberg's extensions loaded,
    the UTC time zone, and the catalog either absent (it is added) or configured as asked. One
    that does not fit raises ConfigError naming the settings that differ. A catalog given by
    `catalog_options` is opened at once: one that cannot be (unreachable, refused) raises
    CatalogUnavailableError naming it.
    """
    check_java()
    from pyspark.sql import SparkSession

    # Python workers must see the driver's packages (pyarrow, icetide); PySpark reads only the env.
    # On a cluster, set PYSPARK_PYTHON to the workers' interpreter (docs/how-to/cluster.md).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    master = session_master(master, conf)
    if is_local_master(master):
        # Local Spark needs no network; binding to loopback also silences Spark's host warning.
        # Not on a cluster, whose executors connect back to the driver: Spark then picks the
        # machine's address, unless SPARK_LOCAL_IP or spark.driver.host names one.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    required = spark_conf(warehouse=warehouse, catalog=catalog, catalog_options=catalog_options)
    extra = dict(conf or {})
    jars = required["spark.jars"].split(",")
    jars += [j for j in extra.pop("spark.jars", "").split(",") if j and j not in jars]
    settings = {
        **TUNING_DEFAULTS,
        "spark.sql.shuffle.partitions": str(max(2, os.cpu_count() or 2)),
        **required,
        "spark.jars": ",".join(jars),
        **extra,
    }
    # The thread's active session, else the process's: a session started on another thread (a
    # notebook's, a maintenance thread's) is still the one `getOrCreate()` would hand back as is.
    active = SparkSession.getActiveSession() or SparkSession._instantiatedSession
    if active is not None:
        _fit_active_session(active, required, catalog)
        spark = active
    else:
        builder = SparkSession.builder.appName(app_name)
        if master is not None:
            builder = builder.master(master)
        for key, value in settings.items():
            builder = builder.config(key, value)
        log.debug("starting Spark with %s", redact(settings))
        with filtered_jvm_stderr():
            spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel(log_level)
    _hand_over_s3_settings(spark, required)
    if catalog_options:
        _open_catalog(spark, catalog)
    return spark


def _hand_over_s3_settings(spark: SparkSession, required: Mapping[str, str]) -> None:
    """This process and the session's Python workers use the catalog's S3 settings for icetide's
    own files. A reused session's workers get them too: PySpark gives each Python function the
    SparkContext's environment as it is when the function is sent."""
    env = {k[len(EXECUTOR_ENV) :]: v for k, v in required.items() if k.startswith(EXECUTOR_ENV)}
    if not env:
        return
    use_s3_settings(S3Settings.from_environment(env))
    environment = getattr(spark.sparkContext, "environment", None)
    if isinstance(environment, dict):
        environment.update(env)


def _fit_active_session(spark: SparkSession, required: Mapping[str, str], catalog: str) -> None:
    """Reuse an active session when it has what icetide needs; add a catalog it lacks; otherwise
    raise ConfigError naming every setting that differs (they cannot change in a running session)."""
    conf = spark.conf
    differs: list[str] = []
    extensions = str(conf.get("spark.sql.extensions", "") or "")
    if ICEBERG_EXTENSIONS not in extensions.split(","):
        differs.append(f"spark.sql.extensions lacks {ICEBERG_EXTENSIONS}")
    zone = str(conf.get("spark.sql.session.timeZone", "") or "")
    if zone != "UTC":
        differs.append(f"spark.sql.session.timeZone is {zone!r}, not 'UTC'")
    prefix = f"spark.sql.catalog.{catalog}"
    catalog_keys = {k: v for k, v in required.items() if k == prefix or k.startswith(prefix + ".")}
    present = {k: conf.get(k, None) for k in catalog_keys}
    if any(v is not None for v in present.values()):
        for key, wanted in catalog_keys.items():
            have = present[key]
            if have is None or str(have) != wanted:
                shown = "unset" if have is None else repr(redact({key: str(have)})[key])
                differs.append(f"{key} is {shown}, not {redact({key: wanted})[key]!r}")
    if differs:
        raise ConfigError(
            "the active Spark session does not fit icetide: "
            + "; ".join(differs)
            + " (stop it, or start it with icetide.spark_conf())"
        )
    if all(v is None for v in present.values()):
        for key, wanted in catalog_keys.items():
            conf.set(key, wanted)


def _open_catalog(spark: SparkSession, catalog: str) -> None:
    """Initialize a configured catalog now: Spark defers it to the first query, and a catalog
    that fails to initialize there (unreachable, unauthorized) surfaces as a confusing error
    about namespaces of `spark_catalog`."""
    try:
        spark._jsparkSession.sessionState().catalogManager().catalog(catalog)
    except Exception as exc:
        raise CatalogUnavailableError(f"catalog: cannot open catalog {catalog!r}: {one_line(exc)}") from exc
