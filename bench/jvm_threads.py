"""Benchmark: where the Spark JVM's CPU goes on the plain-JSON append fast path, by thread kind.

    .venv/bin/python bench/jvm_threads.py [--events 300000] [--runs 10] [--record]
    .venv-spark35/bin/python bench/jvm_threads.py ...   (the same on PySpark 3.5)

`--events` JSON events (bench/ingest.py's) go into one topic of Apache Kafka on 127.0.0.1; after a
warm-up pipeline (bench/ingest.py's), `--runs` pipelines each drain the whole topic into a table of
their own, as bench/ingest.py's runner does. Around each run the CPU time of every thread of the
Spark JVM is read from /proc, and the threads are grouped by name (digits dropped): the JIT's
compiler threads, py4j's gateway threads ("Thread"), the executor's task threads, GC and the rest.
Reported: each run's wall seconds and JVM CPU seconds, and core-seconds per million rows by thread
kind. A JVM that is still compiling spends most of its CPU in the compiler threads, which a
pipeline running for hours pays once: compare the last runs, not the first.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_session, in_temp_warehouse, median, parser, render_table, report

TICK = os.sysconf("SC_CLK_TCK")


def spark_jvm_pid() -> int:
    """The Spark driver JVM started by this process (not the broker's)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parent = int(stat[stat.rindex(")") + 2 :].split()[1])
        if parent == os.getpid() and b"SparkSubmit" in cmdline:
            return int(entry.name)
    raise RuntimeError("no Spark JVM started by this process")


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of each thread kind of process `pid` (threads named alike summed)."""
    out: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
            name = (task / "comm").read_text().strip()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        kind = re.sub(r"\d+", "N", re.sub(r"[#\-]?\d+$", "", name).strip())
        out[kind] = out.get(kind, 0.0) + (int(fields[11]) + int(fields[12])) / TICK
    return out


def run(events: int, runs: int, warehouse: str) -> str:
    import pyspark

    from bench.ingest import WARM_UP_EVENTS, pipeline, produce
    from icetide.pipeline.table_runner import Runner
    from tests.kafka_broker import BENCH_JVM_OPTIONS, apache_kafka, create_topic

    with apache_kafka(Path(warehouse) / "kafka", jvm_options=BENCH_JVM_OPTIONS) as bootstrap:
        topic = create_topic(bootstrap, partitions=4)
        produce(bootstrap, topic, 0, events)
        spark = bench_session(warehouse)
        warm_topic = create_topic(bootstrap, partitions=4)
        produce(bootstrap, warm_topic, 0, WARM_UP_EVENTS)
        Runner(pipeline(bootstrap, warm_topic, "warmup", "1s", 250_000), spark).run(once=True, handle_signals=False)
        pid = spark_jvm_pid()
        walls: list[float] = []
        cpus: list[float] = []
        total: dict[str, float] = {}
        for i in range(runs):
            before = thread_cpu(pid)
            started = time.monotonic()
            runner = Runner(pipeline(bootstrap, topic, f"run{i}", "1s", 250_000), spark)
            summary: Any = runner.run(once=True, handle_signals=False)
            walls.append(time.monotonic() - started)
            assert sum(b.records_in for b in summary.batches) == events
            after = thread_cpu(pid)
            spent = {k: after[k] - before.get(k, 0.0) for k in after}
            cpus.append(sum(spent.values()))
            for kind, seconds in spent.items():
                total[kind] = total.get(kind, 0.0) + seconds
        spark.stop()
    per_m = 1e6 / (events * runs)
    half = runs // 2
    kinds = render_table(
        ["JVM thread kind", "core-s per M rows"],
        [[k, f"{v * per_m:.2f}"] for k, v in sorted(total.items(), key=lambda kv: -kv[1]) if v * per_m >= 0.01],
    )
    return (
        f"PySpark {pyspark.__version__}; {events:,} JSON events, {runs} runs after a warm-up of "
        f"{WARM_UP_EVENTS:,}.\n\n"
        f"Wall s per run: {' '.join(f'{w:.2f}' for w in walls)}; median of the last {runs - half}: "
        f"{median(walls[half:]):.2f} s (all: {median(walls):.2f} s).\n"
        f"JVM CPU s per run: {' '.join(f'{c:.2f}' for c in cpus)}; "
        f"{sum(cpus) * per_m:.2f} core-s per million rows.\n\n{kinds}\n"
    )


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--events", type=int, default=300_000)
    p.add_argument("--runs", type=int, default=10)
    args = p.parse_args()
    body = in_temp_warehouse(lambda wh: run(args.events, args.runs, wh))
    report("bench/jvm_threads.py: the Spark JVM's CPU by thread kind, JSON append fast path", body, save=args.record)


if __name__ == "__main__":
    main()
