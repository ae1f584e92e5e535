"""The exceptions icetide raises: one root, and markers that say whether a retry can help.

Every error icetide raises on purpose is here, under `IcetideError`; the module that raises one
imports it from here (and its old home still names it, for code that imported it from there). An
error that subclasses a builtin too (`WriteError`, `BadOperationError`, `DeletionVectorError`)
keeps that base, so `except ValueError` around the code that raises it still catches it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from icetide.maintenance.results import CompactionResult

# Prefixed to the message of an error raised inside a Spark task, so the driver can find it again in
# the text of the Py4J / PythonException that wraps it (write/spark_write.py, sources/base.py).
EXECUTOR_ERROR_MARKER = "[icetide] "  # WriteError
EXECUTOR_SOURCE_ERROR_MARKER = "[icetide-source] "  # ExecutorSourceError
EXECUTOR_SOURCE_ACCESS_MARKER = "[icetide-source-access] "  # ExecutorSourceAccessError: no retry can help


class IcetideError(Exception):
    """Root of every error icetide raises on purpose; its message is one line for the user."""


class TransientError(IcetideError):
    """Marker: the same call may succeed if retried later."""


class TerminalError(IcetideError):
    """Marker: retrying the same call cannot help; something must change first."""


class ConfigError(TerminalError):
    """Configuration is invalid; the message names the key."""


class SchemaError(TerminalError):
    """A batch or table definition does not fit the table; the message names the column."""


class SchemaEvolutionError(SchemaError):
    """A batch column cannot become a table column without converting its values (e.g. bigint to
    string), or the table's schema changed under a batch being written; nothing was committed."""


class DriverStoppedError(TerminalError):
    """The Spark driver's JVM under this process exited (most often out of memory): nothing more
    can run in this Spark session, so a long-running command stops instead of failing forever."""


def driver_stopped(exc: BaseException) -> bool:
    """Did `exc` come from a Spark driver whose JVM is gone (py4j can no longer reach it)?"""
    from py4j.protocol import Py4JNetworkError

    seen: BaseException | None = exc
    for _ in range(20):  # a cause chain, bounded
        if seen is None:
            return False
        if isinstance(seen, Py4JNetworkError | ConnectionRefusedError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class JavaNotFoundError(TerminalError):
    """No usable Java runtime for Spark."""


class UnsupportedSparkError(TerminalError):
    """The installed PySpark is a version icetide does not run on; the message names the ones it does."""


class NotInstalledError(IcetideError):
    """An optional dependency is missing; the message is the line that installs it."""


class DependencyError(TransientError):
    """A JVM dependency could not be fetched from its Maven repository (unreachable, or other bytes
    than the pinned ones); the message names its coordinates and the repository."""


class CommitConflictError(TransientError):
    """A commit kept losing races to other writers until the retry budget ran out.

    Nothing was committed and the batch's files were deleted; writing the batch again is safe.
    """


class CompactionConflictError(CommitConflictError):
    """A compaction commit was rejected because of a concurrent change to its files.

    The message names Iceberg's conflict (e.g. "found new delete for replaced data file").
    Nothing of the conflicting groups was committed and their new files were deleted; planning
    again is safe. `result` holds what the job did commit (partial progress) and skipped.
    """

    def __init__(self, message: str, *, result: CompactionResult) -> None:
        super().__init__(message)
        self.result = result


class CommitFailedError(TerminalError):
    """The catalog definitely rejected the commit; the batch's files were deleted."""


class CommitStateUnknownError(TransientError):
    """The catalog may or may not have applied the commit, and re-reading it did not tell.

    No file is deleted, and the same commit is never simply sent again (it could land twice):
    the pipeline's last committed batch decides. `icetide run` restarts from it (backing off),
    which resolves the state once the table can be read again.
    """


class CatalogUnavailableError(TransientError):
    """The catalog could not be opened (unreachable, refused the credentials); the message says
    which catalog and why. Retrying helps once it is reachable, or the settings are fixed."""


class SourceError(TransientError):
    """A source could not be read."""


class ExecutorSourceError(SourceError):
    """A SourceError raised inside a Spark task; its message carries the marker for the driver."""

    def __init__(self, message: str) -> None:
        super().__init__(EXECUTOR_SOURCE_ERROR_MARKER + message)


class SourceAccessError(TerminalError):
    """A source (or the schema registry it needs) refused icetide's credentials: terminal."""


class ExecutorSourceAccessError(SourceAccessError):
    """A SourceAccessError raised inside a Spark task; its message carries the marker for the driver."""

    def __init__(self, message: str) -> None:
        super().__init__(EXECUTOR_SOURCE_ACCESS_MARKER + message)


class DataLossError(TerminalError):
    """Source records were removed (retention, a recreated topic) before the pipeline read them.

    Raised with `on_data_loss: fail` (the default); `on_data_loss: skip` records each lost range
    in the dead-letter table instead and goes on.
    """


class TooManyBadRecordsError(TerminalError):
    """A batch's share of bad records exceeded max_bad_fraction; nothing of it was committed."""


class PipelineAlreadyRunningError(TerminalError):
    """Another process runs this pipeline on this table; its host and pid are in the message."""


class PipelineStateAtRiskError(TerminalError):
    """Expiring would drop the only record of a pipeline's last batch; nothing was expired."""


class SnapshotGoneError(TransientError):
    """A snapshot a job started from is no longer an ancestor of the current one (rollback, expiry)."""


class WriteError(IcetideError, RuntimeError):
    """A task could not write its rows; the message (after the marker) is for the user."""

    def __init__(self, message: str) -> None:
        super().__init__(EXECUTOR_ERROR_MARKER + message)


class BadOperationError(IcetideError, ValueError):
    """A row carries an `_op` that is not INSERT, UPSERT or DELETE."""


class DeletionVectorError(IcetideError, ValueError):
    """Bytes that are not a valid deletion vector or Puffin file."""


def is_transient(exc: BaseException) -> bool:
    """May running the same step again succeed? True only for errors marked TransientError."""
    return isinstance(exc, TransientError)


def one_line(exc: BaseException) -> str:
    """The most telling single line of an exception, even one wrapped by py4j or a Python worker.

    Java and worker errors arrive as pages of stack trace; the line a user needs is usually the
    deepest `SomethingException: message` (the root cause), so that is the one returned.
    """
    if isinstance(exc, IcetideError):
        return str(exc)
    text = str(exc).strip()
    # py4j puts the Java exception on a line of its own after ": " ("...calling o53.sql.\n: org...").
    causes = re.findall(r"^\s*(?::\s*)?(?:Caused by: )?((?:[\w.$]+(?:Error|Exception)): .+)$", text, flags=re.MULTILINE)
    if causes:
        return causes[-1].strip()
    return text.splitlines()[0] if text else type(exc).__name__
