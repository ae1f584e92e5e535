"""The JSON fast path: Kafka JSON records and landing JSON-lines files to Iceberg files in one
pass per Spark task.

For `format: json`, each Spark task (executor/json_task.py) reads its share of the batch: Kafka offset ranges with
librdkafka (executor/kafka_blocks.py), or whole landing files, in plan order, line by line as
the Spark path reads them (sources/files.py `json_lines`, positions "file:line"). It decodes the
payloads (decode/json/records.py: a block in one pyarrow read where its column types allow, else
record by record, every column type included), computes the partition values in pyarrow
(write/transforms.py) and writes the files right there with the sink's rolling writer. Rows never
cross into the JVM; a task returns only its files' Iceberg metadata and its bad records. The
driver then commits exactly as the runner's Spark path does: dead letters first (with the plan),
then the files with the batch id and the position. Files are named like the sink's
(`icetide-<pipeline>-b<batch>-...`), so an abandoned batch's files are found and deleted on
restart.

`mode: append` writes data files only, in as many tasks as the batch fills. `mode: upsert`
collapses each key's changes to its last (by `order_by`, then arrival) and writes data and
equality-delete files under every live spec, as the sink's writer tasks do (executor/writer.py
`write_changes`). An equality delete does not apply to the data files of its own commit, so every
change of a key in a batch must meet in one task's collapse: upsert tasks take whole Kafka
partitions (landing files' upserts run in one task), each returns its distinct keys, and a batch in which two tasks
share a key is deleted and written again in one task, as every later batch of the process is
(`one_task_upserts`). A producer keyed by the table's key never meets that case. Upserts run in
several tasks only when `write_parallelism` asks for more than one.

With `schema_evolution`, a batch whose records carry fields the Spark path would add as columns
is discarded by the driver and written there, in one commit with the new columns; every other
batch stays on the fast path, which counts the fields it does not add.

The runner keeps the Spark path (the same decoder in Spark's tasks, then UpsertSink) when
`fast_path: off`, for CSV and Parquet files (Spark's readers type their columns), for column
types the decoder does not produce (TIME, which no Spark table has), for partition transforms
pyarrow does not compute (bucket and truncate of decimals and binaries), for a spec an upsert's
deletes cannot serve, and, in append mode, for a batch whose records carry an `_op` other than
INSERT (the tasks then write nothing of it and the batch is run again on the Spark path).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from icetide.commit.committer import WrittenFile
from icetide.decode.json.evolution import addable
from icetide.decode.json.records import ArrowJsonDecoder
from icetide.decode.json.scalars import undecodable_columns
from icetide.errors import IcetideError, one_line
from icetide.executor.json_task import JsonTaskConfig, JsonTaskResult, run_json_tasks, summed_counts
from icetide.executor.kafka_ahead import ReadAhead
from icetide.executor.task_shares import split_files, split_partitions, split_ranges
from icetide.pipeline.batch_path import FallbackReason
from icetide.pipeline.read_ahead import AheadOfTrigger, ReadAheadStopped, collect_ahead
from icetide.pipeline.spark_path import SourceAdapter, payload_limits
from icetide.pipeline.staged import Fallback, StagedBatch
from icetide.sink.sink import UpsertSink
from icetide.sources.base import raise_source_error_in
from icetide.sources.kafka_reader import OffsetRange
from icetide.table.iceberg import partition_fields, spark_schema
from icetide.write.keys import keys_meet
from icetide.write.transforms import computable

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from icetide.config.pipeline import PipelineConfig

log = logging.getLogger(__name__)

MIN_TASK_RECORDS = 25_000  # below this a second task costs more (consumer, worker) than it saves
RECORD_BYTES = 200  # landing files: a task's share counted in records of about this size


class JsonFastPath:
    """Drives the fast path for one pipeline: decides if a batch can take it, runs its tasks."""

    def __init__(self, spark: SparkSession, config: PipelineConfig, sink: UpsertSink, source: SourceAdapter) -> None:
        self.spark = spark
        self.config = config
        self.sink = sink
        self.source = source
        self.kafka = source.kafka.config if source.kind == "kafka" else None  # None: landing files
        self.time_zone = spark.conf.get("spark.sql.session.timeZone") or "UTC"
        self._checked: tuple[Any, Fallback | None] | None = None
        self._task_config: tuple[Any, JsonTaskConfig] | None = None
        # Upserts stage in several tasks while no key has met in two; once one has, in one task.
        self.one_task_upserts = False

    @staticmethod
    def applies(config: PipelineConfig) -> Fallback | None:
        """Why the pipeline's config rules the fast path out, or None."""
        if config.fast_path == "off":
            return Fallback(FallbackReason.FAST_PATH_OFF, "fast_path: off")
        if config.capture_source:
            return Fallback(
                FallbackReason.TWO_STAGE, "stage 1 of a two-stage pipeline (records keep their source position and op)"
            )
        if config.format != "json":
            return Fallback(FallbackReason.FORMAT, f"format: {config.format}")
        if config.source_kind == "files" and config.source["files"].get("format", "json") != "json":
            # Spark's CSV and Parquet readers type the columns: there is no decoder to run in a task.
            return Fallback(FallbackReason.FILES_FORMAT, f"source.files.format: {config.source['files']['format']}")
        return None

    def unavailable(self) -> Fallback | None:
        """Why the table (as last refreshed) rules the fast path out, or None; checked again when
        its schema, spec, writer properties or live earlier specs change."""
        jtable = self.sink.table
        version = self.sink.writer_config_version()
        if self._checked is not None and self._checked[0] == version:
            return self._checked[1]
        fallback = self._check(jtable)
        if fallback is not None:
            log.info("JSON fast path off for %s: %s", self.sink.table_name, fallback.detail)
        self._checked = (version, fallback)
        return fallback

    def _check(self, jtable: Any) -> Fallback | None:
        from zoneinfo import ZoneInfo

        schema = self.sink.writer_config(0, ()).table_schema
        # Every type the decoder produces is taken, record by record where its block-wise read
        # does not (DECIMAL, BINARY, FIXED, TIMESTAMP_NTZ, ARRAY, STRUCT, MAP): the Spark path runs
        # the same decoder in its tasks and the same writer, so the fast path has nothing to add.
        missing = undecodable_columns(schema)
        if missing:
            return Fallback(
                FallbackReason.COLUMN_TYPES,
                f"column types the Python JSON decoder does not produce: {', '.join(missing)}",
            )
        try:
            ZoneInfo(self.time_zone)
        except (ValueError, KeyError):
            return Fallback(
                FallbackReason.SESSION_TIME_ZONE, f"session time zone {self.time_zone!r} is not a zone name"
            )
        for pf in partition_fields(jtable):
            source = schema.field(pf.transform.column).type if pf.transform else pa.null()
            if not computable(pf.transform, source):
                return Fallback(
                    FallbackReason.PARTITION_TRANSFORM,
                    f"partition field {pf.name} ({pf.transform}) is computed in the JVM",
                )
        if self.config.mode == "upsert":  # its deletes go under every spec with live files too
            try:
                plan = self.sink.plan_writers(0)
            except IcetideError as exc:  # a spec the key does not serve: the Spark path says so
                return Fallback(FallbackReason.PARTITION_SPEC, one_line(exc))
            for _, transform in plan.partitions:
                if transform is not None and not computable(transform, schema.field(transform.column).type):
                    return Fallback(
                        FallbackReason.PARTITION_TRANSFORM,
                        f"partition transform {transform} of an earlier spec is computed in the JVM",
                    )
        return None

    def task_config(self, batch_id: int) -> JsonTaskConfig:
        """The tasks' configuration for `batch_id`, from the table's current metadata.

        Built once per table schema, spec and properties (about 0.1 s of py4j calls), then
        only the batch id changes.
        """
        version = self.sink.writer_config_version()
        if self._task_config is None or self._task_config[0] != version:
            self._task_config = (version, self._build_task_config(batch_id))
        config = self._task_config[1]
        return dataclasses.replace(config, writer=dataclasses.replace(config.writer, batch_id=batch_id))

    def _build_task_config(self, batch_id: int) -> JsonTaskConfig:
        upsert = self.config.mode == "upsert"
        # Upserts: equality deletes under every live spec (SchemaError for a spec the key does not serve).
        plan = self.sink.plan_writers(batch_id, deletes=upsert)
        writer = plan.writer
        kafka = self.kafka
        return JsonTaskConfig(
            consumer_settings=kafka.reader_settings() if kafka is not None else {},
            read_timeout=kafka.read_timeout_seconds if kafka is not None else 0.0,
            decoder=ArrowJsonDecoder(
                writer.table_schema,
                writer.key,
                op_mode=self.config.mode,
                time_zone=self.time_zone,
                limits=payload_limits(self.config),
                nested_as_text=self.config.json.nested_as_text,
            ),
            writer=writer,
            partitions=plan.partitions,
            upsert=upsert,
            reads_files=kafka is None,
        )

    def tasks_for(self, records: int) -> int:
        """How many tasks a batch of `records` runs in: Spark's parallelism, if there is enough to
        share. Upserts: one, unless `write_parallelism` asks for more, and again one once a key
        met in two tasks (see `write`): a second task costs about a fifth more CPU per row
        (docs/runner.md), worth it to drain a backlog on many cores, not by default."""
        if self.config.mode == "upsert" and (self.one_task_upserts or (self.config.write_parallelism or 1) < 2):
            return 1
        parallelism = self.config.write_parallelism or self.spark.sparkContext.defaultParallelism
        return max(1, min(parallelism, records // MIN_TASK_RECORDS))

    def groups(self, items: list[OffsetRange] | list[str]) -> list[list[OffsetRange]] | list[list[str]]:
        """The batch's Kafka ranges or landing files, cut into one group per task."""
        if self.kafka is not None:
            ranges = [r for r in items if isinstance(r, OffsetRange) and r.count > 0]
            tasks = self.tasks_for(sum(r.count for r in ranges))
            # Upserts keep each Kafka partition whole: a producer keyed by the table's key sends
            # every change of a key to one partition, so the tasks' keys do not meet.
            return split_partitions(ranges, tasks) if self.config.mode == "upsert" else split_ranges(ranges, tasks)
        files = [str(f) for f in items]
        if self.config.mode == "upsert":
            # Landing files seldom keep a key's changes in one file: upserts run in one task, not
            # in several that would find a key they share and write the batch again.
            return [files]
        sizes = self.source.files.planned_sizes(files)
        return split_files(files, sizes, self.tasks_for(sum(sizes) // RECORD_BYTES))

    def write(
        self, batch_id: int, items: list[OffsetRange] | list[str], *, ahead: AheadOfTrigger | None = None
    ) -> StagedBatch | Fallback:
        """Run the batch's tasks over its Kafka ranges or landing files; files written, nothing
        committed. Failed tasks' files are deleted, and so is the whole batch when a record carries
        a change (`_op` other than INSERT): the Spark path runs it.

        With `ahead` (Kafka: `items` holds a range for every partition of the position, empty or
        not), the tasks read past the ranges until the trigger time, and the staged batch's
        `read_to` holds the ranges read; a batch that falls back or is written again runs from
        `items` alone."""
        if ahead is not None:
            assert self.kafka is not None, "reading ahead is for Kafka sources"
            groups: list[list[OffsetRange]] | list[list[str]] = split_partitions(
                [r for r in items if isinstance(r, OffsetRange)], self.tasks_for(ahead.planned(items))
            )
            spare = ahead.spare(self.config.trigger.max_records, ahead.planned(items), len(groups))
            config = dataclasses.replace(
                self.task_config(batch_id), key_check=len(groups) > 1, ahead=ReadAhead(ahead.until, spare)
            )
        else:
            groups = self.groups(items)
            config = dataclasses.replace(self.task_config(batch_id), key_check=len(groups) > 1)
        started, started_at = time.monotonic(), time.time()
        try:
            results = self._run_tasks(groups, config, ahead)
        except Exception as exc:
            self.discard(batch_id)
            if ahead is not None and ahead.stop.is_set():
                raise ReadAheadStopped(f"batch {batch_id} stopped while reading ahead; nothing was committed") from exc
            raise_source_error_in(exc)
            log.debug("append tasks of batch %s failed", batch_id, exc_info=True)
            raise IcetideError(
                f"writing batch {batch_id} to {self.sink.table_name} failed: {one_line(exc)}; nothing was committed"
            ) from exc
        elapsed = time.monotonic() - started
        log.debug(
            "batch %s: %d task(s) in %.2fs; per task from/to s after the job's start: %s, "
            "read cpu/wait/decode cpu/write/task cpu s: %s",
            batch_id,
            len(results),
            elapsed,
            [(round(r.started_at - started_at, 2), round(r.finished_at - started_at, 2)) for r in results],
            [r.timings() for r in results],
        )
        if any(r.changes for r in results):
            self.discard(batch_id)
            return Fallback(FallbackReason.CHANGE_OPS, "records carry _op changes")
        if config.key_check and keys_meet([r.keys for r in results if r.keys is not None]):
            # Two tasks each wrote a change of one key: an equality delete does not apply to the
            # data files of its own commit, so both rows would stay. Written again in one task.
            self.discard(batch_id)
            self.one_task_upserts = True
            log.info(
                "batch %s of %s: a key came in two tasks' shares (in two Kafka partitions or files); "
                "upserts stage in one task from now on",
                batch_id,
                self.sink.table_name,
            )
            return self.write(batch_id, items)
        unknown = summed_counts(r.unknown_fields for r in results)
        added = self._to_add(unknown)
        if added:
            self.discard(batch_id)
            return Fallback(
                FallbackReason.SCHEMA_EVOLUTION, f"schema_evolution: fields to add as columns: {', '.join(added)}"
            )
        files = [WrittenFile.from_row(f) for r in results for f in r.files]
        write_seconds = max((r.write_seconds for r in results), default=0.0)
        read_to = tuple(range_ for r in results for range_ in r.reached) if ahead is not None else None
        idle = min((r.wait_seconds for r in results), default=0.0) if ahead is not None else 0.0  # records awaited
        return StagedBatch(
            files={self.sink.table_name: files},
            bad=[b for r in results for b in r.bad],
            records_in=sum(r.records for r in results),
            read_decode_seconds=max(0.0, elapsed - write_seconds - idle),
            write_seconds=write_seconds,
            task_timings=[r.timings() for r in results],
            unknown_fields=unknown,
            nested_as_text=sum(r.nested_as_text for r in results),
            read_to=read_to,
            waited_seconds=idle,
        )

    def _run_tasks(
        self, groups: list[list[OffsetRange]] | list[list[str]], config: JsonTaskConfig, ahead: AheadOfTrigger | None
    ) -> list[JsonTaskResult]:
        """The batch's Spark job, one task per group; a job reading ahead is cancelled when the
        run is asked to stop."""
        if ahead is not None:
            return collect_ahead(
                self.spark, groups, lambda items: run_json_tasks(config, items), self.sink.table_name, ahead
            )
        rdd = self.spark.sparkContext.parallelize(list(enumerate(groups)), max(1, len(groups)))
        return rdd.mapPartitions(lambda items: run_json_tasks(config, items)).collect()  # type: ignore[no-any-return]

    def _to_add(self, unknown: dict[str, int]) -> list[str]:
        """With `schema_evolution`, the batch's unknown fields the Spark path would add as columns
        (decode/json/evolution.py `addable`); a batch with any is written there, in the same
        commit as the new columns. Fields it would not add stay counted, as on the Spark path."""
        if not self.config.schema_evolution or not unknown:
            return []
        return addable(unknown, spark_schema(self.spark, self.sink.table), ())

    def discard(self, batch_id: int) -> None:
        """Delete what the batch's tasks wrote (it will not be committed from these files)."""
        self.sink.remove_batch_files(batch_id)
