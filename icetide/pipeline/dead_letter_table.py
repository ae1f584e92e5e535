"""The dead-letter table: bad records with their payload, error, source position and time.

Two tables cannot share one atomic commit in most catalogs, so the dead letters of batch N are
committed first, by their own sink with the same pipeline id and batch id, with the position
the batch reads up to: the pipeline's bad records up to there are committed. A batch read again
after a crash (from its tables' positions, which the crash left behind) takes the next batch id
after every table's and the dead-letter table's, and leaves out the bad records the dead-letter
table already holds (`Held`): each is written once, however the source has grown meanwhile.
One scheme for a pipeline of one table and of many (docs/design.md, "Pipeline state").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from icetide.commit.pipeline_state import PipelineState
from icetide.decode.frames import BAD_DDL
from icetide.sink.sink import UpsertSink
from icetide.table.create import create_table
from icetide.write.batch import BatchResult

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

DEAD_LETTER_SCHEMA = (
    "pipeline STRING NOT NULL, batch_id BIGINT NOT NULL, source_position STRING NOT NULL, "
    "payload STRING, error STRING, failed_at TIMESTAMP"
)
DEAD_LETTER_KEY = ["pipeline", "batch_id", "source_position"]
BadRow = tuple[str | None, str, str]  # payload, error, source position (BAD_DDL)


class DeadLetterTable:
    """Appends a batch's bad records once, with the position they are committed up to."""

    def __init__(self, spark: SparkSession, name: str, pipeline_id: str) -> None:
        # Only ever appended (below), so format v2 and equality mode: every reader of Iceberg reads
        # it, and no key index is held for deletes that never come.
        create_table(spark, name, schema=DEAD_LETTER_SCHEMA, key=DEAD_LETTER_KEY, format_version=2)
        self.spark = spark
        self.name = name
        self.pipeline_id = pipeline_id
        # Every record has a unique key (its source position), so INSERT needs no delete.
        self.sink = UpsertSink(
            spark,
            name,
            pipeline_id=pipeline_id,
            changelog=True,
            distribution="key",
            write_parallelism=1,
            deletes="equality",
        )

    def last_committed(self) -> PipelineState | None:
        """The pipeline's last dead-letter commit: its batch id, position and (many tables) registry."""
        return self.sink.last_committed()

    def write(
        self,
        bad: DataFrame | Sequence[BadRow],
        *,
        batch_id: int,
        position: Any,
        registry: dict[str, Any] | None = None,
    ) -> BatchResult:
        """Commit the batch's bad records (already counted non-empty by the caller), with the
        `position` the pipeline's bad records are committed up to and, for many tables, its
        `registry` (icetide.pipeline.sync.state).

        `bad` is a frame of BAD_DDL columns (the Spark path's), or the rows this process holds (a
        fast path's: payload, error, source position), which are written from here without a Spark
        job when the table is unpartitioned, as icetide creates it; a Spark write of a few rows
        takes about 1 s, 3-4 s in a new session (docs/design.md, "Dead letters written by the
        driver")."""
        from pyspark.sql import functions as F

        if isinstance(bad, Sequence):
            if self.sink.table.spec().isUnpartitioned():
                rows = self._rows(bad, batch_id)
                return self.sink.write_rows(rows, batch_id=batch_id, source_position=position, registry=registry)
            bad = self.spark.createDataFrame(list(bad), BAD_DDL)
        frame = bad.select(
            F.lit(self.pipeline_id).alias("pipeline"),
            F.lit(batch_id).cast("bigint").alias("batch_id"),
            F.col("source_position"),
            F.col("payload"),
            F.col("error"),
            F.current_timestamp().alias("failed_at"),
            F.lit("INSERT").alias("_op"),
        )
        return self.sink.write(frame, batch_id=batch_id, source_position=position, registry=registry)

    def _rows(self, bad: Sequence[BadRow], batch_id: int) -> pa.Table:
        """The dead-letter rows of `bad`, failed now."""
        payloads, errors, positions = [b[0] for b in bad], [b[1] for b in bad], [b[2] for b in bad]
        return pa.table(
            {
                "pipeline": pa.array([self.pipeline_id] * len(bad), pa.string()),
                "batch_id": pa.array([batch_id] * len(bad), pa.int64()),
                "source_position": pa.array(positions, pa.string()),
                "payload": pa.array(payloads, pa.string()),
                "error": pa.array(errors, pa.string()),
                "failed_at": pa.array([datetime.now(UTC)] * len(bad), pa.timestamp("us", tz="UTC")),
            }
        )

    def recorded(self, positions: list[str]) -> set[str]:
        """Which of these source positions (lost ranges) the pipeline's dead letters hold."""
        from pyspark.sql import functions as F

        self.spark.catalog.refreshTable(self.name)
        rows = (
            self.spark.table(self.name)
            .where((F.col("pipeline") == self.pipeline_id) & F.col("source_position").isin(positions))
            .select("source_position")
            .collect()
        )
        return {r[0] for r in rows}

    def remove_abandoned_files(self) -> int:
        """Delete files of dead-letter batches that never committed (after a crash)."""
        return self.sink.remove_abandoned_files()


