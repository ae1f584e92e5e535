"""UpsertSink: write a batch of changes into an Iceberg table, exactly once per batch id."""

from __future__ import annotations

import logging
import re
import time
from typing import TYPE_CHECKING, Any

from icetide.errors import ConfigError, IcetideError, SchemaError, one_line
from icetide.faults import crash_point
from icetide.sink.batch import BatchResult, WriterPlan
from icetide.sink.changelog import ARRIVAL_COLUMN, INSERT, OP_COLUMN, UPSERT
from icetide.sink.committer import CommitOutcome, Committer, WrittenFile
from icetide.sink.distribution import DISTRIBUTIONS, SlotPlan, distribute, is_small_batch, plan_estimated_bytes
from icetide.sink.evolution import SchemaChange, evolved_schema, fits_column, plan_change
from icetide.sink.pipeline_state import PipelineState
from icetide.sink.spec_layouts import EarlierSpecs, check_spec_serves_upserts
from icetide.sink.writer import (
    EXECUTOR_ERROR_MARKER,
    WRITTEN_FILE_DDL,
    SpecLayout,
    WriterConfig,
    file_prefix,
    remove_files,
    writer_function,
)
from icetide.spark.py4j_collections import java_list
from icetide.table.iceberg import (
    arrow_schema,
    data_location,
    key_columns,
    key_field_ids,
    partition_fields,
    spark_schema,
    spark_schema_of,
    table_property,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

DEFAULT_TARGET_FILE_SIZE = 512 * 1024 * 1024  # Iceberg's write.target-file-size-bytes default
DEFAULT_ROW_GROUP_BYTES = 128 * 1024 * 1024
DEFAULT_COMPRESSION_RATIO = 0.4
PARTITION_COLUMN_PREFIX = "_icetide_p"
# The table properties writer_config reads (data_location's included).
WRITER_PROPERTIES = (
    "write.target-file-size-bytes",
    "write.parquet.compression-level",
    "write.parquet.row-group-size-bytes",
    "write.parquet.compression-codec",
    "write.data.path",
    "write.folder-storage.path",
)


def _check_write_settings(distribution: str | None, write_parallelism: int | None) -> None:
    """Raise ConfigError naming the key when a distribution or write parallelism is not one the sink
    takes (None: not given)."""
    if distribution is not None and distribution not in DISTRIBUTIONS:
        raise ConfigError(f"distribution: {distribution!r} is not one of {', '.join(DISTRIBUTIONS)}")
    if write_parallelism is not None and write_parallelism < 1:
        raise ConfigError("write_parallelism: must be at least 1")


def _executor_message(exc: BaseException) -> str | None:
    """The user-facing message a writer task raised, dug out of Spark's exception text."""
    match = re.search(re.escape(EXECUTOR_ERROR_MARKER) + r"([^\n]+)", str(exc))
    return match.group(1).strip() if match else None


class UpsertSink:
    """Writes batches of changes into an Iceberg table: executors write, the driver commits once.

    A batch is a DataFrame of the table's columns plus an optional `_op` column (INSERT, UPSERT
    or DELETE; absent or null means UPSERT). Several changes to one key collapse to the last by
    `order_by` (ties by arrival order). UPSERT and DELETE write an equality delete on the key;
    so does INSERT unless `changelog=True`, for producers that know an INSERT's key is new.
    With `keep_inserts=True` (append mode), a key whose changes in a batch are all INSERTs keeps
    every one of them as a row; a key with an UPSERT or DELETE still collapses to its last change.

    With `schema_evolution=True`, a batch column the table lacks adds a nullable column and a
    wider type widens a column (int to bigint, float to double, decimal precision), in the same
    Iceberg transaction as the batch's data; a change Iceberg cannot make without converting
    values raises SchemaEvolutionError and commits nothing (see icetide/sink/evolution.py).
    After a partition spec change, each batch's equality deletes are written under every spec
    that still has live data files, so upserts and deletes reach rows written under older specs.
    With `deletes="vectors"` (format v3 tables) the commit carries deletion vectors for the rows
    the batch replaces instead of equality deletes (icetide/sink/stream_vectors.py).

    Example::

        sink = icetide.UpsertSink(spark, "lake.db.events", pipeline_id="p1", order_by="ts")
        sink.write(batch_df, batch_id=1)
        stream_df.writeStream.foreachBatch(sink).option("checkpointLocation", "chk").start()
    """

    def __init__(
        self,
        spark: SparkSession,
        table: str,
        *,
        pipeline_id: str,
        order_by: str | None = None,
        changelog: bool = False,
        keep_inserts: bool = False,
        distribution: str = "dynamic",
        write_parallelism: int | None = None,
        target_file_size: int | None = None,
        compression_ratio: float = DEFAULT_COMPRESSION_RATIO,
        schema_evolution: bool = False,
        deletes: str = "equality",
    ) -> None:
        if not pipeline_id:
            raise ConfigError("pipeline_id: a non-empty pipeline id is required")
        _check_write_settings(distribution, write_parallelism)
        if not 0 < compression_ratio <= 1:
            raise ConfigError("compression_ratio: must be in (0, 1]")
        self.spark = spark
        self.table_name = table
        self.pipeline_id = pipeline_id
        self.order_by = order_by
        self.changelog = changelog
        self.keep_inserts = keep_inserts
        self.distribution = distribution
        self.write_parallelism = write_parallelism
        self.target_file_size = target_file_size
        self.compression_ratio = compression_ratio
        self.schema_evolution = schema_evolution
        self.catalog = table.split(".")[0]
        self.committer = Committer(spark, table, pipeline_id, deletes=deletes)
        self.last_plan: SlotPlan | None = None
        self._earlier_specs = EarlierSpecs(table)
        self._check_table()

    def _check_table(self) -> None:
        jtable = self.committer.table
        self.key = key_columns(jtable)
        if not self.key:
            raise ConfigError(
                f"table {self.table_name} has no primary key (identifier fields); create it with key=[...]"
            )
        self.columns = [f.name() for f in java_list(jtable.schema().columns())]

    def last_committed(self) -> PipelineState | None:
        """This pipeline's last committed batch and source position, from the table."""
        return self.committer.last_committed()

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        """`foreachBatch` entry point: Spark's batch id is the commit's batch id."""
        self.write(df, batch_id=batch_id)

    def write(
        self,
        df: DataFrame,
        *,
        batch_id: int,
        source_position: Any = None,
        input_cached: bool | None = None,
        truncate: bool = False,
        order_by: str | None = None,
        distribution: str | None = None,
        write_parallelism: int | None = None,
        registry: dict[str, Any] | None = None,
    ) -> BatchResult:
        """Write and commit one batch, exactly once: a batch id at or below the last one is a no-op.

        `source_position` (and a dead-letter table's `registry`) is the pipeline's state the commit
        carries (pipeline_state.PipelineState).

        With `truncate`, every row committed before this batch is removed in the same commit
        (a CDC source's TRUNCATE); `df` then holds only what came after it.

        `input_cached` says the batch reads from a persisted DataFrame (default: `df.is_cached`);
        then the dynamic distribution's two passes read that cache instead of persisting again.

        `order_by`, `distribution` and `write_parallelism` override the sink's own for this batch
        only (None: the sink's own); a bad one raises ConfigError naming it before anything is read.
        """
        _check_write_settings(distribution, write_parallelism)
        started = time.monotonic()
        state = self.committer.last_committed()
        refresh_seconds = time.monotonic() - started
        if state is not None and batch_id <= state.batch_id:
            log.info("batch %s of %s already committed (last %s): skipped", batch_id, self.pipeline_id, state.batch_id)
            return BatchResult(batch_id, False, None, 0, 0, 0, 0, 0, 0.0, 0.0, {}, "already committed")
        config, prepared, change = self._prepare(df, batch_id, order_by=order_by)
        cached = df.is_cached if input_cached is None else input_cached
        files, write_seconds = self._write_files(
            prepared, config, source_cached=cached, distribution=distribution, write_parallelism=write_parallelism
        )
        plan_seconds = time.monotonic() - started - refresh_seconds - write_seconds
        crash_point("after_write", batch_id)
        commit_started = time.monotonic()
        if change:
            log.info("batch %s evolves the schema of %s: %s", batch_id, self.table_name, change.describe())
            outcome: CommitOutcome = self.committer.commit(
                batch_id, files, source_position, truncate=truncate, schema_change=change, registry=registry
            )
            self._check_table()
        else:
            outcome = self.committer.commit(batch_id, files, source_position, truncate=truncate, registry=registry)
        refresh_seconds += outcome.refresh_seconds
        index = self.committer.index_seconds()
        commit_seconds = time.monotonic() - commit_started - outcome.refresh_seconds
        result = BatchResult.of_files(
            batch_id,
            files,
            outcome,
            write_seconds=write_seconds,
            commit_seconds=commit_seconds,
            plan_seconds=plan_seconds,
            refresh_seconds=refresh_seconds,
            find_seconds=index.find,
            index_seconds=index.follow,
        )
        log.debug("batch %s: %s", batch_id, result)
        return result

    def _prepare(
        self, df: DataFrame, batch_id: int, *, order_by: str | None = None
    ) -> tuple[WriterConfig, DataFrame, SchemaChange]:
        """Check the batch against the table (evolving it if allowed) and add op, arrival and partition columns.

        `order_by` overrides the sink's own (None: the sink's own). Returns the schema change the
        commit must apply (empty without one).
        """
        from pyspark.sql import functions as F
        from pyspark.sql.types import NullType

        jtable = self.committer.table
        table_struct = spark_schema(self.spark, jtable)
        table_fields = {f.name: f for f in table_struct.fields}
        batch_types = {f.name: f.dataType for f in df.schema.fields}
        order_by = self.order_by if order_by is None else order_by
        extra_order = order_by if order_by and order_by not in table_fields else None
        if extra_order and extra_order not in batch_types:
            raise SchemaError(
                f"batch {batch_id}: order_by column {extra_order!r} is neither in the batch nor in {self.table_name}"
            )
        jschema = jtable.schema()
        change = SchemaChange()
        if self.schema_evolution:
            change, _ = plan_change(
                table_struct,
                df.schema,
                ignore={OP_COLUMN, *([extra_order] if extra_order else [])},
                fits=fits_column,
                table_name=self.table_name,
            )
            if change:
                jschema, change = evolved_schema(self.spark, jtable, change)
                table_fields = {f.name: f for f in spark_schema_of(self.spark, jschema).fields}
        for name, dtype in batch_types.items():
            if self.schema_evolution and isinstance(dtype, NullType):
                continue  # an untyped, all-null column adds nothing (evolution.plan_change logs it)
            if name not in (OP_COLUMN, extra_order) and name not in table_fields:
                raise SchemaError(f"batch {batch_id}: column {name!r} is not in table {self.table_name}")
        columns = []
        for name, field in table_fields.items():
            if name not in batch_types:
                if not field.nullable:
                    raise SchemaError(f"batch {batch_id}: NOT NULL column {name!r} of {self.table_name} is missing")
                columns.append(F.lit(None).cast(field.dataType).alias(name))
            elif not fits_column(batch_types[name], field.dataType):
                raise SchemaError(
                    f"batch {batch_id}: column {name!r} is {batch_types[name].simpleString()}, "
                    f"table {self.table_name} has {field.dataType.simpleString()}"
                )
            elif batch_types[name] != field.dataType:
                columns.append(F.col(f"`{name}`").cast(field.dataType).alias(name))
            else:
                columns.append(F.col(f"`{name}`"))
        op = F.col(OP_COLUMN).cast("string") if OP_COLUMN in batch_types else F.lit(UPSERT)
        # Arrival order is fixed before any shuffle: partition index, then position in it.
        if extra_order:  # orders changes of one key (e.g. a CDC source timestamp), never written
            columns.append(F.col(f"`{extra_order}`"))
        prepared = df.select(*columns, op.alias(OP_COLUMN), F.monotonically_increasing_id().alias(ARRIVAL_COLUMN))
        plan = self._plan_writers(batch_id, deletes=True, schema=jschema, order_by=order_by)
        for name, transform in plan.partitions:
            expr = F.expr(transform.spark_expression(self.catalog)) if transform else F.lit(None)
            prepared = prepared.withColumn(name, expr)
        return plan.writer, prepared, change

    def plan_writers(self, batch_id: int, *, deletes: bool = True) -> WriterPlan:
        """The writer config and partition columns for staging `batch_id` outside the sink, from the
        table's current metadata, exactly as `write` stages a batch.

        With `deletes` (the upsert paths) it raises SchemaError for a spec whose partition values are
        not computed from the key alone, and adds the layout of every earlier spec with live data
        files, which the batch's equality deletes are also written under. Without (append-only
        batches: no deletes) it plans the current spec only.
        """
        return self._plan_writers(batch_id, deletes=deletes)

    def _plan_writers(
        self, batch_id: int, *, deletes: bool, schema: Any = None, order_by: str | None = None
    ) -> WriterPlan:
        jtable = self.committer.table
        fields = partition_fields(jtable)
        layouts = []
        if deletes:
            check_spec_serves_upserts(self.table_name, self.key, int(jtable.spec().specId()), fields)
            layouts = self._earlier_specs.layouts(jtable, self.key, has_fields=bool(fields))
        names = tuple(f"{PARTITION_COLUMN_PREFIX}{i}" for i in range(len(fields)))
        partitions = list(zip(names, (pf.transform for pf in fields), strict=True))
        for layout, layout_fields in layouts:
            partitions += zip(layout.columns, (pf.transform for pf in layout_fields), strict=True)
        writer = self.writer_config(
            batch_id, names, schema=schema, delete_specs=tuple(layout for layout, _ in layouts), order_by=order_by
        )
        return WriterPlan(writer, tuple(partitions))

    def writer_config_version(self) -> tuple[Any, ...]:
        """What `writer_config` and `plan_writers` depend on besides the batch id: schema, spec,
        the writer's table properties (not all properties: pipeline state changes them every
        commit) and the earlier specs with live data files, whose layouts an upsert's deletes
        are also written under (another writer, or a rollback, can bring one back)."""
        jtable = self.committer.table
        properties = jtable.properties()
        return (
            int(jtable.schema().schemaId()),
            int(jtable.spec().specId()),
            str(jtable.location()),
            tuple(str(properties.get(key)) for key in WRITER_PROPERTIES),
            # One py4j call for a table that never changed its spec (most): no fields, no manifest list.
            ()
            if jtable.specs().size() == 1
            else self._earlier_specs.earlier_ids(jtable, has_fields=bool(partition_fields(jtable))),
        )

    def writer_config(
        self,
        batch_id: int,
        partition_columns: tuple[str, ...],
        *,
        schema: Any = None,
        delete_specs: tuple[SpecLayout, ...] = (),
        order_by: str | None = None,
    ) -> WriterConfig:
        """What writer tasks need for `batch_id`, from the table's current metadata.

        `partition_columns` name the batch columns holding the spec's partition values, in order;
        `schema` is the Iceberg schema files are written in (default: the table's current one);
        `delete_specs` are earlier specs the batch's deletes are also written under; `order_by`
        orders changes of one key (default: the sink's own).
        """
        jtable = self.committer.table
        fields = partition_fields(jtable)
        target = self.target_file_size or int(
            table_property(jtable, "write.target-file-size-bytes", str(DEFAULT_TARGET_FILE_SIZE))
        )
        level = table_property(jtable, "write.parquet.compression-level", "")
        return WriterConfig(
            table_schema=arrow_schema(schema if schema is not None else jtable.schema()),
            key=tuple(self.key),
            partition_columns=partition_columns,
            partition_names=tuple(pf.name for pf in fields),
            partition_types=tuple(pf.result_type for pf in fields),
            partition_field_ids=tuple(pf.field_id for pf in fields),
            spec_id=int(jtable.spec().specId()),
            equality_ids=tuple(key_field_ids(jtable)),
            data_location=data_location(jtable),
            pipeline_id=self.pipeline_id,
            batch_id=batch_id,
            order_by=self.order_by if order_by is None else order_by,
            changelog=self.changelog,
            target_file_size=target,
            row_group_bytes=int(
                table_property(jtable, "write.parquet.row-group-size-bytes", str(DEFAULT_ROW_GROUP_BYTES))
            ),
            compression=table_property(jtable, "write.parquet.compression-codec", "zstd").lower(),
            compression_level=int(level) if level else None,
            keep_inserts=self.keep_inserts,
            delete_specs=delete_specs,
        )

    def _collapse_in_spark(self, df: DataFrame, order_by: str | None) -> DataFrame:
        """For distribution `none`: collapse duplicate keys with a Spark aggregation, keep its layout
        (with `keep_inserts`, keys with only INSERTs keep every row, as the writers do)."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        others = [c for c in df.columns if c not in self.key]
        order = [F.col(order_by)] if order_by else []
        ordering = F.struct(*order, F.col(ARRIVAL_COLUMN))
        op = F.upper(F.trim(F.coalesce(F.col(OP_COLUMN), F.lit(UPSERT))))
        df = df.withColumn(OP_COLUMN, op)
        kept = None
        if self.keep_inserts:
            changes = F.max((F.col(OP_COLUMN) != F.lit(INSERT)).cast("int")).over(Window.partitionBy(*self.key))
            marked = df.withColumn("_changes", changes)
            kept = marked.where(F.col("_changes") == 0).drop("_changes")
            df = marked.where(F.col("_changes") == 1).drop("_changes")
        picked = df.groupBy(*self.key).agg(
            F.max_by(F.struct(*others), ordering).alias("_last"),
            F.max((F.col(OP_COLUMN) != F.lit(INSERT)).cast("int")).alias("_changed"),
        )
        last_op = F.col(f"_last.{OP_COLUMN}")
        fixed_op = F.when((last_op == F.lit(INSERT)) & (F.col("_changed") == 1), F.lit(UPSERT)).otherwise(last_op)
        collapsed = picked.select(
            *self.key, *[F.col(f"_last.`{c}`").alias(c) for c in others if c != OP_COLUMN], fixed_op.alias(OP_COLUMN)
        ).select(*df.columns)
        return collapsed if kept is None else kept.unionByName(collapsed)

    def _write_files(
        self,
        prepared: DataFrame,
        config: WriterConfig,
        *,
        source_cached: bool,
        distribution: str | None = None,
        write_parallelism: int | None = None,
    ) -> tuple[list[WrittenFile], float]:
        """The batch's files, written by one Spark job after the distribution's plan; and that
        job's seconds. `distribution` and `write_parallelism` override the sink's own (None: its own)."""
        from pyspark import StorageLevel

        distribution = self.distribution if distribution is None else distribution
        parallelism = write_parallelism or self.write_parallelism or self.spark.sparkContext.defaultParallelism
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
                routed, plan = self._collapse_in_spark(prepared, config.order_by), None
            else:
                routed, plan = distribute(
                    prepared,
                    mode=distribution,
                    key=self.key,
                    partition_columns=config.partition_columns,
                    parallelism=parallelism,
                    target_file_size=config.target_file_size,
                    compression_ratio=self.compression_ratio,
                    value_columns=list(config.table_schema.names),
                    estimated_bytes=estimate,
                    cached_input=source_cached,
                )
            self.last_plan = plan
            writing = time.monotonic()
            rows = routed.mapInArrow(writer_function(config), WRITTEN_FILE_DDL).collect()  # type: ignore[arg-type]
            write_seconds = time.monotonic() - writing
        except IcetideError:
            raise
        except Exception as exc:
            self._remove_batch_files(config)
            message = _executor_message(exc)
            log.debug("writing batch %s failed", config.batch_id, exc_info=True)
            if message:
                raise SchemaError(f"batch {config.batch_id}: {message}; nothing was committed") from exc
            raise IcetideError(
                f"writing batch {config.batch_id} to {self.table_name} failed: {one_line(exc)}; nothing was committed"
            ) from exc
        finally:
            if cached:
                prepared.unpersist()
        return [WrittenFile.from_row(r) for r in rows], write_seconds

    def _remove_batch_files(self, config: WriterConfig) -> None:
        """After a failed write job, delete what its tasks wrote (found by the batch's file prefix)."""
        self.remove_batch_files(config.batch_id)

    def remove_batch_files(self, batch_id: int) -> int:
        """Delete the files this pipeline wrote for `batch_id` (an uncommitted batch's); returns how many."""
        prefix = file_prefix(self.pipeline_id, batch_id)
        removed = remove_files(data_location(self.committer.table), lambda name: name.startswith(prefix))
        if removed:
            log.info("deleted %d file(s) of uncommitted batch %s", removed, batch_id)
        return removed

    def remove_abandoned_files(self) -> int:
        """Delete files this pipeline wrote for batches after its last commit (a crashed run's).

        Call it when the pipeline (re)starts and before it writes: it assumes no other process
        is writing for the same pipeline id, since files of a batch still in flight look the same.
        """
        state = self.committer.last_committed()
        last = state.batch_id if state is not None else -1
        pattern = re.compile(re.escape(file_prefix(self.pipeline_id, 0)[: -len("b000000000000-")]) + r"b(\d{12})-")

        def abandoned(name: str) -> bool:
            match = pattern.match(name)
            return bool(match) and int(match.group(1)) > last  # type: ignore[union-attr]

        removed = remove_files(data_location(self.committer.table), abandoned)
        if removed:
            log.info(
                "deleted %d file(s) of uncommitted batches after %s of pipeline %s", removed, last, self.pipeline_id
            )
        return removed
