"""How an Iceberg commit failed, as the JVM reports it, for the sink's commits and maintenance's:
the exception classes that mean a conflict (nothing landed: plan again) or an unknown outcome
(it may have landed: never delete its files), and Iceberg's messages made readable."""

from __future__ import annotations

import re

CONFLICTS = (
    "org.apache.iceberg.exceptions.CommitFailedException",
    "org.apache.iceberg.exceptions.ValidationException",
)
UNKNOWN = ("org.apache.iceberg.exceptions.CommitStateUnknownException",)
_FILE_START = re.compile(r"Generic(?:Data|Delete)File\{")
_FILE_PATH = re.compile(r"file_path=([^,}]+)")


def short_message(message: str) -> str:
    """Iceberg prints whole DataFile objects (nested braces and all) in messages; keep their paths."""
    out = []
    rest = message
    while (start := _FILE_START.search(rest)) is not None:
        depth, end = 0, len(rest)
        for i in range(start.end() - 1, len(rest)):
            depth += {"{": 1, "}": -1}.get(rest[i], 0)
            if depth == 0:
                end = i + 1
                break
        path = _FILE_PATH.search(rest, start.end(), end)
        out.append(rest[: start.start()] + (path.group(1) if path else "a file"))
        rest = rest[end:]
    return "".join(out) + rest
