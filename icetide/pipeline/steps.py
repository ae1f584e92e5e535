"""One batch's steps, the same for a pipeline of one table (pipeline/table_runner.py) and of many
(pipeline/sync/runner.py): plan, stage on the fast path (or fall back to the Spark path, with the
reason), commit the dead letters, then the tables, in place or overlapped with the next batch.

`BatchPipeline.step` is the order of those steps, written once; what differs between one table
and many (where the position is kept, how a plan is made, which tables a batch commits) is in
the hooks each pipeline implements. The run loop (pipeline/loop.py) drives `step`.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from icetide.config.pipeline import PipelineConfig
from icetide.errors import SourceError
from icetide.pipeline.batches import BatchMetrics, RunSummary
from icetide.pipeline.loop import PipelineLoop
from icetide.pipeline.overlap import CommitOverlap, InFlight
from icetide.pipeline.staged import Fallback, StagedBatch
from icetide.pipeline.supervision import RestartMetrics

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from icetide.ops.prometheus import PipelineMetrics

Plan = TypeVar("Plan")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Timings:
    """Where a batch's time went before its commit."""

    started: float  # time.monotonic() when planning started
    plan_seconds: float  # planning (listing the source, resolving positions)
    read_seconds: float = 0.0  # planning to staged: read, decode and write (not the wait for a batch in flight)


