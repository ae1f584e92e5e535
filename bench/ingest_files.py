"""Benchmark: landing JSON-lines files -> Iceberg through the runner, fast path against Spark path.

    .venv/bin/python bench/ingest_files.py [--events 500000] [--files 40] [--max-files 10] [--rounds 3]
        [--debezium] [--record]

Lands `events` JSON events of about 200 bytes (bench/ingest.py's `event`) in `files` files, then,
in each round, drains the folder four times, each into its own table: append and upsert, each on
the fast path (pipeline/json_fast.py: each task reads whole files, decodes and writes) and with
`fast_path: off` (the Spark path: the same decoder in Spark's tasks, then the sink). The four
pipelines alternate within a round, so a noisy neighbour hits them alike. Reported per pipeline:
the median rows/s of wall time and per busy core-second of the machine (/proc/stat), and each
path's figure against the other's in the same round.

`--debezium`: the same rows as Debezium JSON-converter messages with their schema (a file sink of
the converter's output; bench/ingest_debezium.py `debezium_event`), drained in upsert mode on the
fast path (executor/sync_task.py reading the files) and on the Spark path.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_session, in_temp_warehouse, median, parser, render_table, report
from bench.ingest import SCHEMA, event, machine_busy_seconds

PIPELINES = [("append", "auto"), ("append", "off"), ("upsert", "auto"), ("upsert", "off")]
DEBEZIUM_PIPELINES = [("upsert", "auto"), ("upsert", "off")]


def land(folder: Path, events: int, files: int, debezium: bool = False) -> None:
    """`events` events in `files` files, renamed into place (the source's half-written-file rule);
    with `debezium`, as Debezium create events with their schema."""
    import json

    from bench.ingest_debezium import debezium_event

    folder.mkdir(parents=True)
    per_file = -(-events // files)
    produced_ms = int(time.time() * 1000)
    for n in range(files):
        first = n * per_file
        lines = [event(i, produced_ms) for i in range(first, min(events, first + per_file))]
        if debezium:
            lines = [debezium_event(json.loads(line), first + i) for i, line in enumerate(lines)]
        tmp = folder / f".part-{n:04d}.json"
        tmp.write_bytes(b"\n".join(lines) + b"\n")
        os.replace(tmp, folder / f"part-{n:04d}.json")


def pipeline(name: str, folder: Path, mode: str, fast_path: str, max_files: int, debezium: bool = False) -> Any:
    from icetide.config.pipeline import PipelineConfig

    return PipelineConfig.from_dict(
        {
            "pipeline": name,
            "format": "debezium" if debezium else "json",
            "source": {"files": {"path": str(folder), "format": "json", "min_age_seconds": 0.001}},
            "table": {
                "name": f"lake.bench.{name}",
                "schema": SCHEMA,
                "key": ["event_id", "event_time"],
                "partition_by": ["hours(event_time)"],
            },
            "mode": mode,
            "fast_path": fast_path,
            "trigger": {"interval": "1s", "max_files": max_files},
            "dead_letter": f"lake.bench.{name}_dead_letter",
        }
    )


def drain(spark: Any, config: Any) -> tuple[float, float, int, set[str]]:
    """(wall seconds, busy core-seconds, rows committed, paths) of one drain of the folder."""
    from icetide.pipeline.table_runner import Runner

    runner = Runner(config, spark)
    busy, started = machine_busy_seconds(), time.perf_counter()
    summary = runner.run(once=True, handle_signals=False)
    wall, cpu = time.perf_counter() - started, machine_busy_seconds() - busy
    runner.close()
    return wall, cpu, summary.rows_written, {b.path for b in summary.batches}


def run(events: int, files: int, max_files: int, rounds: int, warehouse: str, debezium: bool = False) -> str:
    folder = Path(warehouse) / "landing"
    land(folder, events, files, debezium)
    spark = bench_session(warehouse)
    pipelines = DEBEZIUM_PIPELINES if debezium else PIPELINES
    drain(spark, pipeline("warmup", folder, pipelines[0][0], "auto", files, debezium))  # JIT, Python workers
    walls: dict[tuple[str, str], list[float]] = {p: [] for p in pipelines}
    per_core: dict[tuple[str, str], list[float]] = {p: [] for p in pipelines}
    paths: dict[tuple[str, str], set[str]] = {p: set() for p in pipelines}
    for r in range(rounds):
        for mode, fast_path in pipelines:
            name = f"{mode}_{fast_path}_{r}"
            wall, cpu, rows, used = drain(spark, pipeline(name, folder, mode, fast_path, max_files, debezium))
            assert rows == events, f"{name} wrote {rows} rows of {events}"
            walls[(mode, fast_path)].append(events / wall)
            per_core[(mode, fast_path)].append(events / cpu)
            paths[(mode, fast_path)] |= used
            print(f"round {r + 1} {mode} fast_path={fast_path}: {events / wall:,.0f} rows/s, {events / cpu:,.0f}/core")
    rows = []
    for mode, fast_path in pipelines:
        other = (mode, "off" if fast_path == "auto" else "auto")
        ratio = median(per_core[(mode, fast_path)]) / median(per_core[other])
        rows.append(
            [
                mode,
                fast_path,
                ", ".join(sorted(paths[(mode, fast_path)])),
                f"{median(walls[(mode, fast_path)]):,.0f}",
                f"{median(per_core[(mode, fast_path)]):,.0f}",
                " ".join(f"{v:,.0f}" for v in sorted(per_core[(mode, fast_path)])),
                f"{ratio:.2f}x",
            ]
        )
    table = render_table(
        ["mode", "fast_path", "path", "rows/s", "rows/s per core (median)", "per core, each round", "vs other path"],
        rows,
    )
    return (
        f"`bench/ingest_files.py --events {events} --files {files} --max-files {max_files} --rounds {rounds}"
        f"{' --debezium' if debezium else ''}`: {events:,} events of about 200 bytes"
        f"{' as Debezium messages with their schema' if debezium else ''} in {files} files, "
        f"drained {events // files * max_files:,} events per batch.\n\n{table}"
    )


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--events", type=int, default=500_000)
    p.add_argument("--files", type=int, default=40)
    p.add_argument("--max-files", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--debezium", action="store_true", help="Debezium messages with their schema, upsert mode")
    args = p.parse_args()
    body = in_temp_warehouse(lambda w: run(args.events, args.files, args.max_files, args.rounds, w, args.debezium))
    report("bench/ingest_files.py: landing files, fast path against Spark path", body, save=args.record)


if __name__ == "__main__":
    main()
