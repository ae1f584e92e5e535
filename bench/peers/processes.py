"""CPU seconds and memory of a system's whole process tree, JVMs and Python workers included."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def _table() -> dict[int, tuple[int, float, int]]:
    """pid -> (parent pid, CPU seconds of the process and its reaped children, resident bytes)."""
    out: dict[int, tuple[int, float, int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
            resident = int((entry / "statm").read_text().split()[1]) * PAGE
        except (OSError, IndexError, ValueError):
            continue
        rest = raw[raw.rindex(")") + 2 :].split()
        # utime, stime, cutime, cstime: a worker that exited and was waited for is in its parent's c*time
        out[int(entry.name)] = (int(rest[1]), sum(int(x) for x in rest[11:15]) / TICK, resident)
    return out


def tree(root: int, table: dict[int, tuple[int, float, int]]) -> list[int]:
    """`root` and its live descendants."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in table:
            out.append(pid)
            todo.extend(children.get(pid, []))
    return out


@dataclass
class TreeMeter:
    """Samples the process trees of named roots every `every` seconds, on a thread: the latest CPU
    seconds of each tree and the peak of its summed resident memory."""

    roots: dict[str, int]
    every: float = 1.0
    cpu: dict[str, float] = field(default_factory=dict)
    peak_rss: dict[str, int] = field(default_factory=dict)
    _every: Every | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def sample(self) -> dict[str, float]:
        """Sample now; returns the CPU seconds of each tree so far."""
        table = _table()
        with self._lock:
            for name, root in self.roots.items():
                pids = tree(root, table)
                if not pids:
                    continue  # exited: keep the last sample
                self.cpu[name] = sum(table[p][1] for p in pids)
                self.peak_rss[name] = max(self.peak_rss.get(name, 0), sum(table[p][2] for p in pids))
            return dict(self.cpu)

    def start(self) -> TreeMeter:
        self._every = Every(self.every, self.sample).start()
        return self

    def stop(self) -> None:
        if self._every is not None:
            self._every.stop()


class Every:
    """`tick()` every `seconds` on a daemon thread, from `start` until `stop` (which waits for it)."""

    def __init__(self, seconds: float, tick: Callable[[], object]) -> None:
        self.seconds = seconds
        self.tick = tick
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.seconds):
            self.tick()

    def start(self) -> Every:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def stop_group(proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    """SIGTERM to the `icetide` command a bench started (`start_new_session=True`), which stops
    its own Spark JVM: the JVM must not get the signal too, or it shuts down under a batch being
    cancelled and logs a Java stack trace (docs/how-to/kafka-upserts.md). Its whole process group
    is SIGKILLed if it outlives `timeout`."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
