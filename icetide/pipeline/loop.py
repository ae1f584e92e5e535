"""The run loop every pipeline shares: the runner lock, signals, supervision, triggers, overlapped
commits and maintenance, in one place.

A batch's steps, in their order, are pipeline/steps.py's `BatchPipeline.step`; what differs
between a pipeline of one table (pipeline/table_runner.py) and one of many (pipeline/sync/runner.py) is in its
hooks. The loop sees a pipeline through `BatchSteps`.
The loop decides when the next batch runs, holds the batch committing while the next one is
written (pipeline/overlap.py), reports each committed batch (the run's summary, Prometheus, the
metrics line, `on_batch`), runs maintenance between batches or on its thread, and restarts the
steps after a transient failure from what the tables hold.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from icetide.config.pipeline import PipelineConfig
from icetide.ops.prometheus import PipelineMetrics
from icetide.ops.runner_lock import RunnerLock, lock_config
from icetide.ops.stop_signals import StopSignals
from icetide.pipeline.batches import BatchMetrics, RunSummary
from icetide.pipeline.maintenance_thread import MaintenanceThread, log_failed_pass, maintenance_policy
from icetide.pipeline.overlap import CommitOverlap
from icetide.pipeline.supervision import RestartMetrics, supervise

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


class BatchSteps(Protocol):
    """One pipeline's batches, as the loop drives them."""

    config: PipelineConfig
    spark: SparkSession
    maintenance_runs: list[Any]
    prometheus: PipelineMetrics | None

    def step(self, commits: CommitOverlap, *, overlap: bool, until: float | None = None) -> bool:
        """Plan, stage and commit the next batch, its metrics added to `commits` (or, with
        `overlap`, leave it committing there while the next one is written); with `until`, read
        ahead until then where the pipeline can (True when it did)."""

    def last_plan_full(self) -> bool:
        """Whether the last plan reached the batch limit (more is waiting)."""

    def remove_abandoned_files(self) -> int:
        """Delete the files of batches that never committed; how many. Only while holding the pipeline."""

    def reload(self) -> None:
        """Read again, from the tables, where the pipeline stands (before a restart)."""

    def close(self) -> None:
        """Release the source's connections."""

    def last_committed_batch(self) -> int | None:
        """The pipeline's last committed batch id, from the tables."""

    def last_committed_at(self) -> str | None:
        """When the pipeline last committed (ISO time), if it ever did."""

    def maintained_tables(self) -> list[str]:
        """The tables maintenance keeps (they may grow as topics appear)."""

    def observe(self, metrics: BatchMetrics) -> None:
        """A committed batch into the pipeline's own series (beyond what the loop records)."""


