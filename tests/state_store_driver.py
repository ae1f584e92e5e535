"""Driver program for test_state_store.py: a streaming sum per key on a RocksDB state store
provider, whose state task fails once midway through emitting one micro-batch's rows and is
retried by Spark. RocksDB's loads from the checkpoint are logged to stderr for the test to count.

Usage: python -m tests.state_store_driver WAREHOUSE PROVIDER_CLASS
Prints one JSON line: per micro-batch, the keys emitted and the distinct totals among them, and
the injected failures that happened.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

KEYS = 100_000
BATCHES = 4
FAILING_BATCH = 2
ROWS_PER_ARROW_BATCH = 1_000
FAIL_AT_ARROW_BATCH = 3  # of the first state partition: some of its rows are in the store by then


def main() -> None:
    warehouse, provider = sys.argv[1], sys.argv[2]
    from pyspark.sql import functions as F

    import icetide

    marker = os.path.join(warehouse, "failures")

    def fail_once(batch_id: int) -> Any:
        """Pass rows through; in the first attempt of one partition of FAILING_BATCH, raise midway."""

        def run(frames: Any) -> Any:
            from pyspark import TaskContext

            context = TaskContext.get()
            failing = batch_id == FAILING_BATCH and context.partitionId() == 0 and context.attemptNumber() == 0
            for n, frame in enumerate(frames, start=1):
                if failing and n == FAIL_AT_ARROW_BATCH:
                    with open(marker, "a") as f:
                        f.write(f"batch {batch_id} partition 0 attempt 0\n")
                    raise RuntimeError("injected failure in the state task")
                yield frame

        return run

    # local[2,2]: two cores, and a failed task is retried once in the same JVM (the same provider).
    spark = icetide.spark_session(
        warehouse=warehouse,
        master="local[2,2]",
        conf={"spark.sql.execution.arrow.maxRecordsPerBatch": str(ROWS_PER_ARROW_BATCH)},
    )
    # RocksDB's loads are counted by the test from stderr ("Loading checkpoint files").
    jvm: Any = spark._jvm  # type: ignore[attr-defined]
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
        "org.apache.spark.sql.execution.streaming.state", jvm.org.apache.logging.log4j.Level.INFO
    )
    spark.sql("CREATE TABLE lake.state.events (k BIGINT, v BIGINT) USING iceberg")
    emitted: dict[int, dict[str, Any]] = {}

    def collect(df: Any, batch_id: int) -> None:
        rows = df.mapInPandas(fail_once(batch_id), df.schema).collect()
        totals = [int(r["total"]) for r in rows]
        emitted[batch_id] = {"keys": len({int(r["k"]) for r in rows}), "rows": len(rows), "totals": sorted(set(totals))}

    spark.conf.set("spark.sql.streaming.stateStore.providerClass", provider)
    spark.conf.set("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
    query = (
        spark.readStream.format("iceberg")
        .load("lake.state.events")
        .groupBy("k")
        .agg(F.sum("v").alias("total"))
        .writeStream.outputMode("update")
        .foreachBatch(collect)
        .option("checkpointLocation", os.path.join(warehouse, "chk"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    error = None
    for b in range(BATCHES):
        events = spark.range(KEYS).select(F.col("id").alias("k"), F.lit(1).cast("long").alias("v"))
        events.writeTo("lake.state.events").append()
        while error is None and len([p for p in query.recentProgress if p["numInputRows"]]) < b + 1:
            if query.exception() is not None:
                error = str(query.exception()).splitlines()[0]
            time.sleep(0.1)
    query.stop()
    failures = Path(marker).read_text().splitlines() if os.path.exists(marker) else []
    emitted_json = {str(b): e for b, e in sorted(emitted.items())}
    print(json.dumps({"emitted": emitted_json, "failures": failures, "error": error}))
    spark.stop()


if __name__ == "__main__":
    main()
