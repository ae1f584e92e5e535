"""The Spark path of a pipeline of many tables: a plan per table (pipeline/sync/runner.py's SyncRunner).

A batch the sync fast path does not take (pipeline/sync/fast_path.py) runs here: one Spark job reads
every range and computes each record's table (decode.route), cached once; then, per table and
several at a time: create it from the stream if it is new, skip what it already holds, decode its
records with its own schema and key (decode/debezium/tasks.py: in Python, in Spark's tasks, with
dead letters, truncates and schema changes). The batch's bad records, from every table, go to the
one dead-letter table first; then every table's files are written through its own UpsertSink
(`stage`), and only then does any table commit, as on the fast path (`after_write` fires once,
between the two).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import reduce
from typing import TYPE_CHECKING, Any, Protocol

from icetide.decode.route import ROUTE_COLUMN, ROUTE_ERROR_COLUMN, with_routes
from icetide.errors import IcetideError, one_line
from icetide.pipeline.batch_path import BatchPath
from icetide.pipeline.batches import SyncBatchMetrics, batch_metrics, commit_tables
from icetide.pipeline.spark_path import avro_transcoding, payload_limits
from icetide.pipeline.staged import Fallback
from icetide.pipeline.sync.state import Position, skipped_below
from icetide.pipeline.table_from_stream import SAMPLE_MESSAGES
from icetide.sources.base import raise_source_error_in
from icetide.sources.kafka_reader import VALUE_ERROR_COLUMN
from icetide.table.create import table_exists
from icetide.table.iceberg import spark_schema
from icetide.write.batch import BatchResult, WrittenBatch

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from icetide.config.pipeline import PipelineConfig
    from icetide.pipeline.sync.dead_letters import SyncDeadLetters
    from icetide.pipeline.sync.state import SyncState
    from icetide.sink.sink import UpsertSink
    from icetide.sources.kafka_topics import KafkaTopics, TopicsPlan


class SyncRunner(Protocol):
    """What the Spark path uses of the pipeline's runner (pipeline/sync/runner.py `SyncRunner`)."""

    config: PipelineConfig
    spark: SparkSession
    topics: KafkaTopics
    dead_letters: SyncDeadLetters
    sinks: dict[str, UpsertSink]
    state: SyncState

    def sink_for(self, name: str) -> UpsertSink: ...

    def create_table(self, name: str, samples: Callable[[], list[tuple[Any, Any]]]) -> None: ...

    def commit_each(
        self, batch_id: int, plan: TopicsPlan, fed: set[str], write: Callable[[str, Position], BatchResult]
    ) -> dict[str, BatchResult]: ...

    def record_metrics(self, results: dict[str, Any], decoded: dict[str, TableBatch], unrouted: int) -> None: ...

    def lag(self) -> int: ...


TABLE_THREADS = 4  # tables decoded, written and committed at once (Spark runs their jobs side by side)
# A table's share of a batch up to this many records is written by one task, hashed by key, without
# the dynamic distribution's statistics pass: one Spark job less per table (docs/design.md, "Many tables").
SMALL_SHARE_RECORDS = 50_000
POSITION_COLUMNS = ["topic", "partition", "offset"]

log = logging.getLogger(__name__)


@dataclass
class TableBatch:
    """One table's share of a batch, decoded."""

    name: str
    good: Any = None
    bad: Any = None
    order_by: str | None = None
    truncated: bool = False
    unknown_fields: dict[str, int] = field(default_factory=dict)
    records: int = 0  # records routed to the table in this batch
    bad_count: int = 0


