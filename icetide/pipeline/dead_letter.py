"""The dead-letter table: bad records with their payload, error, source position and time.

Two tables cannot share one atomic commit in most catalogs, so the dead letters of batch N are
committed first, by their own sink with the same pipeline id and batch id: a replay of batch N
after a crash finds them committed and adds nothing. The dead-letter commit also records the
batch's plan (what it read and the position after it); a replay reads exactly that plan, so the
bad records it finds are the ones already committed, even if the source has grown meanwhile.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from icetide.sink.batch import BatchResult
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
    """Appends a batch's bad records once, recording the batch's plan with them."""

    def __init__(self, spark: SparkSession, name: str, pipeline_id: str) -> None:
        create_table(spark, name, schema=DEAD_LETTER_SCHEMA, key=DEAD_LETTER_KEY)
        self.name = name
        self.pipeline_id = pipeline_id
        # Every record has a unique key (its source position), so INSERT needs no delete.
        self.sink = UpsertSink(
            spark, name, pipeline_id=pipeline_id, changelog=True, distribution="key", write_parallelism=1
        )

    def recorded_plan(self, batch_id: int) -> dict[str, Any] | None:
        """The plan committed with batch `batch_id`'s dead letters, if that batch got that far."""
        state = self.sink.last_committed()
        if state is None or state.batch_id != batch_id or not isinstance(state.source_position, dict):
            return None
        plan = state.source_position.get("plan")
        return plan if isinstance(plan, dict) else None

    def write(self, bad: DataFrame, *, batch_id: int, plan: dict[str, Any], source_position: Any = None) -> BatchResult:
        """Commit the batch's bad records (already counted non-empty by the caller).

        `source_position` replaces the recorded plan as the commit's position (a pipeline of
        many tables records its registry there, icetide.pipeline.sync_state)."""
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
        position = source_position if source_position is not None else {"plan": plan}
        return self.sink.write(rows, batch_id=batch_id, source_position=position)

    def remove_abandoned_files(self) -> int:
        """Delete files of dead-letter batches that never committed (after a crash)."""
        return self.sink.remove_abandoned_files()
