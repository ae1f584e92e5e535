"""The demo: generated ad events through the sink, with the dynamic distribution."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from icetide.cli.demo import run_demo
from icetide.sources.generator import AdEventsConfig, ad_events


def test_demo_lands_every_impression_once_with_one_file_per_partition_per_batch(spark: Any) -> None:
    seen: list[Any] = []
    report = run_demo(spark, batches=4, events_per_batch=2_000, table="lake.test.demo_events", on_batch=seen.append)
    config = AdEventsConfig(events_per_batch=2_000)
    new_per_batch = config.events_per_batch - int(config.events_per_batch * config.update_share)
    assert report.rows == 2_000 + 3 * new_per_batch  # updates change rows, never add them
    assert report.snapshots == 4 and len(seen) == 4 and all(b.committed for b in seen)
    for result in seen:  # dynamic: a small partition costs one data file per batch
        assert all(n == 1 for n in result.files_per_partition.values())
    assert report.data_files == sum(b.data_files for b in seen)
    assert report.sample and report.sample_columns[0] == "hour"


def test_generator_is_deterministic_and_updates_earlier_impressions(spark: Any) -> None:
    a = ad_events(spark, 3, AdEventsConfig(events_per_batch=500)).collect()
    b = ad_events(spark, 3, AdEventsConfig(events_per_batch=500)).collect()
    assert a == b
    earlier = {
        r["impression_id"]
        for b in range(3)
        for r in ad_events(spark, b, AdEventsConfig(events_per_batch=500)).select("impression_id").collect()
    }
    updates = [r for r in a if r["clicks"] > 0]
    assert updates and all(r["impression_id"] in earlier for r in updates)


def test_cli_demo_prints_a_summary(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "icetide.cli", "demo", "--batches", "2", "--events", "500"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for expected in ("after 2 micro-batches", "files per partition", "sample query", "rows 850"):
        assert expected in done.stdout
    assert "Exception" not in done.stderr


def test_cli_error_is_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "icetide.cli", "demo", "--batches", "1", "--events", "10", "--warehouse", "s3x://nope"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("icetide: error:"), done.stderr[-2000:]
