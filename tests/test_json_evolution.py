"""Schema evolution of plain JSON records (issue 14): a key the table lacks adds a nullable column
typed by its values, in the batch's own commit; a later value that does not fit is a dead letter."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from pyspark.sql import types as T

from icetide.config.pipeline import PipelineConfig
from icetide.decode import decode_json
from icetide.decode.json.evolution import addable, infer_ddl
from icetide.pipeline.table_runner import Runner
from tests.kafka_broker import create_topic, produce
from tests.model import ReferenceModel, table_rows

KEY = ["event_id", "event_time"]
BASE = ["event_id", "event_time", "ad_id", "clicks"]
SCHEMA = "event_id STRING NOT NULL, event_time TIMESTAMP NOT NULL, ad_id STRING, clicks INT"
Record = tuple[int, bytes, bytes, None]


def pipeline(name: str, bootstrap: str, topic: str, *, evolution: bool, max_records: int) -> PipelineConfig:
    return PipelineConfig.from_dict(
        {
            "pipeline": name,
            "source": {"kafka": {"bootstrap_servers": bootstrap, "topic": topic, "starting_offsets": "earliest"}},
            "table": {"name": f"lake.jsonevo.{name}", "schema": SCHEMA, "key": KEY},
            "trigger": {"interval": "1s", "max_records": max_records},
            "dead_letter": f"lake.jsonevo.{name}_dead_letter",
            "schema_evolution": evolution,
        }
    )


def record(i: int, partitions: int, **fields: Any) -> Record:
    """Event i (its own key), in partition i % partitions; `fields` added to the base columns."""
    value = {"event_id": f"e{i}", "event_time": f"2026-01-01T0{i % 3}:00:00", "ad_id": f"ad{i % 7}", "clicks": i}
    return (i % partitions, f"k{i}".encode(), json.dumps({**value, **fields}).encode(), None)


def model_of(records: list[Record], columns: list[str], bad: set[int]) -> dict[Any, Any]:
    """key -> row for every record not in `bad` (each record has its own key); absent fields read None."""
    model = ReferenceModel(KEY, columns, None)
    rows = []
    for i, (_, _, payload, _) in enumerate(records):
        if i not in bad:
            r = json.loads(payload)
            rows.append({**r, "event_time": datetime.fromisoformat(r["event_time"])})
    model.apply(1, rows)
    return model.rows


def column_types(spark: Any, table: str) -> dict[str, str]:
    return {f.name: f.dataType.simpleString() for f in spark.table(table).schema.fields}


def test_json_keys_added_mid_stream_become_columns_older_rows_null(spark: Any, kafka_broker: str) -> None:
    """Records 0-29 carry the table's columns only; from 30 on they add `score` (integers) and
    `channel` (text, sometimes null or absent), and some a key with a dot (no column name). Every
    13th record has a bad time. Several batches over two partitions, one run."""
    topic = create_topic(kafka_broker, partitions=2)
    records: list[Record] = []
    for i in range(90):
        extra: dict[str, Any] = {}
        if i >= 30:
            extra["score"] = i * 10
            if i % 4:
                extra["channel"] = None if i % 4 == 1 else f"ch{i % 5}"
        if i >= 60 and i % 2:
            extra["x.y"] = 1
        if i % 13 == 0:
            extra["event_time"] = "not a time"
        records.append(record(i, 2, **extra))
    produce(kafka_broker, topic, records)
    config = pipeline("added", kafka_broker, topic, evolution=True, max_records=40)
    summary = Runner(config, spark).run(once=True, handle_signals=False)

    assert len(summary.batches) >= 3 and sum(b.records_in for b in summary.batches) == 90
    name = config.table.name
    assert column_types(spark, name) == {
        "event_id": "string",
        "event_time": "timestamp",
        "ad_id": "string",
        "clicks": "int",
        "score": "bigint",
        "channel": "string",
    }
    assert all(f.nullable for f in spark.table(name).schema.fields if f.name in ("score", "channel"))
    bad = {i for i in range(90) if i % 13 == 0}
    columns = [*BASE, "score", "channel"]
    assert table_rows(spark, name, columns, KEY) == model_of(records, columns, bad)
    dead = spark.table(config.dead_letter).collect()
    assert sorted(r["source_position"] for r in dead) == sorted(f"{topic}/{i % 2}@{i // 2}" for i in bad)
    assert all(r["error"].startswith("column event_time:") for r in dead)
    # The dotted key cannot be a column: it is counted, as without evolution.
    dotted = [i for i in range(60, 90) if i % 2 and i % 13]
    assert sum(b.unknown_fields.get("x.y", 0) for b in summary.batches) == len(dotted)
    assert all(set(b.unknown_fields) <= {"x.y"} for b in summary.batches)
    # The fast path writes the batches that add nothing; a batch with fields to add is written
    # by the Spark path, in the commit that adds them (pipeline/json_fast.py).
    paths = [(b.path, b.fallback) for b in summary.batches]
    assert ("json_fast", None) in paths and ("spark", "schema_evolution") in paths, paths
    assert all(
        b.fallback_detail.startswith("schema_evolution: fields to add") for b in summary.batches if b.fallback
    ), summary.batches
    more = [record(i, 2, score=i, channel="late", **({"x.y": 2} if i % 2 else {})) for i in range(90, 130)]
    produce(kafka_broker, topic, more)
    summary = Runner(config, spark).run(once=True, handle_signals=False)
    assert {b.path for b in summary.batches} == {"json_fast"}  # the columns exist; the dotted key stays counted
    assert sum(b.unknown_fields.get("x.y", 0) for b in summary.batches) == 20
    assert table_rows(spark, name, columns, KEY) == model_of(records + more, columns, bad)


def test_a_value_that_does_not_fit_the_inferred_type_is_a_dead_letter(spark: Any, kafka_broker: str) -> None:
    """`score` arrives as integers, so it is BIGINT; a later "high" or 2.5 is a dead letter naming
    the column, a quoted "12" fits (as it would an existing BIGINT column)."""
    topic = create_topic(kafka_broker, partitions=1)
    scores: dict[int, Any] = {i: i for i in range(10, 20)} | {20: "high", 21: "12", 22: 2.5, 23: 23, 24: None}
    records = [record(i, 1, **({"score": scores[i]} if i in scores else {})) for i in range(25)]
    produce(kafka_broker, topic, records)
    config = pipeline("conflict", kafka_broker, topic, evolution=True, max_records=15)
    summary = Runner(config, spark).run(once=True, handle_signals=False)

    assert sum(b.records_in for b in summary.batches) == 25
    name = config.table.name
    assert column_types(spark, name)["score"] == "bigint"
    dead = {r["source_position"]: r["error"] for r in spark.table(config.dead_letter).collect()}
    assert dead == {
        f"{topic}/0@20": "column score: 'high' is not a BIGINT",
        f"{topic}/0@22": "column score: '2.5' is not a BIGINT",
    }
    expected = model_of(records, [*BASE, "score"], {20, 22})
    expected[("e21", datetime(2026, 1, 1, 0))] = (*expected[("e21", datetime(2026, 1, 1, 0))][:4], 12)
    assert table_rows(spark, name, [*BASE, "score"], KEY) == expected


def test_without_evolution_new_keys_are_counted_not_added(spark: Any, kafka_broker: str) -> None:
    topic = create_topic(kafka_broker, partitions=1)
    records = [record(i, 1, **({"score": i} if i >= 5 else {})) for i in range(12)]
    produce(kafka_broker, topic, records)
    config = pipeline("off", kafka_broker, topic, evolution=False, max_records=50)
    summary = Runner(config, spark).run(once=True, handle_signals=False)

    assert [b.unknown_fields for b in summary.batches] == [{"score": 7}]
    assert list(column_types(spark, config.table.name)) == BASE
    assert table_rows(spark, config.table.name, BASE, KEY) == model_of(records, BASE, set())


def test_within_one_batch_the_first_value_types_the_column(spark: Any) -> None:
    """In one batch, the first non-null value decides (1 -> BIGINT): a later "x" is bad, naming the column."""
    schema = T.StructType([T.StructField("id", T.LongType(), nullable=False)])
    values = [
        json.dumps({"id": 1}),
        json.dumps({"id": 2, "n": None, "flag": True}),
        json.dumps({"id": 3, "n": 1, "ratio": 0.5, "Id": 9, "_icetide_t0": 1}),
        json.dumps({"id": 4, "n": "x", "ratio": 2}),
        json.dumps({"id": 5, "n": 7, "flag": "maybe"}),
    ]
    frame = spark.createDataFrame(
        [("t", 0, i, v.encode()) for i, v in enumerate(values)],
        "topic STRING, partition INT, offset BIGINT, value BINARY",
    )
    keep: list[Any] = []
    unknown: dict[str, int] = {}
    added: list[T.StructField] = []
    good, bad = decode_json(
        frame,
        "value",
        schema,
        ["id"],
        "upsert",
        ["topic", "partition", "offset"],
        keep=keep,
        unknown_fields=unknown,
        schema_evolution=True,
        new_columns=added,
    )
    try:
        assert {f.name: f.dataType.simpleString() for f in added} == {
            "flag": "boolean",
            "n": "bigint",
            "ratio": "double",
        }
        assert good.columns == ["id", "flag", "n", "ratio", "_op"]
        rows = {r["id"]: (r["flag"], r["n"], r["ratio"]) for r in good.collect()}
        assert rows == {1: (None, None, None), 2: (True, None, None), 3: (None, 1, 0.5)}
        assert {r["source_position"]: r["error"] for r in bad.collect()} == {
            "t/0@3": "column n: 'x' is not a BIGINT",
            "t/0@4": "column flag: 'maybe' is not a BOOLEAN",
        }
        # Equal but for case to a column, or icetide's own: counted, not added.
        assert unknown == {"Id": 1, "_icetide_t0": 1}
    finally:
        for df in keep:
            df.unpersist()


def test_which_keys_can_become_columns() -> None:
    schema = T.StructType([T.StructField("id", T.LongType()), T.StructField("Name", T.StringType())])
    unknown = {"score": 1, "name": 1, "a.b": 1, "": 1, "_icetide_x": 1, "Tag": 1, "tag": 1, "offset": 1, "ok": 1}
    assert addable(unknown, schema, ["offset"]) == ["ok", "score"]
    assert [infer_ddl(t) for t in (None, "true", "-12", "1" * 19, "1e3", "2.5", "abc", '{"a":1}')] == [
        "STRING",
        "BOOLEAN",
        "BIGINT",
        "DOUBLE",
        "DOUBLE",
        "DOUBLE",
        "STRING",
        "STRING",
    ]
