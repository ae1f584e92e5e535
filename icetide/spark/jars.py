"""The jars an icetide session puts on Spark's classpath: Iceberg's runtime, and icetide's own.

icetide's own JVM classes (`jvm/*.java`: the RocksDB state store provider and the commit lock of
the embedded catalog) are compiled with the JDK's `javac` against the installed PySpark's jars and
Iceberg's runtime jar the first time a session needs them, into one jar in `$ICETIDE_CACHE`
(default `~/.cache/icetide`), keyed by the sources, Spark's version and Iceberg's jar, so a changed
source or another Spark builds a new jar. Without `javac` (a JRE only) there is no icetide jar:
sessions run with Spark's own state provider and Iceberg's in-JVM commit lock, and say so.
`python -m icetide.spark.jars` builds the jar and prints its path (for a plain Spark session).
"""

from __future__ import annotations

import glob
import hashlib
import logging
import os
import subprocess
import tempfile
import zipfile
from collections.abc import Mapping

from icetide.errors import ConfigError
from icetide.spark.java import jdk_tool

log = logging.getLogger(__name__)

# Spark 3.5 from PyPI is built for Scala 2.12; the wheel also carries 2.13 jars, which must not load.
RUNTIME_JAR_PATTERN = "iceberg-spark-runtime-3.5_2.12-*.jar"
SOURCE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jvm")
CACHE_ENV = "ICETIDE_CACHE"
# A JDBC catalog's driver, by the start of its `uri`: (database, Debian package, jar in SYSTEM_JARS).
JDBC_DRIVERS = {
    "jdbc:postgresql:": ("PostgreSQL", "libpostgresql-jdbc-java", "postgresql.jar"),
    "jdbc:sqlite:": ("SQLite", "libxerial-sqlite-jdbc-java", "sqlite-jdbc.jar"),
}
SYSTEM_JARS = "/usr/share/java"
JDBC_DRIVER_ENV = "ICETIDE_JDBC_DRIVER"  # a driver jar's path, for other databases or other installs
JDBC_CATALOG_IMPL = "org.apache.iceberg.jdbc.JdbcCatalog"


def iceberg_runtime_jar() -> str:
    """Path of the Iceberg Spark runtime jar shipped in `snowpark-connect-deps-iceberg`."""
    try:
        import snowpark_connect_deps_iceberg as deps
    except ImportError as exc:  # pragma: no cover - a broken install
        raise ConfigError(
            "the Iceberg runtime is not installed: pip install 'snowpark-connect-deps-iceberg==1.0.2'"
        ) from exc
    roots = list(getattr(deps, "__path__", [])) or [os.path.dirname(deps.__file__ or "")]
    for root in roots:
        found = sorted(glob.glob(os.path.join(root, "jars", RUNTIME_JAR_PATTERN)))
        if found:
            return found[-1]
    raise ConfigError(f"no {RUNTIME_JAR_PATTERN} inside snowpark-connect-deps-iceberg at {roots}")


def is_jdbc_catalog(options: Mapping[str, str] | None) -> bool:
    """Do these catalog options name Iceberg's JDBC catalog (`type: jdbc` or its catalog-impl)?"""
    options = options or {}
    return options.get("type") == "jdbc" or options.get("catalog-impl") == JDBC_CATALOG_IMPL


def jdbc_driver_jar(options: Mapping[str, str] | None) -> str | None:
    """The JDBC driver jar a JDBC catalog needs on Spark's classpath; None for other catalogs, and
    for a database whose driver icetide does not know (PostgreSQL and SQLite it does).

    $ICETIDE_JDBC_DRIVER, when set, is the jar. Otherwise the Debian package's jar in
    /usr/share/java. A missing jar is a ConfigError naming the package to install.
    """
    if not is_jdbc_catalog(options):
        return None
    assert options is not None
    explicit = os.environ.get(JDBC_DRIVER_ENV)
    if explicit:
        if not os.path.isfile(explicit):
            raise ConfigError(f"{JDBC_DRIVER_ENV}: no JDBC driver jar at {explicit}")
        return explicit
    uri = str(options.get("uri", ""))
    for prefix, (database, package, jar) in JDBC_DRIVERS.items():
        if uri.startswith(prefix):
            path = os.path.join(SYSTEM_JARS, jar)
            if not os.path.isfile(path):
                raise ConfigError(
                    f"catalog.uri: the {database} JDBC driver is not installed: apt-get install {package} "
                    f"(or set {JDBC_DRIVER_ENV} to its jar)"
                )
            return path
    return None


def cache_dir() -> str:
    """Where built jars are kept: $ICETIDE_CACHE, else ~/.cache/icetide."""
    return os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "icetide")


def pyspark_jars() -> tuple[str, str]:
    """(folder of the installed PySpark's jars, PySpark's version)."""
    import pyspark

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
        log.debug("building %s failed: %s", target, exc)
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
    """Path of the jar of icetide's JVM classes (state provider, commit lock), built if needed;
    None without javac."""
    spark_jars, spark_version = pyspark_jars()
    sources = sorted(glob.glob(os.path.join(SOURCE_DIR, "*.java")))
    classpath = [os.path.join(spark_jars, "*"), iceberg_runtime_jar()]
    return compiled_jar("icetide-jvm", sources, classpath, depends_on=f"spark {spark_version}")


if __name__ == "__main__":  # `make install` builds the jar once, so tests and the demo find it
    import sys

    built = icetide_jar()
    if built is None:
        print(
            "note: javac not found, so the stateful stage will use Spark's own RocksDB provider and the embedded "
            "catalog's commits are safe only inside one process",
            file=sys.stderr,
        )
    else:
        print(built)
