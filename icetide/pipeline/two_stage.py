"""A two-stage pipeline, for a merge engine or dimension enrichment, in one Spark application.

Stage 1 is the ordinary runner in append mode: the source lands, exactly once, in a raw table
(the table is its checkpoint), one row per good record with its source position and op. Stage 2
streams the raw table (`readStream.format("iceberg")`) through the stateful changelog stage into
the pipeline's table; Spark's checkpoint holds its offsets and keyed state, and the sink commits
each Spark batch id once. Either stage can die at any moment and restart exactly once.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from icetide.commit.committer import APPEND_TABLE_PROPERTIES
from icetide.config.pipeline import PipelineConfig, TableConfig
from icetide.errors import ConfigError
from icetide.pipeline.batches import RunSummary
from icetide.pipeline.provision import create_config_table, pipeline_session
from icetide.pipeline.raw_retention import RawRetentionResult, apply_raw_retention
from icetide.pipeline.spark_path import EVENT_OP_COLUMN, SOURCE_POSITION_COLUMN
from icetide.pipeline.table_runner import Runner
from icetide.stateful.settings import StatefulSettings
from icetide.stateful.stage import ChangelogStage, StageOptions
from icetide.table.format_version import FORMAT_VERSION_PROPERTY
from icetide.table.iceberg import load_table, spark_schema
from icetide.write.collapse import OP_COLUMN

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery
    from pyspark.sql.types import StructType

    from icetide.pipeline.batches import BatchMetrics
    from icetide.pipeline.supervision import RestartMetrics
    from icetide.write.batch import BatchResult

log = logging.getLogger(__name__)

# Raw retention deletes whole days, so checking once an hour is often enough; a run applies it
# at its start and then at most this often, between stage-1 batches.
RETENTION_EVERY_SECONDS = 3600.0


def raw_table_config(config: PipelineConfig, settings: StatefulSettings, target: StructType) -> TableConfig:
    """The raw table: the events' columns (the target's, less enrichment outputs; only the key
    required), the record's op and source position; keyed by position and event time, by day."""
    order_by = config.order_by or ""
    enriched = {c for e in settings.enrich for c in e.outputs}
    key = set(config.table.key)
    if order_by not in target.fieldNames():
        raise ConfigError(f"order_by: {order_by} is not a column of {config.table.name}")
    columns = []
    for f in target.fields:
        if f.name in enriched:
            continue
        required = f.name in key or f.name == order_by
        columns.append(f"{f.name} {f.dataType.simpleString()}{' NOT NULL' if required else ''}")
    columns += [f"{EVENT_OP_COLUMN} string", f"{SOURCE_POSITION_COLUMN} string NOT NULL"]
    return TableConfig(
        name=settings.raw_table,
        schema=", ".join(columns),
        key=(SOURCE_POSITION_COLUMN, order_by),
        partition_by=(f"days({order_by})",),
        # Appended to, and read by stage 2 as a stream: format v2 and equality mode, as before the
        # v3 default (no deletes to fold, no key index over every event).
        properties={**APPEND_TABLE_PROPERTIES, FORMAT_VERSION_PROPERTY: "2"},
        deletes="equality",
    )


@dataclass
class StageTwoProgress:
    """What stage 2 committed in this run."""

    batches: int = 0
    rows_written: int = 0
    delete_rows: int = 0


