"""The stateful changelog stage against its reference model: engines, order, duplicates, restarts."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import icetide
from icetide.errors import ConfigError
from icetide.spark.jars import spark_line
from icetide.spark.state_store import PROVIDER_CLASS, SPARK_PROVIDER_CLASS
from icetide.stateful.merge import MergeSpec
from icetide.stateful.stage import ChangelogStage, StageOptions
from tests.merge_model import merge_events
from tests.model import table_rows

SCHEMA = "id STRING NOT NULL, ts TIMESTAMP, a INT, b STRING, clicks INT, last_click TIMESTAMP"
RAW_DDL = "id STRING, ts TIMESTAMP, a INT, b STRING, clicks INT, last_click TIMESTAMP, _op STRING"
KEY = ["id"]
VALUES = ["ts", "a", "b", "clicks", "last_click"]
T0 = datetime(2026, 1, 1, tzinfo=UTC).replace(tzinfo=None)
ENGINES = {
    "last": MergeSpec("last"),
    "partial": MergeSpec("partial"),
    "aggregate": MergeSpec(
        "aggregate", {"ts": "max", "a": "first", "b": "last_non_null", "clicks": "sum", "last_click": "max"}
    ),
    # Columns of one function share a struct: two `first` and two `last` columns.
    "shared": MergeSpec("aggregate", {"ts": "max", "a": "first", "b": "first", "clicks": "last", "last_click": "last"}),
}


class Harness:
    """A raw Iceberg table streamed through a stage into a keyed target table."""

    def __init__(self, spark: Any, table: str, tmp_path: Any, spec: MergeSpec, **options: Any) -> None:
        self.spark, self.table, self.raw = spark, table, table + "_raw"
        self.checkpoint = str(tmp_path / f"chk-{table.split('.')[-1]}")
        icetide.create_table(spark, table, schema=SCHEMA, key=KEY)
        spark.sql(f"CREATE TABLE {self.raw} ({RAW_DDL}) USING iceberg")
        self.spec = spec
        self.options = StageOptions(merge=spec, watermark_seconds=options.pop("watermark", 10 * 86400), **options)
        self.events: list[dict[str, Any]] = []

    def stage(self) -> ChangelogStage:
        return ChangelogStage(self.spark, self.table, pipeline_id="stateful", order_by="ts", options=self.options)

    def append(self, events: list[dict[str, Any]]) -> None:
        self.events += events
        rows = [tuple(e.get(c) for c in ["id", *VALUES, "_op"]) for e in events]
        self.spark.createDataFrame(rows, RAW_DDL).writeTo(self.raw).append()

    def run(self, stage: ChangelogStage | None = None) -> ChangelogStage:
        stage = stage or self.stage()
        query = stage.start(
            self.spark.readStream.format("iceberg").load(self.raw), checkpoint=self.checkpoint, available_now=True
        )
        query.awaitTermination()
        return stage

    def table_rows(self) -> dict[Any, Any]:
        return table_rows(self.spark, self.table, ["id", *VALUES], KEY)

    def expected(self) -> dict[Any, Any]:
        return merge_events(self.events, KEY, "ts", VALUES, self.spec)


def random_events(rng: random.Random, batch: int, keys: int, count: int) -> list[dict[str, Any]]:
    """Partial events with distinct times per key, some repeated verbatim, some deletes."""
    events = []
    for i in range(count):
        k = rng.randrange(keys)
        ts = T0 + timedelta(seconds=rng.randrange(3600), microseconds=batch * 1000 + i)
        e: dict[str, Any] = {"id": f"k{k}", "ts": ts}
        if rng.random() < 0.6:
            e["a"] = rng.randrange(100)
        if rng.random() < 0.5:
            e["b"] = rng.choice(["x", "y", "z"])
        if rng.random() < 0.5:
            e["clicks"] = rng.randrange(3)
            e["last_click"] = ts
        e["_op"] = "DELETE" if rng.random() < 0.05 else "UPSERT"
        events.append(e)
        if rng.random() < 0.1:
            events.append(dict(e))  # a repeated event
    rng.shuffle(events)
    return events


@pytest.mark.parametrize("engine", ["last", "partial", "aggregate", "shared"])
def test_engines_match_the_model_under_random_order_and_duplicates(spark, table_name, tmp_path, engine):
    spec = ENGINES[engine]
    h = Harness(spark, table_name, tmp_path, spec)
    rng = random.Random(engine)
    for batch in range(4):
        events = random_events(rng, batch, keys=40, count=60)
        h.append(events)
        h.run()
        assert h.table_rows() == h.expected(), f"batch {batch}"


def test_new_keys_insert_without_deletes_and_unchanged_keys_are_not_written(spark, table_name, tmp_path):
    h = Harness(spark, table_name, tmp_path, ENGINES["last"])
    h.append([{"id": f"k{i}", "ts": T0 + timedelta(minutes=10), "a": i} for i in range(20)])
    stage = h.run()
    assert stage.last_result is not None and stage.last_result.delete_rows == 0
    assert stage.last_result.rows_written == 20
    # Older events for known keys change nothing under `last`: no commit at all.
    stage.last_result = None
    h.append([{"id": f"k{i}", "ts": T0, "a": -1} for i in range(20)])
    h.run(stage)
    assert stage.last_result is None
    # One newer event: one UPSERT, one delete row.
    h.append([{"id": "k3", "ts": T0 + timedelta(minutes=20), "a": 33}])
    h.run(stage)
    assert stage.last_result is not None
    assert (stage.last_result.rows_written, stage.last_result.delete_rows) == (1, 1)
    assert h.table_rows() == h.expected()


def test_partial_events_merge_fields_and_out_of_order_events_do_not_overwrite(spark, table_name, tmp_path):
    h = Harness(spark, table_name, tmp_path, ENGINES["partial"])
    h.append([{"id": "ad", "ts": T0 + timedelta(minutes=5), "a": 1, "b": "impression"}])
    h.run()
    h.append(
        [
            {"id": "ad", "ts": T0 + timedelta(minutes=9), "clicks": 2, "last_click": T0 + timedelta(minutes=9)},
            {"id": "ad", "ts": T0 + timedelta(minutes=1), "a": 0, "b": "older"},
        ]
    )
    h.run()
    row = h.table_rows()[("ad",)]
    assert row[1:] == (T0 + timedelta(minutes=9), 1, "impression", 2, T0 + timedelta(minutes=9))


def test_a_delete_restarts_the_merge_and_its_before_image_is_never_merged(spark, table_name, tmp_path):
    """A CDC delete carries the row it removes (its before-image): that must not be summed again,
    nor come back under partial updates when the key reappears; a delete arriving late, ordered
    before the key's latest event, still drops the fields merged before it."""
    h = Harness(spark, table_name, tmp_path, ENGINES["aggregate"])  # a: first, b: last_non_null, clicks: sum
    h.append([{"id": "ad", "ts": T0 + timedelta(minutes=1), "a": 1, "b": "campaign-x", "clicks": 3}])
    h.run()
    before_image = {"a": 1, "b": "campaign-x", "clicks": 3}
    h.append([{"id": "ad", "ts": T0 + timedelta(minutes=2), **before_image, "_op": "DELETE"}])
    h.run()
    assert h.table_rows() == {} == h.expected()
    h.append([{"id": "ad", "ts": T0 + timedelta(minutes=3), "clicks": 1}])
    h.run()
    row = h.table_rows()[("ad",)]
    # clicks: 3 + 1 (the delete's 3 is not added again); b: reset by the delete; a: first spans deletes
    assert row[1:] == (T0 + timedelta(minutes=3), 1, None, 4, None) and h.table_rows() == h.expected()

    h.append([{"id": "ad", "ts": T0 + timedelta(minutes=5), "b": "campaign-y"}])
    h.append([{"id": "ad", "ts": T0 + timedelta(minutes=7), "clicks": 2}])
    h.run()
    assert h.table_rows()[("ad",)][3] == "campaign-y"
    h.append([{"id": "ad", "ts": T0 + timedelta(minutes=6), "_op": "DELETE"}])  # late: before minute 7
    h.run()
    assert h.table_rows()[("ad",)][3] is None  # campaign-y was set before the delete
    assert h.table_rows() == h.expected()


