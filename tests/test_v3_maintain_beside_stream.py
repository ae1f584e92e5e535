"""`icetide maintain` as its own OS process beside a stream of upserts into a format v3 table.

The stream commits from this process (the shared Spark session, `UpsertSink`); the maintainer is
the real command line, `icetide maintain TABLE --every 1s --fold-deletes position`, on the same
warehouse, started with subprocess, so every commit race between them is a race between two JVMs
on one table (the embedded catalog's file lock, `lock-impl`). Its default policy is due on this
table within a few batches: more than 4 small data files in a partition asks for compaction, more
than 2 delete files for folding (with `position` on v3: equality deletes into deletion vectors,
then compaction). The stream goes on until the maintainer has landed both kinds of commit among
the stream's batches (at most MAX_BATCHES).

After MIN_BATCHES the stream waits up to QUIET_SECONDS before each next batch while the wanted
commits have not landed, as a stream with a trigger interval does; the races of the batches
before stay in the test. (It was added for `deletes: vectors`, whose stream left compaction no
window before compaction carried the DVs committed meanwhile; that case is
tests/test_v3_compaction_carry.py now, with no quiet window.)

After every batch Spark reads the model, and every row the batch did not touch keeps its
`_row_id` (row lineage survives compaction). At the end PyIceberg and DuckDB read the model too.
With `deletes: equality` the maintainer's conversions and compactions are the commits asserted.
"""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import icetide
from icetide.maintenance.compaction import SUMMARY_OPERATION
from icetide.maintenance.position_deletes import convert_equality_deletes
from icetide.table.iceberg import load_table
from tests.commands import ROOT
from tests.model import ReferenceModel
from tests.test_compaction import COLUMNS, KEY, SCHEMA, UPSERT_DDL
from tests.test_v3_readers import readers_agree

KEYS = 300
MIN_BATCHES = 15
MAX_BATCHES = 40
QUIET_SECONDS = 8.0
T0 = datetime(2026, 1, 1, 10)
STARTUP_TIMEOUT = 120.0  # the maintainer's JVM and first pass, on 2 busy cores


class Stream:
    """An upsert stream into a v3 table, with its model and every row's `_row_id` as last read."""

    def __init__(self, spark: Any, name: str, deletes: str) -> None:
        self.spark = spark
        self.name = name
        icetide.create_table(spark, name, schema=SCHEMA, key=KEY, partition_by=["hours(ts)"], format_version=3)
        self.sink = icetide.UpsertSink(spark, name, pipeline_id="stream", order_by="seq", deletes=deletes)
        self.model = ReferenceModel(KEY, COLUMNS, "seq")
        self.batch = 0
        self.row_ids: dict[tuple[Any, ...], int] = {}
        self.first_files: dict[tuple[Any, ...], str] = {}  # where batch 1 wrote each row
        self.files: dict[tuple[Any, ...], str] = {}
        self.first_row_ids: dict[tuple[Any, ...], int] = {}

    @staticmethod
    def row(key_id: int, seq: int, value: str) -> dict[str, Any]:
        return {"id": key_id, "ts": T0 + timedelta(hours=key_id % 2), "v": value, "seq": seq, "_op": "UPSERT"}

    def write(self, rows: list[dict[str, Any]]) -> set[tuple[Any, ...]]:
        """Commit one batch through the sink; returns the keys it touched."""
        self.batch += 1
        df = self.spark.createDataFrame([tuple(r.get(c) for c in [*COLUMNS, "_op"]) for r in rows], UPSERT_DDL)
        result = self.sink.write(df, batch_id=self.batch)
        assert result.committed, result
        self.model.apply(self.batch, rows)
        return {self.model.key_of(r) for r in rows}

    def check(self, touched: set[tuple[Any, ...]]) -> None:
        """The table equals the model, and rows outside `touched` kept their `_row_id`."""
        load_table(self.spark, self.name).refresh()  # see the maintainer's commits
        read = self.spark.sql(f"SELECT {', '.join(COLUMNS)}, _row_id, _file FROM {self.name}").collect()
        rows: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        ids: dict[tuple[Any, ...], int] = {}
        files: dict[tuple[Any, ...], str] = {}
        for r in read:
            k = tuple(r[c] for c in KEY)
            assert k not in rows, f"batch {self.batch}: duplicate key {k}"
            rows[k] = tuple(r[c] for c in COLUMNS)
            ids[k] = int(r["_row_id"])
            files[k] = r["_file"]
        assert rows == self.model.rows, f"batch {self.batch}: the table differs from the model"
        kept = {k: v for k, v in self.row_ids.items() if k in ids and k not in touched}
        changed = {k: (v, ids[k]) for k, v in kept.items() if ids[k] != v}
        assert not changed, f"batch {self.batch}: untouched rows got new _row_id: {sorted(changed.items())[:5]}"
        assert len(set(ids.values())) == len(ids), f"batch {self.batch}: two rows share a _row_id"
        self.row_ids = ids
        self.files = files
        if self.batch == 1:
            self.first_files = dict(files)
            self.first_row_ids = dict(ids)


