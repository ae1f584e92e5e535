"""The peer harness (bench/peers/compare.py) still runs: icetide and the Flink Iceberg sink (and, on
appends, Iceberg's Kafka Connect sink) read one tiny topic into their tables, and every table
equals the model. On `debezium` the topic is Debezium's: the changes are made to a PostgreSQL
table and captured by its PostgreSQL connector in a Kafka Connect worker (bench/peers/live_cdc.py),
and the tables must equal the database table.

Slow (PyFlink's venv is built from bench/peers/requirements-flink.txt on first use, about 3 minutes,
and the Flink job's JVM starts in about a minute); `-m "not peer"` leaves it out.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.peer
@pytest.mark.parametrize("workload", ["ads", "debezium", "appends"])
def test_peer_harness_on_a_tiny_topic(workload: str) -> None:
    size = ["--events-per-batch", "60"] if workload != "appends" else ["--events", "600", "--warm-up", "50"]
    done = subprocess.run(
        [sys.executable, "bench/peers/compare.py", "--workload", workload, "--hours", "1", "--rate", "400", *size],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "every table equals the model" in done.stdout
    systems = 3 if workload == "appends" else 2  # the Kafka Connect sink has no upsert mode
    measured = {
        cells[0]: cells[1 : 1 + systems]
        for line in done.stdout.splitlines()
        if line.startswith("| ") and len(cells := [c.strip() for c in line.strip("|").split("|")]) > systems
    }
    assert measured["measure"][1].startswith("Flink")
    if systems == 3:
        assert measured["measure"][2].startswith("Kafka Connect sink")
    for system in range(systems):
        assert float(measured["rows/s per core (CPU s of the process tree)"][system].replace(",", "")) > 0
        assert float(measured["data files per partition (mean)"][system]) >= 1
        assert float(measured["freshness p99 s"][system]) > 0
    assert measured["scan s, duckdb"][0] not in ("refused", "not read")