def test_restart_replays_a_batch_the_table_already_holds(spark, table_name, tmp_path):
    """The table committed a batch whose checkpoint commit never happened: Spark re-runs it, the sink skips it."""
    import shutil
    from pathlib import Path

    h = Harness(spark, table_name, tmp_path, ENGINES["aggregate"])
    h.append([{"id": f"k{i}", "ts": T0 + timedelta(minutes=i), "clicks": 1} for i in range(10)])
    h.run()
    h.append([{"id": f"k{i}", "ts": T0 + timedelta(minutes=30 + i), "clicks": 2} for i in range(5)])
    h.run()
    assert h.table_rows() == h.expected()
    # Lose Spark's record that the last batch finished: the state and table are one batch ahead.
    commits = sorted(Path(h.checkpoint, "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    last = commits[-1]
    last.unlink()
    shutil.rmtree(Path(h.checkpoint, "commits", f".{last.name}.crc"), ignore_errors=True)
    Path(h.checkpoint, "commits", f".{last.name}.crc").unlink(missing_ok=True)
    h.run()
    assert h.table_rows() == h.expected()  # sums not doubled


def test_an_empty_checkpoint_for_a_pipeline_the_table_holds_is_refused(spark, table_name, tmp_path):
    h = Harness(spark, table_name, tmp_path, ENGINES["last"])
    h.append([{"id": "k", "ts": T0, "a": 1}])
    h.run()
    h.checkpoint = str(tmp_path / "elsewhere")
    with pytest.raises(ConfigError, match=r"checkpoint .* is empty"):
        h.run()


def test_an_evicted_key_is_written_as_an_upsert_not_a_second_insert(spark, table_name, tmp_path):
    h = Harness(spark, table_name, tmp_path, ENGINES["last"], watermark=60, ttl_seconds=3600)
    h.append([{"id": "old", "ts": T0, "a": 1}])
    h.run()
    # Event time moves on by a day: the watermark passes the first TTL window and its state goes.
    h.append([{"id": "other", "ts": T0 + timedelta(days=1), "a": 2}])
    h.run()
    h.append([{"id": "other", "ts": T0 + timedelta(days=1, minutes=1), "a": 3}])  # advances the watermark
    h.run()
    stage = h.run()
    h.append([{"id": "old", "ts": T0 + timedelta(days=1, minutes=2), "a": 4}])
    stage = h.run()
    assert stage.last_result is not None and stage.last_result.delete_rows == 1  # UPSERT, not INSERT
    assert h.table_rows() == h.expected()


def test_enrichment_sees_the_dimension_latest_snapshot(spark, table_name, tmp_path):
    from icetide.stateful.enrich import Enrichment

    dim = table_name + "_dim"
    icetide.create_table(spark, dim, schema="code INT NOT NULL, label STRING", key=["code"])
    spark.createDataFrame([(1, "one")], "code INT, label STRING").writeTo(dim).append()
    h = Harness(
        spark, table_name, tmp_path, ENGINES["last"], enrich=(Enrichment(dim, (("a", "code"),), (("label", "b"),)),)
    )
    h.append([{"id": "k1", "ts": T0, "a": 1}])
    h.run()
    assert h.table_rows()[("k1",)][3] == "one"
    spark.sql(f"DELETE FROM {dim} WHERE code = 1")
    spark.createDataFrame([(1, "uno")], "code INT, label STRING").writeTo(dim).append()
    h.append([{"id": "k2", "ts": T0, "a": 1}, {"id": "k1", "ts": T0 + timedelta(minutes=1), "a": 1}])
    h.run()
    rows = h.table_rows()
    assert rows[("k1",)][3] == "uno" and rows[("k2",)][3] == "uno"


def test_without_dedup_every_delivered_event_counts(spark, table_name, tmp_path):
    h = Harness(spark, table_name, tmp_path, ENGINES["aggregate"], dedup=False)
    event = {"id": "k", "ts": T0, "clicks": 2}
    h.append([event, dict(event)])  # delivered twice: both summed
    h.run()
    assert h.table_rows()[("k",)][4] == 4


@pytest.mark.parametrize("engine", ["last", "partial"])
def test_a_repeated_event_writes_nothing_and_needs_no_dedup_state(spark, table_name, tmp_path, engine):
    h = Harness(spark, table_name, tmp_path, ENGINES[engine])
    assert not h.options.deduplicates()  # auto: nothing in these engines counts a repeat
    event = {"id": "k", "ts": T0, "a": 1, "b": "x"}
    h.append([event, dict(event)])
    stage = h.run()
    assert stage.last_result is not None and stage.last_result.rows_written == 1
    stage.last_result = None
    h.append([dict(event)])  # delivered again, a batch later
    h.run(stage)
    assert stage.last_result is None  # the earliest batch keeps the tie: no change, no write
    assert h.table_rows() == h.expected()
    assert StageOptions(merge=ENGINES["aggregate"]).deduplicates()  # sum counts repeats


def test_the_stage_runs_on_icetides_state_provider_and_leaves_the_session_as_it_was(spark, table_name, tmp_path):
    h = Harness(spark, table_name, tmp_path, ENGINES["last"])
    stage = h.stage()
    before = {key: spark.conf.get(key, None) for key in stage.query_conf()}
    h.append([{"id": "k", "ts": T0, "a": 1}])
    h.run(stage)
    metadata = json.loads((Path(h.checkpoint) / "offsets" / "0").read_text().splitlines()[1])
    # icetide's provider on Spark 3.5; Spark's own on 4.1, which fixed the reload (SPARK-51955).
    expected = PROVIDER_CLASS if spark_line(spark.version) == "3.5" else SPARK_PROVIDER_CLASS
    assert metadata["conf"]["spark.sql.streaming.stateStore.providerClass"] == expected
    assert {key: spark.conf.get(key, None) for key in before} == before
    assert h.table_rows() == h.expected()


def test_a_checkpoint_on_icetides_provider_is_refused_by_a_session_without_it(spark, table_name, tmp_path, monkeypatch):
    h = Harness(spark, table_name, tmp_path, ENGINES["last"])
    h.append([{"id": "k", "ts": T0, "a": 1}])
    h.run()
    if spark_line(spark.version) == "3.5":
        monkeypatch.setattr("icetide.stateful.stage.provider_loaded", lambda spark: False)  # a session without the jar
    else:  # a checkpoint started on Spark 3.5, resumed on 4.1, which has no icetide provider
        offsets = Path(h.checkpoint) / "offsets" / "0"
        offsets.write_text(offsets.read_text().replace(SPARK_PROVIDER_CLASS, PROVIDER_CLASS))
        (offsets.parent / ".0.crc").unlink()  # Hadoop's checksum of the file as Spark wrote it
    with pytest.raises(ConfigError, match="icetide's RocksDB provider"):
        h.run()
