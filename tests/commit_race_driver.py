"""Driver program for test_commit_lock.py: one process of several that append to one table of the
embedded catalog as fast as they can, each in its own Spark JVM.

Usage: python -m tests.commit_race_driver WAREHOUSE TABLE WRITER COMMITS SYNC_DIR
                [--plain] [--slow-rename JAR:MS] [--catalog-option KEY=VALUE ...]

It starts its Spark session, writes SYNC_DIR/ready-WRITER, waits for SYNC_DIR/go, then makes
COMMITS fast appends of one small Parquet file each (1 to 3 rows), tagged `race.commit` =
WRITER-n in the snapshot summary. It prints one JSON line: per commit, its tag, its rows, and
whether the commit call returned (ok) or the Java exception it raised. With --plain the table is
reached through a catalog configured as a plain Spark session would be, without icetide's
commit lock (`lock-impl`), to show what the lock prevents. With --slow-rename, the local file
system of this process is tests/jvm/SlowRenameFileSystem.java (from JAR), which waits MS
milliseconds between the catalog's check that the next metadata version is free and its rename
onto it, so that concurrent commits race every time. With --catalog-option, the table is in the
catalog those options describe (JDBC, REST), and WAREHOUSE is unused.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid
from typing import Any

TAG = "race.commit"
PLAIN_CATALOG = "plain"


def rows_of(n: int) -> int:
    """Rows in the n-th commit of a writer: 1 to 3, so a lost commit changes the count."""
    return n % 3 + 1


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("warehouse", "table", "writer", "commits", "sync"):
        parser.add_argument(name)
    parser.add_argument("--plain", action="store_true")
    parser.add_argument("--slow-rename", default="")
    parser.add_argument("--catalog-option", action="append", default=[])
    args = parser.parse_args()
    warehouse, table, writer, sync = args.warehouse, args.table, args.writer, args.sync
    import pyarrow as pa
    import pyarrow.parquet as pq

    import icetide
    from icetide.table.iceberg import arrow_schema, data_location, java_exception_class, jvm, load_table

    conf = {"spark.sql.shuffle.partitions": "1"}
    if args.slow_rename:
        jar, delay = args.slow_rename.rsplit(":", 1)
        conf |= {
            "spark.driver.extraClassPath": jar,
            "spark.hadoop.fs.file.impl": "icetide.testing.SlowRenameFileSystem",
            "spark.hadoop.icetide.test.rename-delay-ms": delay,
        }
    if args.plain:
        prefix = f"spark.sql.catalog.{PLAIN_CATALOG}"
        conf |= {
            prefix: "org.apache.iceberg.spark.SparkCatalog",
            f"{prefix}.type": "hadoop",
            f"{prefix}.warehouse": os.path.abspath(warehouse),
        }
        table = PLAIN_CATALOG + table[table.index(".") :]
    options = dict(pair.split("=", 1) for pair in args.catalog_option) or None
    spark = icetide.spark_session(
        warehouse=None if options else warehouse,
        catalog_options=options,
        master="local[1]",
        conf=conf,
    )
    j = jvm(spark)
    jtable = load_table(spark, table)
    schema = arrow_schema(jtable.schema())
    folder = data_location(jtable).removeprefix("file:")
    os.makedirs(folder, exist_ok=True)

    with open(os.path.join(sync, f"ready-{writer}"), "w"):
        pass
    deadline = time.monotonic() + 300
    while not os.path.exists(os.path.join(sync, "go")):
        if time.monotonic() > deadline:
            raise SystemExit("no go signal")
        time.sleep(0.01)

    results: list[dict[str, Any]] = []
    started = time.monotonic()
    for n in range(int(args.commits)):
        tag = f"{writer}-{n}"
        rows = rows_of(n)
        path = os.path.join(folder, f"{tag}-{uuid.uuid4().hex}.parquet")
        data = pa.table({"id": list(range(rows)), "writer": [tag] * rows}, schema=schema)
        pq.write_table(data, path)
        data_file = (
            j.org.apache.iceberg.DataFiles.builder(jtable.spec())
            .withPath(path)
            .withFormat("PARQUET")
            .withFileSizeInBytes(os.path.getsize(path))
            .withRecordCount(rows)
            .build()
        )
        try:
            jtable.newFastAppend().appendFile(data_file).set(TAG, tag).commit()
            results.append({"tag": tag, "rows": rows, "ok": True})
        except Exception as exc:
            results.append({"tag": tag, "rows": rows, "ok": False, "error": java_exception_class(exc) or repr(exc)})
    elapsed = time.monotonic() - started
    print(json.dumps({"writer": writer, "seconds": elapsed, "commits": results}))
    spark.stop()


if __name__ == "__main__":
    main()
