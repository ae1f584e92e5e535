"""Benchmark: streaming upserts with maintenance off and with the policy on, side by side.

    .venv/bin/python bench/maintenance.py [--batches 24] [--events 10000] [--every 6] [--record]

The demo's ad-event stream (new impressions, clicks updating earlier ones, a long tail of late
hours) goes batch by batch through two sinks into two tables: `off` (never maintained) and `on`
(`icetide.maintain` between batches every `--every` batches, and once after the last). A third
table, `compacted`, holds the same rows written once (no deletes, one pass). Reported: full-scan
and point-lookup latency of each (medians of 5), file counts, files per partition-hour in hours
older than the newest, the stream's batch latency with and without maintenance, and the time
maintenance took.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_session, in_temp_warehouse, median, parser, render_table, report, timed

SCAN = "SELECT count(*), sum(clicks), sum(conversions), max(updated_at) FROM {t}"
LOOKUP = "SELECT * FROM {t} WHERE impression_id = 'imp-3-17' AND event_time = timestamp'{ts}'"


def run(batches: int, events: int, every: int, warehouse: str) -> str:
    import icetide
    from icetide.maintenance.health import HealthThresholds
    from icetide.maintenance.maintain import MaintenancePolicy, maintain
    from icetide.sources.generator import (
        AD_EVENTS_KEY,
        AD_EVENTS_PARTITION_BY,
        AD_EVENTS_SCHEMA,
        AdEventsConfig,
        ad_events,
    )

    spark = bench_session(warehouse)
    config = AdEventsConfig(events_per_batch=events)
    names = {mode: f"lake.bench.maint_{mode}" for mode in ("off", "on")}
    sinks = {}
    for mode, name in names.items():
        icetide.create_table(
            spark, name, schema=AD_EVENTS_SCHEMA, key=AD_EVENTS_KEY, partition_by=AD_EVENTS_PARTITION_BY
        )
        sinks[mode] = icetide.UpsertSink(spark, name, pipeline_id="bench", order_by="updated_at")
    policy = MaintenancePolicy(thresholds=HealthThresholds(max_small_files=2, max_delete_files=1))
    latency: dict[str, list[float]] = {"off": [], "on": []}
    maintenance_seconds = 0.0
    for b in range(batches):
        df = ad_events(spark, b, config).cache()
        df.count()
        for mode in ("off", "on"):
            result = sinks[mode].write(df, batch_id=b)
            latency[mode].append(result.total_seconds)
        df.unpersist()
        if (b + 1) % every == 0 or b == batches - 1:
            seconds, rep = timed(lambda: maintain(spark, names["on"], policy))
            maintenance_seconds += seconds
            print(f"batch {b}: maintenance {seconds:.1f}s: {'; '.join(rep.lines())}", flush=True)
        print(f"batch {b}: off {latency['off'][-1]:.2f}s, on {latency['on'][-1]:.2f}s", flush=True)
    compacted = "lake.bench.maint_compacted"
    spark.sql(
        f"CREATE TABLE {compacted} USING iceberg PARTITIONED BY (hours(event_time)) "
        f"TBLPROPERTIES ('format-version'='2') AS SELECT * FROM {names['off']}"
    )
    tables = {"off": names["off"], "on": names["on"], "compacted": compacted}
    assert spark.table(names["on"]).exceptAll(spark.table(compacted)).count() == 0, "maintenance changed rows"
    row = spark.table(compacted).where("impression_id = 'imp-3-17'").first()
    ts = row["event_time"] if row else "2026-01-01 00:00:00"
    rows = []
    scans: dict[str, float] = {}
    for mode, t in tables.items():
        for _ in range(2):  # warm up
            spark.sql(SCAN.format(t=t)).collect()
        scan = median([timed(lambda t=t: spark.sql(SCAN.format(t=t)).collect())[0] for _ in range(5)])
        lookup = median([timed(lambda t=t: spark.sql(LOOKUP.format(t=t, ts=ts)).collect())[0] for _ in range(5)])
        scans[mode] = scan
        counts = {
            int(r["content"]): int(r["n"])
            for r in spark.sql(f"SELECT content, count(*) AS n FROM {t}.files GROUP BY content").collect()
        }
        per_hour = [
            int(r["n"])
            for r in spark.sql(
                f"SELECT partition, count(*) AS n FROM {t}.files WHERE content = 0 GROUP BY partition "
                "ORDER BY partition DESC"
            ).collect()
        ][1:]  # hours older than the newest
        rows.append(
            (
                mode,
                f"{scan:.2f}",
                f"{scan / 1:.2f}",
                f"{lookup:.2f}",
                str(counts.get(0, 0)),
                str(counts.get(1, 0) + counts.get(2, 0)),
                str(max(per_hour, default=0)),
                f"{sum(per_hour) / max(1, len(per_hour)):.1f}",
            )
        )
    rows = [(r[0], r[1], f"{scans[r[0]] / scans['compacted']:.2f}x", *r[3:]) for r in rows]
    spark.stop()
    table = render_table(
        [
            "table",
            "full scan s",
            "vs compacted",
            "point lookup s",
            "data files",
            "delete files",
            "max files / older hour",
            "avg files / older hour",
        ],
        rows,
    )
    off, on = median(latency["off"]), median(latency["on"])
    return (
        f"{batches} batches of {events:,} ad events (demo workload), maintenance every {every} batches and "
        f"after the last, in the same Spark application between batches:\n\n{table}\n\n"
        f"- stream batch latency (write + commit, median): off {off:.2f}s, on {on:.2f}s "
        f"({on / off:.2f}x; target <= 1.2x)\n"
        f"- full scan with the policy on: {scans['on'] / scans['compacted']:.2f}x the compacted table "
        f"(target <= 1.5x)\n"
        f"- maintenance time: {maintenance_seconds:.1f}s in all\n"
    )


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--batches", type=int, default=24)
    p.add_argument("--events", type=int, default=10_000)
    p.add_argument("--every", type=int, default=6)
    args = p.parse_args()
    body = in_temp_warehouse(lambda wh: run(args.batches, args.events, args.every, wh))
    report("bench/maintenance.py: streaming upserts with maintenance off and on", body, save=args.record)


if __name__ == "__main__":
    main()
