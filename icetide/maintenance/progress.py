"""Progress of long maintenance work, handed to whoever asked for it; the library draws nothing.

Every long step (rewriting and committing compaction groups, scanning data files for deleted
positions, listing files for orphans) calls an optional `ProgressCallback` with a
`ProgressEvent` after each unit of work. The CLI turns the events into progress bars in a
terminal and into log lines elsewhere; a library user passes nothing and hears nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProgressEvent:
    """`done` of `total` units of one step of maintenance on one table (`total` None: unknown)."""

    table: str
    step: str  # e.g. "rewrite groups", "commit groups", "scan data files", "list files"
    done: int
    total: int | None
    detail: str = ""  # the unit just finished, e.g. a partition

    @property
    def finished(self) -> bool:
        """Is the step complete (as far as a known total tells)?"""
        return self.total is not None and self.done >= self.total


ProgressCallback = Callable[[ProgressEvent], None]


def notify(
    callback: ProgressCallback | None, table: str, step: str, done: int, total: int | None, detail: str = ""
) -> None:
    """Send one event; a failing callback is logged and ignored, never failing the work."""
    if callback is None:
        return
    try:
        callback(ProgressEvent(table, step, done, total, detail))
    except Exception:
        log.debug("progress callback failed", exc_info=True)