class TwoStageRunner:
    """Stage 1 (source -> raw table) in the calling thread, stage 2 (raw -> table) as a streaming query."""

    def __init__(self, config: PipelineConfig, spark: SparkSession | None = None) -> None:
        if config.stateful is None:
            raise ConfigError("merge or enrich: a two-stage pipeline needs one of them")
        self.config, self.settings = config, config.stateful
        self.spark = spark = spark or pipeline_session(config)
        t = config.table
        create_config_table(spark, t)
        raw = raw_table_config(config, self.settings, spark_schema(spark, load_table(spark, t.name)))
        raw_config = replace(
            config, table=raw, mode="append", capture_source=True, stateful=None, maintain_table=t.name
        )
        self.ingest = Runner(raw_config, spark)
        s = self.settings
        options = StageOptions(
            merge=s.merge,
            watermark_seconds=s.watermark_seconds,
            ttl_seconds=s.ttl_seconds,
            dedup_by=s.dedup_by,
            dedup=s.dedup,
            enrich=s.enrich,
        )
        self.stage = ChangelogStage(
            spark, t.name, pipeline_id=config.pipeline, order_by=config.order_by or "", options=options,
            distribution=config.distribution, target_file_size=t.target_file_size,
        )  # fmt: skip
        self.progress = StageTwoProgress()
        self.on_stage_two: Callable[[str], None] | None = None  # one JSON line per committed stage-2 batch
        self._last_retention: float | None = None  # time.monotonic() of the last pass

    @property
    def maintenance_runs(self) -> list[Any]:
        """Maintenance of the pipeline's table, run beside stage 1 (between its batches or on a thread)."""
        return self.ingest.maintenance_runs

    def events(self) -> DataFrame:
        """The raw table as a stream of events (its deletes, from retention, are skipped)."""
        from pyspark.sql import functions as F

        raw = (
            self.spark.readStream.format("iceberg")
            .option("streaming-skip-delete-snapshots", "true")
            .option("streaming-skip-overwrite-snapshots", "true")
            .load(self.settings.raw_table)
        )
        return raw.select(
            *[F.col(f"`{c}`") for c in raw.columns if c not in (EVENT_OP_COLUMN,)],
            F.col(EVENT_OP_COLUMN).alias(OP_COLUMN),
        )

    def _start_stage_two(self) -> StreamingQuery:
        # Never `availableNow`: Iceberg's streaming source caps such a run by walking the raw
        # table from the checkpoint's first offset, so it fails once raw retention has expired
        # that snapshot. `--once` runs the processing-time query until it has caught up instead.
        self.stage.sink.remove_abandoned_files()
        self.stage.on_result = self._stage_two_committed
        return self.stage.start(
            self.events(),
            checkpoint=self.settings.checkpoint,
            interval_seconds=self.config.trigger.interval,
            query_name=f"icetide-{self.config.pipeline}",
        )

    def _stage_two_committed(self, batch_id: int, result: BatchResult) -> None:
        if not result.committed:
            return
        self.progress.batches += 1
        self.progress.rows_written += result.rows_written
        self.progress.delete_rows += result.delete_rows
        line = json.dumps(
            {
                "pipeline": self.config.pipeline,
                "stage": 2,
                "batch_id": batch_id,
                "rows_written": result.rows_written,
                "delete_rows": result.delete_rows,
                "data_files": result.data_files,
                "delete_files": result.delete_files,
                "bytes_written": result.bytes_written,
                "plan_seconds": round(result.plan_seconds, 3),
                "write_seconds": round(result.write_seconds, 3),
                "refresh_seconds": round(result.refresh_seconds, 3),
                "commit_seconds": round(result.commit_seconds, 3),
            },
            sort_keys=True,
        )
        log.info("stage 2 batch committed: %s", line)
        if self.on_stage_two is not None:
            self.on_stage_two(line)

    def apply_retention(self) -> RawRetentionResult | None:
        """Apply `raw.retention` (icetide/pipeline/raw_retention.py), at most once per
        RETENTION_EVERY_SECONDS; None when it did not run."""
        seconds = self.settings.raw_retention_seconds
        if seconds is None:
            return None
        last = self._last_retention
        if last is not None and time.monotonic() - last < RETENTION_EVERY_SECONDS:
            return None
        self._last_retention = time.monotonic()
        return apply_raw_retention(
            self.spark,
            self.settings.raw_table,
            order_by=self.config.order_by or "",
            retention_seconds=seconds,
            checkpoint=self.settings.checkpoint,
        )

    def run(
        self,
        *,
        once: bool = False,
        on_batch: Callable[[BatchMetrics], None] | None = None,
        on_restart: Callable[[RestartMetrics], None] | None = None,
        handle_signals: bool = True,
    ) -> RunSummary:
        """Run both stages until stopped; with `once`, drain the source into the raw table, then
        the raw table into the target, and return. `on_batch` and `on_restart` hear stage 1's
        batches and restarts (as Runner.run's do), `on_stage_two` stage 2's batches."""
        self.apply_retention()
        if once:
            summary = self.ingest.run(
                once=True, on_batch=on_batch, on_restart=on_restart, handle_signals=handle_signals
            )
            query = self._start_stage_two()
            try:
                query.processAllAvailable()  # everything stage 1 committed, merged and committed
            finally:
                query.stop()
            return summary
        query = self._start_stage_two()
        stop_watch = threading.Event()

        def watch() -> None:  # a failed stage 2 stops stage 1: the pipeline fails as one
            while not stop_watch.wait(1.0):
                if not query.isActive:
                    self.ingest.stop()
                    return

        watcher = threading.Thread(target=watch, name="icetide-stage2-watch", daemon=True)
        watcher.start()

        def each(metrics: BatchMetrics) -> None:
            self.apply_retention()
            if on_batch is not None:
                on_batch(metrics)

        try:
            summary = self.ingest.run(once=False, on_batch=each, on_restart=on_restart, handle_signals=handle_signals)
        finally:
            stop_watch.set()
            if query.isActive:
                query.stop()
        if query.exception() is not None:
            query.awaitTermination()  # raises the stage's error
        return summary
