"""How a batch ran: the path that read, decoded, wrote and committed it (`BatchPath`) and, for a
batch on a Spark path, why no fast path took it (`FallbackReason`).

Each is one value from a short, fixed list, so a dashboard can count and alert on them: they are the
metrics line's `path` and `fallback`, the pipeline's state on its tables (`icetide status --json`:
`batch_path`, `fallback`) and the labels of Prometheus' `icetide_batch_paths_total`. The words
behind a fallback (which column, which table, which record) go to the metrics line's
`fallback_detail` and the log, never into a label.
"""

from __future__ import annotations

from enum import StrEnum


class BatchPath(StrEnum):
    """The way a batch ran. A fast path is one Spark job of Python tasks that read, decode and write
    the batch's files (the driver commits them); a Spark path decodes in Spark and writes through
    the sink (icetide.UpsertSink)."""

    JSON_FAST = "json_fast"
    """`format: json`, one table: Kafka ranges or landing files (pipeline/json_fast.py)."""
    DEBEZIUM_FAST = "debezium_fast"
    """`format: debezium`, one table: the sync fast path's tasks with one route (pipeline/sync/fast_path.py)."""
    AVRO_FAST = "avro_fast"
    """`format: debezium-avro` or `avro`, one table: the same tasks, records read from Confluent's wire format."""
    SYNC_FAST = "sync_fast"
    """`format: debezium`, many tables: every table of the batch in one Spark job."""
    SYNC_AVRO_FAST = "sync_avro_fast"
    """`format: debezium-avro` or `avro`, many tables: the same, records read from Confluent's wire format."""
    SPARK = "spark"
    """One table on the Spark path (pipeline/table_runner.py `run_spark_path`)."""
    SYNC_SPARK = "sync_spark"
    """Many tables on the Spark path: a plan per table (pipeline/sync/spark_path.py)."""

    @property
    def fast(self) -> bool:
        """Is this one of the fast paths?"""
        return self not in (BatchPath.SPARK, BatchPath.SYNC_SPARK)


class FallbackReason(StrEnum):
    """Why a batch ran on a Spark path. The first six rule out every batch of the pipeline (its
    configuration), the next five every batch of a table (its schema, spec or the session), the
    rest one batch (what it holds)."""

    FAST_PATH_OFF = "fast_path_off"
    """`fast_path: off`."""
    TWO_STAGE = "two_stage"
    """Stage 1 of a two-stage pipeline: its records keep their source position and op."""
    FORMAT = "format"
    """A `format` no fast path reads (or not from this source)."""
    FILES_FORMAT = "files_format"
    """Landing files in CSV or Parquet: Spark's readers type their columns."""
    SOURCE = "source"
    """A source no fast path reads."""
    ORDER_BY_SOURCE_TS = "order_by_source_ts"
    """`order_by: _source_ts`."""

    COLUMN_TYPES = "column_types"
    """A column type the fast path's decoder does not produce."""
    SESSION_TIME_ZONE = "session_time_zone"
    """The Spark session's time zone is not a zone name."""
    PARTITION_TRANSFORM = "partition_transform"
    """A partition transform only the JVM computes (bucket or truncate of decimals and binaries)."""
    PARTITION_SPEC = "partition_spec"
    """A partition spec (current, or earlier with live files) an upsert's deletes cannot serve: the
    Spark path says why."""
    ORDER_BY_COLUMN = "order_by_column"
    """`order_by` names no column of the table."""

    DATA_LOSSES = "data_losses"
    """Source ranges were lost: the Spark path records them as dead letters."""
    CHANGE_OPS = "change_ops"
    """`mode: append`, and records carry an `_op` other than INSERT."""
    SCHEMA_EVOLUTION = "schema_evolution"
    """`schema_evolution`, and records carry fields to add as columns."""
    NEW_TABLES = "new_tables"
    """Records route to tables the fast path could not create from its samples."""
    RECORD_FOR_SPARK = "record_for_spark"
    """A record only the Spark path takes as it must (a truncate, a schema change to apply, a message
    in another layout, a dead letter only its source block routes)."""
    DECODER_FAILED = "decoder_failed"
    """The fast path's decoder failed on a record it did not foresee."""
    WRITE_FAILED = "write_failed"
    """A fast path task failed to write a table's files."""
    TABLE_FED_BY_TWO_TASKS = "table_fed_by_two_tasks"
    """Two tasks of the batch fed one table (its topics changed)."""


__all__ = ["BatchPath", "FallbackReason"]
