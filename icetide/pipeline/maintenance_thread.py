"""Maintenance on a schedule, on a thread of the pipeline's own Spark application.

The runner (and the sync runner, for all of its tables) starts a `MaintenanceThread` unless the
pipeline config says `maintenance: off` or `{every_batches: N}` (without a block: every 10s; with
`{every: 5m}`: every 5 minutes) and stops it when the run ends (`--once` drained, SIGINT/SIGTERM,
an error). A table a pass left unchanged is skipped until something commits to it. Batches keep
committing meanwhile; what keeps the two apart is Iceberg's validation, not a lock: compaction
commits with the starting sequence number and skips a conflicting group, a delete conversion
that conflicts lands nothing, and the stream's commit retries a lost race. A run that fails is
logged and the thread goes on; it never fails the stream, and a table that fails never keeps the
others from their turn.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from icetide.config.pipeline import MaintenanceConfig
from icetide.errors import one_line
from icetide.maintenance.maintain import MaintenancePolicy, MaintenanceReport, maintain_tables

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

THREAD_NAME = "icetide-maintenance"
DEFAULT_STOP_TIMEOUT = 600.0  # a run in flight finishes its compaction group, then returns


def log_failed_pass(what: str, exc: BaseException) -> None:
    """A maintenance pass beside a pipeline failed: one WARNING line naming the cause (the stack
    trace, Java's included, at DEBUG); the pipeline goes on."""
    log.warning("maintenance of %s failed (%s); the pipeline goes on", what, one_line(exc))
    log.debug("the maintenance failure", exc_info=exc)


def maintenance_policy(config: MaintenanceConfig) -> MaintenancePolicy:
    """The maintenance policy a pipeline's `maintenance:` block asks for."""
    return MaintenancePolicy(
        time_budget_seconds=config.time_budget_seconds,
        fold_deletes=config.fold_deletes,
        vector_deleted_share=config.vector_deleted_share,
        vector_file_rows=config.vector_file_rows,
    )


class MaintenanceThread:
    """Runs `maintain` every `every_seconds` on a daemon thread until `stop()`.

    `tables` is one table, or a function returning the tables to keep (a sync pipeline's, which
    grow as topics appear): each run is one pass over them within the policy's time budget, and
    the next run starts where that pass stopped (maintenance.maintain_tables). The first run
    starts `every_seconds` after `start()`. Reports are appended to `reports` (a list the caller
    may share, such as `Runner.maintenance_runs`) and logged.
    """

    def __init__(
        self,
        spark: SparkSession,
        tables: str | Callable[[], list[str]],
        policy: MaintenancePolicy,
        every_seconds: float,
        *,
        reports: list[MaintenanceReport] | None = None,
        name: str | None = None,
    ) -> None:
        self.spark = spark
        self.tables: Callable[[], list[str]] = (lambda: [tables]) if isinstance(tables, str) else tables
        self.table = name or (tables if isinstance(tables, str) else "the pipeline's tables")
        self.policy = policy
        self.every_seconds = every_seconds
        self.reports: list[MaintenanceReport] = reports if reports is not None else []
        self.failures = 0
        self._next_start = 0
        self._settled: dict[str, int] = {}  # table -> the snapshot a pass left as it was (skipped until a commit)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=THREAD_NAME, daemon=True)

    @property
    def running(self) -> bool:
        """Is the thread alive?"""
        return self._thread.is_alive()

    def start(self) -> MaintenanceThread:
        """Start the schedule; returns self."""
        self._thread.start()
        log.info("maintenance of %s on a thread, every %.0fs", self.table, self.every_seconds)
        return self

    def stop(self, timeout: float | None = DEFAULT_STOP_TIMEOUT) -> bool:
        """Ask the thread to stop and wait for it: a run in flight commits nothing after the
        group it is on. Returns whether the thread ended within `timeout`."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning(
                "maintenance of %s still running after %ss; leaving it to end with the process", self.table, timeout
            )
            return False
        return True

    def _loop(self) -> None:
        self.spark.sparkContext.setJobDescription(f"icetide maintenance of {self.table}")
        while not self._stop.wait(self.every_seconds):
            try:
                passed = maintain_tables(
                    self.spark,
                    self.tables(),
                    self.policy,
                    start=self._next_start,
                    stop=self._stop.is_set,
                    keep_going=True,
                    settled=self._settled,
                )
            except Exception as exc:
                self.failures += 1
                log_failed_pass(self.table, exc)
                continue
            self._next_start = passed.next_start
            self.failures += len(passed.failed)
            for report in passed.reports:
                self.reports.append(report)
                log.log(
                    logging.DEBUG if report.did_nothing else logging.INFO,
                    "maintenance of %s (thread) in %.1fs: %s",
                    report.table,
                    report.seconds,
                    "; ".join(report.lines()),
                )
            if passed.not_reached:
                log.info("maintenance: %d table(s) wait for the next run (time budget)", len(passed.not_reached))