def run_spark_batch(
    runner: SyncRunner, batch_id: int, plan: TopicsPlan, plan_seconds: float, started: float, fallback: Fallback
) -> SyncBatchMetrics:
    """Run the batch on the Spark path (no fast path took it, for `fallback`): route, then decode,
    write and commit each table with its own plan."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    read = plan.topics_read()

    kept: list[Any] = []
    try:
        # One pass over the whole batch: which tables it feeds, from which topics. Each table
        # then reads only its own topics' ranges: a table's Spark jobs have as many tasks as
        # it has ranges, not as many as the batch has (which would grow with tables squared).
        counts = (
            routed(runner, plan, read)
            .groupBy(ROUTE_COLUMN, "topic")
            .agg(F.count(F.lit(1)).alias("records"), F.count(ROUTE_ERROR_COLUMN).alias("errors"))
            .collect()
        )
        routes: dict[str, set[str]] = {}
        shares: dict[str, int] = {}
        for r in counts:
            if r[ROUTE_COLUMN] is not None:
                routes.setdefault(r[ROUTE_COLUMN], set()).add(r["topic"])
                shares[r[ROUTE_COLUMN]] = shares.get(r[ROUTE_COLUMN], 0) + int(r["records"])
        records_in = sum(int(r["records"]) for r in counts)
        unroutable = {r["topic"] for r in counts if r["errors"]}
        created = [name for name in sorted(routes) if ensure_table(runner, name, routed(runner, plan, routes[name]))]
        registry_changed = False
        for name, topics in sorted(routes.items()):  # before decoding: each table's held records
            registry_changed |= runner.state.register(name, {t: plan.starts[t] for t in topics})
        decoded = decode_tables(runner, routes, plan, kept)
        for name, batch in decoded.items():
            batch.records = shares.get(name, 0)
        read_seconds = time.monotonic() - started
        bad_count = 0
        bad = None
        if unroutable or plan.losses or any(d.bad_count for d in decoded.values()):
            bad = bad_records(runner, plan, unroutable, decoded).persist(StorageLevel.MEMORY_AND_DISK)
            kept.append(bad)
            bad_count = bad.count()

        def first_error() -> str:
            first = bad.first() if bad is not None else None
            return str(first["error"]) if first else "?"

        runner.dead_letters.commit(
            runner.state, batch_id, plan, bad_count, records_in, first_error, lambda: bad, lambda: registry_changed
        )
        written = stage_tables(runner, decoded, batch_id)
        results = commit_tables(
            batch_id,
            lambda: runner.commit_each(
                batch_id,
                plan,
                set(decoded),
                lambda n, p: commit_table(runner, n, p, written, decoded, batch_id, fallback),
            ),
        )
    except IcetideError:
        raise
    except Exception as exc:
        raise_source_error_in(exc)
        raise
    finally:
        for frame in kept:
            frame.unpersist()
    source_lag = runner.lag()
    runner.record_metrics(results, decoded, unrouted=bad_count - sum(d.bad_count for d in decoded.values()))
    return batch_metrics(
        SyncBatchMetrics,
        runner.config.pipeline,
        batch_id,
        results,
        records_in=records_in,
        bad_records=bad_count,
        read_decode_seconds=read_seconds,
        source_lag=source_lag,
        truncated=any(d.truncated for d in decoded.values()),
        unknown_fields={f"{d.name}.{k}": v for d in decoded.values() for k, v in d.unknown_fields.items()},
        lost_ranges=len(plan.losses),
        source_plan_seconds=plan_seconds,
        created_tables=tuple(created),
        path=BatchPath.SYNC_SPARK,
        fallback=fallback.reason,
        fallback_detail=fallback.detail,
    )


def ensure_table(runner: SyncRunner, name: str, routed: DataFrame) -> bool:
    """Create table `name` if it does not exist (from its first messages' schema and key, or from
    the pipeline's `table.schema`); True if it was created."""
    from pyspark.sql import functions as F

    if name in runner.sinks or table_exists(runner.spark, name):
        runner.sink_for(name)
        return False

    def samples() -> list[tuple[Any, Any]]:
        rows = (
            routed.where((F.col(ROUTE_COLUMN) == name) & F.col("value").isNotNull() & F.col("key").isNotNull())
            .select("key", "value")
            .limit(SAMPLE_MESSAGES)
            .collect()
        )
        return [(r["key"], r["value"]) for r in rows]

    runner.create_table(name, samples)
    return True


def routed(runner: SyncRunner, plan: TopicsPlan, topics: set[str] | list[str]) -> DataFrame:
    """The batch's records of `topics`, read from Kafka, each with its route (decode.route)."""
    ranges = [r for r in plan.ranges if r.topic in topics and r.end > r.start]
    transcode = avro_transcoding(runner.config)  # Avro records read as the JSON converter's messages
    records = runner.topics.read(runner.spark, ranges, transcode=transcode)
    return with_routes(records, runner.config.table.name, error_col=VALUE_ERROR_COLUMN if transcode else None)


def decode_tables(
    runner: SyncRunner, routes: dict[str, set[str]], plan: TopicsPlan, kept: list[Any]
) -> dict[str, TableBatch]:
    """Each table's records of the batch (those it does not hold yet), decoded with its own
    schema, its bad records counted; several tables at once."""
    from pyspark.sql import functions as F

    from icetide.decode.debezium.changes import SOURCE_ORDER_COLUMN, SOURCE_TS_COLUMN
    from icetide.decode.debezium.tasks import decode_debezium

    c = runner.config

    def decode(name: str) -> TableBatch:
        sink = runner.sinks[name]
        state = runner.state.tables[name]
        held = skipped_below(state.effective(), plan.starts, state.topics(), reset=plan.reset_partitions())
        rows = routed(runner, plan, routes[name]).where(F.col(ROUTE_COLUMN) == name)
        if held:
            rows = rows.where(~_below(held, F.col("topic"), F.col("partition"), F.col("offset")))
        read_error = VALUE_ERROR_COLUMN if VALUE_ERROR_COLUMN in rows.columns else None
        rows = rows.select(
            "topic", "partition", "offset", "timestamp", "key", "value", *([read_error] if read_error else [])
        )
        local: list[Any] = []
        changes = decode_debezium(
            rows,
            "value",
            spark_schema(runner.spark, sink.table),
            list(sink.key),
            c.mode,
            POSITION_COLUMNS,
            keep=local,
            limits=payload_limits(c),
            settings=c.debezium,
            on_truncate=c.on_truncate,
            schema_evolution=c.schema_evolution,
            error_col=read_error,
        )
        kept.extend(local)
        order_by = c.order_by or changes.order_by
        good = changes.good.drop(*[x for x in (SOURCE_TS_COLUMN, SOURCE_ORDER_COLUMN) if x != order_by])
        bad_count = changes.bad.count()  # materializes the decoded cache that good and bad share
        return TableBatch(
            name, good, changes.bad, order_by, changes.truncated, changes.unknown_fields, bad_count=bad_count
        )

    names = sorted(routes)
    if not names:
        return {}
    with ThreadPoolExecutor(max_workers=min(TABLE_THREADS, len(names))) as pool:
        return {b.name: b for b in pool.map(decode, names)}


def bad_records(
    runner: SyncRunner, plan: TopicsPlan, unroutable: set[str], decoded: dict[str, TableBatch]
) -> DataFrame:
    """The batch's bad records not yet in the dead-letter table: unroutable ones and each table's."""
    from pyspark.sql import functions as F

    from icetide.decode.frames import BAD_DDL, source_position

    frames = [d.bad.select("payload", "error", "source_position") for d in decoded.values() if d.bad_count]
    if unroutable:
        records = routed(runner, plan, unroutable)
        frames.append(
            records.where(F.col(ROUTE_ERROR_COLUMN).isNotNull()).select(
                # U+FFFD where the bytes are not UTF-8: Spark's cast keeps them, which no writer takes
                F.encode(F.col("value").cast("string"), "UTF-8").cast("string").alias("payload"),
                F.col(ROUTE_ERROR_COLUMN).alias("error"),
                source_position(POSITION_COLUMNS).alias("source_position"),
            )
        )
    if plan.losses:
        rows = [(None, f"data loss: {loss.reason}", loss.where()) for loss in plan.losses]
        frames.append(runner.spark.createDataFrame(rows, BAD_DDL))
    bad = reduce(lambda a, b: a.unionByName(b), frames)
    return runner.dead_letters.held(runner.state, plan).keep_new(bad)


def stage_tables(runner: SyncRunner, decoded: dict[str, TableBatch], batch_id: int) -> dict[str, WrittenBatch]:
    """Write every table's files for the batch, several tables at once, committing nothing. When
    one table's write fails, the files the others wrote are deleted and its error is raised."""

    def stage(batch: TableBatch) -> WrittenBatch:
        small = batch.records <= SMALL_SHARE_RECORDS and runner.config.distribution == "dynamic"
        return runner.sinks[batch.name].stage(
            batch.good,
            batch_id=batch_id,
            input_cached=True,
            order_by=batch.order_by,
            distribution="key" if small else runner.config.distribution,
            write_parallelism=1 if small else runner.config.write_parallelism,
        )

    if not decoded:
        return {}
    batches = [decoded[name] for name in sorted(decoded)]
    with ThreadPoolExecutor(max_workers=min(TABLE_THREADS, len(batches))) as pool:
        futures = {b.name: pool.submit(stage, b) for b in batches}
    written = {name: f.result() for name, f in futures.items() if f.exception() is None}
    failed = {name: error for name, f in futures.items() if (error := f.exception()) is not None}
    if failed:
        for name, files in written.items():
            runner.sinks[name].delete_files(files.files, reason="another table of the batch failed to write")
        (_, error), *others = failed.items()
        for name, other in others:  # only the first is raised
            log.warning("batch %s: writing %s failed too: %s", batch_id, name, one_line(other))
            log.debug("writing %s failed", name, exc_info=other)
        raise error
    return written


def commit_table(
    runner: SyncRunner,
    name: str,
    position: Position,
    written: dict[str, WrittenBatch],
    decoded: dict[str, TableBatch],
    batch_id: int,
    fallback: Fallback,
) -> BatchResult:
    """Commit one table's written share of the batch (a metadata-only commit without one), with
    the path that ran it and why (`fallback`)."""
    path, reason = BatchPath.SYNC_SPARK, fallback.reason
    batch = written.get(name)
    if batch is None:
        outcome = runner.sink_for(name).commit_files(batch_id, [], position, batch_path=path, fallback=reason)
        return BatchResult.of_files(batch_id, [], outcome, write_seconds=0.0, commit_seconds=0.0)
    sink = runner.sinks[name]
    return sink.commit_written(batch, position, truncate=decoded[name].truncated, batch_path=path, fallback=reason)


def _below(held: dict[tuple[str, int], int], topic: Column, partition: Column, offset: Column) -> Column:
    """SQL: the record's offset is below what is already held for its topic-partition."""
    from pyspark.sql import functions as F

    terms = [(topic == F.lit(t)) & (partition == F.lit(p)) & (offset < F.lit(o)) for (t, p), o in sorted(held.items())]
    return reduce(lambda a, b: a | b, terms, F.lit(False))
