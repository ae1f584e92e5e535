"""The sync fast path's Python decoding of Debezium messages alone: no Spark, no broker.

    .venv/bin/python bench/decode_debezium.py [--events 100000] [--passes 3]

Builds the messages of bench/ingest_debezium.py (rows of bench/ingest.py, the Connect schema in
every message, a MySQL source block) and runs, over all of them, what `sync_task` does per
message for a one-table upsert pipeline: `EnvelopeReader.read`, `source_order`, `TableRows.add`,
then one `TableRows.table()`. Prints microseconds per message by phase (wall time, message by
message) and in all (CPU time of the whole pass, which other load on a shared machine disturbs
less), the median of the passes. `add` moves every 50,000 rows into Arrow (`SEALED_ROWS`);
`table` moves the rest.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa

from bench.common import machine, median, parser, render_table, report
from bench.ingest import event
from bench.ingest_debezium import debezium_event
from icetide.decode.debezium.message import EnvelopeReader
from icetide.decode.debezium.rows import Conversions, TableRows, source_order
from icetide.decode.limits import PayloadLimits

UTC_MICROS = pa.timestamp("us", tz="UTC")
# The Arrow schema of bench/ingest.py's table (SCHEMA), as the sink's writer config gives it.
TABLE = pa.schema(
    [
        pa.field("event_id", pa.string(), nullable=False),
        pa.field("event_time", UTC_MICROS, nullable=False),
        pa.field("ad_id", pa.int64()),
        pa.field("campaign_id", pa.int64()),
        pa.field("country", pa.string()),
        pa.field("device", pa.string()),
        pa.field("price", pa.float64()),
        pa.field("clicks", pa.int32()),
        pa.field("produced_at", UTC_MICROS),
    ]
)
KEY = ("event_id", "event_time")
PHASES = ("read", "source_order", "add", "table")


PRODUCED_MS = 1_767_225_600_000  # 2026-01-01: fixed, so every run decodes the same messages


def messages(count: int) -> list[bytes]:
    """`count` messages as bench/ingest_debezium.py produces them."""
    return [debezium_event(json.loads(event(i, PRODUCED_MS)), i) for i in range(count)]


def one_pass(values: list[bytes]) -> tuple[dict[str, float], pa.Table]:
    """Seconds of each phase over all `values`, message by message as `sync_task` goes (wall
    time), the CPU seconds of the whole pass ("cpu": other load on a shared machine counts less
    in it), and the table made."""
    clock = time.perf_counter
    reader = EnvelopeReader(PayloadLimits())
    rows = TableRows(TABLE, KEY, "upsert", Conversions(time_zone="UTC"))
    read = order = add = 0.0
    cpu_started = time.thread_time()
    for offset, value in enumerate(values):
        t0 = clock()
        envelope = reader.read(value)
        t1 = clock()
        assert envelope is not None
        position = source_order(envelope.source, envelope.ts_ms, offset)
        t2 = clock()
        rows.add(envelope, position, evolving=False)
        t3 = clock()
        read, order, add = read + t1 - t0, order + t2 - t1, add + t3 - t2
    started = clock()
    table = rows.table()
    seconds = {"read": read, "source_order": order, "add": add, "table": clock() - started}
    seconds["cpu"] = time.thread_time() - cpu_started
    return seconds, table


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--events", type=int, default=100_000)
    p.add_argument("--passes", type=int, default=3)
    args = p.parse_args()
    values = messages(args.events)
    passes = [one_pass(values)[0] for _ in range(args.passes)]
    per_message = {phase: median([s[phase] for s in passes]) / args.events * 1e6 for phase in PHASES}
    total = median([sum(s[phase] for phase in PHASES) for s in passes]) / args.events * 1e6
    cpu = median([s["cpu"] for s in passes]) / args.events * 1e6
    rows = [[phase, f"{per_message[phase]:.2f}"] for phase in PHASES]
    rows += [["total (wall)", f"{total:.2f}"], ["total (CPU)", f"{cpu:.2f}"]]
    body = (
        f"{args.events:,} messages of {sum(map(len, values)) // args.events} bytes, median of {args.passes} "
        f"passes; {machine()}\n\n{render_table(['phase', 'µs per message'], rows)}\n\n"
        f"messages per CPU second: {1e6 / cpu:,.0f}\n"
    )
    report("bench/decode_debezium.py: the sync fast path's Debezium decoding in Python", body, save=args.record)


if __name__ == "__main__":
    main()
