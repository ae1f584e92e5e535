"""Crash injection for the exactly-once tests: kill -9 this process at a named point.

Set ICETIDE_CRASH_AT to a point name (`after_write`, `after_dead_letter`, `after_commit`) and
optionally ICETIDE_CRASH_BATCH to a batch id; the process then SIGKILLs itself when it reaches
that point, exactly as `kill -9` would, with no cleanup and no flush.
"""

from __future__ import annotations

import os
import signal

CRASH_AT = "ICETIDE_CRASH_AT"
CRASH_BATCH = "ICETIDE_CRASH_BATCH"


def crash_point(point: str, batch_id: int) -> None:
    """SIGKILL this process if the environment asks for a crash at `point` (of `batch_id`)."""
    if os.environ.get(CRASH_AT) != point:
        return
    wanted = os.environ.get(CRASH_BATCH)
    if wanted is not None and int(wanted) != batch_id:
        return
    os.kill(os.getpid(), signal.SIGKILL)
