"""Benchmark: commit latency of the embedded catalog with icetide's file lock, without it,
through `icetide catalog serve` (REST, the embedded catalog behind it), and of a JDBC catalog on
SQLite (Debian's libxerial-sqlite-jdbc-java, if installed). Not part of the test suite.

    .venv/bin/python bench/commit_lock.py [--commits 60] [--record]

One Spark session (one process) with these Iceberg catalogs on one warehouse folder; on each, a
table receives `--commits` metadata-only fast appends in a row. Reported: the median and p95
latency of a commit. Correctness across processes is tests/test_commit_lock.py's business.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import in_temp_warehouse, median, parser, render_table, report
from icetide.spark.maven import SQLITE_JDBC, fetch

SQLITE_JAR = fetch(SQLITE_JDBC)  # its native library is inside the jar


def catalogs(warehouse: str) -> dict[str, str]:
    """Spark conf for the catalogs beside icetide's `lake`: `nolock` (Hadoop, Iceberg's in-JVM
    lock) and `sqlite` (JDBC)."""
    conf = {
        "spark.sql.catalog.nolock": "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.catalog.nolock.type": "hadoop",
        "spark.sql.catalog.nolock.warehouse": warehouse,
    }
    if os.path.exists(SQLITE_JAR):
        conf |= {
            "spark.driver.extraClassPath": SQLITE_JAR,
            "spark.sql.catalog.sqlite": "org.apache.iceberg.spark.SparkCatalog",
            "spark.sql.catalog.sqlite.type": "jdbc",
            "spark.sql.catalog.sqlite.uri": f"jdbc:sqlite:{warehouse}/catalog.db",
            "spark.sql.catalog.sqlite.warehouse": f"{warehouse}/jdbc",
            "spark.sql.catalog.sqlite.jdbc.schema-version": "V1",
        }
    return conf


def commit_latencies(spark: Any, table: str, commits: int) -> list[float]:
    """Seconds of each of `commits` fast appends of one (never written) 1-row file."""
    from icetide.table.iceberg import jvm, load_table

    spark.sql(f"CREATE TABLE {table} (id bigint) USING iceberg")
    jtable = load_table(spark, table)
    seconds = []
    for n in range(commits):
        data_file = (
            jvm(spark)
            .org.apache.iceberg.DataFiles.builder(jtable.spec())
            .withPath(f"{jtable.location()}/data/f{n}.parquet")
            .withFormat("PARQUET")
            .withFileSizeInBytes(100)
            .withRecordCount(1)
            .build()
        )
        started = time.perf_counter()
        jtable.newFastAppend().appendFile(data_file).commit()
        seconds.append(time.perf_counter() - started)
    return seconds


def run(warehouse: str, commits: int) -> str:
    import icetide
    from icetide.catalog.server import catalog_server, served_catalog

    with catalog_server(served_catalog("lake", warehouse=warehouse, options=None), port=0) as server:
        rest = {"spark.sql.catalog.rest": "org.apache.iceberg.spark.SparkCatalog"}
        rest |= {"spark.sql.catalog.rest.type": "rest", "spark.sql.catalog.rest.uri": server.uri}
        spark = icetide.spark_session(warehouse=warehouse, master="local[1]", conf=catalogs(warehouse) | rest)
        return _measure(spark, commits)


def _measure(spark: Any, commits: int) -> str:
    names = ["lake", "nolock", "rest"] + (["sqlite"] if os.path.exists(SQLITE_JAR) else [])
    labels = {
        "lake": "Hadoop + icetide file lock",
        "nolock": "Hadoop, in-JVM lock (unsafe across processes)",
        "rest": "REST (icetide catalog serve: Hadoop + file lock behind it)",
        "sqlite": "JDBC on SQLite",
    }
    rows: list[list[str]] = []
    for round_ in range(2):  # the first round warms the JVM up; the second is reported
        rows = []
        for name in names:
            if name == "rest":
                spark.sql(f"CREATE NAMESPACE IF NOT EXISTS rest.bench_{name}")
            seconds = sorted(commit_latencies(spark, f"{name}.bench_{name}.t{round_}", commits))
            p95 = seconds[int(0.95 * len(seconds))]
            rows.append([labels[name], f"{median(seconds) * 1000:.1f}", f"{p95 * 1000:.1f}"])
    spark.stop()
    return f"{commits} metadata-only fast appends in a row, one process:\n\n" + render_table(
        ["catalog", "median ms", "p95 ms"], rows
    )


def main() -> None:
    args_parser = parser(__doc__)
    args_parser.add_argument("--commits", type=int, default=60)
    args = args_parser.parse_args()
    body = in_temp_warehouse(lambda warehouse: run(warehouse, args.commits))
    report("bench/commit_lock.py: commit latency by catalog and lock", body, save=args.record)


if __name__ == "__main__":
    main()
