"""A MariaDB server on a free 127.0.0.1 port, started once per test session, its binlog in ROW
format for Debezium's MariaDB connector.

The server is Debian's `mariadb-server` package (the Makefile's DEB_PACKAGES). As root, the data
folder belongs to the `mysql` user the package creates and the server runs as that user
(`--user`). Its settings are what Debezium asks of a source (docs/how-to/debezium-sync.md): a
binlog (`log_bin`) in `ROW` format with full row images, a server id, and UTC as the session time
zone. The server reads no option file (`--no-defaults`), so the package's own service settings
never leak in. `new_database()` gives each test its own database; USER (password `password`)
may do anything, replication included.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.kafka_broker import _die_with_parent, free_port

USER = "icetide"
INSTALL_LINE = "apt-get install mariadb-server (make install does, as root)"
START_TIMEOUT_SECONDS = 60.0


@dataclass(frozen=True)
class MariaDbServer:
    """A running server: where it listens and how to log in."""

    port: int
    password: str

    def connect(self, database: str | None = None, *, autocommit: bool = True) -> Any:
        """A PyMySQL connection as USER over TCP."""
        import pymysql

        return pymysql.connect(
            host="127.0.0.1", port=self.port, user=USER, password=self.password, database=database,
            autocommit=autocommit, charset="utf8mb4",
        )  # fmt: skip

    def new_database(self) -> str:
        name = f"db_{uuid.uuid4().hex[:10]}"
        with self.connect() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {name} CHARACTER SET utf8mb4")
        return name


@contextlib.contextmanager
def mariadb_server() -> Iterator[MariaDbServer]:
    """Install a data folder, start the server on a free 127.0.0.1 port; stop it and remove its files after."""
    mariadbd, install_db = shutil.which("mariadbd", path="/usr/sbin:/usr/bin"), shutil.which("mariadb-install-db")
    if mariadbd is None or install_db is None:
        raise RuntimeError(f"MariaDB is not installed: {INSTALL_LINE}")
    root = tempfile.mkdtemp(prefix="icetide-mariadb-")
    user = "mysql" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
    if os.geteuid() == 0:
        owner = pwd.getpwnam(user)
        os.chown(root, owner.pw_uid, owner.pw_gid)
    data, socket_path, log = (
        os.path.join(root, "data"),
        os.path.join(root, "mariadb.sock"),
        os.path.join(root, "server.log"),
    )
    done = subprocess.run(
        [install_db, "--no-defaults", f"--datadir={data}", f"--user={user}", "--auth-root-authentication-method=socket",
         "--skip-test-db"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"mariadb-install-db failed: {(done.stderr or done.stdout).strip()[-2000:]}")
    password = "password"
    proc: subprocess.Popen[bytes] | None = None

    def stop() -> None:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)

    atexit.register(stop)
    try:
        for attempt in range(3):
            port = free_port()
            with open(log, "ab") as out:
                proc = subprocess.Popen(
                    [mariadbd, "--no-defaults", f"--datadir={data}", f"--socket={socket_path}", f"--port={port}",
                     "--bind-address=127.0.0.1", f"--user={user}", "--skip-name-resolve", "--server-id=1",
                     "--log-bin=binlog", "--binlog-format=ROW", "--binlog-row-image=FULL", "--default-time-zone=+00:00",
                     "--character-set-server=utf8mb4", "--innodb-buffer-pool-size=32M",
                     f"--pid-file={os.path.join(root, 'mariadb.pid')}"],
                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent,
                )  # fmt: skip
            if _wait_ready(proc, socket_path, START_TIMEOUT_SECONDS):
                break
            stop_proc(proc)
            if attempt == 2:
                with open(log, errors="replace") as f:
                    raise RuntimeError(f"MariaDB did not start: {f.read()[-2000:]}")
        _sql_as_root(
            socket_path,
            f"CREATE USER '{USER}'@'%' IDENTIFIED BY '{password}';"
            f" GRANT ALL PRIVILEGES ON *.* TO '{USER}'@'%' WITH GRANT OPTION;",
        )
        yield MariaDbServer(port, password)
    finally:
        stop()
        atexit.unregister(stop)


def stop_proc(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def _sql_as_root(socket_path: str, statements: str) -> None:
    """Statements as the server's root, over its socket (root logs in by unix socket identity)."""
    command = ["mariadb", "--no-defaults", f"--socket={socket_path}", "-u", "root", "-e", statements]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"mariadb {statements!r} failed: {done.stderr.strip()}")


def _wait_ready(proc: subprocess.Popen[bytes], socket_path: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        ping = subprocess.run(
            ["mariadb-admin", "--no-defaults", f"--socket={socket_path}", "-u", "root", "ping"],
            capture_output=True, timeout=30,
        )  # fmt: skip
        if ping.returncode == 0:
            return True
        time.sleep(0.2)
    return False


@pytest.fixture(scope="session")
def mariadb() -> Iterator[MariaDbServer]:
    """One MariaDB server for the whole test session."""
    with mariadb_server() as server:
        yield server
