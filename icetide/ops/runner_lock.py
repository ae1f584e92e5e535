"""One runner per pipeline id and table: a lock the OS releases, or a lease that expires.

A second runner of a pipeline would plan the same batches and, worse, its start-up cleanup
would delete the first runner's in-flight files (they look exactly like a crashed run's). So a
runner holds its pipeline before it touches anything:

- local warehouse (the embedded Hadoop catalog on a local folder, or any catalog whose
  `warehouse` is a local path): an exclusive `flock` on `<warehouse>/.icetide-runner-<table>-
  <pipeline>.lock`. The OS drops it when the process dies, even by SIGKILL, so a restart is never
  blocked. The file holds the holder's host and pid, for the message a second runner prints.
  The name starts with '.', so neither the Hadoop catalog nor orphan removal sees it.
- any other catalog (REST, JDBC, Glue, Hive, object stores): a lease in the table property
  `icetide.runner.<pipeline>` (`{"owner", "host", "pid", "pidns", "expires_at_ms"}`), taken when it is
  absent, expired or already ours, renewed between batches once half of it has passed, and
  removed on a clean stop. A runner killed by SIGKILL blocks a restart on another machine for
  at most `lease_seconds` (RUNNER_LEASE_SECONDS, 120 s); a restart on the same machine (same
  host name and pid namespace) takes the lease over at once when the holder's pid is gone.
  Property updates are last-writer-wins, so two runners starting in the same instant could both
  write one; each reads the property back after a short settle time, and the one that finds the
  other's owner gives up.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import logging
import os
import re
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from icetide.errors import PipelineAlreadyRunningError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from icetide.config.pipeline import PipelineConfig

log = logging.getLogger(__name__)

LEASE_PROPERTY_PREFIX = "icetide.runner."
RUNNER_LEASE_SECONDS = 120.0
LEASE_SETTLE_SECONDS = 1.0


@dataclass(frozen=True)
class Holder:
    """Who holds a pipeline."""

    host: str
    pid: int
    started_at: str = ""

    def describe(self) -> str:
        """'host H, pid P' (plus when it started, if known)."""
        since = f", since {self.started_at}" if self.started_at else ""
        return f"host {self.host}, pid {self.pid}{since}"


def _pid_namespace() -> str:
    """This process's pid namespace ('' where the OS does not say): pids of two containers on one
    host with one host name are comparable only within one namespace."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def _holder_died_here(current: dict[str, Any]) -> bool:
    """Is the lease's holder a process of this machine and pid namespace that no longer exists?"""
    namespace = _pid_namespace()
    if not namespace or current.get("host") != socket.gethostname() or current.get("pidns") != namespace:
        return False
    try:
        pid = int(current.get("pid", -1))
    except (TypeError, ValueError):
        return False
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False


def _me() -> Holder:
    return Holder(socket.gethostname(), os.getpid(), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))


def local_warehouse(config: PipelineConfig, spark: SparkSession | None = None) -> Path | None:
    """The warehouse folder of the pipeline's Hadoop catalog when it is on this machine's file
    system, else None. With `spark`, the session's catalog settings decide (a caller may pass a
    session whose catalog differs from the file's); without, the pipeline file's."""
    options = dict(config.catalog_options or {})
    if spark is not None:
        prefix = f"spark.sql.catalog.{config.catalog}."
        found = {k: spark.conf.get(prefix + k, None) for k in ("type", "catalog-impl", "warehouse")}
        if any(found.values()):
            options = {k: v for k, v in found.items() if v}
    if options and (options.get("type") != "hadoop" or options.get("catalog-impl")):
        return None  # REST, JDBC, Glue, Hive...: the catalog, not a folder, decides commits
    where = options.get("warehouse") or config.warehouse
    if not where:
        return None
    if where.startswith("file:"):
        return Path(re.sub(r"^file:(//)?", "", where))
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", where):
        return None
    return Path(where)


