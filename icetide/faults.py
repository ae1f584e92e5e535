"""Fault injection for the exactly-once tests: kill -9 this process, or fail a call, at a named point.

Crashes: set ICETIDE_CRASH_AT to a point name (`after_write`, `after_dead_letter`,
`after_table_commit` (a pipeline of many tables: after a table's commit), `after_commit`; with
`deletes="vectors"`: `after_index_catch_up`, `after_dv_write`, `vectors_committed`,
`after_index_update`; on an executor, in the first attempt of a JSON fast-path task:
`task_files_written`)
and optionally ICETIDE_CRASH_BATCH to a batch id; the process then SIGKILLs itself when it
reaches that point, exactly as `kill -9` would, with no cleanup and no flush. ICETIDE_PAUSE_AT
makes it sleep at that point instead, for ICETIDE_PAUSE_SECONDS (default 60), in every batch or
only in batch ICETIDE_PAUSE_BATCH (a batch held in flight, for tests of a second runner, or a
task held on one machine of a cluster while the test kills that machine); it says so on stderr
first, one line, so a test watching the process (or an executor's log) knows. With
ICETIDE_PAUSE_MARK it also creates that file (the test knows the point is reached), and with
ICETIDE_PAUSE_UNTIL it wakes as soon as that file exists (the test lets it go on). Compaction's
points (the `batch` is the commit attempt, from 1; 0 after the commit): `compaction_before_commit`,
`compaction_carried_dvs_written` (DVs committed meanwhile carried onto the new files: written, not
committed), `compaction_committed`.

Failures: set ICETIDE_FAIL_AT to a point of the committer (`before_commit_call`: the catalog
call reports an unknown state without committing; `commit_call_landed`: it reports an unknown
state after committing; `after_commit_call`: the snapshot lookup after a commit fails;
`resolve_read`: re-reading the committed batch fails). ICETIDE_FAIL_TIMES (default 1) bounds how
often it fails in one process.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from icetide.errors import CommitStateUnknownError

CRASH_AT = "ICETIDE_CRASH_AT"
CRASH_BATCH = "ICETIDE_CRASH_BATCH"
PAUSE_AT = "ICETIDE_PAUSE_AT"
PAUSE_SECONDS = "ICETIDE_PAUSE_SECONDS"
PAUSE_BATCH = "ICETIDE_PAUSE_BATCH"
PAUSE_MARK = "ICETIDE_PAUSE_MARK"
PAUSE_UNTIL = "ICETIDE_PAUSE_UNTIL"
FAIL_AT = "ICETIDE_FAIL_AT"
FAIL_TIMES = "ICETIDE_FAIL_TIMES"
_UNKNOWN_POINTS = ("before_commit_call", "commit_call_landed")
_failed: dict[str, int] = {}


def crash_point(point: str, batch_id: int) -> None:
    """SIGKILL this process if the environment asks for a crash at `point` (of `batch_id`), or
    sleep there if it asks for a pause (ICETIDE_PAUSE_AT, ICETIDE_PAUSE_SECONDS, ICETIDE_PAUSE_BATCH)."""
    pause_batch = os.environ.get(PAUSE_BATCH)
    if os.environ.get(PAUSE_AT) == point and (pause_batch is None or int(pause_batch) == batch_id):
        _pause(point, batch_id)
    if os.environ.get(CRASH_AT) != point:
        return
    wanted = os.environ.get(CRASH_BATCH)
    if wanted is not None and int(wanted) != batch_id:
        return
    os.kill(os.getpid(), signal.SIGKILL)


def _pause(point: str, batch_id: int) -> None:
    seconds = float(os.environ.get(PAUSE_SECONDS, "60"))
    mark, until = os.environ.get(PAUSE_MARK), os.environ.get(PAUSE_UNTIL)
    print(f"icetide: paused at {point} (batch {batch_id}) for {seconds:g}s", file=sys.stderr, flush=True)
    if mark:
        with open(mark, "a"):
            pass
    if not until:
        time.sleep(seconds)
        return
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not os.path.exists(until):
        time.sleep(0.1)


class InjectedFault(RuntimeError):
    """The failure ICETIDE_FAIL_AT asked for."""


def fault_point(point: str) -> None:
    """Raise here if the environment asks for a failure at `point` (at most ICETIDE_FAIL_TIMES times)."""
    if os.environ.get(FAIL_AT) != point:
        return
    done = _failed.get(point, 0)
    if done >= int(os.environ.get(FAIL_TIMES, "1")):
        return
    _failed[point] = done + 1
    if point in _UNKNOWN_POINTS:
        raise CommitStateUnknownError(f"injected at {point}: the catalog's answer was lost")
    raise InjectedFault(f"injected failure at {point}")
