"""Compaction lands beside a `deletes: vectors` stream: it carries the DVs committed meanwhile.

The stream writes from this process (`UpsertSink`, the shared Spark session); the maintainer is the
real command line, `icetide maintain`, in its own OS process on the same warehouse (tests in
test_v3_maintain_beside_stream.py explain the set-up). Before issue 45 item 2 a compaction lost
every race to a stream marking most files every second ("found new position delete for replaced
data file"); now its commit carries those DVs onto its new files by row lineage
(maintenance/carry.py).

- A stream at a one-second trigger upserting half the keys of both partitions every batch (a DV
  on every file), `icetide maintain --every 1s` at its default policy beside it: compactions land
  within a bounded number of the maintainer's passes, one carries rows within a bounded number of
  batches, and the table equals the
  model after every batch (no row doubled: no DV lost; none missing: none applied twice), rows
  not touched keep their `_row_id`, and PyIceberg and DuckDB read the model at the end.
- kill -9 of the maintainer at every new step: after the carried DVs are written (not committed)
  and right after the commit. The maintainer is held before its commit (ICETIDE_PAUSE_AT) while
  the stream commits DVs on its input files, so the commit has something to carry; after each
  kill the table equals the model, and the stream goes on over whatever landed.
"""

from __future__ import annotations

import random
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from icetide.maintenance.compaction import SUMMARY_CARRIED_ROWS
from tests.test_v3_maintain_beside_stream import (
    Stream,
    _log_text,
    _wait_for_first_pass,
    history,
    maintainer,
    maintainer_commits,
    maintainer_output_on_failure,
    stream_positions,
)
from tests.test_v3_readers import readers_agree

KEYS = 160
TRIGGER_SECONDS = 1.0
COMPACTIONS_WANTED = 2
# The maintainer's passes, from its first, by which the wanted compactions landed. A carrying commit
# needs a stream commit between a compaction's plan and its commit: it is awaited within MAX_BATCHES.
MAX_PASSES = 6
MAX_BATCHES = 60
WAIT_SECONDS = 180.0  # a maintainer's JVM, its plan and rewrite, on 2 busy cores


def _upserts(stream: Stream, rng: random.Random, share: float) -> list[dict[str, Any]]:
    """One batch: `share` of the keys upserted (both partitions: most files get a DV), a few deleted."""
    seq = stream.batch + 1
    updates = rng.sample(range(KEYS), int(KEYS * share))
    deleted = rng.sample(sorted(set(range(KEYS)) - set(updates)), 4)
    rows = [Stream.row(i, seq, f"b{seq}") for i in updates]
    return rows + [{**Stream.row(i, seq, "gone"), "_op": "DELETE"} for i in deleted]


def _one_vector_per_file(spark: Any, table: str) -> None:
    referenced = [r[0] for r in spark.sql(f"SELECT referenced_data_file FROM {table}.delete_files").collect()]
    assert len(referenced) == len(set(referenced)), "two DVs for one data file"


def _passes(log: Path, table: str) -> int:
    return len(re.findall(rf"^{re.escape(table)}: done in", _log_text(log), flags=re.MULTILINE))


