"""What a batch and a run report (one JSON metrics line per batch), and the runners' stop signals."""

from __future__ import annotations

import json
import logging
import signal
import threading
from dataclasses import asdict, dataclass, field
from types import FrameType
from typing import Any

from icetide.errors import TerminalError
from icetide.pipeline.supervision import RestartMetrics

log = logging.getLogger(__name__)


class TooManyBadRecordsError(TerminalError):
    """A batch's share of bad records exceeded max_bad_fraction; nothing of it was committed."""


@dataclass(frozen=True)
class BatchMetrics:
    """One batch of a run, as printed in its JSON metrics line."""

    pipeline: str
    batch_id: int
    committed: bool
    records_in: int
    rows_written: int
    delete_rows: int
    bad_records: int
    data_files: int
    delete_files: int
    bytes_written: int
    read_decode_seconds: float
    write_seconds: float
    commit_seconds: float
    source_lag: int
    finished_at: str
    truncated: bool = False  # a source TRUNCATE removed every row committed before this batch
    unknown_fields: dict[str, int] = field(default_factory=dict)  # fields the table lacks -> records
    lost_ranges: int = 0  # source ranges lost before being read, recorded in the dead-letter table
    plan_seconds: float = 0.0  # the sink's preparation and distribution plan (its statistics job)
    refresh_seconds: float = 0.0  # reading the table's committed state (before writing, before committing)
    source_plan_seconds: float = 0.0  # planning the batch: the table's committed position, then the source's plan
    path: str = "spark"  # "fast": staged by one Spark job of Python tasks; else "spark: <why>" (pipeline/staging.py)
    records_as_columns: int = 0  # records the fast path read a run at a time, as columns (Avro: decode/avro_runs.py)

    def to_json(self) -> str:
        """One line of JSON."""
        return json.dumps(asdict(self), sort_keys=True)


@dataclass
class RunSummary:
    """What a run did."""

    batches: list[BatchMetrics] = field(default_factory=list)
    abandoned_files_removed: int = 0
    stopped_by_signal: bool = False
    restarts: list[RestartMetrics] = field(default_factory=list)

    @property
    def rows_written(self) -> int:
        """Rows written by all the run's batches."""
        return sum(b.rows_written for b in self.batches)


def install_stop_signals(stop: threading.Event) -> dict[int, Any]:
    """SIGINT and SIGTERM set `stop` (the batch in flight finishes); a second one interrupts.
    Returns the previous handlers; nothing is installed outside the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def handler(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        log.warning("signal %s: stopping after the batch in flight", signal.Signals(signum).name)
        stop.set()

    previous: dict[int, Any] = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.getsignal(sig)
        signal.signal(sig, handler)
    return previous


@dataclass(frozen=True)
class SyncBatchMetrics(BatchMetrics):
    """One batch of a pipeline of many tables: the totals, and rows written per table."""

    tables_committed: int = 0
    table_rows: dict[str, int] = field(default_factory=dict)  # table -> rows written, tables with rows only
    created_tables: tuple[str, ...] = ()
