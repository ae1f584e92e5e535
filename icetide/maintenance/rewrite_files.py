"""The rows of some data files, deletes applied, written into new files that no snapshot holds yet:
compaction's rewrite of one group, with Iceberg's own Spark machinery as its rewrite_data_files
does it (see maintenance/compaction.py)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from icetide.spark.py4j_collections import java_iter
from icetide.table.iceberg import jvm

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def rewrite_files(
    spark: SparkSession, table: Any, table_name: str, tasks: list[Any], *, split_size: int, target_file_size: int
) -> list[Any]:
    """The new data files (Java DataFiles, staged, not committed) holding the rows of `tasks` (the
    FileScanTasks planned at a snapshot, with the delete files that applied then).

    The tasks are staged in `ScanTaskSetManager`, read back with `scan-task-set-id` (the reader
    applies the deletes), and written with `rewritten-file-scan-task-set-id`, which stages the new
    files in `FileRewriteCoordinator` instead of committing them. Raises what the read or write
    raised; Spark's write abort removes a failed write's partial output."""
    j = jvm(spark)
    set_id = f"icetide-compaction-{uuid.uuid4()}"
    staged = j.java.util.ArrayList()
    for task in tasks:
        staged.add(task)
    task_sets = j.org.apache.iceberg.spark.ScanTaskSetManager.get()
    coordinator = j.org.apache.iceberg.spark.FileRewriteCoordinator.get()
    task_sets.stageTasks(table, set_id, staged)
    try:
        rows = (
            spark.read.format("iceberg")
            .option("scan-task-set-id", set_id)
            .option("split-size", str(split_size))
            .option("file-open-cost", "0")
            # Iceberg 1.10's vectorized (Arrow) read of a rewrite's task set keeps about 28 MB
            # of direct memory per compaction, never released: `icetide maintain --every`
            # died of it ("Cannot reserve ... direct buffer memory") after ~20 passes at 10M
            # rows (docs/design.md). Plain reads and copies do not keep it.
            .option("vectorization-enabled", "false")
            .load(table_name)
        )
        (
            rows.write.format("iceberg")
            .option("rewritten-file-scan-task-set-id", set_id)
            .option("target-file-size-bytes", str(target_file_size))
            .option("distribution-mode", "none")
            .option("fanout-enabled", "true")  # an old spec's group may span new-spec partitions
            .mode("append")
            .save(table_name)
        )
        return list(java_iter(coordinator.fetchNewFiles(table, set_id)))
    finally:
        task_sets.removeTasks(table, set_id)
        coordinator.clearRewrite(table, set_id)
