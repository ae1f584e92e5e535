"""Shared fixtures: one Spark session per test process, on a temporary warehouse."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import pytest

_counter = itertools.count()


@pytest.fixture(scope="session")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("warehouse"))


@pytest.fixture(scope="session")
def spark(warehouse: str) -> Iterator[object]:
    import icetide

    session = icetide.spark_session(
        warehouse=warehouse,
        master="local[2]",
        conf={"spark.sql.shuffle.partitions": "4", "spark.default.parallelism": "2"},
    )
    yield session
    session.stop()


@pytest.fixture
def table_name() -> str:
    """A fresh table name in the embedded catalog, unique within the test process."""
    return f"lake.test.t{os.getpid()}_{next(_counter)}"


from tests.kafka_broker import kafka_broker  # noqa: E402, F401
