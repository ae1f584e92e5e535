"""Benchmark: one compaction pass over many small partitions, each group alone or small groups combined.

    .venv/bin/python bench/compaction_units.py [--partitions 24] [--files 6] [--rows 500] [--rounds 3] [--record]

What the maintenance block does beside a stream of many hourly partitions: `--partitions` hours,
each with `--files` small files of `--rows` rows, compacted with partial progress (as a pass with
a time budget or a stop request runs) once with `combine_groups_bytes=0` (a Spark job and a commit
per partition, as before 2026-11-29) and once at the default (small groups in one job and one
commit). Both tables hold the same rows; the two are run alternately, `--rounds` times each, on
fresh copies. Reported: medians of wall seconds and of CPU seconds of this process tree (the
driver's JVM included), and the commits each pass made.
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

MODES = {"each group alone (combine_groups_bytes=0)": 0, "small groups combined (default)": None}


def _fill(spark: Any, table: str, partitions: int, files: int, rows: int) -> None:
    t0 = datetime(2026, 1, 1)
    spark.sql(f"CREATE TABLE {table} (id BIGINT, ts TIMESTAMP, v STRING) USING iceberg PARTITIONED BY (hours(ts))")
    for f in range(files):
        data = [
            (h * 1_000_000 + f * rows + i, t0 + timedelta(hours=h, seconds=i), f"v{f}")
            for h in range(partitions)
            for i in range(rows)
        ]
        # One append a file round: every partition gets one more small file, as a stream's batch does.
        spark.createDataFrame(data, "id BIGINT, ts TIMESTAMP, v STRING").repartition(1).writeTo(table).append()


def run(partitions: int, files: int, rows: int, rounds: int, warehouse: str) -> str:
    from icetide.maintenance.compaction import compact

    spark = bench_session(warehouse)
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.bench")
    meter = TreeMeter({"self": os.getpid()})
    walls: dict[str, list[float]] = {m: [] for m in MODES}
    cpus: dict[str, list[float]] = {m: [] for m in MODES}
    commits: dict[str, int] = {}
    for r in range(rounds):
        for mode, combine in MODES.items():
            table = f"lake.bench.units_{r}_{combine if combine is not None else 'default'}"
            _fill(spark, table, partitions, files, rows)
            options: dict[str, Any] = {"combine_groups_bytes": combine} if combine is not None else {}
            cpu0 = meter.sample()["self"]
            started = time.perf_counter()
            result = compact(spark, table, min_input_files=2, partial_progress=True, stop=lambda: False, **options)
            walls[mode].append(time.perf_counter() - started)
            cpus[mode].append(meter.sample()["self"] - cpu0)
            commits[mode] = len(set(result.snapshot_ids))
            assert result.groups == partitions, result
            assert spark.table(table).count() == partitions * files * rows
    rows_out = [[mode, f"{median(walls[mode]):.2f}", f"{median(cpus[mode]):.2f}", commits[mode]] for mode in MODES]
    alone, combined = (median(walls[m]) for m in MODES)
    alone_cpu, combined_cpu = (median(cpus[m]) for m in MODES)
    return (
        f"{partitions} hourly partitions of {files} files of {rows} rows each, compacted with partial progress "
        f"(`compact(..., partial_progress=True, min_input_files=2)`); medians of {rounds} rounds, the two modes "
        f"alternating. Load average at the end: {' / '.join(f'{x:.1f}' for x in os.getloadavg())}.\n\n"
        + render_table(["pass", "wall s", "CPU s (process tree)", "commits"], rows_out)
        + f"\n\nCombined against alone: wall {combined / alone:.2f}x, CPU {combined_cpu / alone_cpu:.2f}x."
    )


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--partitions", type=int, default=24)
    p.add_argument("--files", type=int, default=6)
    p.add_argument("--rows", type=int, default=500)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    body = in_temp_warehouse(lambda wh: run(args.partitions, args.files, args.rows, args.rounds, wh))
    report("bench/compaction_units.py: a compaction pass over many small partitions", body, save=args.record)


if __name__ == "__main__":
    main()
