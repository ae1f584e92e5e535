"""What every icetide source shares: the planning contract and how executor-side failures reach the driver."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Protocol

from icetide.errors import (
    EXECUTOR_SOURCE_ACCESS_MARKER,
    EXECUTOR_SOURCE_ERROR_MARKER,
    ExecutorSourceError,
    IcetideError,
    SourceAccessError,
    SourceError,
)
from icetide.errors import ExecutorSourceAccessError as ExecutorSourceAccessError  # still importable from here

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class BatchSource(Protocol):
    """A source the micro-batch runner drives: plan on the driver, read on the executors.

    `plan(position, limit)` returns the items of the next batch and the position just after them;
    the position is JSON-able and is committed with the batch's data, so a restart from the
    committed position reads exactly what was not committed yet. `read` turns planned items into
    a lazy DataFrame: every action on it reads the source again, so persist it if used twice.
    """

    def plan(self, position: Any, limit: int, /) -> tuple[list[Any], dict[str, Any]]: ...

    def read(self, spark: SparkSession, items: list[Any], /) -> DataFrame: ...


def source_error_in(exc: BaseException) -> IcetideError | None:
    """The SourceError a Spark task raised, recovered from the (Java- or worker-wrapped) exception.

    Returns None when `exc` does not come from a source read. Reads are lazy, so such errors
    surface in whichever action first evaluates the source DataFrame (often the sink's write).
    """
    if isinstance(exc, SourceError) and not isinstance(exc, ExecutorSourceError):
        return exc
    access = re.search(re.escape(EXECUTOR_SOURCE_ACCESS_MARKER) + r"([^\n]+)", str(exc))
    if access:
        return SourceAccessError(access.group(1).strip())
    match = re.search(re.escape(EXECUTOR_SOURCE_ERROR_MARKER) + r"([^\n]+)", str(exc))
    return SourceError(match.group(1).strip()) if match else None


def raise_source_error_in(exc: BaseException) -> None:
    """Raise the SourceError a Spark task raised inside `exc` (see `source_error_in`), if any.

    Used where a batch's Spark actions fail: a source's failure reaches supervision as the
    SourceError it is (transient, the run restarts), whatever action evaluated the read."""
    source_error = source_error_in(exc)
    if source_error is not None:
        raise source_error from exc