class BatchPipeline(ABC, Generic[Plan]):
    """A pipeline's batches, step by step; its state (the tables' positions) is read from the
    tables it commits to."""

    config: PipelineConfig
    spark: SparkSession
    prometheus: PipelineMetrics | None

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._last_plan_full = False
        self.maintenance_runs: list[Any] = []
        self._partition_lag: dict[str, int] | None = None

    # -- the hooks ---------------------------------------------------------------------------

    @abstractmethod
    def plan_next(self, flight: InFlight | None) -> tuple[int, Plan]:
        """The next batch id and its plan: from where the tables stand, or from where the batch in
        flight leaves them once it commits."""

    @abstractmethod
    def plan_is_full(self, plan: Plan) -> bool:
        """Whether the plan reached the batch limit (more is waiting)."""

    @abstractmethod
    def plan_is_empty(self, batch_id: int, plan: Plan) -> bool:
        """Whether the plan reads nothing and records no lost range (nothing to commit)."""

    @abstractmethod
    def stage(self, batch_id: int, plan: Plan) -> StagedBatch | Fallback:
        """The batch's files for every table, written on the fast path, nothing committed; or why
        the batch runs on the Spark path."""

    def reads_ahead(self) -> bool:
        """Whether the next batch can read ahead of its trigger (`stage_ahead`)."""
        return False

    def stage_ahead(self, batch_id: int, plan: Plan, until: float) -> tuple[Plan, StagedBatch | Fallback] | None:
        """As `stage`, the tasks reading on past the plan until `until` (time.time() seconds): the
        plan extended to what they read, and the batch; None when the run was asked to stop
        first (nothing staged)."""
        raise NotImplementedError("this pipeline does not read ahead")

    @abstractmethod
    def discard(self, batch_id: int) -> None:
        """Delete whatever the batch wrote (the batch before it failed to commit)."""

    @abstractmethod
    def commit_dead_letters(self, batch_id: int, plan: Plan, staged: StagedBatch) -> StagedBatch:
        """Check the staged batch's share of bad records and commit those the dead-letter table
        does not hold yet, before any table; `staged` with only those."""

    @abstractmethod
    def overlap_position(self, batch_id: int, plan: Plan, staged: StagedBatch) -> dict[str, Any] | None:
        """Where the batch leaves the source, for the next plan to start from while it commits on
        the commit thread; None when it has nothing to overlap."""

    @abstractmethod
    def commit_staged(self, batch_id: int, plan: Plan, staged: StagedBatch, timings: Timings) -> BatchMetrics:
        """Commit the staged files of every table the batch feeds, each with its position; the
        batch's metrics."""

    @abstractmethod
    def run_spark_path(self, batch_id: int, plan: Plan, timings: Timings, fallback: Fallback) -> BatchMetrics:
        """Read, decode, dead-letter, write and commit the batch in Spark; its metrics."""

    @abstractmethod
    def remove_abandoned_files(self) -> int:
        """Delete the files of batches that never committed; how many. Only while holding the pipeline."""

    @abstractmethod
    def reload(self) -> None:
        """Read again, from the tables, where the pipeline stands (before a restart)."""

    @abstractmethod
    def close(self) -> None:
        """Release the source's connections."""

    @abstractmethod
    def last_committed_batch(self) -> int | None:
        """The pipeline's last committed batch id, from the tables."""

    @abstractmethod
    def last_committed_at(self) -> str | None:
        """When the pipeline last committed (ISO time), if it ever did."""

    @abstractmethod
    def maintained_tables(self) -> list[str]:
        """The tables maintenance keeps (they may grow as topics appear)."""

    @abstractmethod
    def observe(self, metrics: BatchMetrics) -> None:
        """A committed batch into the pipeline's own series (beyond what the loop records)."""

    # -- the steps ---------------------------------------------------------------------------

    def step(self, commits: CommitOverlap, *, overlap: bool, until: float | None = None) -> bool:
        """Plan, stage and commit one batch. It commits here, or, with `overlap`, on the fast path
        while a backlog drains, on the commit thread while the next step plans from where this
        batch leaves the source, reads and writes (pipeline/overlap.py). Batches whose commit
        finished are queued in `commits`: the one that was in flight first, then this one.

        With `until` (the next trigger time), a pipeline that can read ahead stages the records
        arriving until then too, so only the commit follows the trigger; True when it did (the
        loop then starts the next batch at once).

        A batch in flight always finishes before the next one writes dead letters, runs on the
        Spark path or commits, and before any error leaves this method: its commit never races
        the restart's cleanup."""
        try:
            started = time.monotonic()
            batch_id, plan = self.plan_next(commits.flight)
            timings = Timings(started, round(time.monotonic() - started, 3))
            ahead = until is not None and self.reads_ahead()
            self._last_plan_full = self.plan_is_full(plan)
            if not ahead and self.plan_is_empty(batch_id, plan):
                commits.finish()
                return False
            staged: StagedBatch | Fallback
            if until is not None and ahead:
                out = self.stage_ahead(batch_id, plan, until)
                if out is None:  # asked to stop while reading ahead
                    commits.finish()
                    return True
                plan, staged = out
                self._last_plan_full = self.plan_is_full(plan)
                if self.plan_is_empty(batch_id, plan):  # nothing arrived before the trigger
                    commits.finish()
                    return True
            else:
                staged = self.stage(batch_id, plan)
            if isinstance(staged, Fallback):
                commits.finish()
                commits.add(self.run_spark_path(batch_id, plan, timings, staged))
                return ahead
            timings = Timings(started, timings.plan_seconds, time.monotonic() - started)
            commits.finish(discard=lambda: self.discard(batch_id))
            staged = self.commit_dead_letters(batch_id, plan, staged)
            due = overlap and self._last_plan_full and not self.config.maintenance_due(batch_id)
            position = self.overlap_position(batch_id, plan, staged) if due else None
            if position is not None:

                def commit_overlapped() -> BatchMetrics:
                    metrics = self.commit_staged(batch_id, plan, staged, timings)
                    return dataclasses.replace(metrics, overlapped=True)

                commits.submit(batch_id, position, commit_overlapped)
            else:
                commits.add(self.commit_staged(batch_id, plan, staged, timings))
            return ahead
        except BaseException:
            commits.finish(quiet=True)
            raise

    def run_batch(self) -> BatchMetrics | None:
        """Run one batch and commit it; None when the source had nothing new."""
        commits = CommitOverlap(self.config.pipeline)
        self.step(commits, overlap=False)
        done = commits.take_finished()
        return done[-1] if done else None

    def stop(self) -> None:
        """Ask the run to stop after the batch in flight (which commits or is abandoned cleanly)."""
        self._stop.set()

    def run(
        self,
        *,
        once: bool = False,
        on_batch: Callable[[BatchMetrics], None] | None = None,
        on_restart: Callable[[RestartMetrics], None] | None = None,
        handle_signals: bool = True,
    ) -> RunSummary:
        """Run batches every trigger interval until stopped; with `once`, until the source is drained.

        `once` stops after the first batch smaller than its limit (max_records or max_files): the
        source held no more than that when the batch was planned, so what was available when the
        run started has been processed even if producers keep writing.

        Only one runner holds a pipeline at a time (icetide.ops.runner_lock); a second one
        raises PipelineAlreadyRunningError before touching anything.

        Transient failures (TransientError: commit conflicts past the retry budget, source
        errors, an unknown commit state) restart the run from what the tables hold after a
        backoff (`restart` in the pipeline file), each restart reported to `on_restart`;
        terminal ones are raised at once, as is the last error once the restart budget is spent.

        SIGINT/SIGTERM stop the run after the batch in flight; a second signal aborts at once.
        """
        loop = PipelineLoop(self, self._stop)
        return loop.run(once=once, on_batch=on_batch, on_restart=on_restart, handle_signals=handle_signals)

    def last_plan_full(self) -> bool:
        """Whether the last plan reached the source's batch limit."""
        return self._last_plan_full

    def measure_lag(self, by_partition: Callable[[], dict[str, int]]) -> int:
        """Records the source holds beyond where the tables stand (-1 when it cannot say); per
        `topic/partition` kept for the Prometheus series."""
        try:
            self._partition_lag = by_partition()
            return sum(self._partition_lag.values())
        except (SourceError, OSError):
            log.debug("could not measure source lag", exc_info=True)
            return -1
