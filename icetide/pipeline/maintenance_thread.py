"""Maintenance on a schedule, on a thread of the pipeline's own Spark application.

The runner starts a `MaintenanceThread` when the pipeline config says `maintenance: {every: 5m}`
and stops it when the run ends (`--once` drained, SIGINT/SIGTERM, an error). Batches keep
committing meanwhile; what keeps the two apart is Iceberg's validation, not a lock:
compaction commits with the starting sequence number and skips a conflicting group, a delete
conversion that conflicts lands nothing, and the stream's commit retries a lost race. A run
that fails is logged and the thread goes on; it never fails the stream.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from icetide.config import MaintenanceConfig
from icetide.maintenance.maintain import MaintenancePolicy, MaintenanceReport, maintain

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

THREAD_NAME = "icetide-maintenance"
DEFAULT_STOP_TIMEOUT = 600.0  # a run in flight finishes its compaction group, then returns


def maintenance_policy(config: MaintenanceConfig) -> MaintenancePolicy:
    """The maintenance policy a pipeline's `maintenance:` block asks for."""
    return MaintenancePolicy(time_budget_seconds=config.time_budget_seconds, fold_deletes=config.fold_deletes)


class MaintenanceThread:
    """Runs `maintain` every `every_seconds` on a daemon thread until `stop()`.

    The first run starts `every_seconds` after `start()`. Reports are appended to `reports`
    (a list the caller may share, such as `Runner.maintenance_runs`) and logged.
    """

    def __init__(
        self,
        spark: SparkSession,
        table: str,
        policy: MaintenancePolicy,
        every_seconds: float,
        *,
        reports: list[MaintenanceReport] | None = None,
    ) -> None:
        self.spark = spark
        self.table = table
        self.policy = policy
        self.every_seconds = every_seconds
        self.reports: list[MaintenanceReport] = reports if reports is not None else []
        self.failures = 0
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
                report = maintain(self.spark, self.table, self.policy, stop=self._stop.is_set)
            except Exception:
                self.failures += 1
                log.warning("maintenance of %s failed; the pipeline goes on", self.table, exc_info=True)
                continue
            self.reports.append(report)
            log.info("maintenance of %s (thread) in %.1fs: %s", self.table, report.seconds, "; ".join(report.lines()))
