"""Shared bits of the benchmarks: a session, timing, a table printer, recording results, and timed
reads of an Iceberg table in Spark, DuckDB and PyIceberg."""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import random
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "benchmarks.md"


def kafka_broker(workdir: Path) -> Any:
    """The benchmarks' Kafka broker, a context manager yielding its bootstrap servers: the one place
    that names the broker (Apache Kafka, one KRaft node, its log and its own log file in `workdir`)."""
    from tests.kafka_broker import BENCH_JVM_OPTIONS, apache_kafka

    return apache_kafka(workdir, jvm_options=BENCH_JVM_OPTIONS)


def bench_session(warehouse: str, memory: str = "8g") -> Any:
    """A local Spark session sized for benchmarks on this machine."""
    import icetide

    return icetide.spark_session(
        warehouse=warehouse,
        master="local[*]",
        conf={"spark.driver.memory": memory, "spark.sql.shuffle.partitions": str(max(2, os.cpu_count() or 2))},
    )


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Run fn once; (seconds, result)."""
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def median(values: Sequence[float]) -> float:
    """Median of a non-empty list."""
    return statistics.median(values)


def render_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table, which also reads well in a terminal."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    lines = ["| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |"]
    lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    lines += ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in cells]
    return "\n".join(lines)


def machine() -> str:
    """One line naming the machine a result was measured on."""
    return f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}"


def record(title: str, body: str) -> None:
    """Append a dated section to docs/benchmarks.md."""
    RESULTS.parent.mkdir(exist_ok=True)
    if not RESULTS.exists():
        RESULTS.write_text("# Benchmarks\n\nResults recorded by the scripts in bench/, newest last.\n")
    stamp = datetime.now(UTC).strftime("%Y-%m-%d")
    with RESULTS.open("a") as f:
        f.write(f"\n## {title} ({stamp}; {machine()})\n\n{body}\n")


def parser(doc: str | None) -> argparse.ArgumentParser:
    """An argument parser showing the benchmark's docstring, with --record."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--record", action="store_true", help="append the results to docs/benchmarks.md")
    return p


def in_temp_warehouse(fn: Callable[[str], Any]) -> Any:
    """Run fn(warehouse) in a fresh temporary warehouse folder, removed afterwards."""
    warehouse = tempfile.mkdtemp(prefix="icetide-bench-")
    try:
        return fn(warehouse)
    finally:
        shutil.rmtree(warehouse, ignore_errors=True)


def report(title: str, body: str, *, save: bool) -> None:
    """Print the results; with `save`, append them to docs/benchmarks.md."""
    print(body)
    if save:
        record(title, body)


def produce_waiting(producer: Any, topic: str, **record: Any) -> None:
    """`producer.produce(topic, **record)`, waiting for room while the producer's queue is full."""
    while True:
        try:
            producer.produce(topic, **record)
            return
        except BufferError:
            producer.poll(0.05)


READ_ENGINES = ("spark", "duckdb", "pyiceberg")
UPSERT_SCHEMA = "id BIGINT NOT NULL, v STRING, amount DOUBLE, seq BIGINT"