def history(spark: Any, name: str) -> list[dict[str, str]]:
    """The summaries of the table's snapshots, oldest first, along the current snapshot's ancestry."""
    jtable = load_table(spark, name)
    jtable.refresh()
    snapshot = jtable.currentSnapshot()
    out = []
    while snapshot is not None:
        out.append(dict(snapshot.summary()))
        parent = snapshot.parentId()
        snapshot = jtable.snapshot(parent) if parent is not None else None
    return out[::-1]


def maintainer_commits(summaries: list[dict[str, str]]) -> list[tuple[int, str, dict[str, str]]]:
    """(position in the history, kind, summary) of every maintenance commit: compaction, fold-deletes."""
    return [(i, s[SUMMARY_OPERATION], s) for i, s in enumerate(summaries) if SUMMARY_OPERATION in s]


def stream_positions(summaries: list[dict[str, str]]) -> list[int]:
    """Positions in the history of the stream's batches."""
    return [i for i, s in enumerate(summaries) if "icetide.batch-id" in s]


@contextlib.contextmanager
def maintainer(
    table: str,
    warehouse: str,
    log: Path,
    args: tuple[str, ...] = ("--every", "1s", "--fold-deletes", "position"),
    env: dict[str, str] | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """`icetide maintain TABLE ARGS` (by default `--every 1s --fold-deletes position`) in its own
    process, output to `log`, with `env` added to the environment; terminated (then killed if it
    lingers) however the block ends."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "icetide.cli", "maintain", table, "--warehouse", warehouse, *args, "--no-progress"],
            cwd=ROOT,
            env={**os.environ, **(env or {})},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            yield process
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _quiet_window(spark: Any, table: str, wanted: set[str]) -> None:
    """Wait up to QUIET_SECONDS for the maintainer to commit the kinds of commit still wanted."""
    deadline = time.monotonic() + QUIET_SECONDS
    while time.monotonic() < deadline:
        if wanted <= {op for _, op, _ in maintainer_commits(history(spark, table))}:
            return
        time.sleep(0.5)


def _log_text(log: Path) -> str:
    return log.read_text(errors="replace")


@contextlib.contextmanager
def maintainer_output_on_failure(log: Path) -> Iterator[None]:
    """A failing assertion carries the tail of what the maintainer printed (its passes, its errors)."""
    try:
        yield
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- icetide maintain output (tail) ---\n{_log_text(log)[-4000:]}") from exc


def _wait_for_first_pass(process: subprocess.Popen[bytes], table: str, log: Path) -> None:
    """Until the maintainer printed its first `done in` (its JVM is up and has read the table)."""
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while f"{table}: done in" not in _log_text(log):
        assert process.poll() is None, f"icetide maintain exited {process.returncode}"
        assert time.monotonic() < deadline, f"no maintenance pass in {STARTUP_TIMEOUT}s"
        time.sleep(0.5)


@pytest.mark.guarantee
# `vectors` is tests/test_v3_compaction_carry.py now: compaction carries the stream's DVs, so a
# one-second stream needs no quiet window (issue 45 item 2).
@pytest.mark.parametrize("deletes", ["equality"])
def test_stream_beside_icetide_maintain_in_another_process(
    spark: Any, warehouse: str, table_name: str, tmp_path: Path, deletes: str
) -> None:
    stream = Stream(spark, table_name, deletes)
    rng = random.Random(24)
    stream.check(stream.write([Stream.row(i, 1, "first") for i in range(KEYS)]))
    log = tmp_path / "maintain.log"
    with maintainer_output_on_failure(log):
        wanted = {"equality": {"compaction", "fold-deletes"}, "vectors": {"compaction"}}[deletes]
        with maintainer(table_name, warehouse, log) as process:
            _wait_for_first_pass(process, table_name, log)
            landed: set[str] = set()
            while stream.batch < MAX_BATCHES and (stream.batch < MIN_BATCHES or not wanted <= landed):
                seq = stream.batch + 1
                updates = rng.sample(range(KEYS), 25)
                deleted = rng.sample(sorted(set(range(KEYS)) - set(updates)), 8)
                rows = [Stream.row(i, seq, f"b{seq}") for i in updates]
                rows += [{**Stream.row(i, seq, "gone"), "_op": "DELETE"} for i in deleted]
                stream.check(stream.write(rows))
                assert process.poll() is None, f"icetide maintain exited {process.returncode}"
                # Maintenance commits followed by a batch of the stream: they landed while it wrote.
                summaries = history(spark, table_name)
                last_batch = max(stream_positions(summaries))
                landed = {op for i, op, _ in maintainer_commits(summaries) if i < last_batch}
                if stream.batch >= MIN_BATCHES and not wanted <= landed:
                    _quiet_window(spark, table_name, wanted)
        output = _log_text(log)
        assert wanted <= landed, f"after {stream.batch} batches the maintainer landed only {landed}"
        assert "maintenance failed" not in output
        assert "Traceback" not in output and "icetide: error" not in output

        commits = maintainer_commits(history(spark, table_name))
        compactions = [s for _, op, s in commits if op == "compaction"]
        conversions = [s for _, op, s in commits if op == "fold-deletes"]
        assert all(int(s.get("added-data-files", 0)) > 0 for s in compactions)
        if deletes == "equality":
            assert any(int(s.get("added-dvs", 0)) > 0 for s in conversions), conversions
            assert any(int(s.get("removed-equality-delete-files", 0)) > 0 for s in conversions), conversions
        else:
            assert not conversions  # the stream leaves no equality delete to convert
        print(  # the run in numbers, for the record (pytest -s)
            f"{deletes}: {stream.batch} batches; maintainer: {len(compactions)} compaction and "
            f"{len(conversions)} conversion commit(s)"
        )

        # Rows written by batch 1 and never touched again: compaction moved them, their _row_id held.
        moved = [k for k, f in stream.first_files.items() if k in stream.files and stream.files[k] != f]
        untouched_first = [k for k in moved if stream.model.rows[k][3] == 1]
        assert untouched_first, "no row of batch 1 was rewritten by compaction"
        assert all(stream.row_ids[k] == stream.first_row_ids[k] for k in untouched_first)  # lineage kept

        if deletes == "equality":  # fold the last batches' equality deletes: PyIceberg refuses them
            assert convert_equality_deletes(spark, table_name).conflict is None
            stream.check(set())
        kinds = {int(r[0]) for r in spark.sql(f"SELECT content FROM {table_name}.delete_files").collect()}
        assert 2 not in kinds, kinds  # no equality delete left
        referenced = [r[0] for r in spark.sql(f"SELECT referenced_data_file FROM {table_name}.delete_files").collect()]
        assert len(referenced) == len(set(referenced)), "two DVs for one data file"

        readers_agree(spark, table_name, stream.model)
