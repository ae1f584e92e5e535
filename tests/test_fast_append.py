"""The append fast path (pipeline/json_fast.py) against a real broker (Apache Kafka) and real Iceberg tables.

It must give the same typed table and the same dead letters as the Spark path, exactly once across
kill -9, and step aside when it cannot (fast_path: off, _op changes).
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml

from icetide.config.pipeline import PipelineConfig
from icetide.decode.json.records import ArrowJsonDecoder
from icetide.errors import ConfigError
from icetide.executor.task_shares import split_partitions, split_ranges
from icetide.pipeline.batches import TooManyBadRecordsError
from icetide.pipeline.table_runner import Runner, RunSummary
from icetide.sources.kafka_reader import OffsetRange
from icetide.table.spec import PartitionTransform
from icetide.write.transforms import arrow_partition_values
from tests.commands import crash_tour, warehouse_reader
from tests.kafka_broker import create_topic, produce
from tests.model import ReferenceModel, table_rows

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = (
    "event_id STRING NOT NULL, event_time TIMESTAMP NOT NULL, ad_id BIGINT, clicks INT, price DOUBLE, "
    "ok BOOLEAN, day DATE, label STRING"
)
COLUMNS = ["event_id", "event_time", "ad_id", "clicks", "price", "ok", "day", "label"]
KEY = ["event_id", "event_time"]
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z in epoch milliseconds


def doc(name: str, bootstrap: str, topic: str, **extra: Any) -> dict[str, Any]:
    table = {"name": f"lake.fast.{name}", "schema": SCHEMA, "key": KEY, "partition_by": ["hours(event_time)"]}
    table.update(extra.pop("table", {}))
    return {
        "pipeline": name,
        "source": {"kafka": {"bootstrap_servers": bootstrap, "topic": topic}},
        "table": table,
        "mode": "append",
        "trigger": {"interval": "1s", "max_records": 400},
        "dead_letter": f"lake.fast.{name}_dead_letter",
        **extra,
    }


def good_event(i: int) -> dict[str, Any]:
    """Coercions both paths share: epoch millis or ISO text (zoned or not), numbers as text, booleans,
    a number into a STRING column, and text that looks like JSON (a string: kept as it is)."""
    shapes = [
        {"event_time": T0 + i * 60_000, "ad_id": i, "clicks": i % 5, "price": 1.5, "ok": True, "day": 20454},
        {"event_time": "2026-01-01T02:30:00Z", "ad_id": str(i), "clicks": "7", "price": 2, "ok": "yes"},
        {"event_time": "2026-01-01 03:00:00", "ad_id": i, "day": "2026-01-02", "label": 42, "ok": False},
        {"event_time": "2026-01-01T05:00:00+02:00", "clicks": None, "price": "3.25", "label": '{"a":[1]}'},
        {"event_time": str(T0 + 7_200_000), "ad_id": -i, "extra": "ignored"},
    ]
    return {"event_id": f"e{i}", **shapes[i % len(shapes)]}


BAD = [
    b'{"event_id": "b", "event_time": "not a time"}',
    b'{"event_id": "b", "event_time": 1767225600000, "clicks": "many"}',
    b'{"event_id": "b", "event_time": 1767225600000, "clicks": 99999999999}',
    b'{"event_time": 1767225600000}',
    b'{"event_id": "b", "event_time": 1767225600000, "ok": "maybe"}',
    b'{"event_id": "b", "event_time": ',
    b"[1, 2]",
    b"   ",
    b'{"event_id": "b", "event_time": 1767225600000, "_op": "merge"}',
    b'{"event_id": "b", "event_time": 1767225600000, "label": {"a": [1]}}',  # an object is no text (issue 49)
    b'{"event_id": "b", "event_time": 1767225600000, "label": [1, 2]}',  # nor is an array
    b'{"event_id": "b", "event_time": 1767225600000, "day": "2024-13-45"}',  # date-shaped, no date
    b'{"event_id": "b", "event_time": "2026-02-30T01:00:00"}',  # time-shaped, no time
]


def records(count: int, *, bad_every: int = 0, partitions: int = 3) -> list[tuple[int, bytes, bytes | None, None]]:
    out: list[tuple[int, bytes, bytes | None, None]] = []
    for i in range(count):
        if bad_every and i % bad_every == bad_every - 1:
            value: bytes | None = BAD[(i // bad_every) % len(BAD)]
        elif i % 97 == 96:
            value = None  # a tombstone: skipped by both paths
        else:
            value = json.dumps(good_event(i)).encode()
        out.append((i % partitions, f"k{i}".encode(), value, None))
    return out


def expected(recs: list[tuple[int, bytes, bytes | None, None]]) -> set[str]:
    """The event ids the table must hold: every good record once (event ids are unique)."""
    model = ReferenceModel(["event_id"], ["event_id"], None)
    model.apply(1, [json.loads(v) for _, _, v, _ in recs if v is not None and v not in BAD])
    return {k[0] for k in model.rows}


def run_pipeline(spark: Any, config_doc: dict[str, Any], summaries: list[RunSummary] | None = None) -> Runner:
    runner = Runner(PipelineConfig.from_dict(config_doc), spark)
    summary = runner.run(once=True, handle_signals=False)
    if summaries is not None:
        summaries.append(summary)
    return runner


# -- pure logic -------------------------------------------------------------------------------


def test_split_ranges_covers_every_offset_once() -> None:
    ranges = [OffsetRange("t", 0, 10, 110), OffsetRange("t", 1, 0, 7), OffsetRange("t", 2, 5, 60)]
    groups = split_ranges(ranges, 3)
    assert len(groups) == 3
    sizes = [sum(r.count for r in g) for g in groups]
    assert max(sizes) - min(sizes) <= 2 and sum(sizes) == 162
    covered = sorted((r.partition, o) for g in groups for r in g for o in range(r.start, r.end))
    assert covered == sorted((r.partition, o) for r in ranges for o in range(r.start, r.end))
    assert split_ranges(ranges, 1) == [ranges]


def test_split_partitions_keeps_each_partition_whole_and_in_order() -> None:
    """Upserts: a key's changes stay in its partition's task, in offset order."""
    ranges = [
        OffsetRange("t", 0, 0, 100),
        OffsetRange("u", 0, 0, 30),
        OffsetRange("t", 1, 0, 60),
        OffsetRange("t", 2, 0, 50),
        OffsetRange("t", 0, 100, 120),  # a second range of partition 0 (as after a held range)
    ]
    groups = split_partitions(ranges, 2)
    assert len(groups) == 2
    where = {(r.topic, r.partition): i for i, g in enumerate(groups) for r in g}
    assert sorted(where) == [("t", 0), ("t", 1), ("t", 2), ("u", 0)]
    assert [r for r in groups[where[("t", 0)]] if r.partition == 0 and r.topic == "t"] == [ranges[0], ranges[4]]
    assert sorted(sum(r.count for r in g) for g in groups) == [120, 140]
    assert split_partitions(ranges, 9) and len(split_partitions(ranges, 9)) == 4
    assert split_partitions(ranges, 1) == [ranges]


# Records with keys that are no column of a table (id STRING NOT NULL, n BIGINT).
KEYS_NO_COLUMN = [
    b'{"id": "a", "n": 1, "color": "red"}',
    b'{"id": "b", "n": 2, "color": null, "size": {"w": 3}}',
    b'{"id": "c", "n": 3, "_op": "INSERT", "color": "blue"}',
]


def test_decoder_counts_keys_that_are_no_column_on_both_paths() -> None:
    """Fields the table lacks are never dropped without a word (issue 14): both decoding paths
    count, per key, the good records that carry it (null-valued too, as decode_json counts); the rows are
    unchanged."""
    schema = pa.schema([pa.field("id", pa.string(), nullable=False), pa.field("n", pa.int64())])
    decoder = ArrowJsonDecoder(schema, ["id"])
    values = KEYS_NO_COLUMN
    block = decoder.decode(values, str)
    assert block.unknown_fields == {"color": 3, "size": 1} and block.rows.num_rows == 3 and not block.bad
    # A bad record sends the block record by record: the same counts, its own keys not counted.
    mixed = decoder.decode([*values, b'{"id": "x", "n": "no", "color": "green"}'], str)
    assert mixed.unknown_fields == {"color": 3, "size": 1} and mixed.rows == block.rows and len(mixed.bad) == 1
    # An extra key whose type changes within a block: pyarrow cannot infer it; the records still count.
    changing = decoder.decode([b'{"id": "a", "v": 1}', b'{"id": "b", "v": "x"}'], str)
    assert changing.unknown_fields == {"v": 2} and changing.rows.num_rows == 2
    assert decoder.decode([b'{"id": "a", "n": 1}'], str).unknown_fields == {}


def test_decoder_block_and_record_paths_agree() -> None:
    schema = pa.schema(
        [
            pa.field("id", pa.string(), nullable=False),
            pa.field("ts", pa.timestamp("us", tz="UTC")),
            pa.field("n", pa.int32()),
            pa.field("d", pa.date32()),
        ]
    )
    decoder = ArrowJsonDecoder(schema, ["id"])
    values = [json.dumps({"id": f"a{i}", "ts": T0 + i, "n": i, "d": 3}).encode() for i in range(50)]
    whole = decoder.decode(values, str)
    assert not whole.bad and whole.rows.num_rows == 50
    # One bad record sends its block record by record: the same rows, and the bad one isolated.
    mixed = decoder.decode([*values, b'{"id": "x", "n": "2.5"}', None], str)
    assert mixed.rows == whole.rows
    assert [(b.error, b.source_position) for b in mixed.bad] == [("column n: '2.5' is not an INT", "50")]
    assert decoder.record('{"id": "x", "ts": "2026-01-01T01:00:00+01:00", "d": "2026-01-02T00:00"}')[0] == [
        "x",
        datetime(2026, 1, 1, tzinfo=UTC),
        None,
        date(2026, 1, 2),
    ]
    # a time of day after a DATE's date would be dropped (Spark's reader did): a bad record (issue 49)
    assert decoder.record('{"id": "x", "d": "2026-01-02T09:00"}')[1] == "column d: '2026-01-02T09:00' is not a DATE"


def test_fast_path_key_is_validated() -> None:
    base = {"pipeline": "p", "source": {"kafka": {}}, "table": {"name": "a.b.c", "schema": "x INT", "key": ["x"]}}
    assert PipelineConfig.from_dict(base).fast_path == "auto"
    assert PipelineConfig.from_dict({**base, "fast_path": False}).fast_path == "off"
    with pytest.raises(ConfigError, match="fast_path: 'fast'"):
        PipelineConfig.from_dict({**base, "fast_path": "fast"})


@pytest.mark.parametrize(
    ("spec", "column", "values"),
    [
        ("hours(ts)", "ts", ["1969-12-31 23:30:00", "1970-01-01 00:00:00", "2026-03-04 05:06:07", None]),
        ("days(ts)", "ts", ["1969-12-31 23:30:00", "2026-03-04 05:06:07", None]),
        ("months(ts)", "ts", ["1969-12-31 23:30:00", "2026-03-04 05:06:07"]),
        ("years(ts)", "ts", ["1969-12-31 23:30:00", "2026-03-04 05:06:07"]),
        ("months(d)", "d", ["1969-12-31", "2026-03-04"]),
        ("truncate(10, n)", "n", [-11, -10, 0, 9, 10, 25, None]),
        ("truncate(2, s)", "s", ["héllo", "a", ""]),
        ("identity(s)", "s", ["x", None]),
        ("bucket(16, n)", "n", [0, 1, -1, 34, 2**31 - 1, -(2**31), None]),
        ("bucket(7, l)", "l", [0, -1, 34, 2**63 - 1, -(2**63), 1510871468000000, None]),
        ("bucket(5, s)", "s", ["iceberg", "", "héllo wörld ✓", "abcd", "abcde", None]),
        ("bucket(3, d)", "d", ["1969-12-31", "2017-11-16", "2026-03-04"]),
        ("bucket(9, ts)", "ts", ["1969-12-31 23:30:00", "2017-11-16 22:31:08", None]),
    ],
)
def test_pyarrow_transforms_match_icebergs(spark: Any, spec: str, column: str, values: list[Any]) -> None:
    types = {"ts": "TIMESTAMP", "d": "DATE", "n": "INT", "l": "BIGINT", "s": "STRING"}
    transform = PartitionTransform.parse(spec)
    df = spark.createDataFrame([(None if v is None else str(v),) for v in values], "raw STRING")
    df = df.selectExpr(f"CAST(raw AS {types[column]}) AS `{column}`")
    want = [r[0] for r in df.selectExpr(transform.spark_expression("lake")).collect()]
    if column == "ts":
        column_values = pa.array(
            [None if v is None else datetime.fromisoformat(v).replace(tzinfo=UTC) for v in values],
            pa.timestamp("us", tz="UTC"),
        )
    elif column == "d":
        column_values = pa.array([date.fromisoformat(v) for v in values], pa.date32())
    else:
        column_values = pa.array(values, {"n": pa.int32(), "l": pa.int64()}.get(column, pa.string()))
    assert arrow_partition_values(column_values, transform).to_pylist() == want


# -- against the broker ---------------------------------------------------------------------------


def test_fast_path_matches_the_spark_path(spark: Any, kafka_broker: str) -> None:
    topic = create_topic(kafka_broker, partitions=3)
    recs = records(900, bad_every=41)
    produce(kafka_broker, topic, recs)
    summaries: list[RunSummary] = []
    fast = run_pipeline(spark, doc("same_fast", kafka_broker, topic), summaries)
    slow = run_pipeline(spark, doc("same_slow", kafka_broker, topic, fast_path="off"), summaries)
    # A key the table lacks ("extra") is counted per batch on both paths, never dropped silently.
    with_extra = sum(1 for _, _, v, _ in recs if v is not None and v not in BAD and b'"extra"' in v)
    for summary in summaries:
        assert sum(b.unknown_fields.get("extra", 0) for b in summary.batches) == with_extra > 0
    assert fast.fast is not None and fast.sink.last_plan is None  # the fast path ran, not the sink's
    assert slow.fast is None and slow.sink.last_plan is not None
    fast_rows = table_rows(spark, "lake.fast.same_fast", COLUMNS, KEY)
    assert fast_rows == table_rows(spark, "lake.fast.same_slow", COLUMNS, KEY)
    assert {k[0] for k in fast_rows} == expected(recs)
    partitions = "SELECT partition.event_time_hour AS h, record_count FROM {}.partitions ORDER BY h"
    assert (
        spark.sql(partitions.format("lake.fast.same_fast")).collect()
        == spark.sql(partitions.format("lake.fast.same_slow")).collect()
    )
    dead = "SELECT source_position, payload, error FROM {} ORDER BY source_position"
    fast_dead = spark.sql(dead.format("lake.fast.same_fast_dead_letter")).collect()
    assert fast_dead == spark.sql(dead.format("lake.fast.same_slow_dead_letter")).collect()
    assert len(fast_dead) == sum(1 for _, _, v, _ in recs if v in BAD)


def test_repeated_keys_in_one_batch_are_all_appended_on_every_path(spark: Any, kafka_broker: str) -> None:
    """Append mode writes every record: the fast path, the Spark path and distribution `none` agree."""
    from collections import Counter

    topic = create_topic(kafka_broker, partitions=1)
    recs = records(60, partitions=1)
    repeated = recs[:10]  # delivered again in the same batch: same event id and time, so the same key
    produce(kafka_broker, topic, recs + repeated)
    counts = {}
    for name, extra in (
        ("rep_fast", {}),
        ("rep_spark", {"fast_path": "off"}),
        ("rep_none", {"fast_path": "off", "distribution": "none"}),
    ):
        runner = run_pipeline(spark, doc(name, kafka_broker, topic, **extra))
        assert (runner.fast is not None) == (name == "rep_fast")
        counts[name] = Counter(r[0] for r in spark.table(f"lake.fast.{name}").select("event_id").collect())
    assert counts["rep_fast"] == counts["rep_spark"] == counts["rep_none"]
    assert sum(counts["rep_fast"].values()) == 70 and counts["rep_fast"]["e0"] == 2


def test_fast_path_writes_bucket_partitions_and_steps_aside_for_changes(spark: Any, kafka_broker: str) -> None:
    topic = create_topic(kafka_broker, partitions=1)
    produce(kafka_broker, topic, records(30, partitions=1))
    bucketed = run_pipeline(
        spark,
        doc("bucketed", kafka_broker, topic, table={"partition_by": ["bucket(4, event_id)"]}),
    )
    assert bucketed.fast is not None and bucketed.fast.unavailable() is None
    assert bucketed.sink.last_plan is None  # the fast path wrote it
    assert spark.table("lake.fast.bucketed").count() == 30
    # Each file's partition is the one Iceberg computes for its rows.
    files = spark.sql(
        "SELECT `partition`.event_id_bucket AS b, readable_metrics.event_id.lower_bound AS lo, "
        "readable_metrics.event_id.upper_bound AS hi FROM lake.fast.bucketed.files"
    ).collect()
    rows = spark.sql("SELECT event_id, lake.system.bucket(4, event_id) AS b FROM lake.fast.bucketed").collect()
    assert {r["b"] for r in rows} == {f["b"] for f in files}
    for f in files:
        ids = sorted(r["event_id"] for r in rows if r["b"] == f["b"])
        assert (ids[0], ids[-1]) == (f["lo"], f["hi"])
    # A DELETE in an append pipeline needs the sink's equality deletes: the batch runs there.
    produce(kafka_broker, topic, [(0, b"k", json.dumps({**good_event(0), "_op": "DELETE"}).encode(), None)])
    changes = run_pipeline(spark, doc("changes", kafka_broker, topic))
    assert changes.sink.last_plan is not None
    assert "e0" not in {r[0] for r in spark.table("lake.fast.changes").select("event_id").collect()}
    assert spark.table("lake.fast.changes").count() == 30 - 1


@pytest.mark.parametrize("bad", BAD[-2:], ids=["date", "timestamp"])
def test_text_shaped_like_a_date_that_is_none_is_a_dead_letter(
    spark: Any, kafka_broker: str, warehouse: str, bad: bytes
) -> None:
    """A block whose only bad record is date- or time-shaped text that is no date ("2024-13-45")
    passes pyarrow's pattern check and fails its cast: that record is a dead letter naming the
    value, as on the Spark path (tests/golden/json/fast_append.json), and the block's other
    records land (the cast once raised out of the task and failed the batch)."""
    topic = create_topic(kafka_broker, partitions=1)
    good = [
        (
            0,
            f"k{i}".encode(),
            json.dumps({"event_id": f"e{i}", "event_time": "2026-01-01 03:00:00", "day": "2026-01-02"}).encode(),
            None,
        )
        for i in range(40)
    ]  # the day and the event time as text: the block casts the text
    produce(kafka_broker, topic, [*good, (0, b"kb", bad, None)])
    name = f"shaped_{len(bad)}"
    summaries: list[RunSummary] = []
    run_pipeline(spark, doc(name, kafka_broker, topic), summaries)
    assert [b.path for b in summaries[0].batches] == ["json_fast"]
    assert spark.table(f"lake.fast.{name}").count() == len(good)
    dead = spark.table(f"lake.fast.{name}_dead_letter").collect()
    assert [r["error"].split(":")[0] for r in dead] == ["column day" if b"day" in bad else "column event_time"]


def test_too_many_bad_records_leave_nothing(spark: Any, kafka_broker: str, warehouse: str) -> None:
    topic = create_topic(kafka_broker, partitions=2)
    produce(kafka_broker, topic, records(200, bad_every=3, partitions=2))
    config = PipelineConfig.from_dict(doc("toobad", kafka_broker, topic, max_bad_fraction=0.1))
    with pytest.raises(TooManyBadRecordsError, match="more than max_bad_fraction"):
        Runner(config, spark).run(once=True, handle_signals=False)
    assert not list((Path(warehouse) / "fast" / "toobad" / "data").rglob("*.parquet"))


@pytest.mark.parametrize(
    "stops",
    [[("after_dead_letter", "2"), ("after_write", "3"), ("after_commit", "3")], [("random", "")]],
    ids=["tour", "random"],
)
def test_fast_path_kill_9_then_restart(
    spark: Any, kafka_broker: str, tmp_path: Path, stops: list[tuple[str, str]]
) -> None:
    topic = create_topic(kafka_broker, partitions=3)
    recs = records(1200, bad_every=29)
    produce(kafka_broker, topic, recs)
    warehouse = tmp_path / "warehouse"
    config_path = tmp_path / "pipeline.yaml"
    config = doc("fcrash", kafka_broker, topic, warehouse=str(warehouse))
    if stops[0][0] == "random":  # smaller batches: the run goes on for a while after its first
        config["trigger"]["max_records"] = 100
    config_path.write_text(yaml.safe_dump(config))
    crash_tour(config_path, stops)
    other = warehouse_reader(spark, "fcheck", warehouse)
    ids = [r[0] for r in other.table("fcheck.fast.fcrash").select("event_id").collect()]
    assert len(ids) == len(set(ids)) and set(ids) == expected(recs)  # every good record once
    dead = [r["source_position"] for r in other.table("fcheck.fast.fcrash_dead_letter").collect()]
    assert len(dead) == len(set(dead)) == sum(1 for _, _, v, _ in recs if v in BAD)
    referenced = {
        r[0].replace("file:", "") for r in other.sql("SELECT file_path FROM fcheck.fast.fcrash.all_files").collect()
    }
    present = {str(p) for p in (warehouse / "fast" / "fcrash" / "data").rglob("*.parquet")}
    assert present and present <= referenced  # the crashed batch's files were deleted on restart


def test_a_batch_read_again_after_its_dead_letters_committed_writes_each_once(
    spark: Any, kafka_broker: str, tmp_path: Path
) -> None:
    """Killed after batch 2's dead letters committed, before its data; more records, good and bad,
    arrive before the restart, so the batch read again is not the one killed. Every good record
    lands once and every bad one is in the dead-letter table once; the restart's first batch is 3,
    one more than the dead letters', and both tables carry pipeline state of version 1."""
    topic = create_topic(kafka_broker, partitions=3)
    recs = records(900, bad_every=29)
    produce(kafka_broker, topic, recs[:600])  # max_records 400: batch 2 reads 200 of them
    warehouse = tmp_path / "warehouse"
    config_path = tmp_path / "pipeline.yaml"
    config_path.write_text(yaml.safe_dump(doc("fheld", kafka_broker, topic, warehouse=str(warehouse))))
    done = crash_tour(
        config_path, [("after_dead_letter", "2")], between=lambda: produce(kafka_broker, topic, recs[600:])
    )
    batches = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert batches[0]["batch_id"] == 3 and all(b["path"] == "json_fast" for b in batches)
    other = warehouse_reader(spark, "fheldcheck", warehouse)
    ids = [r[0] for r in other.table("fheldcheck.fast.fheld").select("event_id").collect()]
    assert len(ids) == len(set(ids)) and set(ids) == expected(recs)
    dead = [r["source_position"] for r in other.table("fheldcheck.fast.fheld_dead_letter").collect()]
    assert len(dead) == len(set(dead)) == sum(1 for _, _, v, _ in recs if v in BAD)
    for name in ("fheld", "fheld_dead_letter"):
        props = {r["key"]: r["value"] for r in other.sql(f"SHOW TBLPROPERTIES fheldcheck.fast.{name}").collect()}
        assert json.loads(props["icetide.pipeline.fheld"])["version"] == 1


