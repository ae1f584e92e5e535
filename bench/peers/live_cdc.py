"""(b) on a live database: the ad events' changes made to a PostgreSQL table, captured by Debezium's
PostgreSQL connector in a Kafka Connect worker, and read from that one topic by every system.

The database is the record: the harness runs each generated change as SQL (a create an INSERT, an
update an UPDATE of every column by the key, a delete a DELETE by the key), in transactions of
`TRANSACTION_ROWS` changes at the paced rate, stamping `produced_at` with the wall time of the
statement. What the connector captures is what it sends: a snapshot (`r`) of the rows that exist
when it starts (the warm-up), then `c`/`u`/`d` and a tombstone after each delete, in Kafka's JSON
converter with schemas. Each system's table must equal the database table at the end.

Settings, and why:
- The connector at Debezium's defaults as docs/how-to/debezium-sync.md shows it (pgoutput, an
  initial snapshot, the JSON converter with schemas), its topic created with the harness's 4
  partitions (Connect's partitioner hashes the key, so a key's changes stay in order).
- `REPLICA IDENTITY FULL` on the table: Flink's `debezium-json` format refuses an update whose
  `before` is null, which PostgreSQL's default identity sends (Flink's docs name this setting).
- Times are `timestamp(3)`: Debezium's default `time.precision.mode` sends them as
  `io.debezium.time.Timestamp`, epoch milliseconds, which both systems read (Flink through
  `TO_TIMESTAMP_LTZ(x, 3)`).
PostgreSQL and the Connect worker are the source, shared by every system like the broker: their
CPU is counted for none.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.peers.workloads import Workload

TABLE = "impressions"
TRANSACTION_ROWS = 100
_PG_TYPES = {"STRING": "text", "BIGINT": "bigint", "INT": "integer", "DOUBLE": "double precision"}
# Debezium with a benchmark's JVM, as the Kafka Connect sink's worker (bench/peers/kafka_connect/peer.py)
CONNECT_JVM_OPTIONS = ("-Xms256m", "-Xmx2g", "-XX:+UseG1GC", "-Duser.timezone=UTC")


def pg_type(ddl: str, kind: str) -> str:
    """A workload column's PostgreSQL type: times to the millisecond (Debezium's `Timestamp`)."""
    base = "timestamp(3)" if kind == "TIMESTAMP" else _PG_TYPES[kind]
    return f"{base} NOT NULL" if "NOT NULL" in ddl else base


def _sql_value(kind: str, value: Any) -> Any:
    if kind == "TIMESTAMP" and value is not None:
        return datetime.fromtimestamp(value / 1000, UTC).replace(tzinfo=None)
    return value


@dataclass
class LiveDatabase:
    """The workload's table in a PostgreSQL database, with a running Debezium connector on it."""

    workload: Workload
    conn: Any
    prefix: str

    @property
    def topic(self) -> str:
        """Debezium's topic for the table: <topic.prefix>.<schema>.<table>."""
        return f"{self.prefix}.public.{TABLE}"

    @property
    def _names(self) -> list[str]:
        return [n for n, _, _ in self.workload.columns]

    def create_table(self) -> None:
        columns = ", ".join(f"{n} {pg_type(ddl, kind)}" for n, ddl, kind in self.workload.columns)
        self.conn.execute(f"CREATE TABLE {TABLE} ({columns}, PRIMARY KEY ({', '.join(self.workload.key)}))")
        self.conn.execute(f"ALTER TABLE {TABLE} REPLICA IDENTITY FULL")

    def apply(self, changes: list[dict[str, Any]], rate: float | None) -> None:
        """Run `changes` ({op, before, after}) as SQL, in order, `TRANSACTION_ROWS` to a transaction,
        at `rate` changes per second (None: at once); each row's `produced_at` is the time of its
        statement."""
        kinds = {n: kind for n, _, kind in self.workload.columns}
        key = self.workload.key
        names = self._names
        values = [n for n in names if n not in key]
        insert = f"INSERT INTO {TABLE} ({', '.join(names)}) VALUES ({', '.join(['%s'] * len(names))})"
        where = " AND ".join(f"{k} = %s" for k in key)
        update = f"UPDATE {TABLE} SET {', '.join(f'{n} = %s' for n in values)} WHERE {where}"
        delete = f"DELETE FROM {TABLE} WHERE {where}"
        began = time.monotonic()
        for start in range(0, len(changes), TRANSACTION_ROWS):
            if rate:
                ahead = start / rate - (time.monotonic() - began)
                if ahead > 0:
                    time.sleep(ahead)
            with self.conn.transaction(), self.conn.cursor() as cur:
                for change in changes[start : start + TRANSACTION_ROWS]:
                    row = change["after"] or change["before"]
                    keys = [_sql_value(kinds[k], row[k]) for k in key]
                    if change["op"] == "d":
                        cur.execute(delete, keys)
                        continue
                    row["produced_at"] = int(time.time() * 1000)
                    if change["op"] == "c":
                        cur.execute(insert, [_sql_value(kinds[n], row[n]) for n in names])
                    else:
                        cur.execute(update, [*(_sql_value(kinds[n], row[n]) for n in values), *keys])
                    if cur.rowcount != 1:
                        raise RuntimeError(f"{change['op']} of {keys} changed {cur.rowcount} rows")

    def rows(self) -> list[dict[str, Any]]:
        """The table as it is now, times as epoch milliseconds: the model every system must equal."""
        kinds = {n: kind for n, _, kind in self.workload.columns}
        select = ", ".join(
            f"(extract(epoch FROM {n}) * 1000)::bigint" if kinds[n] == "TIMESTAMP" else n for n in self._names
        )
        with self.conn.cursor() as cur:
            cur.execute(f"SELECT {select} FROM {TABLE}")
            return [dict(zip(self._names, r, strict=True)) for r in cur.fetchall()]


