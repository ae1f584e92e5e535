"""The Spark driver JVM's standard error, less the one line every Spark 4 start prints.

Spark 4's launcher starts the JVM with `--add-modules=jdk.incubator.vector`, and the JVM answers
with "WARNING: Using incubator modules: jdk.incubator.vector" on standard error, before any
logging is set up and with no option to silence it. A command's user would see it above every
result and every one-line error. While the JVM starts, standard error (fd 2) is a pipe: the JVM
inherits it for its lifetime, and a daemon thread copies what comes through to the real
standard error, without that line. Python's own fd 2 is put back as soon as the JVM runs.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

DROPPED = (b"WARNING: Using incubator modules: jdk.incubator.vector",)


def _copy(read_fd: int, write_fd: int) -> None:
    with os.fdopen(read_fd, "rb", buffering=0) as source:
        pending = b""
        while chunk := source.read(65536):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            out = b"".join(line + b"\n" for line in lines if not line.startswith(DROPPED))
            if out:
                with contextlib.suppress(OSError):
                    os.write(write_fd, out)
        if pending:
            with contextlib.suppress(OSError):
                os.write(write_fd, pending)


@contextlib.contextmanager
def filtered_jvm_stderr() -> Iterator[None]:
    """Around the start of a Spark driver JVM: the JVM's standard error reaches ours, filtered."""
    try:
        original = os.dup(2)
    except OSError:  # no standard error at all: nothing to filter
        yield
        return
    read_fd, write_fd = os.pipe()
    threading.Thread(target=_copy, args=(read_fd, original), name="icetide-jvm-stderr", daemon=True).start()
    os.dup2(write_fd, 2)
    os.close(write_fd)
    try:
        yield
    finally:
        os.dup2(original, 2)  # the JVM keeps the pipe; the thread keeps `original` open for it
