"""The dead letters of a one-table pipeline's batches, on either path.

Before a batch's data commits: the share of bad records is checked (`max_bad_fraction`), then
its bad records and the source ranges lost before it was read are committed to the dead-letter
table with the position they are committed up to, less what that table already holds from a
batch a crash interrupted (`Held`, planned in `held`). A pipeline without a dead-letter table
logs its bad records' count instead. The scheme is the one a pipeline of many tables keeps
(pipeline/dead_letter_table.py; docs/design.md, "Pipeline state").
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from icetide.commit.pipeline_state import PipelineState
from icetide.decode.frames import BAD_DDL
from icetide.decode.json.block import BadRecord
from icetide.pipeline.batches import commit_dead_letters
from icetide.pipeline.dead_letter_table import BadRow, DeadLetterTable
from icetide.pipeline.spark_path import PlannedBatch, SourceAdapter

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from icetide.config.pipeline import PipelineConfig

log = logging.getLogger(__name__)


def lost_rows(plan: PlannedBatch) -> list[tuple[None, str, str]]:
    """The dead-letter rows (BAD_DDL) of the source ranges lost before the batch read them, less
    those the dead-letter table holds already."""
    return [
        (None, loss["error"], loss["source_position"])
        for loss in plan.losses
        if not plan.held.holds(loss["source_position"])
    ]


class TableDeadLetters:
    """One pipeline's dead-letter table (None in `table` when it has none) and its last commit."""

    def __init__(self, spark: SparkSession, config: PipelineConfig, source: SourceAdapter) -> None:
        self.spark = spark
        self.config = config
        self.source = source
        self.table = DeadLetterTable(spark, config.dead_letter, config.pipeline) if config.dead_letter else None
        self.last: PipelineState | None = None  # the dead-letter table's last commit, as last read

    def read_last(self) -> int:
        """Read the dead-letter table's last commit again; its batch id (0: none)."""
        self.last = self.table.last_committed() if self.table is not None else None
        return self.last.batch_id if self.last is not None else 0

    def held(self, batch_id: int, plan: PlannedBatch) -> PlannedBatch:
        """`plan` with what of it the dead-letter table already holds (a batch read again after a
        crash between the dead-letter commit and the table's): never written twice."""
        if self.table is None:
            return plan
        held = self.source.held(self.last, plan, self.table.recorded)
        if not held:
            return plan
        log.info("batch %s reads again what a crash left behind; its dead letters are committed", batch_id)
        return dataclasses.replace(plan, held=held)

    def commit_frame(self, batch_id: int, plan: PlannedBatch, bad: DataFrame, bad_count: int, records_in: int) -> None:
        """The Spark path's bad records (BAD_DDL columns, `bad_count` of them), checked and committed."""

        def frame() -> DataFrame:
            rows = lost_rows(plan)
            return bad.unionByName(self.spark.createDataFrame(rows, BAD_DDL)) if rows else bad

        self._commit(batch_id, plan, bad_count, records_in, lambda: bad.first()["error"], frame)  # type: ignore[index]

    def commit_records(
        self, batch_id: int, plan: PlannedBatch, bad: list[BadRecord], records_in: int, discard: Callable[[], object]
    ) -> list[BadRecord]:
        """A fast path's bad records, less those held, checked and committed; the ones committed.
        `discard` deletes the batch's files when there are too many."""
        if plan.held:
            bad = [b for b in bad if not plan.held.holds(b.source_position)]

        def frame() -> list[BadRow]:
            return [(b.payload, b.error, b.source_position) for b in bad] + lost_rows(plan)

        self._commit(batch_id, plan, len(bad), records_in, lambda: bad[0].error, frame, discard)
        return bad

    def _commit(
        self,
        batch_id: int,
        plan: PlannedBatch,
        bad_count: int,
        records_in: int,
        first_error: Callable[[], str],
        frame: Callable[[], Any],
        discard: Callable[[], object] | None = None,
    ) -> None:
        """The batch's share of bad records checked, then its bad records and lost ranges (`frame()`,
        BAD_DDL rows) committed to the dead-letter table, if it has one (batches.commit_dead_letters)."""

        def write() -> bool:
            if self.table is None:
                if bad_count:
                    log.warning("batch %s: %d bad record(s) and no dead_letter table configured", batch_id, bad_count)
                return False
            if not bad_count and not lost_rows(plan):
                return False
            self._write(frame(), batch_id, plan)
            return True

        commit_dead_letters(
            batch_id,
            bad_records=bad_count,
            records_in=records_in,
            limit=self.config.max_bad_fraction,
            first_error=first_error,
            write=write,
            discard=discard,
        )

    def _write(self, bad: Any, batch_id: int, plan: PlannedBatch) -> None:
        """Commit the batch's bad records, with the position they are committed up to."""
        assert self.table is not None
        position = self.source.dead_letter_position(self.last, plan)
        result = self.table.write(bad, batch_id=batch_id, position=position)
        if result.committed:  # what it committed, without reading the table again
            self.last = PipelineState(self.config.pipeline, batch_id, position, datetime.now(UTC).isoformat())
        else:  # another writer's commit holds that batch id: the table says what is held
            self.last = self.table.last_committed()

    def remove_abandoned_files(self) -> int:
        """Delete the files of dead-letter batches that never committed; how many."""
        return self.table.remove_abandoned_files() if self.table is not None else 0
