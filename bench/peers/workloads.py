"""The workloads both systems consume: one topic each, produced once, messages as JSON objects.

(a) `ads`: seed 003's ad events from icetide's generator (icetide/sources/generator.py): each
    15-minute batch of simulated time holds new impressions (a long tail of late ones, up to 23
    hours back) and clicks/conversions updating impressions of earlier batches; upserts by
    (impression_id, event_time) into hourly partitions of event_time.
(b) `debezium`: the ad events' changes made to a PostgreSQL table and captured by Debezium's
    connector (bench/peers/live_cdc.py): the systems read the connector's topic.
(c) `appends`: plain JSON events of about 200 bytes (bench/ingest.py's shape) whose event times
    walk through the simulated hours, up to an hour late; appended into hourly partitions.

Every message carries `produced_at`, the wall time it was handed to the producer, or of the SQL
statement that made the change (epoch ms): freshness is measured from it. Times are epoch
milliseconds, as icetide's JSON decoder and Flink's `TO_TIMESTAMP_LTZ(x, 3)` both read them.
"""

from __future__ import annotations

import dataclasses
import json
import random
from dataclasses import dataclass
from typing import Any

AD_COLUMNS = [
    ("impression_id", "STRING NOT NULL", "STRING"),
    ("event_time", "TIMESTAMP NOT NULL", "TIMESTAMP"),
    ("ad_id", "BIGINT", "BIGINT"),
    ("campaign_id", "BIGINT", "BIGINT"),
    ("country", "STRING", "STRING"),
    ("clicks", "INT", "INT"),
    ("last_click_time", "TIMESTAMP", "TIMESTAMP"),
    ("conversions", "INT", "INT"),
    ("revenue", "DOUBLE", "DOUBLE"),
    ("updated_at", "TIMESTAMP NOT NULL", "TIMESTAMP"),
    ("produced_at", "TIMESTAMP", "TIMESTAMP"),
]
APPEND_COLUMNS = [
    ("event_id", "STRING NOT NULL", "STRING"),
    ("event_time", "TIMESTAMP NOT NULL", "TIMESTAMP"),
    ("ad_id", "BIGINT", "BIGINT"),
    ("campaign_id", "BIGINT", "BIGINT"),
    ("country", "STRING", "STRING"),
    ("device", "STRING", "STRING"),
    ("price", "DOUBLE", "DOUBLE"),
    ("clicks", "INT", "INT"),
    ("produced_at", "TIMESTAMP", "TIMESTAMP"),
]
COUNTRIES = ["JP", "US", "GB", "DE", "FR", "KR", "TW", "BR"]
DEVICES = ["ios", "android", "web"]
HOUR_MS = 3_600_000


@dataclass(frozen=True)
class Workload:
    """What is produced and how each system's table is declared."""

    name: str
    columns: list[tuple[str, str, str]]  # name, Spark DDL type, kind (for Flink: TIMESTAMP read as epoch ms)
    key: list[str]
    key_field: str  # the Kafka message key, and the point lookup's column
    sum_column: str  # summed by the full scan
    upsert: bool
    order_by: str | None
    warm_up: list[dict[str, Any]]  # produced first, until both systems have committed them
    messages: list[dict[str, Any]]  # produced at a steady rate after the warm-up
    simulated_hours: int
    partition_by: str = "hours(event_time)"
    envelope: str = "json"  # json: the row itself; debezium: changes {op, before, after} made to a database

    @property
    def spark_schema(self) -> str:
        return ", ".join(f"{n} {t}" for n, t, _ in self.columns)

    def flink_source(self) -> tuple[list[tuple[str, str]], list[str]]:
        """The Kafka source's columns and the INSERT's expressions, for the Flink job."""
        cols = [(n, "BIGINT" if kind == "TIMESTAMP" else kind) for n, _, kind in self.columns]
        select = [f"TO_TIMESTAMP_LTZ(`{n}`, 3)" if kind == "TIMESTAMP" else f"`{n}`" for n, _, kind in self.columns]
        return cols, select

    def model(self) -> dict[Any, dict[str, Any]] | list[dict[str, Any]]:
        """The rows the table must hold: the last message per key (upserts) or every message."""
        everything = self.warm_up + self.messages
        if not self.upsert:
            return everything
        out: dict[Any, dict[str, Any]] = {}
        for m in everything:
            if self.envelope == "debezium":
                row = m["after"] or m["before"]
                if m["after"] is None:
                    out.pop(tuple(row[k] for k in self.key), None)
                    continue
                m = row
            out[tuple(m[k] for k in self.key)] = m
        return out

    def key_of(self, m: dict[str, Any]) -> str:
        """The Kafka message key of message `m`."""
        return str(m[self.key_field])

    def encode(self, m: dict[str, Any], now_ms: int) -> bytes:
        """Message `m` as produced now: `produced_at` stamped into it. (A Debezium workload is not
        produced by the harness: its changes are made to a database, bench/peers/live_cdc.py.)"""
        m["produced_at"] = now_ms
        return json.dumps(m).encode()


