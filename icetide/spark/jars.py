"""The jars an icetide session puts on Spark's classpath: Iceberg's runtime, a JDBC driver, and icetide's own.

Iceberg's runtime and the JDBC drivers come from Maven Central by their coordinates
(`icetide.spark.maven`), the runtime chosen by the installed PySpark's Spark line and Scala version.
icetide's own JVM classes (`jvm/*.java`: the commit lock of the embedded catalog, the REST catalog
server and, on Spark 3.5, the RocksDB state store provider) are compiled with the JDK's `javac`
against the installed PySpark's jars and Iceberg's runtime the first time a session needs them,
into one jar in `$ICETIDE_CACHE` (default `~/.cache/icetide`), keyed by the sources, Spark's
version and Iceberg's jar, so a changed source or another Spark builds a new jar. Without `javac`
(a JRE only) there is no icetide jar: sessions run with Spark's own state provider and Iceberg's
in-JVM commit lock, and say so. `python -m icetide.spark.jars` fetches and builds what the
installed PySpark needs and prints the jars' paths (for a plain Spark session).
"""

from __future__ import annotations

import glob
import hashlib
import logging
import os
import re
import subprocess
import tempfile
import zipfile
from collections.abc import Mapping

from icetide.errors import ConfigError, UnsupportedSparkError
from icetide.filesystems import is_s3
from icetide.spark.java import jdk_tool
from icetide.spark.maven import (
    ICEBERG_AWS_BUNDLE,
    ICEBERG_RUNTIMES,
    ICEBERG_VERSION,
    POSTGRESQL_JDBC,
    SQLITE_JDBC,
    Artifact,
    cache_dir,
    fetch,
)

log = logging.getLogger(__name__)

SOURCE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jvm")
# Sources compiled only for some Spark lines: the provider works around SPARK-51955, fixed in 4.1.
SPARK_LINE_SOURCES = {"ReusingRocksDBProvider.java": {"3.5"}}
SUPPORTED_SPARK = "PySpark 4.1 (the default) or 3.5"
INSTALL_SPARK = "pip install 'pyspark>=4.1,<4.2'"
# A JDBC catalog's driver, by the start of its `uri`: (database, Maven artifact).
JDBC_DRIVERS: dict[str, tuple[str, Artifact]] = {
    "jdbc:postgresql:": ("PostgreSQL", POSTGRESQL_JDBC),
    "jdbc:sqlite:": ("SQLite", SQLITE_JDBC),
}
JDBC_DRIVER_ENV = "ICETIDE_JDBC_DRIVER"  # a driver jar's path, for other databases or other installs
JDBC_CATALOG_IMPL = "org.apache.iceberg.jdbc.JdbcCatalog"


def spark_line(version: str | None = None) -> str:
    """The Spark line ('4.1', '3.5') of `version` (default: the installed PySpark's), if icetide
    supports it; otherwise UnsupportedSparkError, one line saying what to install."""
    if version is None:
        version = pyspark_jars()[1]
    match = re.match(r"(\d+)\.(\d+)", version)
    line = f"{match.group(1)}.{match.group(2)}" if match else version
    if not any(line == known for known, _ in ICEBERG_RUNTIMES):
        raise UnsupportedSparkError(
            f"PySpark {version} is not supported: icetide runs on {SUPPORTED_SPARK}, the Spark lines Iceberg "
            f"{ICEBERG_VERSION} ships runtimes for: {INSTALL_SPARK}"
        )
    return line


def scala_version(spark_jars: str) -> str:
    """The Scala version ('2.13', '2.12') the installed PySpark was built for, from its jars."""
    found = sorted(glob.glob(os.path.join(spark_jars, "scala-library-*.jar")))
    match = re.search(r"scala-library-(\d+\.\d+)", os.path.basename(found[-1])) if found else None
    if match is None:
        raise UnsupportedSparkError(f"no scala-library jar in {spark_jars}: reinstall PySpark ({INSTALL_SPARK})")
    return match.group(1)


