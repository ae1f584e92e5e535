"""Where a location lives: the pyarrow filesystem and path for a local path, file: or s3://... URI."""

from __future__ import annotations

import os

import pyarrow.fs as pafs


def filesystem_for(location: str) -> tuple[pafs.FileSystem, str]:
    """A pyarrow filesystem and the path inside it for a location (local path, file:, s3://, ...).
    A relative local path is made absolute (from the working folder)."""
    if location.startswith("file:"):
        return pafs.LocalFileSystem(), "/" + location[len("file:") :].lstrip("/")
    if "://" not in location:
        return pafs.LocalFileSystem(), os.path.abspath(location)
    return pafs.FileSystem.from_uri(location)
