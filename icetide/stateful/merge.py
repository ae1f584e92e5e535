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
LATEST = "_icetide_latest"  # the latest event by order: its op, batch time (and row, engine `last`)
FIRST_SEEN = "_icetide_first_seen"
LAST_SEEN = "_icetide_last_seen"
LAST_DELETE = "_icetide_last_delete"  # the key's latest DELETE event: its order `o`, batch time `n` (negated)
COUNTED_AT = "_icetide_counted_at"  # the last batch with a non-zero input to any sum or count column
COUNTING = ("sum", "count")  # functions that count a repeated event twice
SHARED = ("first", "last")  # functions whose columns share one struct: they take one event's values
RESETTING = ("last", "last_non_null")  # functions that start afresh after the key's latest DELETE
MERGE_KEYS = {"engine", "columns"}  # the `merge` block's keys


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
        extra = sorted(set(d) - MERGE_KEYS)
        if extra:
            raise ConfigError(f"{where}{extra[0]}: unknown key (allowed: {', '.join(sorted(MERGE_KEYS))})")
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

    def counts_duplicates(self) -> bool:
        """Whether a repeated event changes the merge (sum, count); every other function ignores it."""
        return self.engine == "aggregate" and any(f in COUNTING for f in self.functions.values())

    def check_columns(self, columns: list[str]) -> None:
        """Every column named in the spec must be a value column of the events."""
        for column in self.functions:
            if column not in columns:
                raise ConfigError(f"merge.columns.{column}: not a value column of the events ({', '.join(columns)})")


def aggregations(spec: MergeSpec, values: list[str], order: Column, op: Column) -> list[Column]:
    """The aggregate expressions of a key's state: merged values with the batch each last changed
    in, the latest event's op, and the first and last batch the key was seen in.

    Each is a plain min/max/sum/count, most over a struct whose first field orders: one compact
    buffer per column (one for all `first` columns, one for all `last` columns), cheaper in the
    state store than max_by/min_by pairs (docs/stateful.md).
    A struct's last field is the batch time, negated where `max` picks: among equal events the
    earliest batch wins, so an event delivered again changes nothing and is not written again.
    """
    from pyspark.sql import functions as F

    at = F.col(BATCH_TIME)
    deleting = F.coalesce(op == F.lit("DELETE"), F.lit(False))  # a null op is an UPSERT
    latest = [order.alias("o"), op.alias("op")]
    if spec.engine == "last":
        latest += [F.col(_q(v)).alias(f"v{i}") for i, v in enumerate(values)]
    out = [
        F.min(at).alias(FIRST_SEEN),
        F.max(at).alias(LAST_SEEN),
        F.max(F.struct(*latest, _earliest_wins(at))).alias(LATEST),
        F.max(F.when(deleting, F.struct(order.alias("o"), _earliest_wins(at)))).alias(LAST_DELETE),
    ]
    if spec.engine != "last":
        # A DELETE's values (a CDC before-image) describe the row it removes: never merged.
        live = ~deleting
        for function, columns in shared_structs(spec, values).items():
            out.append(_shared_aggregate(function, columns, order, at, live))
        for v in values:
            if spec.function(v) not in SHARED:
                out.append(column_aggregate(spec.function(v), v, order, at, live))
        counted = [F.col(_q(v)) for v in values if spec.function(v) in COUNTING]
        if counted:
            out.append(F.max(F.when(_any_input(spec, values) & live, at)).alias(COUNTED_AT))
    return out


def shared_structs(spec: MergeSpec, values: list[str]) -> dict[str, list[str]]:
    """The columns merged by `first` and by `last`, in `values` order: the columns of one function
    all take the same event's values (the earliest or the latest by order), so they share one
    struct and one aggregate. The benchmark's merge had three `first` aggregates and now has one:
    about 1.05-1.2x on the stage alone, in noisy side-by-side runs (docs/stateful.md)."""
    out: dict[str, list[str]] = {}
    for v in values:
        if spec.function(v) in SHARED:
            out.setdefault(spec.function(v), []).append(v)
    return out


def _shared_aggregate(function: str, columns: list[str], order: Column, at: Column, live: Column) -> Column:
    from pyspark.sql import functions as F

    fields = [order.alias("o"), *[F.col(_q(c)).alias(f"v{i}") for i, c in enumerate(columns)]]
    if function == "first":
        return F.min(F.when(live, F.struct(*fields, F.unix_micros(at).alias("n")))).alias(_shared_name(function))
    return F.max(F.when(live, F.struct(*fields, _earliest_wins(at)))).alias(_shared_name(function))


def _shared_name(function: str) -> str:
    return f"_icetide_{function}"


