"""Soak of a whole-database sync: Debezium topics into one table each through `icetide run`, with
maintenance, kills, a broker restart and a new column while it streams.

    .venv/bin/python bench/soak_sync.py [--minutes 30] [--tables 8] [--rate 300] [--keys 2000] [--record]

For `--minutes` it produces Debezium change events as Kafka Connect's JSON converter writes them
(`schemas.enable=true`: a key `{"schema", "payload": {"id"}}`, an envelope with `before`, `after`,
a MySQL source block naming the table, `op` c/u/d, and a tombstone after each delete) for
`--tables` tables, one topic of 2 partitions each (`soakdb.inventory.tNN`; a key always lands in
the same partition), at `--rate` events per second in all. One event in `--bad-every` is bad:
text that is not JSON (no table can be named: routed nowhere) or a `qty` that is no number
(routed, refused by the decoder). A third of the way in, table t00's events gain a column
(`note`), as an `ALTER TABLE ... ADD COLUMN` upstream would: the pipeline has
`schema_evolution: true`.

One pipeline (`topic_pattern`, `table.name: lake.soak_sync.{table}`, tables created from their
first messages' schemas and keys, upsert mode) runs as `icetide run` in a subprocess, SIGKILLed
every 10-20% of the run and started again; `icetide maintain --every 1m` runs beside it. Half
way, the Apache Kafka broker is killed and started again with its log (bench/soak.py's SoakRun).

At the end it waits until every table's committed position reaches its topic's end, stops both
processes and checks that each table equals its reference model (per table: key -> row, each
partition's events applied in offset order) and that the dead-letter table holds every bad
record once and nothing else.
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_session, parser, render_table
from bench.ingest_debezium import SOURCE_FIELDS
from bench.soak import ProducedLog, SoakRun, log, run_soak

PARTITIONS = 2
NAMESPACE = "soak_sync"
DEAD_LETTER = f"lake.{NAMESPACE}.dead_letter"
TOPIC_PREFIX = "soakdb.inventory."
NAMES = ["bolt", "nut", "gear", "spring", "washer", "valve"]

ROW_FIELDS = [
    {"type": "int32", "optional": False, "field": "id"},
    {"type": "string", "optional": True, "field": "name"},
    {"type": "int64", "optional": True, "field": "qty"},
    {"type": "double", "optional": True, "field": "price"},
    {"type": "int64", "optional": True, "name": "io.debezium.time.Timestamp", "version": 1, "field": "updated_at"},
]
NOTE_FIELD = {"type": "string", "optional": True, "field": "note"}


def topic_of(table: str) -> str:
    return TOPIC_PREFIX + table


def envelope_schema(table: str, fields: list[dict[str, Any]]) -> dict[str, Any]:
    """The Connect schema of `table`'s change events, as Debezium's MySQL connector names it."""
    value = {"type": "struct", "fields": fields, "optional": True, "name": f"soakdb.inventory.{table}.Value"}
    return {
        "type": "struct",
        "name": f"soakdb.inventory.{table}.Envelope",
        "optional": False,
        "fields": [
            {**value, "field": "before"},
            {**value, "field": "after"},
            {"type": "struct", "fields": SOURCE_FIELDS, "optional": False, "field": "source"},
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
        ],
    }


def key_message(table: str, row_id: int) -> bytes:
    schema = {
        "type": "struct",
        "optional": False,
        "name": f"soakdb.inventory.{table}.Key",
        "fields": [{"type": "int32", "optional": False, "field": "id"}],
    }
    return json.dumps({"schema": schema, "payload": {"id": row_id}}, separators=(",", ":")).encode()


class SyncStream(ProducedLog):
    """Every table's change events; the log keeps (key, value or None, kind), kind "c" | "u" | "d" |
    "tomb" | "bad"."""

    def __init__(self, bootstrap: str, args: Any) -> None:
        self.tables = [f"t{i:02d}" for i in range(args.tables)]
        super().__init__(bootstrap, args.rate, [topic_of(t) for t in self.tables], PARTITIONS)
        self.keys: int = args.keys
        self.bad_every: int = args.bad_every
        self.rng = random.Random(args.seed)
        self.seq = 0
        self.evolved = threading.Event()  # t00's events carry `note` from now on
        self.current: dict[str, dict[int, dict[str, Any]]] = {t: {} for t in self.tables}  # what was sent

    def records(self) -> list[tuple[str, int, tuple[Any, ...]]]:
        """The next change (and its tombstone after a delete): (topic, partition, key, value, kind)."""
        self.seq += 1
        i = self.seq
        table = self.rng.choice(self.tables)
        row_id = self.rng.randrange(self.keys)
        now = int(time.time() * 1000)
        rows = self.current[table]
        evolved = table == "t00" and self.evolved.is_set()
        fields = [*ROW_FIELDS, NOTE_FIELD] if evolved else ROW_FIELDS
        before = rows.get(row_id)
        after: dict[str, Any] | None
        source = {
            "version": "2.7.0.Final",
            "connector": "mysql",
            "name": "soakdb",
            "ts_ms": now,
            "db": "inventory",
            "table": table,
            "file": "mysql-bin.000007",
            "pos": 4 + 250 * i,
            "row": 0,
        }
        topic, partition, key = topic_of(table), row_id % PARTITIONS, key_message(table, row_id)
        if self.bad_every and i % self.bad_every == 0:
            if (i // self.bad_every) % 2:
                return [(topic, partition, (key, b'{"schema": {"type": "struct", "fie', "bad"))]  # cut off
            refused = {"id": row_id, "name": "bad", "qty": "not a number", "price": 1.0, "updated_at": now}
            payload = {"before": None, "after": refused, "source": source, "op": "c", "ts_ms": now}
            body = {"schema": envelope_schema(table, fields), "payload": payload}
            return [(topic, partition, (key, json.dumps(body, separators=(",", ":")).encode(), "bad"))]
        if before is not None and self.rng.random() < 0.08:
            op, after, kind = "d", None, "d"
            del rows[row_id]
        else:
            after = {
                "id": row_id,
                "name": self.rng.choice(NAMES) if self.rng.random() < 0.9 else None,
                "qty": self.rng.randrange(-1000, 1_000_000),
                "price": round(self.rng.random() * 500, 2),
                "updated_at": now - self.rng.randrange(86_400_000),
            }
            if evolved:
                after["note"] = f"n{i}" if self.rng.random() < 0.7 else None
            op = kind = "u" if before is not None else "c"
            rows[row_id] = after
        payload = {"before": before, "after": after, "source": source, "op": op, "ts_ms": now}
        value = json.dumps({"schema": envelope_schema(table, fields), "payload": payload}, separators=(",", ":"))
        out: list[tuple[str, int, tuple[Any, ...]]] = [(topic, partition, (key, value.encode(), kind))]
        if op == "d":
            out.append((topic, partition, (key, None, "tomb")))  # as Debezium follows a delete
        return out

    def model(self) -> tuple[dict[str, dict[int, dict[str, Any]]], set[str]]:
        """Per table, id -> row after each partition's events in offset order; the bad records' positions."""
        from datetime import UTC, datetime

        tables: dict[str, dict[int, dict[str, Any]]] = {}
        bad: set[str] = set()
        for topic, partitions in self.log.items():
            rows = tables.setdefault(topic.removeprefix(TOPIC_PREFIX), {})
            for p, records in partitions.items():
                for o in sorted(records):
                    _, value, kind = records[o]
                    if kind == "bad":
                        bad.add(f"{topic}/{p}@{o}")
                    elif kind in ("c", "u"):
                        after = dict(json.loads(value or b"")["payload"]["after"])
                        ms = after["updated_at"]
                        after["updated_at"] = datetime.fromtimestamp(ms / 1000, UTC).replace(tzinfo=None)
                        rows[after["id"]] = after
                    elif kind == "d":
                        rows.pop(json.loads(value or b"")["payload"]["before"]["id"], None)
        return tables, bad


def committed_positions(warehouse: Path, table: str) -> dict[str, dict[int, int]]:
    """The highest position each of `table`'s commits recorded, topic -> partition -> next offset."""
    meta_dir = warehouse / NAMESPACE / table / "metadata"
    try:
        version = (meta_dir / "version-hint.text").read_text().strip()
        meta = json.loads((meta_dir / f"v{version}.metadata.json").read_text())
    except (OSError, ValueError):
        return {}
    out: dict[str, dict[int, int]] = {}
    for snapshot in meta.get("snapshots", []):
        position = snapshot.get("summary", {}).get("icetide.source-position")
        if not position:
            continue
        for topic, partitions in json.loads(position).items():
            if isinstance(partitions, dict):
                for p, o in partitions.items():
                    mine = out.setdefault(topic, {})
                    mine[int(p)] = max(mine.get(int(p), 0), int(o))
    return out


