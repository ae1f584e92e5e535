"""SIGINT and SIGTERM stop a run after the batch in flight (icetide/ops/stop_signals.py).

CI once saw `icetide run` hang for good after SIGTERM: the handler called `stop.set()` while the
run loop's main thread was inside `stop.wait()`, holding the lock `set` takes. These tests send
real signals to a real separate process whose main thread waits on the event the way the run
loop does, at the moments that deadlocked.
"""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from tests.commands import ROOT

ROUNDS = 3000  # a handler that set the event itself deadlocked in 3 of 4 runs of 1000 rounds

CHILD = textwrap.dedent(
    """
    import faulthandler, logging, signal, sys, threading
    from icetide.ops.stop_signals import StopSignals

    logging.basicConfig(level=logging.WARNING)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    stop = threading.Event()
    for round in range(int(sys.argv[1])):
        signals = StopSignals(stop).install()
        print("ready", round, flush=True)
        while not stop.is_set():
            stop.wait(0.00001)  # in and out of the wait's lock, as fast as it goes
        signals.restore()
        stop.clear()
        print("stopped", round, flush=True)
    signals = StopSignals(stop).install()
    print("ready twice", flush=True)
    try:
        while not stop.is_set():
            stop.wait(0.00001)
        print("stop seen", flush=True)
        while True:
            stop.wait(0.00001)
    except KeyboardInterrupt:
        print("interrupted", stop.is_set(), flush=True)
    """
)


def _lines(proc: subprocess.Popen[str]) -> queue.Queue[str]:
    """The child's stdout lines, as they come (a thread reads them)."""
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None
    stdout = proc.stdout
    threading.Thread(target=lambda: [lines.put(line.strip()) for line in stdout], daemon=True).start()
    return lines


def _line(proc: subprocess.Popen[str], lines: queue.Queue[str], stderr: Path, timeout: float = 10) -> str:
    try:
        return lines.get(timeout=timeout)
    except queue.Empty:
        proc.send_signal(signal.SIGUSR1)  # the child's stacks into its stderr
        time.sleep(1)
        proc.kill()
        proc.wait()
        raise AssertionError(f"no answer within {timeout}s; its stacks:\n{stderr.read_text()[-6000:]}") from None


def test_signals_while_the_main_thread_waits_on_stop_set_it_every_time(tmp_path: Path) -> None:
    """SIGTERM (and SIGINT) sent ROUNDS times, each while the main thread spins through
    `stop.wait()`: every one sets `stop`, and the stop is logged once per signal. A second signal
    before the first is handled away interrupts the main thread (KeyboardInterrupt)."""
    stderr = tmp_path / "stderr"  # a file: a pipe nobody reads yet would fill and block the child
    with stderr.open("w") as err_file:
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(ROUNDS)],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err_file,
            text=True,
        )
    lines = _lines(proc)
    try:
        for n in range(ROUNDS):
            assert _line(proc, lines, stderr) == f"ready {n}"
            proc.send_signal(signal.SIGINT if n % 2 else signal.SIGTERM)
            assert _line(proc, lines, stderr) == f"stopped {n}"
        assert _line(proc, lines, stderr) == "ready twice"
        proc.send_signal(signal.SIGTERM)
        assert _line(proc, lines, stderr) == "stop seen"
        proc.send_signal(signal.SIGTERM)
        assert _line(proc, lines, stderr) == "interrupted True"
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = stderr.read_text()
    assert proc.returncode == 0, err[-3000:]
    stops = [line for line in err.splitlines() if "stopping after the batch in flight" in line]
    assert len(stops) == ROUNDS + 1
    assert sum("signal SIGINT" in line for line in stops) == ROUNDS // 2
