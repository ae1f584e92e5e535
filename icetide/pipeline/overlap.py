"""Overlapped commits: a batch committing on the commit thread while the next one is read and
written, and the committed batches the run loop has not reported yet (docs/runner.md,
"Overlapped commits").

The run loop (pipeline/loop.py) owns one `CommitOverlap` per run and hands it to each step. A
step that staged its batch's files may `submit` the batch's commit and return; the next step
starts from that batch's position and, before it commits anything itself (or writes dead
letters), `finish`es it. A commit that failed raises there, and the files the next batch wrote
from a position that never committed are deleted (`discard`). A step that commits in place
`add`s its metrics.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from icetide.errors import CommitConflictError
from icetide.pipeline.batches import BatchMetrics

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class InFlight:
    """A batch committing on the commit thread."""

    batch_id: int
    position: dict[str, Any]  # where the batch leaves the source: the next plan starts here
    commit: Future[BatchMetrics]


class CommitOverlap:
    """At most one batch in flight, the commit thread, and the batches committed but not reported."""

    def __init__(self, pipeline: str) -> None:
        self.pipeline = pipeline
        self.flight: InFlight | None = None
        self._finished: list[BatchMetrics] = []
        self._pool: ThreadPoolExecutor | None = None

    def add(self, metrics: BatchMetrics) -> None:
        """A batch committed in place."""
        self._finished.append(metrics)

    def submit(self, batch_id: int, position: dict[str, Any], commit: Callable[[], BatchMetrics]) -> None:
        """Run `commit` on the commit thread; the batch is in flight until `finish`."""
        assert self.flight is None, "a batch is in flight already"
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="icetide-commit")
        self.flight = InFlight(batch_id, position, self._pool.submit(commit))

    def finish(self, *, discard: Callable[[], object] | None = None, quiet: bool = False) -> None:
        """Wait for the batch in flight to commit. If its commit failed, or another writer holds
        its batch id (the next plan is void), `discard` deletes what was written after it and the
        error is raised; `quiet` logs it instead (another error is already on its way out)."""
        flight, self.flight = self.flight, None
        if flight is None:
            return
        try:
            metrics = flight.commit.result()
            self._finished.append(metrics)
            if not metrics.committed:
                raise CommitConflictError(
                    f"batch {flight.batch_id} of {self.pipeline} was already committed by another writer; "
                    "planning again from the table"
                )
        except BaseException:
            if discard is not None:
                discard()
            if not quiet:
                raise
            log.debug("the commit of batch %s failed too", flight.batch_id, exc_info=True)

    def take_finished(self) -> list[BatchMetrics]:
        """The batches committed since the last call, oldest first."""
        done, self._finished = self._finished, []
        return done

    def close(self) -> None:
        """Let a batch in flight finish (quietly) and stop the commit thread."""
        self.finish(quiet=True)
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
