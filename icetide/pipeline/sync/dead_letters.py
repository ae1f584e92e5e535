"""The dead letters of a pipeline of many tables (pipeline/sync/runner.py): one dead-letter table for the
bad records of every table, committed before any table of the batch, with the pipeline's registry
of tables and the dead-letter position (the one-table pipeline's: pipeline/table_dead_letters.py).
A batch read again after a crash between that commit and the tables' leaves out the bad records
the position says are held, so each is written once."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from icetide.config.pipeline import PipelineConfig
from icetide.pipeline.batches import commit_dead_letters
from icetide.pipeline.dead_letter_table import BadRow, DeadLetterTable, Held
from icetide.pipeline.sync.state import SyncState, advance

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from icetide.sources.kafka_topics import TopicsPlan


class SyncDeadLetters:
    """The dead-letter table of a pipeline of many tables, and how a batch commits to it."""

    def __init__(self, spark: SparkSession, config: PipelineConfig) -> None:
        assert config.dead_letter is not None  # checked at load
        self.config = config
        self.table = DeadLetterTable(spark, config.dead_letter, config.pipeline)

    def write(
        self, state: SyncState, bad: DataFrame | Sequence[BadRow] | None, plan: TopicsPlan, batch_id: int
    ) -> None:
        """Commit the batch's bad records (a frame, or a fast path's rows; None: there are none, a
        metadata-only commit) with the
        registry and the dead-letter position of `state`, which it moves on. The position never goes
        back, but on a partition found reset that the dead-letter table has not recorded yet (a new log)."""
        resets = [loss for loss in plan.losses if loss.to_offset is None]
        recorded = self.table.recorded([loss.where() for loss in resets]) if resets else set()
        reset = {(loss.topic, str(loss.partition)) for loss in resets if loss.where() not in recorded}
        position = advance(state.dead_letter_position, plan.ends, reset=reset)
        registry = state.registry()
        if bad is None:
            self.table.sink.commit_files(batch_id, [], position, registry=registry)
        else:
            self.table.write(bad, batch_id=batch_id, position=position, registry=registry)
        state.dead_letter_position = position
        state.dead_letter_batch = batch_id

    def commit(
        self,
        state: SyncState,
        batch_id: int,
        plan: TopicsPlan,
        bad_count: int,
        records_in: int,
        first_error: Callable[[], str],
        frame: Callable[[], DataFrame | Sequence[BadRow] | None],
        register: Callable[[], bool],
        discard: Callable[[], object] | None = None,
    ) -> None:
        """The batch's share of bad records checked, then its tables registered (`register()`: whether
        the registry changed) and the dead-letter table committed, before any table, when the batch
        has bad records (`frame()`), changes the registry or reads a topic no table is fed by yet
        (batches.commit_dead_letters); with whole transactions, every batch."""

        def write() -> bool:
            registry_changed = register()
            fed = {t for s in state.tables.values() for t in s.topics()}
            every_batch = state.whole_transactions  # its position holds the batch's ends (sync/transactions.py)
            if not (every_batch or bad_count or plan.losses or registry_changed or (plan.topics_read() - fed)):
                return False
            self.write(state, frame() if bad_count else None, plan, batch_id)
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

    def held(self, state: SyncState, plan: TopicsPlan) -> Held:
        """The batch's bad records the dead-letter table already holds (a batch read again after a
        crash between the dead-letter commit and the tables'): never written twice."""
        lost = [loss.where() for loss in plan.losses]
        return Held.kafka(state.dead_letter_position, plan.starts, lost, self.table.recorded)
