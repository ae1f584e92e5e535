"""What a batch read again after a crash finds the dead-letter table holding already (pipeline/
dead_letter_table.py `Held`), and the position a dead-letter commit records, in the cases a review of
the scheme named: a recreated topic seen or not seen by the dead-letter table, a batch that stops
short of the dead-letter position, files named by a dead-letter position (docs/design.md,
"Pipeline state"); and the dead letters a fast path holds, written by the driver. The end-to-end
runs are in test_fast_append.py, test_runner_kafka.py and test_supervision.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from icetide.pipeline.dead_letter_table import DEAD_LETTER_KEY, DEAD_LETTER_SCHEMA, DeadLetterTable, Held
from icetide.pipeline.sync.state import advance
from icetide.sources.files import FileSource, FileSourceConfig
from icetide.table.create import create_table


def nothing_recorded(positions: list[str]) -> set[str]:
    return set()


def test_offsets_below_the_dead_letter_position_are_held_on_the_partitions_read_again() -> None:
    held = Held.kafka({"t": {"0": 800, "1": 50}}, {"t": {"0": 400, "1": 50}}, [], nothing_recorded)
    assert held.offsets == {("t", 0): 800}  # partition 1 reads from where the dead letters end
    assert held.holds("t/0@799") and not held.holds("t/0@800") and not held.holds("t/1@60")
    assert not Held.kafka({"t": {"0": 400}}, {"t": {"0": 400}}, [], nothing_recorded)  # a clean run holds nothing


def test_a_range_lost_to_retention_is_held_when_it_starts_below_the_position() -> None:
    held = Held.kafka({"t": {"0": 1200}}, {"t": {"0": 200}}, ["t/0@100..200"], nothing_recorded)
    assert held.holds("t/0@100..200") and held.holds("t/0@150")


def test_a_recreated_topic_is_a_new_log_unless_the_dead_letters_recorded_its_reset() -> None:
    """The table's position was 0:800 when the topic was recreated; the plan reads the new log from
    0 and records the range lost as "t/0@800..?"."""
    starts, lost = {"t": {"0": 0}}, ["t/0@800..?"]
    fresh = Held.kafka({"t": {"0": 500}}, starts, lost, nothing_recorded)  # old-log dead letters
    assert not fresh.holds("t/0@42") and not fresh.holds("t/0@800..?")
    # Killed after the dead letters of the batch that found the reset (new log read to 0:10).
    seen = Held.kafka({"t": {"0": 10}}, starts, lost, lambda ps: set(ps) & {"t/0@800..?"})
    assert seen.holds("t/0@800..?") and seen.holds("t/0@9") and not seen.holds("t/0@10")


def test_the_dead_letter_position_never_goes_back_but_on_a_reset_partition() -> None:
    before = {"t": {"0": 2000, "1": 5000}}
    assert advance(before, {"t": {"0": 1500, "1": 5500}}) == {"t": {"0": 2000, "1": 5500}}
    assert advance(before, {"t": {"0": 10, "1": 5500}}, reset=[("t", "0")]) == {"t": {"0": 10, "1": 5500}}


def test_a_files_dead_letter_position_keeps_the_files_it_held_within_the_late_window(tmp_path: Path) -> None:
    source = FileSource(
        FileSourceConfig.from_dict({"path": str(tmp_path), "format": "json", "late_window_seconds": 60})
    )
    earlier = {
        "max_mtime_ms": 100_000,
        "files": {"a.json": 90_000, "b.json": 100_000, "mid.json": 38_000, "old.json": 1_000},
    }
    later = {"max_mtime_ms": 95_000, "files": {"a.json": 90_000, "c.json": 95_000}, "listed_at_ms": 7}
    merged = source.merge_positions(earlier, later)
    assert merged == {
        "max_mtime_ms": 100_000,
        # mid.json: below the earlier horizon (40 s), not below this batch's own (35 s), from which
        # the table plans once the batch commits; old.json: below both
        "files": {"a.json": 90_000, "b.json": 100_000, "c.json": 95_000, "mid.json": 38_000},
        "listed_at_ms": 7,
    }
    paths = [str(tmp_path / n) for n in ("a.json", "b.json", "d.json")]
    assert source.held(merged, paths) == paths[:2]
    held = Held(files=frozenset(source.held(merged, paths)))
    assert held.holds(f"{paths[1]}:17") and held.holds(paths[0]) and not held.holds(f"{paths[2]}:1")


def test_a_reset_the_dead_letters_recorded_keeps_their_position_in_the_new_log(tmp_path: Path) -> None:
    """Killed after the dead letters of the batch that found a reset (new log read to 0:40); the
    batch read again stops at 0:25 (another partition took its share of max_records): the
    dead-letter position stays at 0:40, as a position in the new log."""
    from icetide.commit.pipeline_state import PipelineState
    from icetide.config.pipeline import PipelineConfig
    from icetide.pipeline.spark_path import PlannedBatch, SourceAdapter

    doc = {
        "pipeline": "p",
        "source": {"kafka": {"bootstrap_servers": "127.0.0.1:9", "topic": "t"}},
        "table": {"name": "lake.db.t", "schema": "id BIGINT NOT NULL", "key": ["id"]},
        "dead_letter": "lake.db.t_dead_letter",
        "on_data_loss": "skip",
    }
    source = SourceAdapter(PipelineConfig.from_dict(doc))
    dead = PipelineState("p", 7, {"0": 40, "1": 500}, "x")
    loss = {"source_position": "t/0@800..?", "error": "data loss: reset"}
    items = [
        {"topic": "t", "partition": 0, "start": 0, "end": 25},
        {"topic": "t", "partition": 1, "start": 500, "end": 525},
    ]
    batch = PlannedBatch(items, {"0": 25, "1": 525}, 50, [loss])
    seen = source.held(dead, batch, lambda ps: set(ps))
    assert seen.holds("t/0@800..?") and seen.holds("t/0@24") and not seen.holds("t/1@500")
    again = PlannedBatch(items, {"0": 25, "1": 525}, 50, [loss], seen)
    assert source.dead_letter_position(dead, again) == {"0": 40, "1": 525}
    fresh = PlannedBatch(items, {"0": 25, "1": 525}, 50, [loss], source.held(dead, batch, lambda ps: set()))
    assert source.dead_letter_position(dead, fresh) == {"0": 25, "1": 525}  # a new log: its own position
    source.close()


def test_dead_letters_a_fast_path_holds_are_written_by_the_driver_once(spark: Any, table_name: str) -> None:
    """A fast path's bad records (rows in the driver) land as one driver-written file per batch,
    committed once with the position: a batch id committed already writes nothing (and leaves no
    file behind), and PyIceberg reads the table as Spark does. A partitioned dead-letter table
    takes the Spark write instead."""
    from pyiceberg.table import StaticTable

    table = DeadLetterTable(spark, table_name, "p")
    rows = [('{"a": 1', "malformed JSON", "t/0@7"), (None, "data loss: retention", "t/1@0..5")]
    result = table.write(rows, batch_id=1, position={"t": {"0": 8}})
    assert result.committed and result.data_files == 1 and result.rows_written == 2
    again = table.write(rows, batch_id=1, position={"t": {"0": 8}})
    assert not again.committed
    assert table.last_committed().source_position == {"t": {"0": 8}}  # type: ignore[union-attr]
    columns = ["pipeline", "batch_id", "source_position", "payload", "error"]
    seen = sorted(tuple(r) for r in spark.table(table_name).select(*columns).collect())
    assert seen == sorted(("p", 1, pos, payload, error) for payload, error, pos in rows)
    files = spark.sql(f"SELECT file_path FROM {table_name}.files").collect()
    location = spark.sql(f"SELECT file FROM {table_name}.metadata_log_entries ORDER BY timestamp DESC").first()[0]
    read = StaticTable.from_metadata(location).scan(selected_fields=tuple(columns)).to_arrow().to_pylist()
    assert sorted(tuple(r[c] for c in columns) for r in read) == seen
    folder = Path(files[0][0].replace("file:", "")).parent
    assert sorted(p.name for p in folder.glob("*.parquet")) == [Path(files[0][0]).name]  # the replay left none

    partitioned = f"{table_name}_by_batch"
    create_table(spark, partitioned, schema=DEAD_LETTER_SCHEMA, key=DEAD_LETTER_KEY, partition_by=["batch_id"])
    other = DeadLetterTable(spark, partitioned, "p")
    assert other.write(rows, batch_id=3, position={}).rows_written == 2
    assert spark.table(partitioned).where("batch_id = 3").count() == 2
