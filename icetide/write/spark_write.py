"""The sink's write job: a prepared batch distributed (write/distribution.py) and written by Spark's
tasks (executor/writer.py), nothing committed; or, with distribution `none`, its duplicate keys
collapsed by a Spark aggregation first."""

from __future__ import annotations

import logging
import re
import time
from typing import TYPE_CHECKING

from icetide.commit.committer import WrittenFile
from icetide.errors import EXECUTOR_ERROR_MARKER, IcetideError, SchemaError, one_line
from icetide.executor.writer import WRITTEN_FILE_DDL, WriterConfig, writer_function
from icetide.write.collapse import ARRIVAL_COLUMN, INSERT, OP_COLUMN, UPSERT
from icetide.write.distribution import SlotPlan, distribute, is_small_batch, plan_estimated_bytes

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)


def executor_message(exc: BaseException) -> str | None:
    """The user-facing message a writer task raised, dug out of Spark's exception text."""
    match = re.search(re.escape(EXECUTOR_ERROR_MARKER) + r"([^\n]+)", str(exc))
    return match.group(1).strip() if match else None


def collapse_in_spark(df: DataFrame, key: Sequence[str], order_by: str | None, keep_inserts: bool) -> DataFrame:
    """For distribution `none`: collapse duplicate keys with a Spark aggregation, keep its layout
    (with `keep_inserts`, keys with only INSERTs keep every row, as the writers do)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    key = list(key)
    others = [c for c in df.columns if c not in key]
    order = [F.col(order_by)] if order_by else []
    ordering = F.struct(*order, F.col(ARRIVAL_COLUMN))
    op = F.upper(F.trim(F.coalesce(F.col(OP_COLUMN), F.lit(UPSERT))))
    df = df.withColumn(OP_COLUMN, op)
    kept = None
    if keep_inserts:
        changes = F.max((F.col(OP_COLUMN) != F.lit(INSERT)).cast("int")).over(Window.partitionBy(*key))
        marked = df.withColumn("_changes", changes)
        kept = marked.where(F.col("_changes") == 0).drop("_changes")
        df = marked.where(F.col("_changes") == 1).drop("_changes")
    picked = df.groupBy(*key).agg(
        F.max_by(F.struct(*others), ordering).alias("_last"),
        F.max((F.col(OP_COLUMN) != F.lit(INSERT)).cast("int")).alias("_changed"),
    )
    last_op = F.col(f"_last.{OP_COLUMN}")
    fixed_op = F.when((last_op == F.lit(INSERT)) & (F.col("_changed") == 1), F.lit(UPSERT)).otherwise(last_op)
    collapsed = picked.select(
        *key, *[F.col(f"_last.`{c}`").alias(c) for c in others if c != OP_COLUMN], fixed_op.alias(OP_COLUMN)
    ).select(*df.columns)
    return collapsed if kept is None else kept.unionByName(collapsed)


def write_files(
    prepared: DataFrame,
    config: WriterConfig,
    *,
    table_name: str,
    distribution: str,
    parallelism: int,
    compression_ratio: float,
    source_cached: bool,
    remove_written: Callable[[int], int],
) -> tuple[list[WrittenFile], SlotPlan | None, float]:
    """The batch's files, written by one Spark job after the distribution's plan; that plan (None
    for distribution `none`) and the job's seconds. After a failed job, `remove_written(batch_id)`
    deletes what its tasks wrote."""
    from pyspark import StorageLevel

    # A batch Spark knows to be small skips the statistics pass (distribution.is_small_batch).
    estimate = plan_estimated_bytes(prepared) if distribution == "dynamic" else None
    small = is_small_batch(estimate, config.target_file_size)
    # The statistics pass and the write must not read the source twice: persist the batch,
    # unless the caller already did (the runner persists what it read).
    cached = distribution == "dynamic" and not small and not source_cached
    if cached:
        prepared = prepared.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        if distribution == "none":
            routed, plan = collapse_in_spark(prepared, config.key, config.order_by, config.keep_inserts), None
        else:
            routed, plan = distribute(
                prepared,
                mode=distribution,
                key=list(config.key),
                partition_columns=config.partition_columns,
                parallelism=parallelism,
                target_file_size=config.target_file_size,
                compression_ratio=compression_ratio,
                value_columns=list(config.table_schema.names),
                estimated_bytes=estimate,
                cached_input=source_cached,
            )
        writing = time.monotonic()
        rows = routed.mapInArrow(writer_function(config), WRITTEN_FILE_DDL).collect()  # type: ignore[arg-type]
        write_seconds = time.monotonic() - writing
    except IcetideError:
        raise
    except Exception as exc:
        remove_written(config.batch_id)
        message = executor_message(exc)
        log.debug("writing batch %s failed", config.batch_id, exc_info=True)
        if message:
            raise SchemaError(f"batch {config.batch_id}: {message}; nothing was committed") from exc
        raise IcetideError(
            f"writing batch {config.batch_id} to {table_name} failed: {one_line(exc)}; nothing was committed"
        ) from exc
    finally:
        if cached:
            prepared.unpersist()
    return [WrittenFile.from_row(r) for r in rows], plan, write_seconds
