"""A PostgreSQL server on a free 127.0.0.1 port, started once per test session.

The server is Debian's `postgresql` package (`make install` installs it; the JDBC driver comes
from Maven Central, `icetide/spark/maven.py`). PostgreSQL refuses to run as root, so as root initdb and the server
run as the `postgres` user (`runuser`), on a data folder in a temporary directory that user
owns. The server writes a logical WAL (`wal_level=logical`, with room for replication slots and
WAL senders), so Debezium's PostgreSQL connector can stream a database's changes with the
built-in `pgoutput` plugin (tests/test_cdc_live.py); catalogs' tests do not notice. Connections
over TCP need a password (scram-sha-256), so a test that passes one through a catalog block
exercises secret redaction for real. `new_database()` gives each test its own
database, so catalogs of different tests never share tables.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

USER = "icetide"
INSTALL_LINE = "apt-get install postgresql (make install does, as root)"


def postgres_bin() -> Path | None:
    """The newest installed PostgreSQL server's bin folder (Debian: /usr/lib/postgresql/N/bin)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(Path(p).parent.parent.name))
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class PostgresServer:
    """A running server: where it listens and how to log in."""

    bin: Path
    port: int
    password: str
    as_postgres: tuple[str, ...]  # the prefix that runs a command as the server's OS user
    host: str = "127.0.0.1"  # the address clients reach it at (it listens on 127.0.0.1 too)

    def uri(self, database: str) -> str:
        """The JDBC URI of one database."""
        return f"jdbc:postgresql://{self.host}:{self.port}/{database}"

    def new_database(self) -> str:
        """Create an empty database owned by USER; returns its name."""
        name = f"lake_{uuid.uuid4().hex[:10]}"
        self.sql(f"CREATE DATABASE {name} OWNER {USER}")
        return name

    def connect(self, database: str, *, autocommit: bool = True) -> Any:
        """A psycopg connection to `database` as the superuser, over TCP."""
        import psycopg

        return psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", password=self.password, dbname=database,
            autocommit=autocommit,
        )  # fmt: skip

    def sql(self, statement: str, database: str = "postgres") -> str:
        """Run one statement as the superuser over the local socket; returns psql's output."""
        login = ["-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", database]
        done = subprocess.run(
            [*self.as_postgres, str(self.bin / "psql"), *login, "-v", "ON_ERROR_STOP=1", "-At", "-c", statement],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PGPASSWORD": self.password},
        )
        if done.returncode != 0:
            raise RuntimeError(f"psql {statement!r} failed: {done.stderr.strip()}")
        return done.stdout.strip()


@contextlib.contextmanager
def postgres_server(host: str = "127.0.0.1", clients: str | None = None) -> Iterator[PostgresServer]:
    """initdb + start a server on a free 127.0.0.1 port; stops it and removes its data after.

    `host`, another local address, is listened on too, and URIs name it; `clients` (a network,
    `10.1.2.0/24`) may then log in over it with the password, as from 127.0.0.1."""
    bin_dir = postgres_bin()
    if bin_dir is None:
        raise RuntimeError(f"PostgreSQL is not installed: {INSTALL_LINE}")
    as_postgres: tuple[str, ...] = ()
    root = tempfile.mkdtemp(prefix="icetide-pg-")
    if os.geteuid() == 0:  # postgres refuses root: run it as its own user, in a folder it owns
        as_postgres = ("runuser", "-u", "postgres", "--")
        owner = pwd.getpwnam("postgres")
        os.chown(root, owner.pw_uid, owner.pw_gid)
    data, log = os.path.join(root, "data"), os.path.join(root, "server.log")
    password = f"pg-{uuid.uuid4().hex[:12]}"
    pwfile = os.path.join(root, "pw")
    with open(pwfile, "w") as f:
        f.write(password)
    if as_postgres:
        os.chown(pwfile, owner.pw_uid, owner.pw_gid)

    def run(*args: str) -> None:
        done = subprocess.run([*as_postgres, *args], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{Path(args[0]).name} failed: {(done.stderr or done.stdout).strip()[-2000:]}")

    run(
        str(bin_dir / "initdb"), "-D", data, "-U", "postgres", f"--pwfile={pwfile}", "-E", "UTF8", "--no-sync",
        "--auth-local=trust", "--auth-host=scram-sha-256",
    )  # fmt: skip
    os.remove(pwfile)
    if clients:
        with open(os.path.join(data, "pg_hba.conf"), "a") as f:
            f.write(f"host all all {clients} scram-sha-256\n")
    listen = "127.0.0.1" if host == "127.0.0.1" else f"127.0.0.1,{host}"
    port = 0

    def stop() -> None:
        """Stop the server (idempotent); kill its postmaster if pg_ctl could not; remove its files."""
        subprocess.run(
            [*as_postgres, str(bin_dir / "pg_ctl"), "-D", data, "-m", "immediate", "-w", "stop"],
            capture_output=True,
            timeout=60,
        )
        with contextlib.suppress(OSError, ValueError), open(os.path.join(data, "postmaster.pid")) as f:
            os.kill(int(f.readline()), signal.SIGKILL)
        shutil.rmtree(root, ignore_errors=True)

    atexit.register(stop)  # also if this process ends without finishing the fixture
    try:
        for _attempt in range(3):
            port = _free_port()
            options = (
                f"-h {listen} -p {port} -k {root} -c fsync=off -c max_connections=100"
                " -c wal_level=logical -c max_replication_slots=10 -c max_wal_senders=10"
            )
            try:
                run(str(bin_dir / "pg_ctl"), "-D", data, "-l", log, "-o", options, "-w", "-t", "30", "start")
                break
            except RuntimeError:
                if _attempt == 2:
                    raise
        server = PostgresServer(bin_dir, port, password, as_postgres, host)
        server.sql(f"CREATE ROLE {USER} LOGIN PASSWORD '{password}'")
        yield server
    finally:
        stop()
        atexit.unregister(stop)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the whole test session."""
    with postgres_server() as server:
        yield server