def iceberg_runtime() -> Artifact:
    """The Iceberg Spark runtime for the installed PySpark's Spark line and Scala version."""
    spark_jars, version = pyspark_jars()
    line = spark_line(version)
    scala = scala_version(spark_jars)
    runtime = ICEBERG_RUNTIMES.get((line, scala))
    if runtime is None:
        raise UnsupportedSparkError(
            f"PySpark {version} is built for Scala {scala}, for which Iceberg {ICEBERG_VERSION} ships no Spark {line} "
            f"runtime: {INSTALL_SPARK}"
        )
    return runtime


def iceberg_runtime_jar() -> str:
    """Path of the Iceberg Spark runtime jar for the installed PySpark, fetched once from Maven."""
    return fetch(iceberg_runtime())


def is_jdbc_catalog(options: Mapping[str, str] | None) -> bool:
    """Do these catalog options name Iceberg's JDBC catalog (`type: jdbc` or its catalog-impl)?"""
    options = options or {}
    return options.get("type") == "jdbc" or options.get("catalog-impl") == JDBC_CATALOG_IMPL


def jdbc_driver_artifact(options: Mapping[str, str] | None) -> Artifact | None:
    """The pinned Maven artifact of a JDBC catalog's driver; None for other catalogs and databases."""
    if not is_jdbc_catalog(options):
        return None
    assert options is not None
    uri = str(options.get("uri", ""))
    for prefix, (_, artifact) in JDBC_DRIVERS.items():
        if uri.startswith(prefix):
            return artifact
    return None


def jdbc_driver_jar(options: Mapping[str, str] | None) -> str | None:
    """The JDBC driver jar a JDBC catalog needs on Spark's classpath; None for other catalogs, and
    for a database whose driver icetide does not know (PostgreSQL and SQLite it does).

    $ICETIDE_JDBC_DRIVER, when set, is the jar. Otherwise the driver's pinned Maven artifact,
    fetched once (a DependencyError names it when it cannot be).
    """
    if not is_jdbc_catalog(options):
        return None
    assert options is not None
    explicit = os.environ.get(JDBC_DRIVER_ENV)
    if explicit:
        if not os.path.isfile(explicit):
            raise ConfigError(f"{JDBC_DRIVER_ENV}: no JDBC driver jar at {explicit}")
        return explicit
    artifact = jdbc_driver_artifact(options)
    return fetch(artifact) if artifact else None


def needs_aws_bundle(warehouse: str | None, options: Mapping[str, str] | None) -> bool:
    """Does a catalog with these options and warehouse need Iceberg's AWS bundle (S3FileIO's SDK)?

    Yes when its warehouse is on S3 (s3://, s3a://, s3n://), when its options name S3 or AWS
    settings (`s3.*`, `client.*`, an `io-impl` or `catalog-impl` of `org.apache.iceberg.aws`), and
    for a REST catalog, whose server may hand out tables on S3 whatever the options say.
    """
    options = options or {}
    if is_s3(str(options.get("warehouse") or warehouse or "")):
        return True
    if any(key.startswith(("s3.", "client.")) for key in options):
        return True
    if any("org.apache.iceberg.aws" in str(options.get(key, "")) for key in ("io-impl", "catalog-impl")):
        return True
    return str(options.get("type", "")).lower() in ("rest", "glue")


def aws_bundle_jar(warehouse: str | None, options: Mapping[str, str] | None) -> str | None:
    """The path of Iceberg's AWS bundle, fetched once, when the catalog needs it (`needs_aws_bundle`)."""
    return fetch(ICEBERG_AWS_BUNDLE) if needs_aws_bundle(warehouse, options) else None


