"""What a batch and a run report (one JSON metrics line per batch), the rules every path applies
at the end of a batch (its share of bad records, its metrics)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from icetide.errors import TooManyBadRecordsError
from icetide.faults import crash_point
from icetide.pipeline.batch_path import BatchPath, FallbackReason
from icetide.pipeline.supervision import RestartMetrics
from icetide.write.batch import BatchResult

log = logging.getLogger(__name__)


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
    path: BatchPath = BatchPath.SPARK  # how the batch ran (pipeline/batch_path.py)
    fallback: FallbackReason | None = None  # on a Spark path: why no fast path took it
    fallback_detail: str | None = None  # the fallback in words: which column, table or record
    overlapped: bool = False  # committed on the commit thread while the next batch was read and written
    columnar: bool = False  # some of its records were decoded a run at a time, as columns (records_as_columns)
    records_as_columns: int = (
        0  # records the fast path read a run at a time, as columns (decode/debezium/event_runs.py)
    )
    nested_as_text: int = 0  # objects and arrays in STRING columns kept as their JSON text (json: nested_as_text)
    commit_attempts: int = 0  # the most attempts a table's catalog commit took (more: lost races, failed calls)
    # deletes="vectors", within commit_seconds: finding the rows the batch replaces (its keys looked up
    # in the key index), and the index built or following other writers' commits
    find_seconds: float = 0.0
    index_seconds: float = 0.0

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


@dataclass(frozen=True)
class SyncBatchMetrics(BatchMetrics):
    """One batch of a pipeline of many tables: the totals, and rows written per table."""

    tables_committed: int = 0
    table_rows: dict[str, int] = field(default_factory=dict)  # table -> rows written, tables with rows only
    created_tables: tuple[str, ...] = ()


M = TypeVar("M", bound=BatchMetrics)


def check_bad_share(
    batch_id: int, bad_records: int, records_in: int, limit: float, first_error: Callable[[], str]
) -> None:
    """Raise TooManyBadRecordsError when more than `limit` of the batch's records are bad (before
    anything of it is committed); `first_error` names the first bad record's error."""
    if records_in and bad_records / records_in > limit:
        raise TooManyBadRecordsError(
            f"batch {batch_id}: {bad_records} of {records_in} records are bad, more than max_bad_fraction "
            f"{limit}; first error: {first_error()}"
        )


def commit_dead_letters(
    batch_id: int,
    *,
    bad_records: int,
    records_in: int,
    limit: float,
    first_error: Callable[[], str],
    write: Callable[[], bool],
    discard: Callable[[], object] | None = None,
) -> None:
    """The first step of every batch's commit, on every path: its share of bad records checked
    (over `limit`, nothing of it is committed and `discard` deletes the files it wrote), then its
    dead letters committed by `write` (False: it had none to commit), before any table."""
    try:
        check_bad_share(batch_id, bad_records, records_in, limit, first_error)
    except TooManyBadRecordsError:
        if discard is not None:
            discard()
        raise
    if write():
        crash_point("after_dead_letter", batch_id)


R = TypeVar("R")


def commit_tables(batch_id: int, commit: Callable[[], R]) -> R:
    """The second step of every batch's commit: its tables, after its dead letters. Every pipeline
    path has written all of the batch's files by now (a fast path's tasks, or the sinks' `stage`),
    so the `after_write` crash point fires here, once, before any table commits; `after_commit`
    once they have. (A caller of `UpsertSink.write` has the sink fire `after_write` itself.)"""
    crash_point("after_write", batch_id)
    result = commit()
    crash_point("after_commit", batch_id)
    return result


def warn_unknown_fields(batch_id: int, unknown_fields: Mapping[str, int]) -> None:
    """Say which fields the source sends that the tables lack (schema_evolution off: not written)."""
    if unknown_fields:
        log.warning(
            "batch %s: the table lacks field(s) the source sends, not written: %s",
            batch_id,
            ", ".join(f"{n} ({c} records)" for n, c in sorted(unknown_fields.items())),
        )


def batch_metrics(kind: type[M], pipeline: str, batch_id: int, results: Mapping[str, BatchResult], **batch: Any) -> M:
    """The metrics line (`kind`: BatchMetrics or SyncBatchMetrics) of a batch whose tables' commits
    returned `results`: the totals over its tables (the seconds of the slowest table), rounded, and
    the time it finished. `batch` gives what only the pipeline knows (records_in, bad_records,
    read_decode_seconds, source_lag, path, fallback, ...)."""
    values = list(results.values())

    def slowest(name: str) -> float:
        return round(max([getattr(r, name) for r in values] or [0.0]), 3)

    totals: dict[str, Any] = {
        "committed": any(r.committed for r in values),
        "rows_written": sum(r.rows_written for r in values),
        "delete_rows": sum(r.delete_rows for r in values),
        "data_files": sum(r.data_files for r in values),
        "delete_files": sum(r.delete_files for r in values),
        "bytes_written": sum(r.bytes_written for r in values),
        "commit_attempts": max([r.commit_attempts for r in values] or [0]),
        **{
            name: slowest(name)
            for name in (
                "write_seconds",
                "commit_seconds",
                "plan_seconds",
                "refresh_seconds",
                "find_seconds",
                "index_seconds",
            )
        },
    }
    if issubclass(kind, SyncBatchMetrics):
        totals["tables_committed"] = sum(1 for r in values if r.committed)
        totals["table_rows"] = {n: r.rows_written for n, r in sorted(results.items()) if r.rows_written}
    batch["read_decode_seconds"] = round(batch["read_decode_seconds"], 3)
    batch["columnar"] = batch.get("records_as_columns", 0) > 0
    if "unknown_fields" in batch:
        batch["unknown_fields"] = dict(sorted(batch["unknown_fields"].items()))
    return kind(pipeline=pipeline, batch_id=batch_id, finished_at=datetime.now(UTC).isoformat(), **totals, **batch)