def _earliest_wins(at: Column) -> Column:
    from pyspark.sql import functions as F

    return (-F.unix_micros(at)).alias("n")


def _any_input(spec: MergeSpec, values: list[str]) -> Column:
    """An event that changes a sum (a non-zero value) or a count (any value) of the key."""
    from functools import reduce

    from pyspark.sql import functions as F

    inputs = []
    for v in values:
        c = F.col(_q(v))
        if spec.function(v) == "sum":
            inputs.append(c.isNotNull() & (c != F.lit(0)))
        elif spec.function(v) == "count":
            inputs.append(c.isNotNull())
    return reduce(lambda a, b: a | b, inputs)


def column_aggregate(function: str, name: str, order: Column, at: Column, live: Column) -> Column:
    """The state of one column under `function`: the aggregate `_icetide_m_<name>` over the
    `live` events (not DELETEs). Ties keep the earlier batch: an equal value is no change. Sums
    and counts record their changes in `_icetide_counted_at`, one aggregate for all of them."""
    from pyspark.sql import functions as F

    c = F.when(live, F.col(_q(name)))
    present = c.isNotNull()
    m = _merged_name(name)
    if function == "last":
        return F.max(F.when(live, F.struct(order.alias("o"), c.alias("v"), _earliest_wins(at)))).alias(m)
    if function == "last_non_null":
        return F.max(F.when(present, F.struct(order.alias("o"), c.alias("v"), _earliest_wins(at)))).alias(m)
    if function == "first":
        return F.min(F.when(live, F.struct(order.alias("o"), c.alias("v"), F.unix_micros(at).alias("n")))).alias(m)
    if function == "max":
        return F.max(F.when(present, F.struct(c.alias("v"), _earliest_wins(at)))).alias(m)
    if function == "min":
        return F.min(F.when(present, F.struct(c.alias("v"), F.unix_micros(at).alias("n")))).alias(m)
    if function == "sum":
        return F.sum(c).alias(m)
    if function == "count":
        return F.count(c).alias(m)
    raise ConfigError(f"merge: unknown function {function!r}")


def _merged_name(column: str) -> str:
    return f"_icetide_m_{column}"


def merged_columns(spec: MergeSpec, values: list[str]) -> list[Column]:
    """The merged value columns, selected from the aggregation's output."""
    from pyspark.sql import functions as F

    if spec.engine == "last":
        return [F.col(f"{LATEST}.v{i}").alias(v) for i, v in enumerate(values)]
    shared = shared_structs(spec, values)
    out = []
    for v in values:
        function = spec.function(v)
        state = F.col(_shared_name(function) if function in SHARED else _merged_name(v))
        if function in SHARED:
            value = state[f"v{shared[function].index(v)}"]
        else:
            value = state if function in COUNTING else state["v"]
        if function in RESETTING:  # a value from before the key's latest DELETE is gone with it
            deleted = F.col(LAST_DELETE)
            value = F.when(deleted.isNull() | (state["o"] >= deleted["o"]), value)
        out.append(value.alias(v))
    return out


def delete_arrived_at() -> Column:
    """The batch time in which the key's latest DELETE (by order) arrived; null without one."""
    from pyspark.sql import functions as F

    return F.timestamp_micros(-F.col(LAST_DELETE)["n"])


def last_op() -> tuple[Column, Column]:
    """(the op of the key's latest event by order, the batch time it arrived in)."""
    from pyspark.sql import functions as F

    return F.col(f"{LATEST}.op"), F.timestamp_micros(-F.col(f"{LATEST}.n"))


def _column_changed_at(function: str, name: str) -> Column:
    from pyspark.sql import functions as F

    n = F.col(_shared_name(function) if function in SHARED else _merged_name(name))["n"]
    return F.timestamp_micros(n if function in ("first", "min") else -n)


def changed_at(spec: MergeSpec, values: list[str]) -> Column:
    """The batch time in which the merged row last changed."""
    from pyspark.sql import functions as F

    if spec.engine == "last" or not values:
        return last_op()[1]
    # A newer event whose fields merge to the same values (all null under `partial`, say) is no change.
    shared = shared_structs(spec, values)
    changes = [_column_changed_at(f, c[0]) for f, c in shared.items()]
    changes += [_column_changed_at(spec.function(v), v) for v in values if spec.function(v) not in (*COUNTING, *SHARED)]
    if any(spec.function(v) in COUNTING for v in values):
        changes.append(F.col(COUNTED_AT))
    return F.greatest(*changes) if len(changes) > 1 else changes[0]


def _q(name: str) -> str:
    return f"`{name}`"
