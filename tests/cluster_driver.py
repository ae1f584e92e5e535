"""Driver program for the scale-out test: runs the sink on a Spark standalone cluster.

Usage: python -m tests.cluster_driver MASTER_URL WAREHOUSE WORKER_PID
Prints one JSON line: rows read back, the expected count, and which processes wrote the files.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def ancestors(pid: int) -> list[int]:
    """The chain of parent pids of a local process (Linux /proc)."""
    chain = []
    while pid > 1:
        try:
            with open(f"/proc/{pid}/status") as f:
                pid = int(next(line for line in f if line.startswith("PPid:")).split()[1])
        except (OSError, StopIteration):
            break
        chain.append(pid)
    return chain


def stateful_sums(spark: Any, warehouse: str) -> tuple[dict[str, int], str]:
    """Two snapshots of click events through the stateful stage (sum per key) on the executors:
    (clicks per key in the target table, the state provider the checkpoint recorded)."""
    import icetide
    from icetide.stateful.merge import MergeSpec
    from icetide.stateful.stage import ChangelogStage, StageOptions

    target, raw = "lake.cluster.clicks", "lake.cluster.clicks_raw"
    icetide.create_table(spark, target, schema="k STRING NOT NULL, ts TIMESTAMP, clicks INT", key=["k"])
    spark.sql(f"CREATE TABLE {raw} (k STRING, ts TIMESTAMP, clicks INT) USING iceberg")
    for batch in range(2):
        spark.range(0, 4_000, numPartitions=4).selectExpr(
            "concat('k', id % 1000) AS k", f"timestamp_seconds(1767225600 + id + {batch} * 10000) AS ts", "1 AS clicks"
        ).writeTo(raw).append()
    options = StageOptions(merge=MergeSpec("aggregate", {"clicks": "sum"}), dedup=False)
    stage = ChangelogStage(spark, target, pipeline_id="clicks", order_by="ts", options=options)
    checkpoint = os.path.join(warehouse, "chk-clicks")
    events = spark.readStream.format("iceberg").load(raw)
    stage.start(events, checkpoint=checkpoint, available_now=True).awaitTermination()
    with open(os.path.join(checkpoint, "offsets", "0")) as f:
        provider = json.loads(f.read().splitlines()[1])["conf"]["spark.sql.streaming.stateStore.providerClass"]
    return {r["k"]: r["clicks"] for r in spark.table(target).collect()}, provider


def main() -> None:
    master, warehouse, worker_pid = sys.argv[1], sys.argv[2], int(sys.argv[3])
    import icetide

    spark = icetide.spark_session(
        warehouse=warehouse, master=master, conf={"spark.executor.memory": "1g", "spark.cores.max": "2"}
    )
    table = "lake.cluster.events"
    icetide.create_table(
        spark,
        table,
        schema="id BIGINT NOT NULL, ts TIMESTAMP NOT NULL, v STRING",
        key=["id", "ts"],
        partition_by=["hours(ts)"],
    )
    sink = icetide.UpsertSink(spark, table, pipeline_id="cluster")
    writers: set[str] = set()
    for batch in range(3):
        df = spark.range(0, 50_000, numPartitions=4).selectExpr(
            "id % 30000 AS id",
            "timestamp_seconds(1767225600 + (id % 30000 % 7) * 3600) AS ts",
            f"'b{batch}' AS v",
        )
        writers.update(sink.write(df, batch_id=batch).writers)
    rows = spark.table(table).count()
    latest = spark.table(table).where("v = 'b2'").count()
    pids = [int(w.rsplit(":", 1)[1]) for w in writers]
    clicks, provider = stateful_sums(spark, warehouse)
    print(
        json.dumps(
            {
                "rows": rows,
                "latest": latest,
                "stateful_clicks": clicks,
                "state_provider": provider,
                "writer_pids": pids,
                "driver_pid": os.getpid(),
                "under_worker": all(worker_pid in ancestors(p) for p in pids),
                "executors": spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size(),
            }
        )
    )
    spark.stop()


if __name__ == "__main__":
    main()
