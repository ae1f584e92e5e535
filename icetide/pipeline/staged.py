"""What a fast path gives back for a batch: the files it staged (`StagedBatch`), or the one signal
that it did not stage it (`Fallback`, with its reason).

Every pipeline stages a batch on a fast path (one Spark job of Python tasks that read, decode and
write the files) where it can, and otherwise on the Spark path (decode in Spark, write through
the sink). A fast path that cannot take a pipeline, a table or a batch returns a `Fallback`: its
reason, one FallbackReason (pipeline/batch_path.py), is the batch's `fallback` in its metrics line,
and its detail, the words that name the column, table or record, is logged and kept beside it as
`fallback_detail`. Both fast paths (pipeline/json_fast.py, pipeline/sync/fast_path.py) stage a
`StagedBatch`, which the runner of one table and of many commit table by table with `commit_table`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from icetide.errors import IcetideError, TransientError
from icetide.pipeline.batch_path import BatchPath, FallbackReason
from icetide.write.batch import BatchResult

if TYPE_CHECKING:
    from icetide.commit.committer import WrittenFile
    from icetide.decode.json.block import BadRecord
    from icetide.sink.sink import UpsertSink
    from icetide.sources.kafka_reader import OffsetRange

TABLES_NAMED = 3  # a failure's line names this many of the batch's tables, then counts the rest


@dataclass(frozen=True)
class Fallback:
    """Why a batch runs on the Spark path: one reason from a fixed list, and its detail in words."""

    reason: FallbackReason
    detail: str


@dataclass(frozen=True)
class StagedBatch:
    """What a fast path wrote for a batch, nothing committed: per table its files and counts."""

    files: dict[str, list[WrittenFile]]  # table -> its data and delete files
    bad: list[BadRecord]  # the dead letters of every table, none committed
    records_in: int
    read_decode_seconds: float
    write_seconds: float
    records: dict[str, int] = field(default_factory=dict)  # table -> its records (many tables)
    feeds: dict[str, set[str]] = field(default_factory=dict)  # table -> topics its events came from
    bad_counts: dict[str, int] = field(default_factory=dict)  # table -> its dead letters
    unknown_fields: dict[str, int] = field(default_factory=dict)  # fields that are no column -> records
    records_as_columns: int = 0  # records read a run at a time (decode/debezium/event_runs.py)
    nested_as_text: int = 0  # objects and arrays kept as JSON text in STRING columns (json: nested_as_text)
    task_timings: list[tuple[float, ...]] = field(default_factory=list)  # per task (JsonTaskResult.timings)
    created_tables: tuple[str, ...] = ()  # tables the batch made from its own messages (many tables)
    read_to: tuple[OffsetRange, ...] | None = None  # read ahead: the Kafka ranges read, past the plan's
    waited_seconds: float = 0.0  # read ahead: how long the tasks waited for records to arrive (the least of them)

    def commit_table(
        self, name: str, sink: UpsertSink, batch_id: int, position: Any, *, batch_path: BatchPath
    ) -> BatchResult:
        """Commit table `name`'s staged files (none: a metadata-only commit) with the batch id, the
        source position it holds after them and the fast path that wrote them."""
        files = self.files.get(name, [])
        committing = time.monotonic()
        outcome = sink.commit_files(batch_id, files, position, batch_path=batch_path)
        index = sink.committer.index_seconds()
        return BatchResult.of_files(
            batch_id,
            files,
            outcome,
            write_seconds=self.write_seconds,
            commit_seconds=time.monotonic() - committing - outcome.refresh_seconds,
            refresh_seconds=outcome.refresh_seconds,
            find_seconds=index.find,
            index_seconds=index.follow,
        )


@dataclass(frozen=True)
class NewTables:
    """The batch routes records to tables that do not exist yet: they are to be created from these
    (key, value) samples, table -> its first keyed messages, before the fast path runs it again."""

    samples: dict[str, list[tuple[bytes | None, bytes]]]

    def fallback(self) -> Fallback:
        """The batch for the Spark path, which creates them itself."""
        return Fallback(FallbackReason.NEW_TABLES, f"new tables: {', '.join(sorted(self.samples))}")


# Lost source ranges become dead letters on the Spark path, which records them.
DATA_LOSSES = Fallback(FallbackReason.DATA_LOSSES, "the batch has data losses (dead letters)")


def batch_place(pipeline: str, tables: Sequence[str]) -> str:
    """Where a batch failed, as its error line starts: the pipeline and the batch's tables (the
    first TABLES_NAMED of them, sorted), or the pipeline alone when they are not known."""
    if not tables:
        return f"pipeline {pipeline}"
    names = sorted(tables)
    shown = ", ".join(names[:TABLES_NAMED])
    if len(names) > TABLES_NAMED:
        shown += f" and {len(names) - TABLES_NAMED} more"
    return f"pipeline {pipeline}, table{'s' if len(names) > 1 else ''} {shown}"


@contextmanager
def failures_named(place: str) -> Iterator[None]:
    """A fast path's failed Spark job (an IcetideError, its trace already in the debug log) raised
    as one line that starts with `place` (see `batch_place`). A transient error, the source's that
    names its topic, is raised as it is: it keeps restarting the run."""
    try:
        yield
    except TransientError:
        raise
    except IcetideError as exc:  # the same class: a TerminalError (refused credentials) stays terminal
        raise type(exc)(f"{place}: {exc}") from exc
