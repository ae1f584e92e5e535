"""How a batch's rows are spread over writer tasks, so streaming writes do not make small files.

Modes (seed 003, section 4):
- `key`: hash by key; fast, but every task touches every partition: small files in the long tail.
- `partition`: hash by partition; one file per partition, but a hot partition back-pressures.
- `dynamic` (default): one aggregation pass over the batch gives each partition's estimated
  bytes; a partition gets `ceil(bytes / target file size)` slots (capped by the parallelism),
  slots are packed onto tasks largest first, and keys are hashed within a partition's slots.
  A batch whose size Spark already knows to be far below one target file skips that pass: its
  plan would be one task anyway (one file per partition), so it goes to one task directly.
- `none`: Spark's current partitioning; duplicate keys are collapsed by a Spark aggregation.

The planning below is pure; `distribute` applies a plan to a DataFrame.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

Distribution = Literal["none", "key", "partition", "dynamic"]
DISTRIBUTIONS: tuple[str, ...] = ("none", "key", "partition", "dynamic")
TASK_COLUMN = "_icetide_task"
# A batch Spark estimates at no more than target file size / this margin skips the statistics
# pass. The margin absorbs estimates below the bytes written (Spark's columnar cache reports its
# compressed size); an estimate that is still too low costs parallelism, never correctness: the
# one task still rolls files at the target size.
SMALL_BATCH_MARGIN = 16
# Estimated (uncompressed) bytes a writer task is worth: a batch of at least twice this is shared
# by two or more tasks even when its files would fit one task. A 2M-row INSERT batch (48 hourly
# partitions, about 100 MB) went to one task and ran at 0.51x Spark's native append on 2 cores
# (docs/benchmarks.md, 2026-11-24).
MIN_TASK_BYTES = 8 * 1024 * 1024
SPARK_HASH_SEED = 42  # the seed of Spark's hash() and of HashPartitioning


@dataclass(frozen=True)
class PartitionStats:
    """One partition's share of a batch."""

    values: tuple[object, ...]
    rows: int
    estimated_bytes: int


@dataclass(frozen=True)
class SlotPlan:
    """Writer tasks for a batch: each partition's slots, as task numbers in [0, tasks)."""

    tasks: int
    slots: dict[tuple[object, ...], list[int]]
    estimated: bool = False  # planned from Spark's size estimate, without the statistics pass (slots empty)

    def files_expected(self) -> int:
        """Data files the plan aims for: one per slot."""
        return sum(len(s) for s in self.slots.values())


def slots_for_partition(estimated_bytes: int, target_file_size: int, parallelism: int) -> int:
    """ceil(bytes / target file size), at least 1 and at most the writer parallelism."""
    return max(1, min(parallelism, math.ceil(estimated_bytes / max(1, target_file_size))))


