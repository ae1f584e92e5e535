"""JSON upserts on the fast path (pipeline/json_fast.py, `mode: upsert`): one task reads, decodes,
collapses by key and writes data and equality-delete files; the driver commits them.

Every table is checked against the reference model (tests/model.py) and against the same stream
written by the Spark path (`fast_path: off`), and read back by DuckDB (equality deletes) or
PyIceberg (deletion vectors), as other teams read the lake. The records are JSON as
tests/test_fast_append.py's producers write them (`good_event`'s coercions, `BAD`'s poison).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from icetide.config.pipeline import PipelineConfig
from icetide.pipeline.table_runner import Runner, RunSummary
from icetide.table.iceberg import load_table
from tests.kafka_broker import create_topic, produce
from tests.lake_readers import duckdb_rows, duckdb_with_iceberg, pyiceberg_rows
from tests.model import ReferenceModel, table_rows
from tests.test_fast_append import BAD, COLUMNS, KEY, SCHEMA, good_event

KEYS = 40


def doc(name: str, bootstrap: str, topic: str, **extra: Any) -> dict[str, Any]:
    table = {"name": f"lake.upfast.{name}", "schema": SCHEMA, "key": KEY, "partition_by": ["hours(event_time)"]}
    table.update(extra.pop("table", {}))
    return {
        "pipeline": name,
        "source": {"kafka": {"bootstrap_servers": bootstrap, "topic": topic, "starting_offsets": "earliest"}},
        "table": table,
        "mode": "upsert",
        "trigger": {"interval": "1s", "max_records": 150},
        "dead_letter": f"lake.upfast.{name}_dead_letter",
        **extra,
    }


def change(i: int) -> dict[str, Any]:
    """Record i changes key e{i % KEYS} (its event time is the key's own); every 9th deletes it."""
    k = i % KEYS
    record = {**good_event(k), "event_id": f"e{k}", "clicks": i}
    if i % 9 == 8:
        record["_op"] = "DELETE"
    return record


def changes(count: int, *, partition_of: Any) -> list[tuple[int, bytes, bytes, None]]:
    out = []
    for i in range(count):
        value = BAD[(i // 13) % len(BAD)] if i % 13 == 12 else json.dumps(change(i)).encode()
        out.append((partition_of(i), f"k{i % KEYS}".encode(), value, None))
    return out


def model(records: list[tuple[int, bytes, bytes, None]], order_by: str | None) -> dict[str, int]:
    """event id -> clicks of the rows the table must hold: the good records through the model in
    offset order (a key's event time is its own, so the event id alone names it)."""
    m = ReferenceModel(["event_id"], ["event_id", "clicks"], order_by)
    m.apply(1, [json.loads(v) for _, _, v, _ in records if v not in BAD])
    return {k[0]: row[1] for k, row in m.rows.items()}


def run(spark: Any, config_doc: dict[str, Any]) -> tuple[Runner, RunSummary]:
    runner = Runner(PipelineConfig.from_dict(config_doc), spark)
    return runner, runner.run(once=True, handle_signals=False)


def clicks_by_id(spark: Any, table: str) -> dict[str, int]:
    rows = table_rows(spark, table, COLUMNS, KEY)
    ids = [k[0] for k in rows]
    assert len(ids) == len(set(ids)), "a key's event time is fixed: one row per event id"
    return {row[0]: row[3] for row in rows.values()}


def dead_letters(spark: Any, table: str) -> list[Any]:
    return spark.sql(f"SELECT source_position, payload, error FROM {table} ORDER BY source_position").collect()


@pytest.mark.parametrize("deletes", ["equality", "vectors"])
def test_upserts_on_the_fast_path_equal_the_model_and_the_spark_path(
    spark: Any, kafka_broker: str, deletes: str
) -> None:
    """Keys stay in their Kafka partition (as a producer keyed by them sends them), so the last
    change of each key in offset order wins; deletes, repeated keys within a batch and across
    batches, poison records. Read back by DuckDB (equality deletes) or PyIceberg (DVs)."""
    topic = create_topic(kafka_broker, partitions=3)
    recs = changes(700, partition_of=lambda i: (i % KEYS) % 3)
    produce(kafka_broker, topic, recs)
    # vectors: a new table's default, written out; equality: a v2 table, as new tables were before
    table: dict[str, Any] = (
        {"format_version": 3, "deletes": "vectors"} if deletes == "vectors" else {"format_version": 2}
    )
    fast_name, slow_name = f"fast_{deletes}", f"slow_{deletes}"
    fast, fast_run = run(spark, doc(fast_name, kafka_broker, topic, table=table))
    slow, slow_run = run(spark, doc(slow_name, kafka_broker, topic, table=table, fast_path="off"))
    assert len(fast_run.batches) >= 4 and {b.path for b in fast_run.batches} == {"json_fast"}
    assert {(b.path, b.fallback) for b in slow_run.batches} == {("spark", "fast_path_off")}
    assert fast.sink.last_plan is None and slow.sink.last_plan is not None  # the fast path wrote it
    assert sum(b.records_in for b in fast_run.batches) == sum(b.records_in for b in slow_run.batches) == 700
    assert sum(b.delete_rows for b in fast_run.batches) > 0
    # The key index's share of each commit, in the metrics line: vectors only (equality looks up nothing).
    with_deletes = [b for b in fast_run.batches if b.delete_rows]
    assert with_deletes and all((b.find_seconds > 0) == (deletes == "vectors") for b in with_deletes)
    assert all(b.find_seconds + b.index_seconds <= b.commit_seconds + 0.002 for b in fast_run.batches)

    want = model(recs, None)
    assert clicks_by_id(spark, f"lake.upfast.{fast_name}") == want
    assert table_rows(spark, f"lake.upfast.{fast_name}", COLUMNS, KEY) == table_rows(
        spark, f"lake.upfast.{slow_name}", COLUMNS, KEY
    )
    fast_dead = dead_letters(spark, f"lake.upfast.{fast_name}_dead_letter")
    assert fast_dead == dead_letters(spark, f"lake.upfast.{slow_name}_dead_letter")
    assert len(fast_dead) == sum(1 for _, _, v, _ in recs if v in BAD)

    spark_rows = table_rows(spark, f"lake.upfast.{fast_name}", COLUMNS, KEY)
    location = str(load_table(spark, f"lake.upfast.{fast_name}").location()).removeprefix("file:")
    if deletes == "vectors":
        from pyiceberg.table import StaticTable

        assert pyiceberg_rows(StaticTable.from_metadata(location), COLUMNS, KEY) == spark_rows
    else:
        with duckdb_with_iceberg() as con:
            assert duckdb_rows(con, f"iceberg_scan('{location}')", COLUMNS, KEY) == spark_rows


def test_keys_across_partitions_follow_order_by_on_the_fast_path(spark: Any, kafka_broker: str) -> None:
    """A key's changes spread over every Kafka partition: `order_by` (the change's clicks, which
    grow with the record) decides, whatever order the task reads the partitions in."""
    topic = create_topic(kafka_broker, partitions=3)
    recs = changes(500, partition_of=lambda i: i % 3)
    produce(kafka_broker, topic, recs)
    _, fast_run = run(spark, doc("ordered_fast", kafka_broker, topic, order_by="clicks"))
    run(spark, doc("ordered_slow", kafka_broker, topic, order_by="clicks", fast_path="off"))
    assert {b.path for b in fast_run.batches} == {"json_fast"}
    assert clicks_by_id(spark, "lake.upfast.ordered_fast") == model(recs, "clicks")
    assert table_rows(spark, "lake.upfast.ordered_fast", COLUMNS, KEY) == table_rows(
        spark, "lake.upfast.ordered_slow", COLUMNS, KEY
    )


def test_a_table_written_before_keeps_its_rows_under_the_fast_paths_deletes(spark: Any, kafka_broker: str) -> None:
    """Rows committed by the Spark path, then changed by the fast path (the equality deletes of a
    later commit apply to the earlier data files), and a run that resumes where the other ended."""
    topic = create_topic(kafka_broker, partitions=2)
    recs = changes(400, partition_of=lambda i: (i % KEYS) % 2)
    first, more = recs[:200], recs[200:]
    produce(kafka_broker, topic, first)
    run(spark, doc("resumed", kafka_broker, topic, fast_path="off"))
    produce(kafka_broker, topic, more)
    _, summary = run(spark, doc("resumed", kafka_broker, topic))
    assert {b.path for b in summary.batches} == {"json_fast"}
    assert sum(b.records_in for b in summary.batches) == 200
    assert clicks_by_id(spark, "lake.upfast.resumed") == model(first + more, None)


def test_a_spec_the_key_does_not_serve_is_refused_as_on_the_spark_path(spark: Any, kafka_broker: str) -> None:
    """Another writer partitions the table by a column outside the key: an upsert's delete could
    miss the old row, so neither path writes it; the fast path steps aside and the Spark path
    says why, in one line, before anything is committed."""
    from icetide.errors import SchemaError

    topic = create_topic(kafka_broker, partitions=1)
    config = PipelineConfig.from_dict(doc("by_ad", kafka_broker, topic))
    Runner(config, spark)  # creates the table
    spark.sql("ALTER TABLE lake.upfast.by_ad ADD PARTITION FIELD ad_id")
    produce(kafka_broker, topic, changes(20, partition_of=lambda i: 0))
    runner = Runner(config, spark)
    assert runner.fast is not None
    with pytest.raises(SchemaError, match=r"partition field 'ad_id'.*not in the key"):
        runner.run(once=True, handle_signals=False)
    fallback = runner.fast.unavailable()
    assert fallback is not None and fallback.reason == "partition_spec" and "not in the key" in fallback.detail
    assert spark.table("lake.upfast.by_ad").count() == 0


def data_files(spark: Any, table: str) -> list[str]:
    return [r[0] for r in spark.sql(f"SELECT file_path FROM {table}.files WHERE content = 0").collect()]


def test_upserts_stage_in_several_tasks_while_keys_stay_in_their_partitions(
    spark: Any, kafka_broker: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A producer keyed by the table's key sends each key's changes to one partition: a batch's
    partitions are shared among `write_parallelism` tasks, whole, and the tasks' keys never meet
    (without it, upserts keep one task). (The threshold for
    a second task is lowered so that a small topic gets one.)"""
    from icetide.pipeline import json_fast

    monkeypatch.setattr(json_fast, "MIN_TASK_RECORDS", 10)
    topic = create_topic(kafka_broker, partitions=3)
    recs = changes(700, partition_of=lambda i: (i % KEYS) % 3)
    produce(kafka_broker, topic, recs)
    fast, fast_run = run(spark, doc("tasks_fast", kafka_broker, topic, write_parallelism=2))
    run(spark, doc("tasks_slow", kafka_broker, topic, fast_path="off"))
    run(spark, doc("tasks_default", kafka_broker, topic))  # no write_parallelism: one task
    assert not any("-t00001-" in f for f in data_files(spark, "lake.upfast.tasks_default"))
    assert {b.path for b in fast_run.batches} == {"json_fast"}
    assert fast.fast is not None and not fast.fast.one_task_upserts
    assert any("-t00001-" in f for f in data_files(spark, "lake.upfast.tasks_fast")), "one task wrote every file"
    assert clicks_by_id(spark, "lake.upfast.tasks_fast") == model(recs, None)
    assert table_rows(spark, "lake.upfast.tasks_fast", COLUMNS, KEY) == table_rows(
        spark, "lake.upfast.tasks_slow", COLUMNS, KEY
    )


def test_a_key_in_two_tasks_sends_the_batch_and_the_next_to_one_task(
    spark: Any, kafka_broker: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keys spread over every partition (a producer not keyed by the table's key): the first
    batch's tasks find a key they share, its files are deleted and it is written again in one
    task, as is every batch after it; no key gets two rows."""
    from icetide.pipeline import json_fast

    monkeypatch.setattr(json_fast, "MIN_TASK_RECORDS", 10)
    topic = create_topic(kafka_broker, partitions=3)
    recs = changes(500, partition_of=lambda i: i % 3)
    produce(kafka_broker, topic, recs)
    fast, fast_run = run(spark, doc("met_fast", kafka_broker, topic, order_by="clicks", write_parallelism=2))
    assert {b.path for b in fast_run.batches} == {"json_fast"}
    assert fast.fast is not None and fast.fast.one_task_upserts
    files = data_files(spark, "lake.upfast.met_fast")
    assert files and not any("-t00001-" in f for f in files)
    assert clicks_by_id(spark, "lake.upfast.met_fast") == model(recs, "clicks")
    location = str(load_table(spark, "lake.upfast.met_fast").location()).removeprefix("file:")
    written = {str(p) for p in Path(location, "data").rglob("*.parquet")}
    referenced = {f.removeprefix("file:") for f in data_files(spark, "lake.upfast.met_fast")}
    deletes = spark.sql("SELECT file_path FROM lake.upfast.met_fast.files WHERE content > 0").collect()
    # Parquet delete files only: a new table's default (deletes: vectors) commits DVs, in Puffin files.
    parquet_deletes = {r[0].removeprefix("file:") for r in deletes if r[0].endswith(".parquet")}
    assert written == referenced | parquet_deletes, "the first writing is deleted"
