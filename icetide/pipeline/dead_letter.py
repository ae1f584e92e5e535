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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from icetide.sink.batch import BatchResult
from icetide.sink.committer import PipelineState
from icetide.sink.sink import UpsertSink
from icetide.table.catalog import create_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

DEAD_LETTER_SCHEMA = (
    "pipeline STRING NOT NULL, batch_id BIGINT NOT NULL, source_position STRING NOT NULL, "
    "payload STRING, error STRING, failed_at TIMESTAMP"
)
DEAD_LETTER_KEY = ["pipeline", "batch_id", "source_position"]


class DeadLetterTable:
    """Appends a batch's bad records once, with the position they are committed up to."""

    def __init__(self, spark: SparkSession, name: str, pipeline_id: str) -> None:
        create_table(spark, name, schema=DEAD_LETTER_SCHEMA, key=DEAD_LETTER_KEY)
        self.name = name
        self.pipeline_id = pipeline_id
        # Every record has a unique key (its source position), so INSERT needs no delete.
        self.sink = UpsertSink(
            spark, name, pipeline_id=pipeline_id, changelog=True, distribution="key", write_parallelism=1
        )

    def last_committed(self) -> PipelineState | None:
        """The pipeline's last dead-letter commit: its batch id, position and (many tables) registry."""
        return self.sink.last_committed()

    def write(
        self, bad: DataFrame, *, batch_id: int, position: Any, registry: dict[str, Any] | None = None
    ) -> BatchResult:
        """Commit the batch's bad records (already counted non-empty by the caller), with the
        `position` the pipeline's bad records are committed up to and, for many tables, its
        `registry` (icetide.pipeline.sync_state)."""
        from pyspark.sql import functions as F

        rows = bad.select(
            F.lit(self.pipeline_id).alias("pipeline"),
            F.lit(batch_id).cast("bigint").alias("batch_id"),
            F.col("source_position"),
            F.col("payload"),
            F.col("error"),
            F.current_timestamp().alias("failed_at"),
            F.lit("INSERT").alias("_op"),
        )
        return self.sink.write(rows, batch_id=batch_id, source_position=position, registry=registry)

    def remove_abandoned_files(self) -> int:
        """Delete files of dead-letter batches that never committed (after a crash)."""
        return self.sink.remove_abandoned_files()


KAFKA_WHERE = r"^(.*)/(\d+)@(\d+)"  # "topic/partition@offset", or a lost range "...@from..to"
FILE_WHERE = r"^(.*):(\d+)$"  # "path:line"; a lost file is its path alone


@dataclass(frozen=True)
class Held:
    """The bad records of a batch that the dead-letter table already holds, by source position:
    Kafka offsets below `offsets[(topic, partition)]`, and every record of the landing files
    `files` (by path). Empty unless the batch reads again what a crash left behind."""

    offsets: Mapping[tuple[str, int], int] = field(default_factory=dict)
    files: frozenset[str] = frozenset()

    @classmethod
    def kafka(
        cls, position: Mapping[str, Mapping[str, int]], starts: Mapping[str, Mapping[str, int]], lost: Iterable[str]
    ) -> Held:
        """What a Kafka batch reading from `starts` (topic -> partition -> first offset) and
        recording the ranges `lost` (their positions, "topic/partition@from..to") finds held by the
        dead-letter `position` (topic -> partition -> offset its bad records are committed up to)."""
        first = {t: dict(p) for t, p in starts.items()}
        for where in lost:
            m = re.match(KAFKA_WHERE, where)
            if m is not None:
                mine = first.setdefault(m[1], {})
                mine[m[2]] = min(int(m[3]), mine.get(m[2], int(m[3])))
        out: dict[tuple[str, int], int] = {}
        for topic, partitions in first.items():
            for p, start in partitions.items():
                offset = position.get(topic, {}).get(p, start)
                if offset > start:
                    out[(topic, int(p))] = offset
        return cls(offsets=out)

    def __bool__(self) -> bool:
        return bool(self.offsets or self.files)

    def holds(self, source_position: str) -> bool:
        """Is the bad record (or lost range) at `source_position` already committed?"""
        if self.offsets:
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
        held = F.lit(False)
        if self.offsets:
            topic = F.regexp_extract(where, KAFKA_WHERE, 1)
            partition = F.regexp_extract(where, KAFKA_WHERE, 2)
            offset = F.regexp_extract(where, KAFKA_WHERE, 3)
            for (t, p), o in sorted(self.offsets.items()):
                held = held | (
                    where.rlike(KAFKA_WHERE)
                    & (topic == F.lit(t))
                    & (partition == F.lit(str(p)))
                    & (offset.cast("bigint") < F.lit(o))
                )
        if self.files:
            path = F.when(where.rlike(FILE_WHERE), F.regexp_extract(where, FILE_WHERE, 1)).otherwise(where)
            held = held | path.isin(sorted(self.files))
        return bad.where(~held)