KAFKA_WHERE = r"^(.*)/(\d+)@(\d+)"  # "topic/partition@offset", or a lost range "...@from..to"
FILE_WHERE = r"^(.*):(\d+)$"  # "path:line"; a lost file is its path alone
RESET = "..?"  # the end of a lost range whose end is unknown: the partition was reset (a recreated topic)


@dataclass(frozen=True)
class Held:
    """The bad records of a batch that the dead-letter table already holds, by source position:
    Kafka offsets below `offsets[(topic, partition)]`, every record of the landing files `files`
    (by path), and the lost ranges `lost`. Empty unless the batch reads again what a crash left
    behind (docs/design.md, "Pipeline state")."""

    offsets: Mapping[tuple[str, int], int] = field(default_factory=dict)
    files: frozenset[str] = frozenset()
    lost: frozenset[str] = frozenset()

    @classmethod
    def kafka(
        cls,
        position: Mapping[str, Mapping[str, int]],
        starts: Mapping[str, Mapping[str, int]],
        lost: Iterable[str],
        recorded: Callable[[list[str]], set[str]],
    ) -> Held:
        """What a Kafka batch reading from `starts` (topic -> partition -> first offset) and
        recording the ranges `lost` ("topic/partition@from..to") finds held by the dead-letter
        `position` (topic -> partition -> offset its bad records are committed up to).

        A partition the batch finds reset (a range lost "from..?": the topic was recreated) is
        read from a new log, which the dead-letter position describes only if the dead-letter
        table already recorded that very reset (`recorded`: which of the given lost ranges it
        holds; asked only when there are resets), in a batch killed before its data committed."""
        first = {t: dict(p) for t, p in starts.items()}
        resets = [where for where in lost if where.endswith(RESET)]
        seen = recorded(resets) if resets else set()
        fresh: set[tuple[str, str]] = set()
        for where in lost:
            m = re.match(KAFKA_WHERE, where)
            if m is None:
                continue
            if where in resets:
                if where not in seen:
                    fresh.add((m[1], m[2]))
                continue
            mine = first.setdefault(m[1], {})
            mine[m[2]] = min(int(m[3]), mine.get(m[2], int(m[3])))
        out: dict[tuple[str, int], int] = {}
        for topic, partitions in first.items():
            for p, start in partitions.items():
                offset = position.get(topic, {}).get(p, start)
                if offset > start and (topic, p) not in fresh:
                    out[(topic, int(p))] = offset
        return cls(offsets=out, lost=frozenset(seen))

    def __bool__(self) -> bool:
        return bool(self.offsets or self.files or self.lost)

    def holds(self, source_position: str) -> bool:
        """Is the bad record (or lost range) at `source_position` already committed?"""
        if source_position in self.lost:
            return True
        if self.offsets and not source_position.endswith(RESET):
            m = re.match(KAFKA_WHERE, source_position)
            if m is not None and int(m[3]) < self.offsets.get((m[1], int(m[2])), -1):
                return True
        if self.files:
            m = re.match(FILE_WHERE, source_position)
            return (m[1] if m is not None else source_position) in self.files
        return False

    def keep_new(self, bad: DataFrame) -> DataFrame:
        """`bad` (a frame with `source_position`) less the records already held."""
        from pyspark.sql import functions as F

        if not self:
            return bad
        where = F.col("source_position")
        held = where.isin(sorted(self.lost)) if self.lost else F.lit(False)
        if self.offsets:
            topic = F.regexp_extract(where, KAFKA_WHERE, 1)
            partition = F.regexp_extract(where, KAFKA_WHERE, 2)
            offset = F.regexp_extract(where, KAFKA_WHERE, 3)
            for (t, p), o in sorted(self.offsets.items()):
                held = held | (
                    where.rlike(KAFKA_WHERE)
                    & ~where.endswith(RESET)
                    & (topic == F.lit(t))
                    & (partition == F.lit(str(p)))
                    & (offset.cast("bigint") < F.lit(o))
                )
        if self.files:
            path = F.when(where.rlike(FILE_WHERE), F.regexp_extract(where, FILE_WHERE, 1)).otherwise(where)
            held = held | path.isin(sorted(self.files))
        return bad.where(~held)