def plan_slots(stats: Sequence[PartitionStats], *, target_file_size: int, parallelism: int) -> SlotPlan:
    """Give each partition its slots and pack the slots onto tasks, largest partitions first.

    Tasks = the hottest partition's slots, the batch's bytes over the target size, or its bytes
    over MIN_TASK_BYTES, whichever is most, capped by the parallelism and the number of slots.
    A slot always goes to the least-loaded task not already holding a slot of the same
    partition, so a hot partition spreads over distinct tasks and small ones share tasks: a
    long-tail partition costs one file, and a small batch few tasks.
    """
    if parallelism < 1:
        raise ValueError("parallelism must be at least 1")
    ordered = sorted(stats, key=lambda s: s.estimated_bytes, reverse=True)
    wanted = {s.values: slots_for_partition(s.estimated_bytes, target_file_size, parallelism) for s in ordered}
    # Enough tasks for the hottest partition's slots, for the batch's bytes at one target file
    # each, and for every core once the batch is worth sharing (MIN_TASK_BYTES a task); never
    # more than there are slots. Small partitions share tasks instead of each starting its own;
    # the files are the slots whatever the task count.
    total_bytes = sum(s.estimated_bytes for s in stats)
    by_bytes = max(math.ceil(total_bytes / max(1, target_file_size)), total_bytes // MIN_TASK_BYTES)
    tasks = max(1, min(parallelism, sum(wanted.values()), max(max(wanted.values(), default=1), by_bytes)))
    loads: list[tuple[float, int]] = [(0.0, t) for t in range(tasks)]
    heapq.heapify(loads)
    slots: dict[tuple[object, ...], list[int]] = {}
    for s in ordered:
        n = min(wanted[s.values], tasks)
        share = s.estimated_bytes / n
        taken = [heapq.heappop(loads) for _ in range(n)]
        slots[s.values] = sorted(t for _, t in taken)
        for load, t in taken:
            heapq.heappush(loads, (load + share, t))
    return SlotPlan(tasks, slots)


def _rotl32(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & 0xFFFFFFFF


def spark_hash_int(value: int, seed: int = SPARK_HASH_SEED) -> int:
    """Spark's Murmur3 hash of a 32-bit int (what `hash(cast(x as int))` returns), signed."""
    k1 = (value & 0xFFFFFFFF) * 0xCC9E2D51 & 0xFFFFFFFF
    k1 = _rotl32(k1, 15) * 0x1B873593 & 0xFFFFFFFF
    h1 = (seed & 0xFFFFFFFF) ^ k1
    h1 = (_rotl32(h1, 13) * 5 + 0xE6546B64) & 0xFFFFFFFF
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & 0xFFFFFFFF
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & 0xFFFFFFFF
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 >= 1 << 31 else h1


def task_routing_values(tasks: int) -> list[int]:
    """For each task t, an int v with pmod(hash(v), tasks) == t.

    `repartition(tasks, col)` sends a row to pmod(hash(col), tasks); writing v_t into the column
    therefore sends the row to exactly task t, so a plan's slots map one-to-one onto tasks.
    """
    found: dict[int, int] = {}
    v = 0
    while len(found) < tasks:
        found.setdefault(spark_hash_int(v) % tasks, v)
        v += 1
    return [found[t] for t in range(tasks)]


def plan_estimated_bytes(df: DataFrame) -> int | None:
    """Spark's estimate of a DataFrame's size in bytes, from its optimized plan; no job runs.

    Exact row counts and sizes for a materialized cache, file sizes for scans; unknown sources
    (RDDs) report Spark's default size (about 8 EB). None if the plan gives no estimate.
    """
    try:
        return int(df._jdf.queryExecution().optimizedPlan().stats().sizeInBytes())
    except Exception:  # an estimate is an optimization only
        return None


def is_small_batch(estimated_bytes: int | None, target_file_size: int) -> bool:
    """True when a batch is so far below one target file that its plan is a single task."""
    return estimated_bytes is not None and 0 <= estimated_bytes * SMALL_BATCH_MARGIN <= target_file_size


def estimated_row_bytes(df: DataFrame, columns: Sequence[str]) -> Column:
    """A cheap per-row estimate of the bytes a row adds to a file, before compression."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    fixed = 0
    variable: list[Column] = []
    for field in df.schema.fields:
        if field.name not in columns:
            continue
        dt = field.dataType
        if isinstance(dt, T.StringType | T.BinaryType):
            variable.append(F.coalesce(F.octet_length(F.col(field.name)), F.lit(0)))
        elif isinstance(dt, T.BooleanType | T.ByteType):
            fixed += 1
        elif isinstance(dt, T.ShortType):
            fixed += 2
        elif isinstance(dt, T.IntegerType | T.FloatType | T.DateType):
            fixed += 4
        elif isinstance(dt, T.DecimalType):
            fixed += 16
        elif isinstance(dt, T.LongType | T.DoubleType | T.TimestampType | T.TimestampNTZType):
            fixed += 8
        else:
            fixed += 32
    total: Column = F.lit(fixed)
    for v in variable:
        total = total + v
    return total


def distribute(
    df: DataFrame,
    *,
    mode: str,
    key: Sequence[str],
    partition_columns: Sequence[str],
    parallelism: int,
    target_file_size: int,
    compression_ratio: float,
    value_columns: Sequence[str],
    estimated_bytes: int | None = None,
    cached_input: bool = False,
) -> tuple[DataFrame, SlotPlan | None]:
    """Repartition a prepared batch for the writers; all changes to one key reach one task.

    `estimated_bytes` is Spark's size estimate of `df` (plan_estimated_bytes): for `dynamic`, a
    small batch (is_small_batch) goes to one task without the statistics pass. A `cached_input`
    is read by that one task directly (no shuffle); otherwise a shuffle keeps the reading parallel.
    """
    from pyspark.sql import functions as F

    if mode == "key":
        return df.repartition(parallelism, *key), None
    if mode == "partition":
        cols = list(partition_columns) or list(key)
        return df.repartition(parallelism, *cols), None
    if mode != "dynamic":
        raise ValueError(f"unknown distribution {mode!r}")
    if is_small_batch(estimated_bytes, target_file_size):
        return (df.coalesce(1) if cached_input else df.repartition(1)), SlotPlan(1, {}, estimated=True)
    row_bytes = estimated_row_bytes(df, value_columns)
    grouped = df.groupBy(*partition_columns) if partition_columns else df.groupBy()
    stats_rows = grouped.agg(F.count(F.lit(1)).alias("rows"), F.sum(row_bytes).alias("raw")).collect()
    stats = [
        PartitionStats(tuple(r[c] for c in partition_columns), int(r["rows"]), int((r["raw"] or 0) * compression_ratio))
        for r in stats_rows
    ]
    if not stats:
        return df, None
    plan = plan_slots(stats, target_file_size=target_file_size, parallelism=parallelism)
    routing = task_routing_values(plan.tasks)
    spark = df.sparkSession
    key_hash = F.xxhash64(*key)
    if not partition_columns:
        values = [routing[t] for t in plan.slots[()]]
        choice = F.element_at(
            F.array(*[F.lit(v) for v in values]), (F.pmod(key_hash, F.lit(len(values))) + 1).cast("int")
        )
        return df.withColumn(TASK_COLUMN, choice).repartition(plan.tasks, TASK_COLUMN).drop(TASK_COLUMN), plan
    from pyspark.sql import types as T

    schema = df.select(*partition_columns).schema.add("_icetide_slots", T.ArrayType(T.IntegerType()))
    plan_rows = [(*values, [routing[t] for t in tasks]) for values, tasks in plan.slots.items()]
    plan_df = spark.createDataFrame(plan_rows, schema)
    cond = [df[c].eqNullSafe(plan_df[c]) for c in partition_columns]
    joined = df.join(F.broadcast(plan_df), on=cond, how="left").select(df["*"], plan_df["_icetide_slots"])
    slots = F.col("_icetide_slots")
    choice = F.element_at(slots, (F.pmod(key_hash, F.size(slots)) + 1).cast("int"))
    routed = joined.withColumn(TASK_COLUMN, choice).drop("_icetide_slots")
    return routed.repartition(plan.tasks, TASK_COLUMN).drop(TASK_COLUMN), plan