def test_a_batch_read_again_that_stops_short_of_the_dead_letters_still_writes_each_once(
    spark: Any, kafka_broker: str, tmp_path: Path
) -> None:
    """Partition 0 has a backlog, partition 1 nothing, when batch 2 (0:400..800) is killed after
    its dead letters committed. Then partition 1 gets a backlog too: `max_records` is shared
    between partitions, so the batch read again (3) stops at 0:600 and the one after it (4, planned
    while 3 commits) reads 0:600..800. Batch 3's own dead letters must not move the dead-letter
    position back to 0:600, and batch 4 must see what is held though planned from the batch in
    flight: each bad record once, each good one once."""
    topic = create_topic(kafka_broker, partitions=2)
    recs = records(2000, bad_every=29, partitions=1)
    first = recs[:1000]  # partition 0
    second = [(1, k, v, h) for _, k, v, h in recs[1000:]]  # partition 1, other event ids
    produce(kafka_broker, topic, first)
    warehouse = tmp_path / "warehouse"
    config_path = tmp_path / "pipeline.yaml"
    trigger = {"interval": "1s", "max_records": 400, "overlap_commit": True}
    config_path.write_text(
        yaml.safe_dump(doc("fshort", kafka_broker, topic, warehouse=str(warehouse), trigger=trigger))
    )
    done = crash_tour(config_path, [("after_dead_letter", "2")], between=lambda: produce(kafka_broker, topic, second))
    batches = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [b["batch_id"] for b in batches][:2] == [3, 4]
    other = warehouse_reader(spark, "fshortcheck", warehouse)
    ids = [r[0] for r in other.table("fshortcheck.fast.fshort").select("event_id").collect()]
    assert len(ids) == len(set(ids)) and set(ids) == expected(recs)
    dead = [r["source_position"] for r in other.table("fshortcheck.fast.fshort_dead_letter").collect()]
    assert len(dead) == len(set(dead)) == sum(1 for _, _, v, _ in recs if v in BAD)


