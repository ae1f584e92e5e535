"""Shared bits of the benchmarks: a session, timing, a table printer, and recording results."""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "benchmarks.md"


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
