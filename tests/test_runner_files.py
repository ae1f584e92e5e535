"""The runner over a landing folder: exactly once across kill -9 at every crash point."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from icetide.config.pipeline import PipelineConfig
from icetide.pipeline.table_runner import Runner
from tests.commands import crash_tour, stop_with_signal, warehouse_reader
from tests.model import ReferenceModel, table_rows

ROOT = Path(__file__).resolve().parent.parent
COLUMNS = ["ad_id", "event_time", "clicks", "seq"]
KEY = ["ad_id", "event_time"]


def pipeline_doc(name: str, landing: Path, warehouse: str | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "pipeline": name,
        "source": {"files": {"path": str(landing), "format": "json", "min_age_seconds": 0.001}},
        "format": "json",
        "table": {
            "name": f"lake.runner.{name}",
            "schema": "ad_id STRING NOT NULL, event_time TIMESTAMP NOT NULL, clicks INT, seq BIGINT",
            "key": KEY,
            "partition_by": ["hours(event_time)"],
        },
        "mode": "upsert",
        "order_by": "seq",
        "trigger": {"interval": "1s", "max_files": 2},
        "dead_letter": f"lake.runner.{name}_dead_letter",
    }
    if warehouse:
        doc["warehouse"] = warehouse
    return doc


def land_files(landing: Path, files: int, seed: int, first: int = 0) -> tuple[list[list[str]], int]:
    """JSON-lines files with upserts, deletes and bad lines; returns the lines and the bad count."""
    rng = random.Random(seed)
    landing.mkdir(parents=True, exist_ok=True)
    all_lines, bad = [], 0
    for n in range(first, first + files):
        lines = []
        for i in range(30):
            ad = f"ad{rng.randrange(12)}"
            hour = rng.choice([1, 2, 3])
            record: dict[str, Any] = {
                "ad_id": ad,
                "event_time": f"2026-01-01T0{hour}:00:00",
                "clicks": rng.randrange(9),
                "seq": n * 100 + i,
            }
            roll = rng.random()
            if roll < 0.1:
                record["_op"] = "DELETE"
            if roll > 0.93:
                lines.append(
                    rng.choice(
                        [
                            '{"ad_id": "x", "event_time": ',
                            '{"ad_id": null, "event_time": "2026-01-01"}',
                            '{"ad_id": "a", "event_time": "2026-01-01T01:00:00", "clicks": "many"}',
                        ]
                    )
                )
                bad += 1
            else:
                lines.append(json.dumps(record))
        tmp = landing / f".part-{n:03d}.json"
        tmp.write_text("\n".join(lines) + "\n")
        os.utime(tmp, (1_767_225_600 + n, 1_767_225_600 + n))
        os.replace(tmp, landing / f"part-{n:03d}.json")
        all_lines.append(lines)
    return all_lines, bad


def expected(all_lines: list[list[str]]) -> dict[Any, Any]:
    model = ReferenceModel(KEY, COLUMNS, "seq")
    rows = []
    for lines in all_lines:
        for line in lines:
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not r.get("ad_id") or not isinstance(r.get("clicks"), int) or len(r["event_time"]) < 19:
                continue
            rows.append({**r, "event_time": datetime.fromisoformat(r["event_time"])})
    # Within the run, a later file always wins; seq grows with the file, so one batch suffices.
    model.apply(1, rows)
    return model.rows


def referenced_and_present(spark: Any, table: str, warehouse: Path) -> tuple[set[str], set[str]]:
    referenced = {r[0].replace("file:", "") for r in spark.sql(f"SELECT file_path FROM {table}.all_files").collect()}
    folder = warehouse.joinpath(*table.split(".")[1:]) / "data"
    present = {str(p) for p in folder.rglob("*.parquet")}
    return referenced, present


def test_runner_in_process_lands_files_once_with_dead_letters(spark: Any, tmp_path: Path, warehouse: str) -> None:
    lines, bad = land_files(tmp_path / "landing", 5, seed=1)
    config = PipelineConfig.from_dict(pipeline_doc("inproc", tmp_path / "landing"))
    runner = Runner(config, spark)
    summary = runner.run(once=True, handle_signals=False)
    assert [b.batch_id for b in summary.batches] == [1, 2, 3]  # max_files 2: 2 + 2 + 1
    assert sum(b.bad_records for b in summary.batches) == bad > 0
    assert table_rows(spark, config.table.name, COLUMNS, KEY) == expected(lines)
    dead = spark.table(config.dead_letter).collect()
    assert len(dead) == bad and all(r["payload"] and r["error"] and ".json:" in r["source_position"] for r in dead)
    assert Runner(config, spark).run(once=True, handle_signals=False).batches == []  # nothing new: nothing lands
    more, more_bad = land_files(tmp_path / "landing", 1, seed=2, first=100)
    summary = Runner(config, spark).run(once=True, handle_signals=False)
    assert [b.batch_id for b in summary.batches] == [4]
    assert table_rows(spark, config.table.name, COLUMNS, KEY) == expected(lines + more)
    assert spark.table(config.dead_letter).count() == bad + more_bad


def test_too_many_bad_records_fail_the_pipeline(spark: Any, tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "bad.json").write_text('{"nope"\n{"ad_id": 1}\n')
    os.utime(landing / "bad.json", (1_767_225_600, 1_767_225_600))
    doc = pipeline_doc("strict", landing)
    doc["max_bad_fraction"] = 0.5
    from icetide.pipeline.batches import TooManyBadRecordsError

    runner = Runner(PipelineConfig.from_dict(doc), spark)
    with pytest.raises(TooManyBadRecordsError, match="2 of 2 records are bad"):
        runner.run(once=True, handle_signals=False)
    assert runner.sink.last_committed() is None


@pytest.mark.parametrize(  # after_commit: test_two_stage; on Spark 3.5 (`guarantee`) the tour alone
    "stops",
    [pytest.param([("after_dead_letter", "2"), ("after_write", "3")], marks=pytest.mark.guarantee), [("random", "")]],
    ids=["tour", "random"],
)
def test_kill_9_and_restart_lands_everything_once(spark: Any, tmp_path: Path, stops: list[tuple[str, str]]) -> None:
    import yaml

    warehouse = tmp_path / "warehouse"
    lines, bad = land_files(tmp_path / "landing", 6, seed=len(stops))
    doc = pipeline_doc("crash", tmp_path / "landing", str(warehouse))
    if stops[0][0] == "random":  # a file a batch: the run goes on for a while after its first batch
        doc["trigger"] = {**doc.get("trigger", {}), "max_files": 1}
    config_path = tmp_path / "pipeline.yaml"
    config_path.write_text(yaml.safe_dump(doc))
    done = crash_tour(config_path, stops)
    metrics = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert all({"records_in", "rows_written", "bad_records", "source_lag"} <= set(m) for m in metrics)
    # Read the result with the test's own session, from the subprocess's warehouse.
    other = warehouse_reader(spark, "crashcheck", warehouse)
    table, dead_letter = "crashcheck.runner.crash", "crashcheck.runner.crash_dead_letter"
    assert table_rows(other, table, COLUMNS, KEY) == expected(lines)
    dead = [r["source_position"] for r in other.table(dead_letter).collect()]
    assert len(dead) == len(set(dead)) == bad  # each bad record exactly once
    for name in (table, dead_letter):
        referenced, present = referenced_and_present(other, name, warehouse)
        assert present <= referenced, f"abandoned files left in {name}: {sorted(present - referenced)[:3]}"


def test_sigterm_stops_cleanly_after_the_batch_in_flight(tmp_path: Path) -> None:
    import yaml

    land_files(tmp_path / "landing", 3, seed=5)
    doc = pipeline_doc("sigterm", tmp_path / "landing", str(tmp_path / "warehouse"))
    config_path = tmp_path / "pipeline.yaml"
    config_path.write_text(yaml.safe_dump(doc))
    proc = subprocess.Popen(
        [sys.executable, "-m", "icetide.cli", "run", str(config_path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    first = json.loads(proc.stdout.readline())  # the first batch's metrics line
    assert first["batch_id"] == 1 and first["committed"]
    out, err = stop_with_signal(proc)
    assert proc.returncode == 0, err[-2000:]
    assert "stopped by signal" in err
    committed = [json.loads(line)["batch_id"] for line in out.splitlines() if line.startswith("{")]
    assert committed == list(range(2, 2 + len(committed)))  # whatever else ran, ran whole


def test_maintenance_between_batches_keeps_the_table_right(spark: Any, tmp_path: Path) -> None:
    lines, _ = land_files(tmp_path / "landing", 6, seed=9)
    doc = pipeline_doc("maintained", tmp_path / "landing")
    doc["maintenance"] = {"every_batches": 2}
    doc["trigger"] = {"interval": "1s", "max_files": 1}
    runner = Runner(PipelineConfig.from_dict(doc), spark)
    summary = runner.run(once=True, handle_signals=False)
    assert len(summary.batches) == 6
    assert len(runner.maintenance_runs) == 3  # after batches 2, 4 and 6
    assert table_rows(spark, runner.config.table.name, COLUMNS, KEY) == expected(lines)
    assert runner.sink.last_committed().batch_id == 6  # type: ignore[union-attr]
