"""Benchmark: files written per partition-hour by each distribution mode (seed 003, section 4).

    .venv/bin/python bench/small_files.py [--hours 24] [--batches-per-hour 2] [--events 20000] [--record]

A stream of generated ad events covering `hours` hours, writer parallelism 20, hourly partitions
by event time. Arrival follows the seed's long tail: most events for the current hour, a
decaying share for each older hour, and updates of earlier impressions. The same batches go
through the sink once per mode into separate tables. Reported per mode: data files added to a
partition per stream hour, by the partition's age (newest, +1, +2, +6, +12, +23 hours back), the
average data and delete file sizes, total files, and the median write time per batch.
A PNG chart goes to docs/small_files.png.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT, bench_session, in_temp_warehouse, median, parser, render_table, report

MODES = ["key", "partition", "dynamic", "none"]
AGES = [0, 1, 2, 6, 12, 23]
PARALLELISM = 20


def run(hours: int, per_hour: int, events: int, warehouse: str) -> tuple[str, dict[str, dict[int, float]]]:
    import icetide
    from icetide.sources.generator import (
        AD_EVENTS_KEY,
        AD_EVENTS_PARTITION_BY,
        AD_EVENTS_SCHEMA,
        AdEventsConfig,
        ad_events,
    )

    spark = bench_session(warehouse)
    config = AdEventsConfig(events_per_batch=events, minutes_per_batch=60 // per_hour)
    batches = hours * per_hour
    start_hour = int(config.start.timestamp()) // 3600
    per_age: dict[str, dict[int, float]] = {}
    rows = []
    for mode in MODES:
        table = f"lake.bench.small_files_{mode}"
        icetide.create_table(
            spark,
            table,
            schema=AD_EVENTS_SCHEMA,
            key=AD_EVENTS_KEY,
            partition_by=AD_EVENTS_PARTITION_BY,
            target_file_size=128 * 1024 * 1024,
        )
        sink = icetide.UpsertSink(
            spark, table, pipeline_id="bench", order_by="updated_at", distribution=mode, write_parallelism=PARALLELISM
        )
        files_by_age: dict[int, int] = defaultdict(int)
        write_times = []
        for b in range(batches):
            df = ad_events(spark, b, config).cache()
            df.count()  # generation is not what is measured
            result = sink.write(df, batch_id=b)
            df.unpersist()
            write_times.append(result.plan_seconds + result.write_seconds)
            now_hour = start_hour + (b * config.minutes_per_batch) // 60
            for part, n in result.files_per_partition.items():
                files_by_age[now_hour - int(part)] += n
            print(f"{mode} batch {b}: {result.data_files} data files, write {result.write_seconds:.2f}s", flush=True)
        per_age[mode] = {age: files_by_age.get(age, 0) / hours for age in AGES}
        sizes = spark.sql(
            f"SELECT content, count(*) AS n, avg(file_size_in_bytes) AS avg FROM {table}.files GROUP BY content"
        ).collect()
        by = {int(r["content"]): r for r in sizes}
        data_avg = by[0]["avg"] / 1024 if 0 in by else 0.0
        del_avg = by[2]["avg"] / 1024 if 2 in by else 0.0
        total = sum(int(r["n"]) for r in sizes)
        rows.append(
            (
                mode,
                *[f"{per_age[mode][a]:.1f}" for a in AGES],
                f"{data_avg:.0f}",
                f"{del_avg:.0f}",
                str(total),
                f"{median(write_times):.2f}",
            )
        )
    spark.stop()
    table_text = render_table(
        [
            "mode",
            *[("newest" if a == 0 else f"+{a}h") for a in AGES],
            "avg data KiB",
            "avg delete KiB",
            "total files",
            "median write s",
        ],
        rows,
    )
    d, k = per_age["dynamic"], per_age["key"]
    total_files = {r[0]: int(r[-2]) for r in rows}
    tail = [a for a in AGES if a >= 2]
    tail_ratio = sum(k[a] for a in tail) / max(1e-9, sum(d[a] for a in tail))
    times = {r[0]: float(r[-1]) for r in rows}
    checks = (
        f"- dynamic / partition total files: {total_files['dynamic'] / max(1, total_files['partition']):.2f} "
        f"(target <= 1.1)\n"
        f"- key / dynamic data files in the long-tail hours (+2h and older): {tail_ratio:.1f}x (target >= 5)\n"
        f"- dynamic / key median batch write time: {times['dynamic'] / times['key']:.2f} (target <= 1.2)\n"
    )
    body = (
        f"{hours} stream hours, {per_hour} batches per hour, {events:,} events per batch, writer parallelism "
        f"{PARALLELISM}. Data files added per partition per stream hour, by partition age:\n\n{table_text}\n\n{checks}"
        f"\n![files per partition-hour by age](small_files.png)\n"
    )
    return body, per_age


def chart(per_age: dict[str, dict[int, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    width = 0.8 / len(per_age)
    for i, (mode, values) in enumerate(per_age.items()):
        xs = [j + i * width for j in range(len(AGES))]
        ax.bar(xs, [max(values[a], 0.01) for a in AGES], width=width, label=mode)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(AGES))])
    ax.set_xticklabels(["newest" if a == 0 else f"+{a}h" for a in AGES])
    ax.set_yscale("log")
    ax.set_ylabel("data files added per partition per hour")
    ax.set_xlabel("partition age (hours behind the stream)")
    ax.set_title("Small files by writer distribution")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--hours", type=int, default=24)
    p.add_argument("--batches-per-hour", type=int, default=2)
    p.add_argument("--events", type=int, default=20_000)
    args = p.parse_args()
    body, per_age = in_temp_warehouse(lambda wh: run(args.hours, args.batches_per_hour, args.events, wh))
    if args.record:
        chart(per_age, ROOT / "docs" / "small_files.png")
    report("bench/small_files.py: files per partition-hour by distribution", body, save=args.record)


if __name__ == "__main__":
    main()
