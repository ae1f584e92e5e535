"""Benchmark: what one `icetide.maintain` pass costs beside an upsert stream with deletion vectors.

    .venv/bin/python bench/maintain_pass.py [--partitions 24] [--batches 8] [--keys 2000] [--record]

The maintenance block of a pipeline runs a pass every `every`, whether or not much is due; beside
a stream of many partitions its fixed cost (the health report's metadata queries, the checks for
dangling deletes and manifests, expiry) is paid every time. A table made by `create_table` at its
defaults (format v3, deletion vectors) over `--partitions` hourly partitions gets `--batches`
upsert batches of `--keys` keys (a fifth updating earlier keys, in every hour); after each batch
one `maintain` pass at the default policy runs. Reported: medians of the passes' wall and CPU
seconds (this process tree: the driver, its JVM and Python workers), and what they did. Run it
through bench/before_after.py to compare two commits on the same machine load.
"""

from __future__ import annotations

import os
import random
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_session, in_temp_warehouse, median, parser, render_table, report
from bench.peers.processes import TreeMeter

SCHEMA = "id BIGINT NOT NULL, ts TIMESTAMP NOT NULL, v STRING, seq BIGINT"


def _batch(spark: Any, rng: random.Random, b: int, partitions: int, keys: int, known: list[int]) -> Any:
    t0 = datetime(2026, 1, 1)
    updates = rng.sample(known, min(len(known), keys // 5))
    new = list(range(len(known), len(known) + keys - len(updates)))
    known.extend(new)
    rows = [(i, t0 + timedelta(hours=i % partitions, seconds=i % 3600), f"b{b}", b, None) for i in updates + new]
    return spark.createDataFrame(rows, f"{SCHEMA}, _op STRING")


def run(partitions: int, batches: int, keys: int, warehouse: str) -> str:
    import icetide
    from icetide.maintenance.maintain import maintain

    spark = bench_session(warehouse)
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.bench")
    table = "lake.bench.maintain_pass"
    icetide.create_table(spark, table, schema=SCHEMA, key=["id", "ts"], partition_by=["hours(ts)"])
    sink = icetide.UpsertSink(spark, table, pipeline_id="bench", order_by="seq")
    meter = TreeMeter({"self": os.getpid()})
    rng, known = random.Random(7), []
    walls, cpus, did = [], [], []
    for b in range(1, batches + 1):
        assert sink.write(_batch(spark, rng, b, partitions, keys, known), batch_id=b).committed
        cpu0 = meter.sample()["self"]
        started = time.perf_counter()
        result = maintain(spark, table)
        walls.append(time.perf_counter() - started)
        cpus.append(meter.sample()["self"] - cpu0)
        did.append("; ".join(result.lines()) or "nothing")
    assert spark.table(table).count() == len(known)
    rows = [
        [str(i + 1), f"{w:.2f}", f"{c:.2f}", d[:100]] for i, (w, c, d) in enumerate(zip(walls, cpus, did, strict=True))
    ]
    return (
        f"A v3 table with deletion vectors over {partitions} hourly partitions, {batches} upsert batches of "
        f"{keys:,} keys through UpsertSink, one `maintain` pass at the default policy after each. Load average at "
        f"the end: {' / '.join(f'{x:.1f}' for x in os.getloadavg())}.\n\n"
        + render_table(["pass", "wall s", "CPU s (process tree)", "what it did"], rows)
        + f"\n\nPass median: wall {median(walls):.2f} s, CPU {median(cpus):.2f} s."
    )


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--partitions", type=int, default=24)
    p.add_argument("--batches", type=int, default=8)
    p.add_argument("--keys", type=int, default=2_000)
    args = p.parse_args()
    body = in_temp_warehouse(lambda wh: run(args.partitions, args.batches, args.keys, wh))
    report("bench/maintain_pass.py: one maintenance pass beside an upsert stream", body, save=args.record)


if __name__ == "__main__":
    main()
