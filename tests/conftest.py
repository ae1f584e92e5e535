"""Shared fixtures: one Spark session per test process, on a temporary warehouse."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import pytest

_counter = itertools.count()

# Every Spark driver JVM the suite starts (this process's session and each `icetide` subprocess's,
# which inherit the environment) compiles with C1 only and collects with the serial collector:
# short-lived JVMs on small data spend most of their CPU in the C2 compiler and GC threads. Measured
# here, a session that starts, creates a table and appends 1,000 rows: about 31 CPU seconds by
# default, 17 with these flags (docs/benchmarks.md, "Test suite"). Not for pipelines: a long run
# wants C2. A value set in the environment wins.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")


def pytest_configure(config: pytest.Config) -> None:
    """Once per run, before the xdist workers start (they and their subprocesses inherit it): the
    drivers map Spark's classes from an archive (tests/jvm_archive.py). ICETIDE_TEST_CDS=0 turns
    it off."""
    options = os.environ["SPARK_SUBMIT_OPTS"]
    if hasattr(config, "workerinput") or "SharedArchiveFile" in options or os.environ.get("ICETIDE_TEST_CDS") == "0":
        return
    from tests.jvm_archive import archive_options

    os.environ["SPARK_SUBMIT_OPTS"] = archive_options(options)


@pytest.fixture(scope="session")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("warehouse"))


@pytest.fixture(scope="session")
def spark(warehouse: str) -> Iterator[object]:
    import icetide
    from icetide.spark.jars import JDBC_DRIVERS
    from icetide.spark.maven import ICEBERG_AWS_BUNDLE, fetch

    # The JDBC drivers and S3FileIO's AWS SDK, so tests can read the PostgreSQL catalogs and S3
    # warehouses of the pipelines they run (a jar must be on the classpath when the JVM starts).
    drivers = [fetch(artifact) for _, artifact in JDBC_DRIVERS.values()] + [fetch(ICEBERG_AWS_BUNDLE)]
    session = icetide.spark_session(
        warehouse=warehouse,
        master="local[2]",
        conf={
            "spark.sql.shuffle.partitions": "4",
            "spark.default.parallelism": "2",
            "spark.jars": ",".join(drivers),
        },
    )
    yield session
    session.stop()


@pytest.fixture
def table_name() -> str:
    """A fresh table name in the embedded catalog, unique within the test process."""
    return f"lake.test.t{os.getpid()}_{next(_counter)}"


from tests.kafka_broker import kafka_broker, kafka_server  # noqa: E402, F401
from tests.kafka_connect import kafka_connect  # noqa: E402, F401
from tests.mariadb_server import mariadb  # noqa: E402, F401
from tests.postgres_server import postgres  # noqa: E402, F401
from tests.s3_server import s3  # noqa: E402, F401