def caught_up(warehouse: Path, ends: dict[str, dict[int, int]]) -> bool:
    for topic, partitions in ends.items():
        position = committed_positions(warehouse, topic.removeprefix(TOPIC_PREFIX)).get(topic, {})
        if any(position.get(p, 0) < end for p, end in partitions.items()):
            return False
    return True


def soak(args: Any, work: Path) -> str:
    warehouse = work / "warehouse"
    run = SoakRun(work, args.minutes, args.seed, args.broker_down)
    stream = SyncStream(run.bootstrap, args)
    stream.create_topics()
    pipeline = {
        "pipeline": "soak-sync",
        "warehouse": str(warehouse),
        "source": {
            "kafka": {
                "bootstrap_servers": run.bootstrap,
                "topic_pattern": TOPIC_PREFIX.replace(".", "\\.") + ".*",
                "starting_offsets": "earliest",
            }
        },
        "format": "debezium",
        "table": {"name": f"lake.{NAMESPACE}.{{table}}"},
        "schema_evolution": True,
        "mode": "upsert",
        "trigger": {"interval": args.interval, "max_records": args.max_records},
        "dead_letter": DEAD_LETTER,
        "restart": {"max_attempts": 30, "backoff": "1s", "max_backoff": "10s"},
        "spark": {"spark.driver.memory": "1g"},
    }

    def evolve(event: str, elapsed: float) -> None:
        if event == "tick" and elapsed >= run.duration / 3 and not stream.evolved.is_set():
            stream.evolved.set()
            log("t00's events carry a new column, note")

    log(f"work dir {work}; {args.tables} tables, {args.rate} events/s over {args.keys} keys each, {args.minutes} min")
    run.run(pipeline, stream, table_ready=(warehouse / NAMESPACE).exists, on=evolve)
    log("waiting for every table to reach its topic's end")
    ends = stream.ends()
    drained, drain_s = run.drain(lambda: caught_up(warehouse, ends), 900)
    run.stop()

    # -- checks ----------------------------------------------------------------------------------
    model, bad = stream.model()
    spark = bench_session(str(warehouse), memory="2g")
    rows_checked, mismatches, per_table = 0, [], []
    for table in stream.tables:
        name = f"lake.{NAMESPACE}.{table}"
        expected = model.get(table, {})
        frame = spark.table(name)
        columns = frame.columns
        got: dict[int, dict[str, Any]] = {}
        duplicates = 0
        for r in frame.collect():
            duplicates += r["id"] in got
            got[r["id"]] = r.asDict()
        want = {k: {c: row.get(c) for c in columns} for k, row in expected.items()}
        missing = sorted(k for k in want if k not in got)
        extra = sorted(k for k in got if k not in want)
        differ = sorted(k for k in want if k in got and got[k] != want[k])
        for what, keys in (("missing", missing), ("extra", extra), ("differ", differ)):
            for k in keys[:3]:
                mismatches.append(f"{table} {what} {k}: table {got.get(k)} model {want.get(k)}")
        rows_checked += len(got)
        ok = not (missing or extra or differ or duplicates)
        added = ", ".join(c for c in columns if c not in {f["field"] for f in ROW_FIELDS}) or "-"
        counts = (len(missing), len(extra), len(differ), duplicates)
        per_table.append((table, "OK" if ok else "MISMATCH", f"{len(got):,}", f"{len(want):,}", *counts, added))
    dead = [r["source_position"] for r in spark.table(DEAD_LETTER).select("source_position").collect()]
    batches = run.batches()
    spark.stop()
    for line in mismatches[:20]:
        log(f"MISMATCH {line}")
    dead_set = set(dead)
    good_in_dead, bad_missing = sorted(dead_set - bad), sorted(bad - dead_set)
    paths: dict[str, int] = {}
    for b in batches:
        path = str(b.get("path", "?")).split(":")[0]  # "fast", or "spark" for any reason
        paths[path] = paths.get(path, 0) + 1
    tables_ok = all(row[1] == "OK" for row in per_table)
    ok = tables_ok and not (good_in_dead or bad_missing or len(dead) != len(dead_set)) and drained
    ok = ok and not stream.errors
    produced = sum(sum(parts.values()) for parts in ends.values())
    checks = render_table(
        ["check", "result"],
        [
            (
                "every table = its model",
                f"{'OK' if tables_ok else 'MISMATCH'}: {rows_checked:,} rows in {len(per_table)} tables",
            ),
            (
                "dead letter = the bad records",
                f"{'OK' if not (good_in_dead or bad_missing or len(dead) != len(dead_set)) else 'MISMATCH'}: "
                f"{len(dead):,} rows for {len(bad):,} bad records; good records in it {len(good_in_dead)}, bad "
                f"missing {len(bad_missing)}, duplicates {len(dead) - len(dead_set)}",
            ),
            ("batches", f"{len(batches):,} committed; by path {dict(sorted(paths.items()))}"),
            *run.rows(),
            ("drain after producing stopped", f"{drain_s:.0f}s, caught up: {drained}"),
            ("producer delivery errors", f"{len(stream.errors)} {stream.errors[:3]}"),
        ],
    )
    tables = render_table(
        ["table", "check", "rows", "model", "missing", "extra", "differ", "duplicates", "added columns"], per_table
    )
    return (
        f"{args.minutes:g} minutes of Debezium JSON-converter changes at {args.rate}/s ({produced:,} records with "
        f"tombstones: {len(bad)} bad, about 8% deletes) for {args.tables} tables ({PARTITIONS} partitions, "
        f"{args.keys:,} keys each), one `icetide run` (topic_pattern, tables created from their messages, "
        f"schema_evolution, trigger {args.interval}, max_records {args.max_records:,}) and `icetide maintain "
        f"--every 1m` as subprocesses, the runner SIGKILLed every 10-20% of the run, t00 gaining a column a third of "
        f"the way in, one broker crash and restart half way (started again with its log). "
        f"Overall: {'PASS' if ok else 'FAIL'}.\n\n{checks}\n\n{tables}\n"
    )


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--minutes", type=float, default=30)
    p.add_argument("--tables", type=int, default=8)
    p.add_argument("--rate", type=int, default=300, help="change events per second, all tables together")
    p.add_argument("--keys", type=int, default=2000, help="keys per table")
    p.add_argument("--bad-every", type=int, default=3000, help="one bad record every N events")
    p.add_argument("--interval", default="2s", help="the runner's trigger interval")
    p.add_argument("--max-records", type=int, default=50_000, help="the runner's max_records")
    p.add_argument("--broker-down", type=float, default=20, help="seconds the broker stays down at its restart")
    p.add_argument("--seed", type=int, default=11)
    run_soak(p, soak, "soak-sync", lambda a: f"bench/soak_sync.py: {a.minutes:g}-minute soak of a whole-database sync")


if __name__ == "__main__":
    main()
