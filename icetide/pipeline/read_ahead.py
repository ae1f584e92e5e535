"""Reading ahead of the trigger, on the driver: the batch's Spark job runs its tasks past the plan
until the trigger time, and is cancelled when the run is asked to stop first (docs/runner.md,
"Reading ahead"). The tasks' side is executor/kafka_ahead.py."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from icetide.pipeline.staged import StagedBatch
from icetide.sources.kafka_reader import OffsetRange

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

T = TypeVar("T")

# setJobGroup's three local properties: cleared after the job, so the batch's later jobs (its
# commit's) carry no read-ahead description or interrupt flag
_JOB_GROUP_PROPERTIES = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")


@dataclass(frozen=True)
class AheadOfTrigger:
    """A batch read ahead: until `until` (time.time() seconds), unless `stop` is set first."""

    until: float
    stop: threading.Event

    @staticmethod
    def planned(items: Iterable[Any]) -> int:
        return sum(r.count for r in items if isinstance(r, OffsetRange))

    def wait_empty(self) -> StagedBatch:
        """A batch with nothing to read (no partition yet): the trigger time awaited, as a batch
        reading ahead would (unless the run is asked to stop first), and nothing staged."""
        self.stop.wait(max(0.0, self.until - time.time()))
        return StagedBatch(files={}, bad=[], records_in=0, read_decode_seconds=0.0, write_seconds=0.0)

    @staticmethod
    def spare(max_records: int, planned: int, tasks: int) -> int:
        """Each of `tasks` tasks' share of what the batch may read beyond its `planned` records."""
        return max(0, max_records - planned) // max(1, tasks)


class ReadAheadStopped(Exception):  # a signal the runner catches, no error a user sees
    """The run was asked to stop while a batch read ahead: its job was cancelled, nothing committed."""


def collect_ahead(
    spark: SparkSession,
    groups: list[Any],
    run: Callable[[Iterable[Any]], Iterable[T]],
    description: str,
    ahead: AheadOfTrigger,
) -> list[T]:
    """The results of one task per group (`run` over `(index, group)` items), in a Spark job
    group cancelled when `ahead.stop` is set: reading ahead would otherwise hold the stop until
    the trigger time."""
    sc = spark.sparkContext
    rdd = sc.parallelize(list(enumerate(groups)), max(1, len(groups)))
    group = f"icetide-read-ahead-{uuid.uuid4().hex[:12]}"
    sc.setJobGroup(group, f"icetide: {description}, reading ahead of the trigger", interruptOnCancel=True)
    done = threading.Event()

    def cancel_on_stop() -> None:
        while not done.is_set():
            if ahead.stop.wait(0.1):
                sc.cancelJobGroup(group)
                return

    watcher = threading.Thread(target=cancel_on_stop, name="icetide-read-ahead-stop", daemon=True)
    watcher.start()
    try:
        return rdd.mapPartitions(run).collect()
    finally:
        done.set()
        watcher.join()
        for key in _JOB_GROUP_PROPERTIES:
            sc.setLocalProperty(key, None)  # type: ignore[arg-type]