# -- overlapped commits (trigger.overlap_commit) -----------------------------------------------


def _batch_files(warehouse: Path, name: str, batch_id: int) -> list[Path]:
    return list((warehouse / "fast" / name / "data").rglob(f"icetide-{name}-b{batch_id:012d}-*.parquet"))


@pytest.mark.parametrize("overlap", [True, False])
def test_a_backlog_is_written_while_the_batch_before_commits(
    spark: Any, kafka_broker: str, warehouse: str, overlap: bool
) -> None:
    """With a backlog, batch N+1's files are on disk by the time batch N is reported committed
    (it was read and written while N committed); with overlap_commit off, never. Either way the
    table holds every good record once, batch ids run 1..N and positions only move forward."""
    name = f"overlap_{str(overlap).lower()}"
    topic = create_topic(kafka_broker, partitions=3)
    recs = records(2_000, bad_every=31)
    produce(kafka_broker, topic, recs)
    config = doc(name, kafka_broker, topic, trigger={"interval": "1s", "max_records": 400, "overlap_commit": overlap})
    runner = Runner(PipelineConfig.from_dict(config), spark)
    next_written: list[bool] = []

    def on_batch(metrics: Any) -> None:
        next_written.append(bool(_batch_files(Path(warehouse), name, metrics.batch_id + 1)))

    summary = runner.run(once=True, handle_signals=False, on_batch=on_batch)
    assert [b.batch_id for b in summary.batches] == list(range(1, len(summary.batches) + 1))
    assert len(summary.batches) >= 5 and all(b.committed for b in summary.batches)
    assert all(b.source_plan_seconds > 0 for b in summary.batches)  # the plan is timed on both settings
    full = len(summary.batches) - 1  # every batch but the last was full: a backlog behind it
    assert next_written[:full] == [overlap] * full
    assert [b.overlapped for b in summary.batches][:full] == [overlap] * full  # the metrics line says so
    ids = [r[0] for r in spark.table(f"lake.fast.{name}").select("event_id").collect()]
    assert len(ids) == len(set(ids)) and set(ids) == expected(recs)
    dead = [r["source_position"] for r in spark.table(f"lake.fast.{name}_dead_letter").collect()]
    assert len(dead) == len(set(dead)) == sum(1 for _, _, v, _ in recs if v in BAD)
    commits = spark.sql(
        "SELECT CAST(summary['icetide.batch-id'] AS INT) AS batch, summary['icetide.source-position'] AS position "
        f"FROM lake.fast.{name}.snapshots WHERE summary['icetide.pipeline-id'] = '{name}' ORDER BY committed_at"
    ).collect()
    assert [r["batch"] for r in commits] == [b.batch_id for b in summary.batches]  # one snapshot each, in order
    offsets = [sum(json.loads(r["position"]).values()) for r in commits]
    assert offsets == sorted(offsets) and offsets[-1] == len(recs)


