"""An S3 API server on a free 127.0.0.1 port, started once per test session, as its own process.

The server is moto's server mode (`moto[server]`, a dev dependency, Apache-2.0), run as
`python -m moto.server`; it keeps objects in its memory and speaks the S3 REST API over HTTP,
path-style. It gets dummy keys, never anonymous requests: pyarrow's anonymous uploads are stored
with their chunk framing. Each test makes its own bucket (`new_bucket()`), so tests never share
objects.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REGION = "us-east-1"


def _free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class S3Server:
    """A running server: its endpoint and the keys the tests sign with."""

    endpoint: str
    access_key: str = "icetide-test-key"
    secret_key: str = field(default="icetide-test-secret", repr=False)

    def catalog_options(self) -> dict[str, str]:
        """The Iceberg catalog options that reach this server through S3FileIO (and icetide's
        pyarrow filesystem, which reads the same options)."""
        return {
            "io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
            "s3.endpoint": self.endpoint,
            "s3.path-style-access": "true",
            "s3.access-key-id": self.access_key,
            "s3.secret-access-key": self.secret_key,
            "client.region": REGION,
        }

    def client(self) -> Any:
        """A boto3 S3 client of this server (moto brings boto3)."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
        )

    def new_bucket(self) -> str:
        """Create an empty bucket; returns its name."""
        name = f"lake-{uuid.uuid4().hex[:10]}"
        self.client().create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        """Every object key in `bucket` under `prefix`."""
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return [o["Key"] for page in pages for o in page.get("Contents", [])]


def upload(s3: S3Server, bucket: str, folder: Path, prefix: str) -> None:
    """Every file of `folder` to s3://bucket/prefix/<name>."""
    client = s3.client()
    for path in sorted(folder.iterdir()):
        client.upload_file(str(path), bucket, f"{prefix}/{path.name}")


def doc_snippet(language: str, s3: S3Server, **values: str) -> list[str]:
    """The lines of docs/object_stores.md's `language` block, its placeholders filled in for `s3`
    (and `values`: "<metadata.json on S3>", ...); a placeholder left unfilled fails the test."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "object_stores.md").read_text()
    match = re.search(rf"```{language}\n(.*?)```", text, flags=re.DOTALL)
    assert match, f"docs/object_stores.md has no {language} block"
    filled = {
        "<key-id>": s3.access_key,
        "<secret>": s3.secret_key,
        "<region>": REGION,
        "<host:port>": s3.endpoint.removeprefix("http://"),
        "<endpoint>": s3.endpoint,
        **values,
    }
    lines = []
    for line in match.group(1).splitlines():
        for placeholder, value in filled.items():
            line = line.replace(placeholder, value)
        lines.append(line)
    return lines


def duckdb_statement(con: Any, s3: S3Server, starts: str, **values: str) -> Any:
    """Run the statement of docs/object_stores.md's SQL block that starts with `starts`, filled in."""
    found = [line for line in doc_snippet("sql", s3, **values) if line.startswith(starts)]
    assert len(found) == 1, f"docs/object_stores.md: no one SQL line starts with {starts!r}"
    assert "<" not in found[0], f"a placeholder is left in {found[0]!r}"
    return con.execute(found[0].rstrip(";"))


def duckdb_s3_secret(con: Any, s3: S3Server) -> None:
    """DuckDB's httpfs reaches the server, as docs/object_stores.md says."""
    duckdb_statement(con, s3, "CREATE SECRET")


@contextlib.contextmanager
def s3_server(host: str = "127.0.0.1") -> Iterator[S3Server]:
    """`python -m moto.server` on a free port of `host` (a local address) until the block ends."""
    port = _free_port(host)
    log = tempfile.NamedTemporaryFile(prefix="icetide-moto-", suffix=".log", delete=False)  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", host, "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "MOTO_ALLOW_NONEXISTENT_REGION": "true"},
    )
    endpoint = f"http://{host}:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2):
                    break
            except (urllib.error.URLError, OSError):
                if proc.poll() is not None or time.monotonic() > deadline:
                    with open(log.name) as f:
                        raise RuntimeError(f"moto's S3 server did not start: {f.read()[-2000:]}") from None
                time.sleep(0.1)
        yield S3Server(endpoint)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        os.unlink(log.name)


@pytest.fixture(scope="session")
def s3() -> Iterator[S3Server]:
    """One S3 server for the whole test session (per xdist worker)."""
    with s3_server() as server:
        yield server
