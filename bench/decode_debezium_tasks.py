"""The Spark path's Debezium decoding: Spark SQL expressions (decode/debezium.py, kept for the records
the Python decoder does not read yet) against the Python decoder run in the tasks
(decode/debezium_tasks.py), side by side on the same frame.

    .venv/bin/python bench/decode_debezium_tasks.py [--events 200000] [--bad-every 0] [--passes 3] [--partitions 2]

The messages of bench/ingest_debezium.py (rows of bench/ingest.py, the Connect schema in every
message, a MySQL source block) as a cached frame of Kafka records (topic, partition, offset,
value), one in `--bad-every` with an unknown op (a dead letter; 0: none), decoded in upsert mode
as the runner decodes a batch (persisted into `keep`); each pass materializes the good rows (a
count) and the dead letters (collected). Prints the median seconds of the passes and records per
second of the two decoders, run alternately so that both see the same load. The Python decoder
must decode every batch itself: a fallback to Spark SQL stops the bench.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import json
from typing import Any

from bench.common import bench_session, in_temp_warehouse, machine, median, parser, render_table, report, timed
from bench.ingest import SCHEMA, event
from bench.ingest_debezium import debezium_event
from icetide.decode import debezium, debezium_tasks

KEY = ["event_id", "event_time"]
PRODUCED_MS = 1_767_225_600_000  # fixed, so every run decodes the same messages
DECODERS = {
    "Spark SQL (decode/debezium.py)": debezium.decode_debezium,
    "Python in the tasks (debezium_tasks.py)": debezium_tasks.decode_debezium,
}


def refuse(reason: str, *_: Any) -> Any:
    raise RuntimeError(f"the Python decoder gave the batch to Spark SQL: {reason}")


def one_pass(frame: Any, schema: Any, decode: Any) -> tuple[int, int]:
    keep: list[Any] = []
    changes = decode(frame, "value", schema, KEY, "upsert", ["topic", "partition", "offset"], keep=keep)
    try:
        return changes.good.count(), len(changes.bad.collect())
    finally:
        for df in keep:
            df.unpersist()


def message(i: int, bad_every: int) -> bytes:
    value = debezium_event(json.loads(event(i, PRODUCED_MS)), i)
    if bad_every and i % bad_every == 7 % bad_every:
        value = value.replace(b'"op":"c"', b'"op":"x"')
    return value


def run(warehouse: str, events: int, passes: int, partitions: int, bad_every: int) -> str:
    from pyspark.sql import types as T

    debezium_tasks.decode_by_spark_sql = refuse  # type: ignore[assignment]
    spark = bench_session(warehouse)
    schema = T._parse_datatype_string(SCHEMA)
    rows = [("events", i % partitions, i, message(i, bad_every)) for i in range(events)]
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
    first = next(iter(DECODERS))
    table = [
        [
            name,
            f"{median(s):.2f}",
            " ".join(f"{x:.2f}" for x in s),
            f"{events / median(s):,.0f}",
            f"{median(seconds[first]) / median(s):.2f}x",
        ]
        for name, s in seconds.items()
    ]
    good, bad = counts[first]
    size = sum(len(r[3]) for r in rows[:100]) // min(100, len(rows))
    return (
        f"{events:,} records of about {size:,} bytes ({good:,} good, {bad:,} dead letters) in {partitions} "
        f"partitions, median of {passes} passes, local[*]; {machine()}\n\n"
        + render_table(["decoder", "seconds", "passes", "records/s", "speed vs Spark SQL"], table)
        + "\n"
    )


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--events", type=int, default=200_000)
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--bad-every", type=int, default=0)
    args = p.parse_args()
    body = in_temp_warehouse(lambda w: run(w, args.events, args.passes, args.partitions, args.bad_every))
    report(
        "bench/decode_debezium_tasks.py: the Spark path's Debezium decoding, Spark SQL vs Python in the tasks",
        body,
        save=args.record,
    )


if __name__ == "__main__":
    main()