def pyspark_jars() -> tuple[str, str]:
    """(folder of the Spark jars PySpark runs with, PySpark's version): $SPARK_HOME/jars when
    SPARK_HOME names a Spark (as spark-submit and a Spark distribution set it, PySpark itself then
    imported from $SPARK_HOME/python/lib/pyspark.zip), else the pip-installed PySpark's own."""
    import pyspark

    home = os.environ.get("SPARK_HOME")
    if home and os.path.isdir(os.path.join(home, "jars")):
        return os.path.join(home, "jars"), pyspark.__version__
    return os.path.join(os.path.dirname(os.path.abspath(pyspark.__file__)), "jars"), pyspark.__version__


def compiled_jar(name: str, sources: list[str], classpath: list[str], *, depends_on: str = "") -> str | None:
    """Path of a jar of `sources` compiled against `classpath`, built now unless the cache has it.

    The jar is named `name-<digest>.jar`, the digest covering the sources' contents, the
    classpath's entries and `depends_on` (e.g. Spark's version), so any change builds a new jar.
    None when it cannot be built (no javac, or javac failed: the reason goes to the debug log).
    Concurrent builders each write a private file and rename it into place, so a reader never
    sees a partial jar.
    """
    digest = hashlib.sha256()
    for source in sorted(sources):
        digest.update(os.path.basename(source).encode())
        with open(source, "rb") as f:
            digest.update(f.read())
    for entry in [*classpath, depends_on]:
        digest.update(entry.encode())
    target = os.path.join(cache_dir(), f"{name}-{digest.hexdigest()[:16]}.jar")
    if os.path.exists(target):
        return target
    javac = jdk_tool("javac")
    if javac is None:
        log.debug("javac not found: cannot build %s", target)
        return None
    try:
        _build(javac, sorted(sources), classpath, target)
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("building %s failed, so icetide runs without its JVM classes: %s", target, exc)
        return None
    return target


def _build(javac: str, sources: list[str], classpath: list[str], target: str) -> None:
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="icetide-javac-") as work:
        classes = os.path.join(work, "classes")
        done = subprocess.run(
            [javac, "-nowarn", "-d", classes, "-cp", os.pathsep.join(classpath), *sources],
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


def icetide_jar() -> str | None:
    """Path of the jar of icetide's JVM classes for the installed Spark, built if needed; None without javac."""
    spark_jars, spark_version = pyspark_jars()
    line = spark_line(spark_version)
    sources = [
        path
        for path in sorted(glob.glob(os.path.join(SOURCE_DIR, "*.java")))
        if line in SPARK_LINE_SOURCES.get(os.path.basename(path), {line})
    ]
    classpath = [os.path.join(spark_jars, "*"), iceberg_runtime_jar()]
    return compiled_jar("icetide-jvm", sources, classpath, depends_on=f"spark {spark_version}")


def session_jars(
    catalog_options: Mapping[str, str] | None = None, *, own_jar: str | None = None, warehouse: str | None = None
) -> list[str]:
    """The jars an icetide session needs for these catalog options, fetched now: Iceberg's runtime,
    icetide's own jar (`own_jar`, else built now when javac is here), a JDBC catalog's driver and,
    for a catalog on S3, Iceberg's AWS bundle."""
    jars = [iceberg_runtime_jar()]
    own = own_jar or icetide_jar()
    if own:
        jars.append(own)
    driver = jdbc_driver_jar(catalog_options)
    if driver:
        jars.append(driver)
    bundle = aws_bundle_jar(warehouse, catalog_options)
    if bundle:
        jars.append(bundle)
    return jars


if __name__ == "__main__":  # `make install` fetches and builds the jars once, so tests and the demo start offline
    import sys

    from icetide.errors import IcetideError

    try:
        for artifact in JDBC_DRIVERS.values():
            fetch(artifact[1])
        fetch(ICEBERG_AWS_BUNDLE)
        print(iceberg_runtime_jar())
        built = icetide_jar()
    except IcetideError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
    if built is None and jdk_tool("javac") is None:
        print(
            "note: javac not found, so the stateful stage will use Spark's own RocksDB provider and the embedded "
            "catalog's commits are safe only inside one process",
            file=sys.stderr,
        )
    elif built is None:
        sys.exit(1)  # the compiler's errors were logged
    else:
        print(built)
