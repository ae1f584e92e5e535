"""Where a location lives: the pyarrow filesystem and path for a local path, file: or s3://... URI.

Everything icetide reads or writes outside Iceberg (fast-path data and delete files, landing
files, the key index, dead letters, raw retention, orphan listing) goes through `filesystem_for`.
On S3 (`s3://`, and `s3a://` / `s3n://` as Hadoop users write them) it uses the same endpoint,
region, path-style setting and credentials as the catalog's S3FileIO: the catalog options
`s3.endpoint`, `client.region` (or `s3.region`), `s3.path-style-access`, `s3.access-key-id`,
`s3.secret-access-key`, `s3.session-token` (`S3Settings.from_catalog`). What they leave out comes
from AWS's own chain in each process: the `AWS_*` environment, `~/.aws`, instance metadata.

The driver installs them with `use_s3_settings`; Spark's Python workers are other processes, so
the driver also hands them over as environment variables (`S3Settings.environment`, through
`spark.executorEnv.*` and the SparkContext's environment), which `filesystem_for` reads in a
process where nothing was installed. Keys are carried only when the catalog options name them.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

import pyarrow.fs as pafs

from icetide.config.secrets import redacted_repr

S3_SCHEMES = ("s3", "s3a", "s3n")
ENV_PREFIX = "ICETIDE_S3_"
# Catalog option -> S3Settings field. Iceberg's own names (S3FileIOProperties, AwsClientProperties).
S3_CATALOG_KEYS = {
    "s3.endpoint": "endpoint",
    "client.region": "region",
    "s3.region": "region",
    "s3.path-style-access": "path_style",
    "s3.access-key-id": "access_key",
    "s3.secret-access-key": "secret_key",
    "s3.session-token": "session_token",
}


@dataclass(frozen=True)
class S3Settings:
    """How to reach S3: None leaves a setting to AWS's default chain (and pyarrow's defaults)."""

    endpoint: str | None = None  # http://127.0.0.1:9000, https://s3.eu-west-1.amazonaws.com, ...
    region: str | None = None
    path_style: bool | None = None
    access_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)

    __repr__ = redacted_repr

    @classmethod
    def from_catalog(cls, options: Mapping[str, str] | None) -> S3Settings:
        """The settings an Iceberg catalog's options give its S3FileIO."""
        found: dict[str, object] = {}
        for key, name in S3_CATALOG_KEYS.items():
            value = (options or {}).get(key)
            if value is not None and str(value) != "" and name not in found:
                found[name] = str(value).strip().lower() == "true" if name == "path_style" else str(value)
        return cls(**found)  # type: ignore[arg-type]

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> S3Settings:
        """The settings a driver handed over in ICETIDE_S3_* variables (`environment`)."""
        env = os.environ if environ is None else environ
        found: dict[str, object] = {}
        for f in dataclasses.fields(cls):
            value = env.get(ENV_PREFIX + f.name.upper())
            if value:
                found[f.name] = value == "true" if f.name == "path_style" else value
        return cls(**found)  # type: ignore[arg-type]

    def environment(self) -> dict[str, str]:
        """ICETIDE_S3_* variables carrying these settings to another process (Spark's Python workers)."""
        out: dict[str, str] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is not None:
                out[ENV_PREFIX + f.name.upper()] = ("true" if value else "false") if f.name == "path_style" else value
        return out

    def filesystem(self) -> pafs.S3FileSystem:
        """pyarrow's S3 filesystem with these settings (AWS's chain for what they leave out).

        Opening a file for writing is delayed to its first part, so a file smaller than a part
        is one PutObject instead of a multipart upload's three requests (docs/design.md: S3
        requests); an error that opening would raise is raised by the write or close instead.
        """
        kwargs: dict[str, object] = {"allow_delayed_open": True}
        if self.endpoint:
            kwargs["endpoint_override"] = self.endpoint
            if self.endpoint.startswith("http://"):
                kwargs["scheme"] = "http"
        if self.region:
            kwargs["region"] = self.region
        if self.path_style is False:  # pyarrow addresses buckets by path unless told otherwise
            kwargs["force_virtual_addressing"] = True
        if self.access_key and self.secret_key:
            kwargs["access_key"] = self.access_key
            kwargs["secret_key"] = self.secret_key
            if self.session_token:
                kwargs["session_token"] = self.session_token
        return pafs.S3FileSystem(**kwargs)  # type: ignore[arg-type]


_installed: S3Settings | None = None
_filesystems: dict[S3Settings, pafs.S3FileSystem] = {}
_lock = threading.Lock()


def use_s3_settings(settings: S3Settings | None) -> None:
    """Install the S3 settings this process uses from now on (None: read ICETIDE_S3_* again)."""
    global _installed
    with _lock:
        _installed = settings


def s3_settings() -> S3Settings:
    """The S3 settings of this process: installed ones, else those in the environment."""
    return _installed if _installed is not None else S3Settings.from_environment()


def is_s3(location: str) -> bool:
    """Is `location` an S3 URI (s3://, s3a://, s3n://)?"""
    return location.split("://", 1)[0].lower() in S3_SCHEMES if "://" in location else False


def make_parent(fs: pafs.FileSystem, path: str) -> None:
    """Make the folder `path` will be written in, where folders exist. An object store has none:
    pyarrow would write an empty marker object per folder level (and ask first), requests that
    S3 charges for and that listings then show."""
    if fs.type_name != "s3":
        fs.create_dir(path.rsplit("/", 1)[0], recursive=True)


def filesystem_for(location: str) -> tuple[pafs.FileSystem, str]:
    """A pyarrow filesystem and the path inside it for a location (local path, file:, s3://, ...).
    A relative local path is made absolute (from the working folder). On S3 the path is
    `bucket/key`, the filesystem the one `s3_settings()` describe."""
    if location.startswith("file:"):
        return pafs.LocalFileSystem(), "/" + location[len("file:") :].lstrip("/")
    if "://" not in location:
        return pafs.LocalFileSystem(), os.path.abspath(location)
    if is_s3(location):
        settings = s3_settings()
        with _lock:
            fs = _filesystems.get(settings)
            if fs is None:
                fs = _filesystems[settings] = settings.filesystem()
        return fs, location.split("://", 1)[1].rstrip("/")
    return pafs.FileSystem.from_uri(location)
