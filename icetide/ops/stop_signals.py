"""SIGINT and SIGTERM stop a run after the batch in flight (`icetide maintain`: after the
maintenance step in flight); a second one interrupts it.

A Python signal handler runs in the main thread between two bytecodes, wherever that thread is,
so it must not take a lock the interrupted code may hold. `threading.Event.set` takes the lock
of the event's condition, which `Event.wait` holds while it enters and leaves its wait: a handler
calling `stop.set()` while the run loop waits on `stop` for its next trigger blocks on a lock its
own thread holds, for ever (CI saw `icetide run` hang so after SIGTERM). Logging is no safer: the
handler could interrupt a write to stderr. So the handler only notes the signal and writes a byte
to a pipe; a relay thread reads it, logs the stop and sets the event.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopSignals:
    """While installed, SIGINT and SIGTERM set `stop` (the batch in flight finishes); a second one
    raises KeyboardInterrupt in the main thread. Nothing is installed outside the main thread.

    `stop` is set by the relay a moment after the signal, and only a second signal aborts, even
    when something else (`Runner.stop()`) had set `stop` already."""

    def __init__(self, stop: threading.Event, in_flight: str = "the batch in flight") -> None:
        self.stop = stop
        self.in_flight = in_flight  # what finishes before the stop (the log line names it)
        self._received: list[int] = []  # appended by the handler: a list append takes no lock
        self._previous: dict[int, Any] = {}
        self._relay: threading.Thread | None = None
        self._wake = (-1, -1)

    def install(self) -> StopSignals:
        if threading.current_thread() is not threading.main_thread():
            return self
        self._wake = os.pipe()
        self._relay = threading.Thread(
            target=self._relay_signals, args=(self._wake[0],), name="icetide-stop-signals", daemon=True
        )
        self._relay.start()
        for sig in SIGNALS:
            self._previous[sig] = signal.getsignal(sig)
            signal.signal(sig, self._handle)
        return self

    def restore(self) -> None:
        """Put back the handlers there were, and end the relay thread."""
        try:
            for sig, handler in self._previous.items():
                signal.signal(sig, handler)  # runs a pending handler first: a second signal raises here
        finally:
            self._previous = {}
            if self._relay is not None:
                write, self._wake = self._wake[1], (-1, -1)
                os.close(write)  # the relay reads end-of-file, closes the read end and ends
                self._relay.join(timeout=5)
                self._relay = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._received:
            raise KeyboardInterrupt
        self._received.append(signum)
        os.write(self._wake[1], bytes([signum]))

    def _relay_signals(self, read: int) -> None:
        try:
            while received := os.read(read, 1):
                log.warning("signal %s: stopping after %s", signal.Signals(received[0]).name, self.in_flight)
                self.stop.set()
        finally:
            os.close(read)  # here, not in restore: never while this thread may still read it
