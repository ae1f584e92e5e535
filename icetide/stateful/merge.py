"""Merge engines: how the events of one key merge into its row, as Spark aggregate expressions.

Every value comes with the batch in which it last changed ("changed at"), computed by the same
streaming aggregation: the stage emits a key only when one of its values changed in the current
micro-batch. Batches are told apart by `current_timestamp()`, which Structured Streaming fixes
per micro-batch (and records in its offset log, so a replayed batch sees the same time).

- `last`: the whole row of the latest event by `order_by`;
- `partial`: per column, the latest non-null value: a newer event's non-null fields overwrite,
  an older event never overwrites a newer value;
- `aggregate`: a function per column (max, min, sum, count, first, last, last_non_null); columns
  without one merge as `last_non_null`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from icetide.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import Column

ENGINES = ("last", "partial", "aggregate")
FUNCTIONS = ("max", "min", "sum", "count", "first", "last", "last_non_null")
BATCH_TIME = "_icetide_batch_time"  # current_timestamp() of the micro-batch an event arrived in
ROW = "_icetide_row"
LAST_OP = "_icetide_last_op"
LAST_OP_AT = "_icetide_last_op_at"
FIRST_SEEN = "_icetide_first_seen"
LAST_SEEN = "_icetide_last_seen"
LAST_DELETE = "_icetide_last_delete"  # order of the key's latest DELETE event, if any


def changed_at_name(column: str) -> str:
    """The aggregate holding the batch time in which `column`'s merged value last changed."""
    return f"_icetide_at_{column}"


@dataclass(frozen=True)
class MergeSpec:
    """A merge engine and, for `aggregate`, the function of each column."""

    engine: str = "last"
    functions: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ConfigError(f"merge.engine: {self.engine!r} is not one of {', '.join(ENGINES)}")
        if self.functions and self.engine != "aggregate":
            raise ConfigError("merge.columns: per-column functions need engine: aggregate")
        for column, function in self.functions.items():
            if function not in FUNCTIONS:
                raise ConfigError(f"merge.columns.{column}: {function!r} is not one of {', '.join(FUNCTIONS)}")

    @classmethod
    def from_dict(cls, d: Any, *, where: str = "merge.") -> MergeSpec:
        """`{engine: aggregate, columns: {clicks: sum, last_click_time: max}}`, or just the engine name."""
        if isinstance(d, str):
            return cls(engine=d)
        if not isinstance(d, Mapping):
            raise ConfigError(f"{where.rstrip('.')}: expected an engine name or a mapping with engine and columns")
        extra = sorted(set(d) - {"engine", "columns"})
        if extra:
            raise ConfigError(f"{where}{extra[0]}: unknown key (allowed: columns, engine)")
        columns = d.get("columns") or {}
        if not isinstance(columns, Mapping):
            raise ConfigError(f"{where}columns: expected a mapping of column -> function")
        return cls(engine=str(d.get("engine", "last")), functions={str(k): str(v) for k, v in columns.items()})

    def function(self, column: str) -> str:
        """How `column` merges."""
        if self.engine == "last":
            return "last"
        if self.engine == "partial":
            return "last_non_null"
        return self.functions.get(column, "last_non_null")

    def check_columns(self, columns: list[str]) -> None:
        """Every column named in the spec must be a value column of the events."""
        for column in self.functions:
            if column not in columns:
                raise ConfigError(f"merge.columns.{column}: not a value column of the events ({', '.join(columns)})")


def _ordering(order: Column, when: Column | None = None) -> Column:
    from pyspark.sql import functions as F

    return order if when is None else F.when(when, order)


def aggregations(spec: MergeSpec, values: list[str], order: Column, op: Column) -> list[Column]:
    """The aggregate expressions of a key's state: merged values, when each changed, the last op,
    and the first and last batch the key was seen in."""
    from pyspark.sql import functions as F

    at = F.col(BATCH_TIME)
    out = [
        F.min(at).alias(FIRST_SEEN),
        F.max(at).alias(LAST_SEEN),
        F.max_by(op, order).alias(LAST_OP),
        F.max_by(at, order).alias(LAST_OP_AT),
        F.max(F.when(op == F.lit("DELETE"), order)).alias(LAST_DELETE),
    ]
    if spec.engine == "last":
        if values:
            out.append(F.max_by(F.struct(*[F.col(_q(v)) for v in values]), order).alias(ROW))
        return out  # the row changed when the latest event changed: LAST_OP_AT
    for v in values:
        value, changed = column_merge(spec.function(v), F.col(_q(v)), order, at)
        out += [value.alias(v), changed.alias(changed_at_name(v))]
    return out


def column_merge(function: str, c: Column, order: Column, at: Column) -> tuple[Column, Column]:
    """(merged value, batch time of its last change) of one column under `function`.

    Ties keep the earlier batch, so an equal value arriving later is not a change.
    """
    from pyspark.sql import functions as F

    present = c.isNotNull()
    earliest_first = F.struct(c, -F.unix_micros(at))  # among equal values, the earliest batch wins
    if function == "last":
        return F.max_by(c, order), F.max_by(at, order)
    if function == "last_non_null":
        return F.max_by(c, _ordering(order, present)), F.max_by(at, _ordering(order, present))
    if function == "first":
        return F.min_by(c, order), F.min_by(at, order)
    if function == "max":
        return F.max(c), F.max_by(at, F.when(present, earliest_first))
    if function == "min":
        return F.min(c), F.min_by(at, F.when(present, F.struct(c, F.unix_micros(at))))
    if function == "sum":
        return F.sum(c), F.max(F.when(present & (c != F.lit(0)), at))
    if function == "count":
        return F.count(c), F.max(F.when(present, at))
    raise ConfigError(f"merge: unknown function {function!r}")


def merged_columns(spec: MergeSpec, values: list[str]) -> list[Column]:
    """The merged value columns, selected from the aggregation's output."""
    from pyspark.sql import functions as F

    if spec.engine == "last":
        return [F.col(f"{ROW}.{_q(v)}").alias(v) for v in values]
    return [F.col(_q(v)) for v in values]


def changed_at(spec: MergeSpec, values: list[str]) -> Column:
    """The batch time in which the merged row last changed."""
    from pyspark.sql import functions as F

    if spec.engine == "last" or not values:
        return F.col(LAST_OP_AT)
    # A newer event whose fields merge to the same values (all null under `partial`, say) is no change.
    return (
        F.greatest(*[F.col(changed_at_name(v)) for v in values])
        if len(values) > 1
        else F.col(changed_at_name(values[0]))
    )


def _q(name: str) -> str:
    return f"`{name}`"
