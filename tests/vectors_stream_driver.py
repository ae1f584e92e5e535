"""Driver program for test_v3_vectors_crash.py: writes batches 1..N of a seeded upsert stream
through `UpsertSink(deletes="vectors")` into a v3 table, in its own Spark JVM.

Usage: python -m tests.vectors_stream_driver WAREHOUSE TABLE BATCHES

Batch b's rows come from `batch_rows(b)` alone, so a rerun writes the same batches; batches
already committed are skipped by the sink. ICETIDE_CRASH_AT / ICETIDE_CRASH_BATCH kill it with
SIGKILL at a point of a batch (icetide/faults.py).
"""

from __future__ import annotations

import random
import sys
from typing import Any

from tests.test_compaction import COLUMNS, KEY, SCHEMA, UPSERT_DDL, _random_batch


def batch_rows(batch_id: int) -> list[dict[str, Any]]:
    """The rows of batch `batch_id`: 20 changes to 40 keys in two hours, as the compaction race uses."""
    return _random_batch(random.Random(batch_id), 20)


def main() -> None:
    import icetide

    warehouse, table, batches = sys.argv[1], sys.argv[2], int(sys.argv[3])
    spark = icetide.spark_session(warehouse=warehouse, master="local[1]", conf={"spark.sql.shuffle.partitions": "2"})
    icetide.create_table(spark, table, schema=SCHEMA, key=KEY, partition_by=["hours(ts)"], format_version=3)
    sink = icetide.UpsertSink(spark, table, pipeline_id="stream", order_by="seq", deletes="vectors")
    sink.remove_abandoned_files()  # as `icetide run` does when it starts: a killed run's files go
    for b in range(1, batches + 1):
        rows = batch_rows(b)
        df = spark.createDataFrame([tuple(r.get(c) for c in [*COLUMNS, "_op"]) for r in rows], UPSERT_DDL)
        sink.write(df, batch_id=b)
    spark.stop()


if __name__ == "__main__":
    main()