def lock_path(warehouse: Path, table: str, pipeline_id: str) -> Path:
    """The lock file of (table, pipeline) in a local warehouse."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{table}-{pipeline_id}")
    return warehouse / f".icetide-runner-{safe}.lock"


class _FileLock:
    """An exclusive flock, released by close() or by the process's death."""

    def __init__(self, path: Path, pipeline_id: str, table: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle: IO[str] = open(path, "a+")  # noqa: SIM115 - held for the life of the run
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = _parse_holder(handle.read())
            handle.close()
            who = holder.describe() if holder is not None else "another process (unknown pid)"
            raise PipelineAlreadyRunningError(
                f"pipeline {pipeline_id!r} is already running on {table}: {who} holds {path}"
            ) from None
        handle.seek(0)
        handle.truncate()
        me = _me()
        handle.write(json.dumps({"host": me.host, "pid": me.pid, "started_at": me.started_at}) + "\n")
        handle.flush()
        self.handle = handle
        self.path = path

    def close(self) -> None:
        self.handle.close()  # closing the descriptor releases the flock


def _parse_holder(text: str) -> Holder | None:
    try:
        data = json.loads(text)
        return Holder(str(data["host"]), int(data["pid"]), str(data.get("started_at", "")))
    except (ValueError, KeyError, TypeError):
        return None


# flock is per open file: a second flock from this process on a new descriptor would fail, so
# holds within one process (the CLI takes it before Spark starts, the runner again) are counted.
_held: dict[Path, tuple[_FileLock, int]] = {}


@contextlib.contextmanager
def hold_local(warehouse: Path, table: str, pipeline_id: str) -> Iterator[Path]:
    """Hold (table, pipeline) in a local warehouse for the block; PipelineAlreadyRunningError if
    another process holds it. Re-entrant within one process."""
    path = lock_path(warehouse, table, pipeline_id).resolve()
    lock, count = _held.get(path, (None, 0))
    if lock is None:
        lock = _FileLock(path, pipeline_id, table)
    _held[path] = (lock, count + 1)
    try:
        yield path
    finally:
        lock, count = _held[path]
        if count == 1:
            del _held[path]
            lock.close()
        else:
            _held[path] = (lock, count - 1)


class TableLease:
    """A runner lease kept in a table property, for catalogs without a local folder."""

    def __init__(
        self, jtable: Any, pipeline_id: str, table: str, *, lease_seconds: float = RUNNER_LEASE_SECONDS
    ) -> None:
        self.jtable = jtable
        self.pipeline_id = pipeline_id
        self.table = table
        self.lease_seconds = lease_seconds
        self.key = LEASE_PROPERTY_PREFIX + pipeline_id
        self.owner = uuid.uuid4().hex
        self.expires_at_ms = 0

    def _current(self) -> dict[str, Any] | None:
        self.jtable.refresh()
        text = self.jtable.properties().get(self.key)
        if not text:
            return None
        try:
            value = json.loads(str(text))
            return value if isinstance(value, dict) else None
        except ValueError:
            return None

    def _refuse(self, current: dict[str, Any]) -> PipelineAlreadyRunningError:
        holder = Holder(str(current.get("host", "?")), int(current.get("pid", -1)), str(current.get("started_at", "")))
        left = max(0.0, (int(current.get("expires_at_ms", 0)) - time.time() * 1000) / 1000)
        return PipelineAlreadyRunningError(
            f"pipeline {self.pipeline_id!r} is already running on {self.table}: {holder.describe()} holds its lease "
            f"(table property {self.key}, expires in {left:.0f}s unless renewed)"
        )

    def _write(self) -> None:
        me = _me()
        self.expires_at_ms = int((time.time() + self.lease_seconds) * 1000)
        value = {
            "owner": self.owner,
            "host": me.host,
            "pid": me.pid,
            "pidns": _pid_namespace(),
            "expires_at_ms": self.expires_at_ms,
        }
        self.jtable.updateProperties().set(self.key, json.dumps(value, sort_keys=True)).commit()

    def acquire(self) -> None:
        """Take the lease, or raise PipelineAlreadyRunningError naming the holder."""
        current = self._current()
        if current is not None and current.get("owner") != self.owner:
            if _holder_died_here(current):
                log.info(
                    "runner lease of %s on %s: its holder (pid %s) is gone; taking it over",
                    self.pipeline_id,
                    self.table,
                    current.get("pid"),
                )
            elif int(current.get("expires_at_ms", 0)) > time.time() * 1000:
                raise self._refuse(current)
            else:
                log.info("runner lease of %s on %s expired; taking it over", self.pipeline_id, self.table)
        self._write()
        time.sleep(LEASE_SETTLE_SECONDS)  # let a runner that raced us land its write, then read back
        current = self._current()
        if current is None or current.get("owner") != self.owner:
            raise self._refuse(current or {})

    def renew(self) -> None:
        """Extend the lease once half of it has passed; raise if another runner took it."""
        if self.expires_at_ms - time.time() * 1000 > self.lease_seconds * 500:
            return
        current = self._current()
        if current is not None and current.get("owner") != self.owner:
            raise self._refuse(current)
        self._write()

    def release(self) -> None:
        """Remove the lease if it is still ours (a clean stop)."""
        try:
            current = self._current()
            if current is not None and current.get("owner") == self.owner:
                self.jtable.updateProperties().remove(self.key).commit()
        except Exception:
            log.debug("could not release the runner lease", exc_info=True)


def lock_config(config: PipelineConfig) -> PipelineConfig:
    """The config a RunnerLock holds the pipeline by: a routing pipeline's is its dead-letter table."""
    if not config.routes_tables or config.dead_letter is None:
        return config
    return dataclasses.replace(config, table=dataclasses.replace(config.table, name=config.dead_letter))


class RunnerLock:
    """Holds a pipeline for one runner: a flock for a local warehouse, else a table lease."""

    def __init__(self, config: PipelineConfig) -> None:
        self.config = config
        self._stack = contextlib.ExitStack()
        self.lease: TableLease | None = None

    def acquire(self, spark: SparkSession | None = None) -> None:
        """Hold the pipeline, or raise PipelineAlreadyRunningError. Without `spark`, only a local
        warehouse can be locked (the lease is taken when a session is given)."""
        warehouse = local_warehouse(self.config, spark)
        if warehouse is not None:
            self._stack.enter_context(hold_local(warehouse, self.config.table.name, self.config.pipeline))
            return
        if spark is None:
            return
        from icetide.table.iceberg import load_table

        self.lease = TableLease(load_table(spark, self.config.table.name), self.config.pipeline, self.config.table.name)
        self.lease.acquire()

    def renew(self) -> None:
        """Between batches: keep the lease alive (a flock needs nothing)."""
        if self.lease is not None:
            self.lease.renew()

    def release(self) -> None:
        """Let go of the pipeline."""
        if self.lease is not None:
            self.lease.release()
            self.lease = None
        self._stack.close()
