"""The rows of some data files, deletes applied, written into new files that no snapshot holds yet:
compaction's rewrite of one group, with Iceberg's own Spark machinery as its rewrite_data_files
does it (see maintenance/compaction.py)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from icetide.errors import one_line
from icetide.maintenance.planning import PartitionKey
from icetide.spark.py4j_collections import java_iter
from icetide.table.iceberg import jvm, static_call

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def rewrite_files(
    spark: SparkSession, table: Any, tasks: list[Any], *, split_size: int, target_file_size: int
) -> list[Any]:
    """The new data files (Java DataFiles, staged, not committed) holding the rows of `tasks` (the
    FileScanTasks planned at a snapshot, with the delete files that applied then).

    The table is registered in `SparkTableCache` and the tasks staged in `ScanTaskSetManager`,
    both under a fresh set id; the rows are read back by loading that id (the reader applies the
    deletes) and written by saving to it, which stages the new files in `FileRewriteCoordinator`
    instead of committing them: what Iceberg 1.12's own bin-pack rewrite does. The Spark 4.1
    runtime resolves the id through its rewrite catalog and has no task-set options; the Spark
    3.5 one reads the options `scan-task-set-id` / `rewritten-file-scan-task-set-id` and finds
    the table by the id. Loading the table's name instead, as with Iceberg 1.10, makes the 4.1
    runtime read the whole table and append it again. Raises what the read or write raised;
    Spark's write abort removes a failed write's partial output."""
    j = jvm(spark)
    set_id = f"icetide-compaction-{uuid.uuid4()}"
    staged = j.java.util.ArrayList()
    for task in tasks:
        staged.add(task)
    tables = static_call(spark, "org.apache.iceberg.spark.SparkTableCache", "get")
    task_sets = j.org.apache.iceberg.spark.ScanTaskSetManager.get()
    coordinator = j.org.apache.iceberg.spark.FileRewriteCoordinator.get()
    tables.add(set_id, table)
    task_sets.stageTasks(table, set_id, staged)
    try:
        rows = (
            spark.read.format("iceberg")
            .option("scan-task-set-id", set_id)
            .option("split-size", str(split_size))
            .option("file-open-cost", "0")
            # The table's reader, vectorized by default. Iceberg 1.10's vectorized read of a v3
            # table leaked the `_row_id` / `_last_updated_sequence_number` vectors (~28 MB of
            # direct memory per 1M-row compaction; apache/iceberg#17296, fixed in 1.12.0), so
            # compaction read rows until then (docs/design.md).
            .load(set_id)
        )
        (
            rows.write.format("iceberg")
            .option("rewritten-file-scan-task-set-id", set_id)
            .option("target-file-size-bytes", str(target_file_size))
            .option("distribution-mode", "none")
            .option("fanout-enabled", "true")  # an old spec's group may span new-spec partitions
            .mode("append")
            .save(set_id)
        )
        return list(java_iter(coordinator.fetchNewFiles(table, set_id)))
    finally:
        tables.remove(set_id)
        task_sets.removeTasks(table, set_id)
        coordinator.clearRewrite(table, set_id)


def rewrite_together(
    spark: SparkSession,
    table: Any,
    tasks: Mapping[PartitionKey, Sequence[Any]],
    *,
    weight: int,
    target_file_size: int,
    partition_of: Callable[[Any], PartitionKey],
) -> dict[PartitionKey, list[Any]] | None:
    """Several partitions' groups rewritten in one Spark job (maintenance/planning.py
    `combine_groups`): the new files of each partition, by partition.

    `weight` is at least what Iceberg weighs the tasks at (their files and delete files), so all
    of them are read as one split and the fanout writer writes one file per partition. None when
    the job failed, or a new file landed outside the given partitions (its files are deleted):
    the caller rewrites the groups one by one."""
    try:
        outputs = rewrite_files(
            spark,
            table,
            [task for group in tasks.values() for task in group],
            split_size=weight + 1,
            target_file_size=target_file_size,
        )
    except Exception as exc:
        log.info("rewriting %d groups in one job failed (%s); one by one", len(tasks), one_line(exc))
        log.debug("combined rewrite failed", exc_info=True)
        return None
    by_partition: dict[PartitionKey, list[Any]] = {key: [] for key in tasks}
    for f in outputs:
        key = partition_of(f)
        if key not in by_partition:
            log.info("a combined rewrite wrote outside its partitions (%s); one by one", key)
            delete_staged(table, outputs)
            return None
        by_partition[key].append(f)
    return by_partition


def delete_staged(table: Any, files: Sequence[Any]) -> None:
    """Delete new files no snapshot holds (a rewrite's staged output); a file that cannot be
    deleted is left for orphan removal, logged at debug level."""
    io = table.io()
    for f in files:
        try:
            io.deleteFile(f.location())
        except Exception:
            log.debug("could not delete %s", f.location(), exc_info=True)
