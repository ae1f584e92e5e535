"""Benchmark: what the default maintenance schedule costs over a sync's idle tables.

    .venv/bin/python bench/idle_tables.py [--tables 20] [--passes 5] [--record]

A pipeline maintains its tables every 10 s by default; a database sync may have many tables that
nothing commits to for hours. `--tables` small tables (format v3, hourly partitions, two upsert
batches each through UpsertSink) get one settling pass of `maintain_tables`, then `--passes`
passes each way, side by side in turn: with `settled` (what the pipeline's schedule keeps: a
table a pass left unchanged is skipped until something commits to it) and without it (every
table gets its full pass, as before the default). Reported: medians of the passes' wall and CPU
seconds (this process tree: the driver, its JVM and Python workers) and the reports they made.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_session, in_temp_warehouse, median, parser, render_table, report
from bench.peers.processes import TreeMeter

SCHEMA = "id BIGINT NOT NULL, ts TIMESTAMP NOT NULL, v STRING, seq BIGINT"


def _batch(spark: Any, b: int) -> Any:
    t0 = datetime(2026, 1, 1)
    rows = [(i, t0 + timedelta(hours=i % 4, seconds=i), f"b{b}", b, None) for i in range(200)]
    return spark.createDataFrame(rows, f"{SCHEMA}, _op STRING")


def run(tables: int, passes: int, warehouse: str) -> str:
    import icetide
    from icetide.maintenance.maintain import maintain_tables

    spark = bench_session(warehouse)
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.bench")
    names = [f"lake.bench.idle_{n}" for n in range(tables)]
    for name in names:
        icetide.create_table(spark, name, schema=SCHEMA, key=["id", "ts"], partition_by=["hours(ts)"])
        sink = icetide.UpsertSink(spark, name, pipeline_id="bench", order_by="seq")
        for b in (1, 2):
            assert sink.write(_batch(spark, b), batch_id=b).committed
    settled: dict[str, int] = {}
    maintain_tables(spark, names, settled=settled)  # compacts what is due
    maintain_tables(spark, names, settled=settled)  # finds nothing due: every table settles
    meter = TreeMeter({"self": os.getpid()})
    measured: dict[str, tuple[list[float], list[float], list[int]]] = {"settled": ([], [], []), "full": ([], [], [])}
    for _ in range(passes):
        for way in ("settled", "full"):
            cpu0 = meter.sample()["self"]
            started = time.perf_counter()
            passed = maintain_tables(spark, names, settled=settled if way == "settled" else None)
            walls, cpus, reports = measured[way]
            walls.append(time.perf_counter() - started)
            cpus.append(meter.sample()["self"] - cpu0)
            reports.append(len(passed.reports))
    rows = [
        [way, f"{median(w):.2f}", f"{median(c):.2f}", f"{median(w) / tables * 1000:.0f}", str(max(r))]
        for way, (w, c, r) in measured.items()
    ]
    (sw, sc, _), (fw, fc, _) = measured["settled"], measured["full"]
    return (
        f"{tables} idle v3 tables (4 hourly partitions, two upsert batches each, then settled by two passes), "
        f"{passes} passes of `maintain_tables` each way, in turn. Load average at the end: "
        f"{' / '.join(f'{x:.1f}' for x in os.getloadavg())}.\n\n"
        + render_table(["pass", "wall s (median)", "CPU s (median)", "ms a table", "tables maintained"], rows)
        + f"\n\nSettled against full: wall {median(sw) / median(fw):.2f}x, CPU {median(sc) / median(fc):.2f}x."
    )


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--tables", type=int, default=20)
    p.add_argument("--passes", type=int, default=5)
    args = p.parse_args()
    body = in_temp_warehouse(lambda wh: run(args.tables, args.passes, wh))
    report("bench/idle_tables.py: the default maintenance schedule over idle tables", body, save=args.record)


if __name__ == "__main__":
    main()