def test_a_failed_commit_in_flight_discards_the_batch_written_after_it(
    spark: Any, kafka_broker: str, warehouse: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batch 1's commit fails for good (every attempt reports an unknown state that did not land,
    ICETIDE_FAIL_AT) while batch 2 is written from its position: batch 2's files are deleted,
    the run restarts from the table and the table ends with every good record once."""
    from icetide import faults

    name = "overlap_fail"
    topic = create_topic(kafka_broker, partitions=3)
    recs = records(1_200)
    produce(kafka_broker, topic, recs)
    retries = {
        "icetide.commit.retry.num-retries": "1",
        "commit.retry.min-wait-ms": "10",
        "commit.retry.max-wait-ms": "20",
    }
    config = doc(
        name, kafka_broker, topic, table={"properties": retries}, restart={"max_attempts": 2, "backoff": "0.1s"}
    )
    monkeypatch.setenv(faults.FAIL_AT, "before_commit_call")
    monkeypatch.setenv(faults.FAIL_TIMES, "2")  # both attempts of batch 1's first commit
    faults._failed.clear()
    written_while_failing: list[int] = []
    runner = Runner(PipelineConfig.from_dict(config), spark)
    assert runner.fast is not None
    discarded: list[int] = []
    discard = runner.sink.remove_batch_files
    monkeypatch.setattr(
        runner.sink, "remove_batch_files", lambda batch_id: (discarded.append(batch_id), discard(batch_id))[1]
    )
    try:
        summary = runner.run(
            once=True,
            handle_signals=False,
            on_restart=lambda _: written_while_failing.append(len(_batch_files(Path(warehouse), name, 2))),
        )
    finally:
        faults._failed.clear()
    assert len(summary.restarts) == 1 and "failed 2 times" in summary.restarts[0].error
    assert discarded == [2] and written_while_failing == [0]  # batch 2 was written, then deleted
    ids = [r[0] for r in spark.table(f"lake.fast.{name}").select("event_id").collect()]
    assert len(ids) == len(set(ids)) and set(ids) == expected(recs)
    referenced = {
        r[0].replace("file:", "") for r in spark.sql(f"SELECT file_path FROM lake.fast.{name}.all_files").collect()
    }
    present = {str(p) for p in (Path(warehouse) / "fast" / name / "data").rglob("*.parquet")}
    assert present and present <= referenced