class UpsertBatches:
    """Upsert batches of `keys` keys over a table whose ids are 0..rows-1: a fifth of each batch
    updates existing ids (drawn at random), the rest are new ids."""

    def __init__(self, rows: int, keys: int, seed: int = 1) -> None:
        self.rng = random.Random(seed)
        self.keys = keys
        self.next_id = rows

    @staticmethod
    def initial(spark: Any, rows: int) -> Any:
        """The table's first `rows` rows, to append."""
        return spark.sql(f"SELECT id, 'v0' v, rand(7) amount, 0L seq FROM range({rows})")

    def batch(self, spark: Any, seq: int) -> Any:
        """Batch `seq`, cached and counted (unpersist it when done)."""
        updates = self.rng.sample(range(self.next_id), self.keys // 5)
        ids = updates + list(range(self.next_id, self.next_id + self.keys - len(updates)))
        self.next_id += self.keys - len(updates)
        rows = [(i, f"v{seq}", self.rng.random(), seq, None) for i in ids]
        df = spark.createDataFrame(rows, f"{UPSERT_SCHEMA}, _op STRING").cache()
        df.count()
        return df


@contextmanager
def duckdb_with_iceberg() -> Iterator[Any]:
    """A DuckDB connection with the iceberg extension loaded, offline, from its wheels (dev extras)."""
    import duckdb

    con = duckdb.connect()
    try:
        for name in ("avro", "iceberg"):  # iceberg needs avro first
            package = importlib.import_module(f"duckdb_extension_{name}")
            folder = os.path.dirname(package.__file__ or "")
            con.execute(
                f"LOAD '{os.path.join(folder, 'extensions', f'v{duckdb.__version__}', f'{name}.duckdb_extension')}'"
            )
        yield con
    finally:
        con.close()


@dataclass(frozen=True)
class ReadTime:
    """One timed read: seconds, or None when the engine refused the table; `capped`: stopped there."""

    seconds: float | None
    capped: bool = False  # stopped at `seconds`; with seconds None: not read (an earlier read was stopped)

    def ratio(self, base: ReadTime) -> float | None:
        """Times `base` (None when either was not measured or `base` was capped)."""
        if self.seconds is None or base.seconds is None or base.capped or not base.seconds:
            return None
        return self.seconds / base.seconds

    def show(self, base: ReadTime | None = None) -> str:
        """`0.42 (1.3x)`, `>60.00 (stopped)`, `not read` or `refused`."""
        if self.seconds is None:
            return "not read" if self.capped else "refused"
        if self.capped:
            return f">{self.seconds:.2f} (stopped)"
        ratio = self.ratio(base) if base is not None else None
        return f"{self.seconds:.2f}" + (f" ({ratio:.1f}x)" if ratio is not None else "")


@dataclass(frozen=True)
class TableReads:
    """Full scan (count and sum over every row) and point lookup of one table in each engine."""

    scan: dict[str, ReadTime]
    lookup: dict[str, ReadTime]
    rows: int  # what Spark counted


@dataclass(frozen=True)
class ReadTarget:
    """A table to read: Spark's name for it, its metadata file (DuckDB and PyIceberg), the snapshot
    to read (None: the current one) and engines not to read (recorded as capped, with no seconds)."""

    table: str
    metadata: str
    snapshot_id: int | None = None
    skip: Sequence[str] = ()


def _readers(
    spark: Any, target: ReadTarget, probe: int | str, con: Any, key_column: str, sum_column: str, counted: list[int]
) -> dict[tuple[str, str], Callable[[], Any]]:
    """(engine, "scan" | "lookup") -> a function doing that read of `target`; Spark's scans append
    their row count to `counted`."""
    from pyiceberg.expressions import EqualTo
    from pyiceberg.table import StaticTable

    table, metadata, snapshot_id = target.table, target.metadata, target.snapshot_id
    at = f" VERSION AS OF {snapshot_id}" if snapshot_id is not None else ""
    scan_of = f"iceberg_scan('{metadata}'" + (f", snapshot_from_id={snapshot_id})" if snapshot_id is not None else ")")
    literal = f"'{probe}'" if isinstance(probe, str) else str(probe)

    def spark_scan() -> Any:
        row = spark.sql(f"SELECT count(*), sum({sum_column}) FROM {table}{at}").collect()[0]
        counted.append(int(row[0]))
        return row

    def spark_lookup() -> Any:
        return spark.sql(f"SELECT * FROM {table}{at} WHERE {key_column} = {literal}").collect()

    def duck_scan() -> Any:
        return con.execute(f"SELECT count(*), sum({sum_column}) FROM {scan_of}").fetchall()

    def duck_lookup() -> Any:
        return con.execute(f"SELECT * FROM {scan_of} WHERE {key_column} = {literal}").fetchall()

    def py_scan() -> Any:
        return (
            StaticTable.from_metadata(metadata)
            .scan(selected_fields=(key_column, sum_column), snapshot_id=snapshot_id)
            .to_arrow()
        )

    def py_lookup() -> Any:
        return (
            StaticTable.from_metadata(metadata)
            .scan(row_filter=EqualTo(key_column, probe), snapshot_id=snapshot_id)
            .to_arrow()
        )

    return {
        ("spark", "scan"): spark_scan,
        ("spark", "lookup"): spark_lookup,
        ("duckdb", "scan"): duck_scan,
        ("duckdb", "lookup"): duck_lookup,
        ("pyiceberg", "scan"): py_scan,
        ("pyiceberg", "lookup"): py_lookup,
    }


def tables_reads(
    spark: Any,
    targets: Sequence[ReadTarget],
    probe: int | str,
    con: Any,
    *,
    key_column: str = "id",
    sum_column: str = "amount",
    repeats: int = 3,
    slow: float = 10.0,
    duckdb_cap: float | None = None,
) -> list[TableReads]:
    """Full scans and point lookups of each target in Spark, DuckDB and PyIceberg: for each engine
    and kind of read, one warm-up read of every target, then `repeats` rounds reading the targets
    in turn, so that tables compared with each other are read under the same machine load (a
    maintenance pass or another engineer's job lands on all of them, not on one). Each figure is
    the median of its `repeats`; a warm-up slower than `slow` seconds is the figure itself.
    PyIceberg refusing equality deletes is recorded as refused; a DuckDB read past `duckdb_cap`
    seconds is interrupted and recorded as capped. The scan sums `sum_column`; the lookup reads
    the rows whose `key_column` is `probe`."""
    import duckdb

    def once(engine: str, fn: Callable[[], Any]) -> ReadTime:
        if engine != "duckdb" or duckdb_cap is None:
            return ReadTime(timed(fn)[0])
        timer = threading.Timer(duckdb_cap, con.interrupt)
        timer.start()
        try:
            return ReadTime(timed(fn)[0])
        except duckdb.InterruptException:
            return ReadTime(duckdb_cap, capped=True)
        finally:
            timer.cancel()

    counted: list[list[int]] = [[] for _ in targets]
    readers = [_readers(spark, t, probe, con, key_column, sum_column, counted[i]) for i, t in enumerate(targets)]
    found: list[dict[str, dict[str, ReadTime]]] = [{"scan": {}, "lookup": {}} for _ in targets]
    for engine in READ_ENGINES:
        reading = [i for i, t in enumerate(targets) if engine not in t.skip]
        for i, t in enumerate(targets):
            if engine in t.skip:
                found[i]["scan"][engine] = found[i]["lookup"][engine] = ReadTime(None, capped=True)
        for kind in ("scan", "lookup"):
            runs: dict[int, list[float]] = {}
            for i in list(reading):
                try:
                    first = once(engine, readers[i][engine, kind])
                except ValueError:  # PyIceberg: "does not yet support equality deletes"
                    if kind != "scan":  # the scan read the same deletes: not a refusal
                        raise
                    found[i]["scan"][engine] = found[i]["lookup"][engine] = ReadTime(None)
                    reading.remove(i)
                    continue
                if first.capped or (first.seconds or 0.0) > slow:
                    found[i][kind][engine] = first
                else:
                    runs[i] = []
            for _ in range(repeats):
                for i in list(runs):
                    run = once(engine, readers[i][engine, kind])
                    if run.capped:
                        found[i][kind][engine] = run
                        del runs[i]
                    else:
                        runs[i].append(run.seconds or 0.0)
            for i, seconds in runs.items():
                found[i][kind][engine] = ReadTime(median(seconds))
    return [TableReads(f["scan"], f["lookup"], c[0] if c else -1) for f, c in zip(found, counted, strict=True)]


def current_metadata(spark: Any, table: str) -> str:
    """The table's current metadata file, fresh from the catalog (for DuckDB and PyIceberg); Spark's
    cached copy of the table is refreshed too."""
    from icetide.table.iceberg import load_table

    spark.sql(f"REFRESH TABLE {table}")
    jtable = load_table(spark, table)
    jtable.refresh()
    return str(jtable.operations().current().metadataFileLocation())
