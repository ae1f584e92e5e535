"""The exceptions icetide raises: one root, and markers that say whether a retry can help."""

from __future__ import annotations


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


class JavaNotFoundError(TerminalError):
    """No usable Java runtime for Spark."""


class CommitConflictError(TransientError):
    """A commit kept losing races to other writers until the retry budget ran out.

    Nothing was committed and the batch's files were deleted; writing the batch again is safe.
    """


class CommitFailedError(TerminalError):
    """The catalog definitely rejected the commit; the batch's files were deleted."""


class CommitStateUnknownError(IcetideError):
    """The catalog may or may not have applied the commit.

    Never retried automatically (a retry could land the batch twice) and no file is deleted:
    check the table's last committed batch for the pipeline before writing again.
    """


class SourceError(TransientError):
    """A source could not be read."""
