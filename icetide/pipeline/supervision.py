"""Supervision of a run: transient failures restart it after a backoff, terminal ones end it.

Shared by the one-table runner (pipeline/table_runner.py) and the many-table sync (pipeline/sync/runner.py).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from icetide.config.pipeline import RestartConfig
from icetide.errors import is_transient, one_line

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RestartMetrics:
    """One restart after a transient failure, as printed in its JSON metrics line."""

    pipeline: str
    event: str  # always "restart": tells the line from a batch's
    attempt: int  # restarts in a row without a committed batch, this one included
    max_attempts: int
    error_type: str
    error: str
    backoff_seconds: float
    last_committed_batch: int | None
    at: str

    def to_json(self) -> str:
        """One line of JSON."""
        return json.dumps(asdict(self), sort_keys=True)


def supervise(
    run: Callable[[], None],
    *,
    pipeline: str,
    restart: RestartConfig,
    stop: threading.Event,
    committed: Callable[[], int],
    last_committed_batch: Callable[[], int | None],
    restarts: list[RestartMetrics],
    after_failure: Callable[[RestartMetrics], None],
    before_retry: Callable[[], object] | None = None,
) -> None:
    """Call `run` until it returns or `stop` is set during a backoff.

    A transient failure (errors.is_transient) restarts it after `restart`'s backoff, at most
    `restart.max_attempts` times in a row without progress (`committed()`, the batches committed
    so far, growing resets the count); anything else, and the last failure past the budget, is
    raised. Each restart is appended to `restarts` and handed to `after_failure` (metrics, closing
    connections) before the wait; `before_retry` runs after it.
    """
    attempt = 0
    while True:
        committed_before = committed()
        try:
            run()
            return
        except Exception as exc:
            if committed() > committed_before:
                attempt = 0  # the budget counts restarts in a row without progress
            if not is_transient(exc) or attempt >= restart.max_attempts or stop.is_set():
                raise
            attempt += 1
            event = RestartMetrics(
                pipeline=pipeline,
                event="restart",
                attempt=attempt,
                max_attempts=restart.max_attempts,
                error_type=type(exc).__name__,
                error=one_line(exc),
                backoff_seconds=restart.delay(attempt),
                last_committed_batch=_last_committed(last_committed_batch),
                at=datetime.now(UTC).isoformat(),
            )
            restarts.append(event)
            log.warning(
                "%s: %s; restart %d of %d in %.1fs",
                pipeline,
                event.error,
                attempt,
                restart.max_attempts,
                event.backoff_seconds,
            )
            log.debug("the failure that caused the restart", exc_info=True)
            after_failure(event)
            if stop.wait(event.backoff_seconds):
                return
            if before_retry is not None:
                before_retry()


def _last_committed(read: Callable[[], int | None]) -> int | None:
    try:
        return read()
    except Exception:
        log.debug("could not read the last committed batch for the restart line", exc_info=True)
        return None
