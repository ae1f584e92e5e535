"""supervise(): the restart loop both runners share (pipeline/supervision.py), without Spark."""

from __future__ import annotations

import threading

import pytest

from icetide.config.pipeline import RestartConfig
from icetide.errors import CommitConflictError, ConfigError, SourceError
from icetide.pipeline.supervision import RestartMetrics, supervise


class Script:
    """A run that fails as scripted: each step commits `n` batches, then raises its error (or returns)."""

    def __init__(self, steps: list[tuple[int, Exception | None]]) -> None:
        self.steps = list(steps)
        self.committed = 0
        self.calls = 0
        self.failures: list[RestartMetrics] = []
        self.retries = 0

    def run(self) -> None:
        self.calls += 1
        commits, error = self.steps.pop(0)
        self.committed += commits
        if error is not None:
            raise error

    def supervise(self, restart: RestartConfig, stop: threading.Event | None = None) -> list[RestartMetrics]:
        restarts: list[RestartMetrics] = []
        supervise(
            self.run,
            pipeline="p",
            restart=restart,
            stop=stop or threading.Event(),
            committed=lambda: self.committed,
            last_committed_batch=lambda: self.committed or None,
            restarts=restarts,
            after_failure=self.failures.append,
            before_retry=self._retry,
        )
        return restarts

    def _retry(self) -> None:
        self.retries += 1


FAST = RestartConfig(max_attempts=2, backoff=0.001, max_backoff=0.004)


def test_transient_failures_restart_with_a_growing_backoff_until_the_run_returns() -> None:
    script = Script([(0, SourceError("broker down")), (0, CommitConflictError("conflict")), (3, None)])
    restarts = script.supervise(FAST)
    assert script.calls == 3 and script.retries == 2 and script.failures == restarts
    assert [(r.attempt, r.error_type, r.backoff_seconds) for r in restarts] == [
        (1, "SourceError", 0.001),
        (2, "CommitConflictError", 0.002),
    ]
    assert restarts[0].error == "broker down" and restarts[0].event == "restart" and restarts[0].max_attempts == 2


def test_the_budget_counts_restarts_in_a_row_without_a_commit() -> None:
    # Two failures, a committed batch, two more: never more than max_attempts in a row.
    errors = [SourceError(f"e{n}") for n in range(4)]
    script = Script([(0, errors[0]), (0, errors[1]), (1, errors[2]), (0, errors[3]), (0, None)])
    restarts = script.supervise(FAST)
    assert [r.attempt for r in restarts] == [1, 2, 1, 2]
    assert [r.last_committed_batch for r in restarts] == [None, None, 1, 1]


def test_past_the_budget_the_last_error_is_raised() -> None:
    script = Script([(0, SourceError("a")), (0, SourceError("b")), (0, SourceError("c"))])
    with pytest.raises(SourceError, match="c"):
        script.supervise(FAST)
    assert len(script.failures) == 2


def test_terminal_errors_are_raised_at_once() -> None:
    script = Script([(0, ConfigError("bad key"))])
    with pytest.raises(ConfigError):
        script.supervise(FAST)
    assert script.calls == 1 and script.failures == []


def test_a_stop_during_the_backoff_ends_the_run_without_retrying() -> None:
    stop = threading.Event()
    script = Script([(0, SourceError("down"))])
    script.failures = _StopOnAppend(stop)  # type: ignore[assignment]
    restarts = script.supervise(RestartConfig(max_attempts=5, backoff=30, max_backoff=60), stop)
    assert len(restarts) == 1 and script.calls == 1 and script.retries == 0


class _StopOnAppend(list):  # type: ignore[type-arg]
    def __init__(self, stop: threading.Event) -> None:
        super().__init__()
        self.stop = stop

    def append(self, item: object) -> None:
        super().append(item)
        self.stop.set()
