"""The one signal a fast path gives when it does not stage a batch: `Fallback`, with its reason.

Every pipeline stages a batch on a fast path (one Spark job of Python tasks that read, decode and
write the files) where it can, and otherwise on the Spark path (decode in Spark, write through
the sink). A fast path that cannot take a pipeline, a table or a batch returns a `Fallback`; its
reason is logged and carried into the batch's metrics line as `path: "spark: <reason>"`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from icetide.errors import IcetideError, TransientError

FAST_PATH = "fast"
TABLES_NAMED = 3  # a failure's line names this many of the batch's tables, then counts the rest


@dataclass(frozen=True)
class Fallback:
    """Why a batch runs on the Spark path; or, with `new_tables`, that tables must be created from
    these (key, value) samples before the fast path runs the batch again."""

    reason: str
    new_tables: dict[str, list[tuple[bytes | None, bytes]]] = field(default_factory=dict)

    @property
    def path(self) -> str:
        """The metrics line's `path` of a batch that fell back for this reason."""
        return f"spark: {self.reason}"


def batch_place(pipeline: str, tables: Sequence[str]) -> str:
    """Where a batch failed, as its error line starts: the pipeline and the batch's tables (the
    first TABLES_NAMED of them, sorted), or the pipeline alone when they are not known."""
    if not tables:
        return f"pipeline {pipeline}"
    names = sorted(tables)
    shown = ", ".join(names[:TABLES_NAMED])
    if len(names) > TABLES_NAMED:
        shown += f" and {len(names) - TABLES_NAMED} more"
    return f"pipeline {pipeline}, table{'s' if len(names) > 1 else ''} {shown}"


@contextmanager
def failures_named(place: str) -> Iterator[None]:
    """A fast path's failed Spark job (an IcetideError, its trace already in the debug log) raised
    as one line that starts with `place` (see `batch_place`). A transient error, the source's that
    names its topic, is raised as it is: it keeps restarting the run."""
    try:
        yield
    except TransientError:
        raise
    except IcetideError as exc:  # the same class: a TerminalError (refused credentials) stays terminal
        raise type(exc)(f"{place}: {exc}") from exc
