"""The Spark path's JSON decoding: the Python decoder run in the tasks (decode/json/tasks.py).
Until the Spark SQL JSON decoder it replaced was deleted (issue 23, item 3), this bench ran the two
side by side on the same frame; that comparison is recorded in docs/benchmarks.md.

    .venv/bin/python bench/decode_json.py [--events 400000] [--bad-every 50] [--passes 3] [--partitions 2] [--record]

The events of bench/ingest.py (about 200 bytes, epoch-millisecond times) as a cached frame of
Kafka records (topic, partition, offset, value), one in `--bad-every` malformed (0: none), decoded in upsert mode with
unknown keys counted, as the runner decodes a batch; each pass materializes the good rows (a
count) and the dead letters (collected). Prints the median seconds of the passes and records
per second.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from typing import Any

from bench.common import bench_session, in_temp_warehouse, machine, median, parser, render_table, report, timed
from bench.ingest import SCHEMA, event
from icetide.decode.json.tasks import decode_json

KEY = ["event_id", "event_time"]
PRODUCED_MS = 1_767_225_600_000


def one_pass(frame: Any, schema: Any) -> tuple[int, int]:
    keep: list[Any] = []
    unknown: dict[str, int] = {}
    good, bad = decode_json(
        frame, "value", schema, KEY, "upsert", ["topic", "partition", "offset"], keep=keep, unknown_fields=unknown
    )
    try:
        return good.count(), len(bad.collect())
    finally:
        for df in keep:
            df.unpersist()


def run(warehouse: str, events: int, passes: int, partitions: int, bad_every: int) -> str:
    from pyspark.sql import types as T

    spark = bench_session(warehouse)
    schema = T._parse_datatype_string(SCHEMA)
    rows = [
        (
            "events",
            i % partitions,
            i,
            b"{not json" if bad_every and i % bad_every == 7 % bad_every else event(i, PRODUCED_MS),
        )
        for i in range(events)
    ]
    frame = spark.createDataFrame(rows, "topic STRING, partition INT, offset BIGINT, value BINARY")
    frame = frame.repartition(partitions).cache()
    frame.count()
    good, bad = one_pass(frame, schema)  # warm-up
    seconds = [timed(lambda: one_pass(frame, schema))[0] for _ in range(passes)]
    table = [["Python in the tasks (decode/json)", f"{median(seconds):.2f}", f"{events / median(seconds):,.0f}"]]
    return (
        f"{events:,} records ({good:,} good, {bad:,} dead letters) in {partitions} partitions, median of {passes} "
        f"passes, local[*]; {machine()}\n\n" + render_table(["decoder", "seconds", "records/s"], table) + "\n"
    )


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--events", type=int, default=400_000)
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--bad-every", type=int, default=50)
    args = p.parse_args()
    body = in_temp_warehouse(lambda w: run(w, args.events, args.passes, args.partitions, args.bad_every))
    report("bench/decode_json.py: the Spark path's JSON decoding, Python in the tasks", body, save=args.record)


if __name__ == "__main__":
    main()