def connector_config(server: Any, database: str, prefix: str, partitions: int) -> dict[str, str]:
    """Debezium's PostgreSQL connector as docs/how-to/debezium-sync.md shows it, its topic created
    with `partitions` partitions."""
    return {
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "plugin.name": "pgoutput",
        "database.hostname": "127.0.0.1",
        "database.port": str(server.port),
        "database.user": "postgres",
        "database.password": server.password,
        "database.dbname": database,
        "topic.prefix": prefix,
        "schema.include.list": "public",
        "table.include.list": f"public.{TABLE}",
        "slot.name": f"dbz_{prefix}",
        "publication.name": f"dbz_{prefix}",
        "publication.autocreate.mode": "filtered",
        "snapshot.mode": "initial",
        "topic.creation.default.replication.factor": "1",
        "topic.creation.default.partitions": str(partitions),
    }


@contextlib.contextmanager
def live_database(workload: Workload, work: Path, bootstrap: str, partitions: int) -> Iterator[LiveDatabase]:
    """A PostgreSQL server holding the workload's warm-up rows, and Debezium's connector streaming its
    table to the broker at `bootstrap` (snapshot first); all stopped afterwards."""
    from tests.kafka_broker import started
    from tests.kafka_connect import KafkaConnect
    from tests.postgres_server import postgres_server

    prefix = f"pg{uuid.uuid4().hex[:8]}"
    with postgres_server() as server:
        database = server.new_database()
        conn = server.connect(database)
        try:
            db = LiveDatabase(workload, conn, prefix)
            db.create_table()
            db.apply(workload.warm_up, None)
            worker = KafkaConnect(
                work / "debezium", bootstrap, group="debezium-source", jvm_options=CONNECT_JVM_OPTIONS
            )
            with started(worker):
                worker.create_connector("source", connector_config(server, database, prefix, partitions), timeout=120)
                yield db
        finally:
            conn.close()