def ads(spark: Any, *, hours: int, events_per_batch: int) -> Workload:
    """Seed 003's ad events over `hours` simulated hours (4 batches an hour); batch 0 is the warm-up.
    A key updated twice in one generated batch keeps its last change, so both systems' order rules
    (icetide: last by updated_at; Flink: last by offset) pick the same row."""
    from pyspark.sql import functions as F

    from icetide.sources.generator import AdEventsConfig, ad_events

    config = AdEventsConfig(events_per_batch=events_per_batch, minutes_per_batch=15)
    names = [n for n, _, _ in AD_COLUMNS if n != "produced_at"]
    timestamps = {n for n, _, kind in AD_COLUMNS if kind == "TIMESTAMP"}
    batches: list[list[dict[str, Any]]] = []
    for b in range(hours * 4):
        df = ad_events(spark, b, config)
        df = df.select(*[F.unix_millis(F.col(n)).alias(n) if n in timestamps else F.col(n) for n in names])
        latest: dict[tuple[str, int], dict[str, Any]] = {}
        for row in df.collect():
            d = row.asDict()
            latest[(d["impression_id"], d["event_time"])] = d
        batches.append(list(latest.values()))
    return Workload(
        name="ads",
        columns=AD_COLUMNS,
        key=["impression_id", "event_time"],
        key_field="impression_id",
        sum_column="revenue",
        upsert=True,
        order_by="updated_at",
        warm_up=batches[0],
        messages=[m for batch in batches[1:] for m in batch],
        simulated_hours=hours,
    )


def appends(*, hours: int, events: int, warm_up: int, start_ms: int = 1_767_225_600_000) -> Workload:
    """`events` plain JSON events whose event times walk through `hours` simulated hours."""

    def event(i: int, total: int) -> dict[str, Any]:
        rng = random.Random(i)
        now = start_ms + (i * hours * HOUR_MS) // max(1, total)
        return {
            "event_id": f"evt-{i:012d}",
            "event_time": now - rng.randrange(0, HOUR_MS),
            "ad_id": rng.randrange(1_000_000),
            "campaign_id": rng.randrange(10_000),
            "country": rng.choice(COUNTRIES),
            "device": rng.choice(DEVICES),
            "price": round(rng.random() * 5, 4),
            "clicks": rng.randrange(3),
        }

    rows = [event(i, events + warm_up) for i in range(events + warm_up)]
    return Workload(
        name="appends",
        columns=APPEND_COLUMNS,
        key=["event_id", "event_time"],
        key_field="event_id",
        sum_column="price",
        upsert=False,
        order_by=None,
        warm_up=rows[:warm_up],
        messages=rows[warm_up:],
        simulated_hours=hours,
    )


def debezium(ad_events: Workload, *, delete_every: int = 40) -> Workload:
    """(b) The ad events as changes to a database table, which Debezium captures
    (bench/peers/live_cdc.py): a key's first change is a create (`c`), later ones updates (`u`, with
    the row before), and every `delete_every`-th change of a key seen before is a delete (`d`)
    instead; a key changed after its delete is created again."""
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}

    def changes(rows: list[dict[str, Any]], start: int) -> list[dict[str, Any]]:
        out = []
        for i, row in enumerate(rows, start):
            k = tuple(row[c] for c in ad_events.key)
            before = seen.get(k)
            if before is not None and i % delete_every == 0:
                out.append({"op": "d", "before": before, "after": None})
                del seen[k]
            else:
                out.append({"op": "u" if before is not None else "c", "before": before, "after": row})
                seen[k] = row
        return out

    warm_up = changes(ad_events.warm_up, 0)
    return dataclasses.replace(
        ad_events,
        name="debezium",
        envelope="debezium",
        warm_up=warm_up,
        messages=changes(ad_events.messages, len(warm_up)),
    )
