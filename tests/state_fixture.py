"""A warehouse written by icetide's pipeline state of version 0 (before the typed, versioned state of
issue 23), kept as tests/data/state_v0.tar.gz, and the streams it was written from.

It holds two pipelines, each stopped by a SIGKILL at a point that leaves state a restart must read:
- `events`: JSON from one topic of 3 partitions, with bad records. It was killed in its third
  batch after that batch's dead letters (and the batch's recorded plan) committed, before its
  data did: a restart must replay that plan and land its rows once, and its dead letters once.
- `inventory`: a database sync of three Debezium topics (real messages, see tests/test_db_sync.py).
  It was killed in its second batch after the first of its tables committed: the registry and
  the dead-letter position are in the dead-letter table, each table holds its own position.

Iceberg metadata holds absolute paths, so the warehouse lives at WAREHOUSE both when written and
when read back. Regenerate (only when the fixture must change, never to make a test pass):
`python -m tests.state_fixture` (it starts an Apache Kafka broker, tests/kafka_broker.py).
"""

from __future__ import annotations

import shutil
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import yaml

WAREHOUSE = Path("/tmp/icetide-state-v0/warehouse")
ARCHIVE = Path(__file__).resolve().parent / "data" / "state_v0.tar.gz"
EVENTS_TOPIC = "state-v0-events"
SYNC_PREFIX = "statev0"
Record = tuple[int, bytes | None, bytes | None, None]


def events_doc(bootstrap: str) -> dict[str, Any]:
    """The `events` pipeline file."""
    from tests.test_runner_kafka import KEY, SCHEMA

    return {
        "pipeline": "events",
        "warehouse": str(WAREHOUSE),
        "source": {"kafka": {"bootstrap_servers": bootstrap, "topic": EVENTS_TOPIC, "starting_offsets": "earliest"}},
        "table": {"name": "lake.v0.events", "schema": SCHEMA, "key": KEY, "partition_by": ["hours(event_time)"]},
        "trigger": {"interval": "1s", "max_records": 40},
        "dead_letter": "lake.v0.events_dead_letter",
    }


def events_records(part: int) -> list[tuple[int, bytes, bytes, None]]:
    """Part 0: what the fixture was written from (120 records); part 1: what arrives after it."""
    from tests.test_runner_kafka import events

    return events(0, 120, bad_every=17) if part == 0 else events(120, 60, bad_every=17)


def sync_doc(bootstrap: str) -> dict[str, Any]:
    """The `inventory` pipeline file."""
    from tests.test_db_sync import pipeline_doc

    doc = pipeline_doc("inventory", bootstrap, SYNC_PREFIX, "v0sync")
    doc["warehouse"] = str(WAREHOUSE)
    doc["trigger"] = {"interval": "1s", "max_records": 30}
    return doc


def sync_records(part: int) -> dict[str, list[Record]]:
    """Per topic: part 0 what the fixture was written from, part 1 what arrives after it."""
    from tests.test_db_sync import changes, inventory_streams

    streams = inventory_streams()
    out: dict[str, list[Record]] = {}
    for seed, (table, stream) in enumerate(sorted(streams.items())):
        every = changes(stream, seed, 50)
        out[f"{SYNC_PREFIX}.inventory.{table}"] = every[:30] if part == 0 else every[30:]
    return out


def create_topics(bootstrap: str) -> None:
    """The fixture's topics, by their fixed names."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    wanted = [NewTopic(EVENTS_TOPIC, num_partitions=3, replication_factor=1)]
    wanted += [NewTopic(t, num_partitions=1, replication_factor=1) for t in sync_records(0)]
    for future in admin.create_topics(wanted).values():
        future.result(timeout=20)


def produce_part(bootstrap: str, part: int) -> None:
    """Produce one part of both pipelines' streams."""
    from tests.kafka_broker import produce

    produce(bootstrap, EVENTS_TOPIC, events_records(part))  # type: ignore[arg-type]
    for topic, records in sync_records(part).items():
        produce(bootstrap, topic, records)


def write_config(doc: dict[str, Any], folder: Path) -> Path:
    """The pipeline file of `doc` in `folder`."""
    path = folder / f"{doc['pipeline']}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def unpack() -> None:
    """Put the fixture's warehouse at WAREHOUSE (replacing what was there)."""
    shutil.rmtree(WAREHOUSE.parent, ignore_errors=True)
    WAREHOUSE.parent.mkdir(parents=True)
    with tarfile.open(ARCHIVE) as tar:
        tar.extractall(WAREHOUSE.parent, filter="data")


def _killed_run(config: Path, point: str, batch: int) -> None:
    env = {"ICETIDE_CRASH_AT": point, "ICETIDE_CRASH_BATCH": str(batch)}
    from tests.commands import run_cli

    done = run_cli("run", str(config), "--once", env=env)
    assert done.returncode == -9, done.stderr[-3000:]


def main() -> None:
    """Write the fixture: both pipelines over part 0, each killed where the docstring says."""
    from tests.kafka_broker import apache_kafka

    shutil.rmtree(WAREHOUSE.parent, ignore_errors=True)
    WAREHOUSE.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp, apache_kafka(Path(tmp) / "kafka") as bootstrap:
        create_topics(bootstrap)
        produce_part(bootstrap, 0)
        _killed_run(write_config(events_doc(bootstrap), Path(tmp)), "after_dead_letter", 3)
        _killed_run(write_config(sync_doc(bootstrap), Path(tmp)), "after_table_commit", 2)
    with tarfile.open(ARCHIVE, "w:gz") as tar:
        tar.add(WAREHOUSE, arcname=WAREHOUSE.name)
    print(f"wrote {ARCHIVE} ({ARCHIVE.stat().st_size:,} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