@pytest.mark.guarantee
def test_compaction_lands_beside_a_one_second_vectors_stream(
    spark: Any, warehouse: str, table_name: str, tmp_path: Path
) -> None:
    stream = Stream(spark, table_name, "vectors")
    rng = random.Random(45)
    stream.check(stream.write([Stream.row(i, 1, "first") for i in range(KEYS)]))
    log = tmp_path / "maintain.log"
    # Spark's rewrite (not the driver's, a fraction of a second): a window between plan and commit
    # wide enough for the one-second stream to land DVs in, which the commit then carries.
    args = ("--every", "1s", "--driver-rewrite-bytes", "0")
    with maintainer_output_on_failure(log), maintainer(table_name, warehouse, log, args) as process:
        _wait_for_first_pass(process, table_name, log)
        first_pass = _passes(log, table_name)
        carried: list[dict[str, str]] = []
        landed_after: int | None = None  # passes after the first by which the wanted compactions landed
        while stream.batch < MAX_BATCHES:
            started = time.monotonic()
            stream.check(stream.write(_upserts(stream, rng, 0.5)))
            assert process.poll() is None, f"icetide maintain exited {process.returncode}"
            summaries = history(spark, table_name)
            last_batch = max(stream_positions(summaries))
            landed = [s for i, op, s in maintainer_commits(summaries) if op == "compaction" and i < last_batch]
            carried = [s for s in landed if int(s.get(SUMMARY_CARRIED_ROWS, 0)) > 0]
            if len(landed) >= COMPACTIONS_WANTED and landed_after is None:
                landed_after = _passes(log, table_name) - first_pass
            if len(landed) >= COMPACTIONS_WANTED and carried:
                break
            time.sleep(max(0.0, TRIGGER_SECONDS - (time.monotonic() - started)))
        passes = _passes(log, table_name) - first_pass
        output = _log_text(log)
        print(  # the run in numbers, for the record (pytest -s)
            f"{stream.batch} batches, {passes} pass(es) after the first; {COMPACTIONS_WANTED} compaction(s) landed "
            f"after {landed_after}, {len(landed)} in all, "
            f"{len(carried)} carrying {sum(int(s[SUMMARY_CARRIED_ROWS]) for s in carried)} row(s)"
        )
        assert len(landed) >= COMPACTIONS_WANTED and carried, f"after {stream.batch} batches: {len(landed)} landed"
        assert landed_after is not None and landed_after <= MAX_PASSES, (
            f"{landed_after} passes before {COMPACTIONS_WANTED} compactions landed"
        )
        assert "maintenance failed" not in output
        assert "Traceback" not in output and "icetide: error" not in output

    stream.check(stream.write(_upserts(stream, rng, 0.5)))  # the stream follows the last compaction
    moved = [k for k, f in stream.first_files.items() if k in stream.files and stream.files[k] != f]
    assert moved, "no row of batch 1 was rewritten by compaction"
    _one_vector_per_file(spark, table_name)
    kinds = {int(r[0]) for r in spark.sql(f"SELECT content FROM {table_name}.delete_files").collect()}
    assert kinds <= {1}, kinds  # deletion vectors only
    readers_agree(spark, table_name, stream.model)


@pytest.mark.guarantee
def test_sigkill_at_every_carry_step_leaves_the_table_equal_to_the_model(
    spark: Any, warehouse: str, table_name: str, tmp_path: Path
) -> None:
    stream = Stream(spark, table_name, "vectors")
    rng = random.Random(17)
    stream.check(stream.write([Stream.row(i, 1, "first") for i in range(KEYS)]))
    stream.check(stream.write(_upserts(stream, rng, 0.3)))
    for point in ("compaction_carried_dvs_written", "compaction_committed"):
        mark, release, log = tmp_path / f"{point}.paused", tmp_path / f"{point}.go", tmp_path / f"{point}.log"
        env = {
            "ICETIDE_PAUSE_AT": "compaction_before_commit",
            "ICETIDE_PAUSE_MARK": str(mark),
            "ICETIDE_PAUSE_UNTIL": str(release),
            "ICETIDE_PAUSE_SECONDS": str(WAIT_SECONDS),
            "ICETIDE_CRASH_AT": point,
        }
        before = len(maintainer_commits(history(spark, table_name)))
        with maintainer_output_on_failure(log), maintainer(table_name, warehouse, log, ("--fold-all",), env) as process:
            deadline = time.monotonic() + WAIT_SECONDS
            while not mark.exists():  # rewritten, held before its commit
                assert process.poll() is None, f"icetide maintain exited {process.returncode}"
                assert time.monotonic() < deadline, f"the maintainer did not reach its commit in {WAIT_SECONDS}s"
                time.sleep(0.2)
            for _ in range(2):  # DVs on the files it rewrote, committed while it waits
                stream.check(stream.write(_upserts(stream, rng, 0.5)))
            release.touch()
            assert process.wait(timeout=WAIT_SECONDS) == -signal.SIGKILL, point
        stream.check(set())  # what the kill left: the table equals the model
        _one_vector_per_file(spark, table_name)
        commits = maintainer_commits(history(spark, table_name))[before:]
        if point == "compaction_committed":
            assert [int(s.get(SUMMARY_CARRIED_ROWS, 0)) > 0 for _, _, s in commits] == [True], commits
        else:
            assert commits == [], commits  # the carried DVs were written, nothing committed
        stream.check(stream.write(_upserts(stream, rng, 0.5)))  # the stream goes on over it
    _one_vector_per_file(spark, table_name)
