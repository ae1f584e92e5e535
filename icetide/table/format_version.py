"""Iceberg format versions a table may have, as a pipeline file or create_table names them. No I/O."""

from __future__ import annotations

from typing import Any

from icetide.errors import ConfigError

FORMAT_VERSIONS = (2, 3)
FORMAT_VERSION_PROPERTY = "format-version"


def parse_format_version(value: Any, key: str) -> int:
    """2 or 3 (an int or its string), else a ConfigError naming `key`."""
    text = str(value).strip() if not isinstance(value, bool) else ""
    if text not in {str(v) for v in FORMAT_VERSIONS}:
        raise ConfigError(f"{key}: must be one of {', '.join(map(str, FORMAT_VERSIONS))}, got {value!r}")
    return int(text)