class PipelineLoop:
    """Runs `steps` every trigger interval until stopped (with `once`, until the source is drained)."""

    def __init__(self, steps: BatchSteps, stop: threading.Event) -> None:
        self.steps = steps
        self.config = steps.config
        self._stop = stop
        self._maintenance_cursor = 0
        self._maintenance_settled: dict[str, int] = {}  # maintain_tables skips these until they change

    def run(
        self,
        *,
        once: bool = False,
        on_batch: Callable[[BatchMetrics], None] | None = None,
        on_restart: Callable[[RestartMetrics], None] | None = None,
        handle_signals: bool = True,
    ) -> RunSummary:
        """Run batches until stopped; see Runner.run for the guarantees."""
        steps, summary = self.steps, RunSummary()
        lock = RunnerLock(lock_config(self.config))
        lock.acquire(steps.spark)
        in_flight = "the batch in flight"
        if self.config.trigger.read_ahead and not once:  # a batch reading ahead commits nothing
            in_flight += " (a batch still reading ahead of its trigger is abandoned; the next run reads it)"
        signals = StopSignals(self._stop, in_flight)
        commits = CommitOverlap(self.config.pipeline)
        maintenance: MaintenanceThread | None = None
        prometheus = steps.prometheus

        def after_failure(event: RestartMetrics) -> None:
            if prometheus is not None:
                prometheus.record_restart()
            if on_restart is not None:
                on_restart(event)
            commits.finish(quiet=True)  # a failure outside a step (lock renewal, on_batch) may leave one
            steps.close()  # a fresh connection after the wait

        try:
            if handle_signals:
                signals.install()
            if prometheus is not None:
                prometheus.committed_before(steps.last_committed_at())
            count_maintenance = prometheus.count_maintenance(steps.maintenance_runs) if prometheus else None
            maintenance = self._start_maintenance_thread()
            supervise(
                lambda: self._run_batches(summary, lock, commits, once, on_batch, count_maintenance),
                pipeline=self.config.pipeline,
                restart=self.config.restart,
                stop=self._stop,
                committed=lambda: len(summary.batches),
                last_committed_batch=steps.last_committed_batch,
                restarts=summary.restarts,
                after_failure=after_failure,
                before_retry=steps.reload,
            )
            summary.stopped_by_signal = self._stop.is_set() and not once
        finally:
            try:
                commits.close()
                steps.close()
                if maintenance is not None:
                    maintenance.stop()
            finally:
                signals.restore()
                lock.release()
        return summary

    def _run_batches(
        self,
        summary: RunSummary,
        lock: RunnerLock,
        commits: CommitOverlap,
        once: bool,
        on_batch: Callable[[BatchMetrics], None] | None,
        count_maintenance: Callable[[], None] | None,
    ) -> None:
        """Start-up cleanup, then batches until stopped (or drained, with `once`)."""
        steps = self.steps
        # Safe only because this process holds the pipeline: another runner's in-flight files
        # would look exactly like a crashed run's.
        summary.abandoned_files_removed += steps.remove_abandoned_files()
        trigger = self.config.trigger
        overlap, reads_ahead = trigger.overlap_commit, trigger.read_ahead and not once
        next_trigger = time.time() + trigger.interval
        while not self._stop.is_set():
            started = time.monotonic()
            lock.renew()
            # Trigger times on a fixed grid, as Flink's checkpoints: a batch that reads ahead reads
            # until the next one, however long the commit before it took (docs/runner.md, "Reading ahead").
            while next_trigger <= time.time():
                next_trigger += trigger.interval
            try:
                paced = steps.step(commits, overlap=overlap, until=next_trigger if reads_ahead else None)
            finally:  # batches that committed before an error are reported too
                done = commits.take_finished()
                for metrics in done:
                    self._report(metrics, summary, on_batch)
                if count_maintenance is not None:
                    count_maintenance()  # the thread's runs too, between batches or not
            if commits.flight is not None:
                continue  # a backlog: the next batch is written while this one commits
            if paced:
                continue  # it read until its trigger time: the next batch reads until the next one
            if once and (not done or not steps.last_plan_full()):
                break  # a batch smaller than the limit drained what was there when it was planned
            if once or (done and steps.last_plan_full()):
                continue  # a backlog beyond one batch's limit: the next batch right away
            # Otherwise one batch per interval, from this one's start (Spark's processing-time
            # trigger, Flink's checkpoint interval): a steady stream commits once an interval,
            # however few records arrived while this batch ran (docs/runner.md, "Cadence").
            self._stop.wait(max(0.0, self.config.trigger.interval - (time.monotonic() - started)))
        commits.finish()  # stopped with a batch in flight: it commits before the run ends
        for metrics in commits.take_finished():
            self._report(metrics, summary, on_batch)

    def _report(
        self, metrics: BatchMetrics, summary: RunSummary, on_batch: Callable[[BatchMetrics], None] | None
    ) -> None:
        """A committed batch: in the summary, maintenance if due, Prometheus, the log, `on_batch`."""
        summary.batches.append(metrics)
        self._maybe_maintain(metrics.batch_id)
        self.steps.observe(metrics)
        log.info("batch %s committed: %s", metrics.batch_id, metrics.to_json())
        if on_batch is not None:
            on_batch(metrics)

    def _maybe_maintain(self, batch_id: int) -> None:
        """Every `maintenance.every_batches`: one pass over the pipeline's tables within its time
        budget, in the pipeline's own Spark application. It never fails the pipeline: its commits
        are validated against the stream's, and an error is logged, not raised."""
        settings = self.config.maintenance
        if settings is None or not self.config.maintenance_due(batch_id):
            return
        from icetide.maintenance.maintain import maintain_tables

        try:
            passed = maintain_tables(
                self.steps.spark,
                self.steps.maintained_tables(),
                maintenance_policy(settings),
                start=self._maintenance_cursor,
                keep_going=True,
                settled=self._maintenance_settled,
            )
            self._maintenance_cursor = passed.next_start
            self.steps.maintenance_runs.extend(passed.reports)
        except Exception as exc:
            log_failed_pass(f"{self.config.pipeline}'s tables", exc)

    def _start_maintenance_thread(self) -> MaintenanceThread | None:
        """With `maintenance: {every: ...}`, maintenance on its own thread for this run; else None."""
        settings = self.config.maintenance
        if settings is None or settings.every_seconds is None:
            return None
        tables = self.steps.maintained_tables()
        one = len(tables) == 1 and not self.config.routes_tables
        return MaintenanceThread(
            self.steps.spark,
            self.steps.maintained_tables,
            maintenance_policy(settings),
            settings.every_seconds,
            reports=self.steps.maintenance_runs,
            name=tables[0] if one else f"{self.config.pipeline}'s tables",
        ).start()
