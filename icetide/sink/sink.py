"""UpsertSink: write a batch of changes into an Iceberg table, exactly once per batch id."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from icetide.commit.committer import CommitOutcome, Committer, WrittenFile
from icetide.commit.pipeline_state import PipelineState
from icetide.errors import ConfigError
from icetide.executor.writer import (
    SpecLayout,
    WriterConfig,
    file_prefix,
    remove_files,
    write_appends,
)
from icetide.faults import crash_point
from icetide.spark.py4j_collections import java_list
from icetide.table.iceberg import (
    arrow_schema,
    data_location,
    key_columns,
    key_field_ids,
    parquet_settings,
    partition_fields,
    target_file_size,
)
from icetide.write.batch import BatchResult, WriterPlan, WrittenBatch
from icetide.write.conform import conform_batch
from icetide.write.distribution import DISTRIBUTIONS, SlotPlan
from icetide.write.evolution import SchemaChange
from icetide.write.spark_write import write_files
from icetide.write.spec_layouts import EarlierSpecs, check_spec_serves_upserts

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

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
    values raises SchemaEvolutionError and commits nothing (see icetide/write/evolution.py).
    After a partition spec change, each batch's equality deletes are written under every spec
    that still has live data files, so upserts and deletes reach rows written under older specs.
    With `deletes="vectors"` (format v3 tables) the commit carries deletion vectors for the rows
    the batch replaces instead of equality deletes (icetide/write/stream_vectors.py), so every
    engine reads each snapshot like a compacted table's. Without `deletes`, the table's own mode:
    `vectors` for a table `create_table` made at its defaults, `equality` for a v2 table and for
    one made before that default or by another tool (icetide/table/delete_modes.py).

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
        deletes: str | None = None,
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
        It is `stage` then `commit_written`, with the `after_write` crash point between them.

        `source_position` (and a dead-letter table's `registry`) is the pipeline's state the commit
        carries (pipeline_state.PipelineState).

        With `truncate`, every row committed before this batch is removed in the same commit
        (a CDC source's TRUNCATE); `df` then holds only what came after it.

        `input_cached`, `order_by`, `distribution` and `write_parallelism` are as for `stage`.
        """
        written = self.stage(
            df,
            batch_id=batch_id,
            input_cached=input_cached,
            order_by=order_by,
            distribution=distribution,
            write_parallelism=write_parallelism,
        )
        if not written.skipped:
            crash_point("after_write", batch_id)
        return self.commit_written(written, source_position, truncate=truncate, registry=registry)

    def write_rows(
        self, rows: pa.Table, *, batch_id: int, source_position: Any = None, registry: dict[str, Any] | None = None
    ) -> BatchResult:
        """Write and commit, exactly once as `write` does, rows this process holds whose keys the
        table does not hold yet (inserts only: no deletes are written), in one data file written
        from here, without a Spark job: the few rows of a dead-letter batch. The table must be
        unpartitioned; `rows` holds its columns by name."""
        started = time.monotonic()
        state = self.committer.last_committed()
        refresh_seconds = time.monotonic() - started
        if state is not None and batch_id <= state.batch_id:
            log.info("batch %s of %s already committed (last %s): skipped", batch_id, self.pipeline_id, state.batch_id)
            written = WrittenBatch(batch_id, [], SchemaChange(), refresh_seconds=refresh_seconds, skipped=True)
        else:
            config = self.writer_config(batch_id, ())
            schema = config.table_schema
            table = pa.Table.from_arrays([rows[f.name].cast(f.type) for f in schema], schema=schema)
            files = [WrittenFile.from_row(f) for f in write_appends(table, config, "-driver")]
            write_seconds = time.monotonic() - started - refresh_seconds
            written = WrittenBatch(batch_id, files, SchemaChange(), write_seconds, 0.0, refresh_seconds)
            crash_point("after_write", batch_id)
        return self.commit_written(written, source_position, registry=registry)

    def stage(
        self,
        df: DataFrame,
        *,
        batch_id: int,
        input_cached: bool | None = None,
        order_by: str | None = None,
        distribution: str | None = None,
        write_parallelism: int | None = None,
    ) -> WrittenBatch:
        """Write one batch's files, committing nothing; a batch id at or below the last committed
        one writes nothing (`skipped`). Commit them with `commit_written`, or delete them with
        `delete_files`.

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
            return WrittenBatch(batch_id, [], SchemaChange(), refresh_seconds=refresh_seconds, skipped=True)
        config, prepared, change = self._prepare(df, batch_id, order_by=order_by)
        distribution = self.distribution if distribution is None else distribution
        files, self.last_plan, write_seconds = write_files(
            prepared,
            config,
            table_name=self.table_name,
            distribution=distribution,
            parallelism=write_parallelism or self.write_parallelism or self.spark.sparkContext.defaultParallelism,
            compression_ratio=self.compression_ratio,
            source_cached=df.is_cached if input_cached is None else input_cached,
            remove_written=self.remove_batch_files,
        )
        plan_seconds = time.monotonic() - started - refresh_seconds - write_seconds
        return WrittenBatch(batch_id, files, change, write_seconds, plan_seconds, refresh_seconds)

    def commit_written(
        self,
        written: WrittenBatch,
        source_position: Any = None,
        *,
        truncate: bool = False,
        registry: dict[str, Any] | None = None,
        batch_path: str | None = None,
        fallback: str | None = None,
    ) -> BatchResult:
        """Commit a batch `stage` wrote, with the pipeline's state (`source_position`, `registry`,
        and how a pipeline ran it: `batch_path`, `fallback`); `truncate` as for `write`. A skipped
        batch commits nothing."""
        batch_id = written.batch_id
        if written.skipped:
            skipped = "already committed"
            return BatchResult(batch_id, False, None, 0, 0, 0, 0, 0, 0.0, 0.0, {}, skipped)
        commit_started = time.monotonic()
        change = written.schema_change
        if change:
            log.info("batch %s evolves the schema of %s: %s", batch_id, self.table_name, change.describe())
        outcome = self.commit_files(
            batch_id,
            written.files,
            source_position,
            truncate=truncate,
            schema_change=change,
            registry=registry,
            batch_path=batch_path,
            fallback=fallback,
        )
        if change:
            self._check_table()
        index = self.committer.index_seconds()
        result = BatchResult.of_files(
            batch_id,
            written.files,
            outcome,
            write_seconds=written.write_seconds,
            commit_seconds=time.monotonic() - commit_started - outcome.refresh_seconds,
            plan_seconds=written.plan_seconds,
            refresh_seconds=written.refresh_seconds + outcome.refresh_seconds,
            find_seconds=index.find,
            index_seconds=index.follow,
        )
        log.debug("batch %s: %s", batch_id, result)
        return result

    def commit_files(
        self,
        batch_id: int,
        files: Sequence[WrittenFile],
        source_position: Any = None,
        *,
        truncate: bool = False,
        schema_change: SchemaChange | None = None,
        registry: dict[str, Any] | None = None,
        batch_path: str | None = None,
        fallback: str | None = None,
    ) -> CommitOutcome:
        """Commit files written for `batch_id` (by `stage` or by a pipeline's own tasks) with the
        pipeline's state, exactly once (commit/committer.py `Committer.commit`); no files: a
        metadata-only commit that moves the state."""
        return self.committer.commit(
            batch_id,
            files,
            source_position,
            truncate=truncate,
            schema_change=schema_change,
            registry=registry,
            batch_path=batch_path,
            fallback=fallback,
        )

    def delete_files(self, files: Sequence[WrittenFile], *, reason: str) -> None:
        """Delete files written for a batch that will not commit them (the log says `reason`)."""
        self.committer.delete_files(files, reason=reason)

    @property
    def table(self) -> Any:
        """The Iceberg table (Java), as of its last refresh."""
        return self.committer.table

    def _prepare(
        self, df: DataFrame, batch_id: int, *, order_by: str | None = None
    ) -> tuple[WriterConfig, DataFrame, SchemaChange]:
        """Check the batch against the table (evolving it if allowed) and add op, arrival and partition columns.

        `order_by` overrides the sink's own (None: the sink's own). Returns the schema change the
        commit must apply (empty without one).
        """
        from pyspark.sql import functions as F

        order_by = self.order_by if order_by is None else order_by
        prepared, jschema, change = conform_batch(
            self.spark,
            self.committer.table,
            df,
            batch_id,
            table_name=self.table_name,
            order_by=order_by,
            schema_evolution=self.schema_evolution,
        )
        plan = self._plan_writers(batch_id, deletes=True, schema=jschema, order_by=order_by)
        for name, transform in plan.partitions:
            expr = F.expr(transform.spark_expression(self.catalog)) if transform else F.lit(None)
            prepared = prepared.withColumn(name, expr)
        return plan.writer, prepared, change

    def plan_writers(
        self,
        batch_id: int,
        *,
        deletes: bool = True,
        order_by: str | None = None,
        changelog: bool | None = None,
        keep_inserts: bool | None = None,
    ) -> WriterPlan:
        """The writer config and partition columns for staging `batch_id` outside the sink, from the
        table's current metadata, exactly as `write` stages a batch.

        With `deletes` (the upsert paths) it raises SchemaError for a spec whose partition values are
        not computed from the key alone, and adds the layout of every earlier spec with live data
        files, which the batch's equality deletes are also written under. Without (append-only
        batches: no deletes) it plans the current spec only. `order_by`, `changelog` and
        `keep_inserts` override the sink's own (None: its own).
        """
        return self._plan_writers(
            batch_id, deletes=deletes, order_by=order_by, changelog=changelog, keep_inserts=keep_inserts
        )

    def _plan_writers(
        self,
        batch_id: int,
        *,
        deletes: bool,
        schema: Any = None,
        order_by: str | None = None,
        changelog: bool | None = None,
        keep_inserts: bool | None = None,
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
            batch_id,
            names,
            schema=schema,
            delete_specs=tuple(layout for layout, _ in layouts),
            order_by=order_by,
            changelog=changelog,
            keep_inserts=keep_inserts,
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
        changelog: bool | None = None,
        keep_inserts: bool | None = None,
    ) -> WriterConfig:
        """What writer tasks need for `batch_id`, from the table's current metadata.

        `partition_columns` name the batch columns holding the spec's partition values, in order;
        `schema` is the Iceberg schema files are written in (default: the table's current one);
        `delete_specs` are earlier specs the batch's deletes are also written under; `order_by`
        orders changes of one key; `changelog` and `keep_inserts` as for the sink (None: the sink's
        own, for all three).
        """
        jtable = self.committer.table
        fields = partition_fields(jtable)
        target = self.target_file_size or target_file_size(jtable)
        parquet = parquet_settings(jtable)
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
            changelog=self.changelog if changelog is None else changelog,
            target_file_size=target,
            row_group_bytes=parquet.row_group_bytes,
            compression=parquet.compression,
            compression_level=parquet.compression_level,
            keep_inserts=self.keep_inserts if keep_inserts is None else keep_inserts,
            delete_specs=delete_specs,
        )

    def remove_batch_files(self, batch_id: int) -> int:
        """Delete the files this pipeline wrote for `batch_id` (an uncommitted batch's); returns how many."""
        prefix = file_prefix(self.pipeline_id, batch_id)
        removed = remove_files(data_location(self.committer.table), lambda name: name.startswith(prefix))
        if removed:
            log.info("deleted %d file(s) of uncommitted batch %s", removed, batch_id)
        return removed

    def remove_abandoned_files(self) -> int:
        """Delete files this pipeline wrote for batches after its last commit (a crashed run's),
        and files of its last committed batch that the commit did not add: the equality-delete
        files its deletion vectors replaced, left behind by a process that died right after the
        commit.

        Call it when the pipeline (re)starts and before it writes: it assumes no other process
        is writing for the same pipeline id, since files of a batch still in flight look the same.
        """
        state = self.committer.last_committed()
        last = state.batch_id if state is not None else -1
        pattern = re.compile(re.escape(file_prefix(self.pipeline_id, 0)[: -len("b000000000000-")]) + r"b(\d{12})-")
        committed: list[set[str] | None] = []  # read once, at the first file of batch `last`: a batch
        # that wrote no file here (its snapshot may be far back, or none) costs no snapshot walk

        def abandoned(name: str) -> bool:
            match = pattern.match(name)
            if not match:
                return False
            batch = int(match.group(1))
            if batch != last:
                return batch > last
            if not committed:
                committed.append(self.committer.files_of_batch(last))
            return committed[0] is not None and name not in committed[0]

        removed = remove_files(data_location(self.committer.table), abandoned)
        if removed:
            log.info(
                "deleted %d file(s) of pipeline %s that no commit holds (of batches after %s, or replaced in it)",
                removed,
                self.pipeline_id,
                last,
            )
        return removed
