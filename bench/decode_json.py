"""The Spark path's JSON decoding: Spark SQL expressions (decode/json.py, the decoder it replaced)
against the Python decoder run in the tasks (decode/json_tasks.py), side by side on the same frame.

    .venv/bin/python bench/decode_json.py [--events 400000] [--bad-every 50] [--passes 3] [--partitions 2] [--record]

The events of bench/ingest.py (about 200 bytes, epoch-millisecond times) as a cached frame of
Kafka records (topic, partition, offset, value), one in `--bad-every` malformed (0: none), decoded in upsert mode with
unknown keys counted, as the runner decodes a batch; each pass materializes the good rows (a
count) and the dead letters (collected). Prints the median seconds of the passes and records
per second of the two decoders, run alternately so that both see the same load.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from typing import Any

from bench.common import bench_session, in_temp_warehouse, machine, median, parser, render_table, report, timed
from bench.ingest import SCHEMA, event
from icetide.decode.json_tasks import decode_json
from tests.spark_sql_json import decode_json as spark_sql_decode_json

KEY = ["event_id", "event_time"]
PRODUCED_MS = 1_767_225_600_000
DECODERS = {"Spark SQL (decode/json.py)": spark_sql_decode_json, "Python in the tasks (json_tasks.py)": decode_json}


def one_pass(frame: Any, schema: Any, decode: Any) -> tuple[int, int]:
    keep: list[Any] = []
    unknown: dict[str, int] = {}
    good, bad = decode(
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
    seconds: dict[str, list[float]] = {name: [] for name in DECODERS}
    counts: dict[str, tuple[int, int]] = {}
    for name, decode in DECODERS.items():  # warm-up
        counts[name] = one_pass(frame, schema, decode)
    assert len(set(counts.values())) == 1, counts
    for _ in range(passes):
        for name, decode in DECODERS.items():
            took, _ = timed(lambda decode=decode: one_pass(frame, schema, decode))
            seconds[name].append(took)
    table = [
        [
            name,
            f"{median(s):.2f}",
            f"{events / median(s):,.0f}",
            f"{median(seconds[next(iter(DECODERS))]) / median(s):.2f}x",
        ]
        for name, s in seconds.items()
    ]
    good, bad = counts[next(iter(DECODERS))]
    return (
        f"{events:,} records ({good:,} good, {bad:,} dead letters) in {partitions} partitions, median of {passes} "
        f"passes, local[*]; {machine()}\n\n"
        + render_table(["decoder", "seconds", "records/s", "speed vs Spark SQL"], table)
        + "\n"
    )


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--events", type=int, default=400_000)
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--bad-every", type=int, default=50)
    args = p.parse_args()
    body = in_temp_warehouse(lambda w: run(w, args.events, args.passes, args.partitions, args.bad_every))
    report(
        "bench/decode_json.py: the Spark path's JSON decoding, Spark SQL vs Python in the tasks", body, save=args.record
    )


if __name__ == "__main__":
    main()
