"""The one signal a fast path gives when it does not stage a batch: `Fallback`, with its reason.

Every pipeline stages a batch on a fast path (one Spark job of Python tasks that read, decode and
write the files) where it can, and otherwise on the Spark path (decode in Spark, write through
the sink). A fast path that cannot take a pipeline, a table or a batch returns a `Fallback`; its
reason is logged and carried into the batch's metrics line as `path: "spark: <reason>"`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

FAST_PATH = "fast"


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
