"""Reading a pipeline file's values: durations, sizes, required keys and unknown keys.

Each error names the key it is about (`trigger.interval: ...`).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

from icetide.errors import ConfigError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(value: Any, key: str) -> float:
    """'5s', '500ms', '2m', '1h', '30d' or a number of seconds -> seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        match = _DURATION.match(str(value))
        if not match:
            raise ConfigError(f"{key}: {value!r} is not a duration like 5s, 500ms, 2m")
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
    if seconds < 0:
        raise ConfigError(f"{key}: must not be negative")
    return seconds


def require_key(d: Mapping[str, Any], key: str, where: str) -> Any:
    """`d[key]`; ConfigError `<where><key>: required` when it is absent, None or empty."""
    if key not in d or d[key] in (None, ""):
        raise ConfigError(f"{where}{key}: required")
    return d[key]


def reject_unknown_keys(d: Mapping[str, Any], allowed: Collection[str], where: str) -> None:
    """ConfigError naming the first key of `d` (sorted) not in `allowed`, listing the allowed ones."""
    extra = sorted(set(d).difference(allowed))
    if extra:
        raise ConfigError(f"{where}{extra[0]}: unknown key (allowed: {', '.join(sorted(allowed))})")


def parse_size(value: Any, key: str) -> int:
    """'128MB', '1GB', '64kb' or a number of bytes -> bytes."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = re.match(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", str(value), flags=re.IGNORECASE)
    if not match:
        raise ConfigError(f"{key}: {value!r} is not a size like 128MB")
    unit = (match.group(2) or "b").lower().rstrip("b").rstrip("i")
    factor = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}[unit]
    return int(float(match.group(1)) * factor)
