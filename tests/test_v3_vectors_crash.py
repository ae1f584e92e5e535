"""`deletes="vectors"` exactly once: kill -9 at every new step, restart, and the table equals the model.

One table, one driver process at a time (tests/vectors_stream_driver.py): killed in batch 2 after
the key index caught up, in batch 3 after the DVs were written (not committed), in batch 4 right
after the commit (the index not yet following it), in batch 5 after the index followed it; each
restart replays from the table's committed batch with a key index built anew from the table.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.commands import ROOT, warehouse_reader
from tests.model import ReferenceModel, table_rows
from tests.test_compaction import COLUMNS, KEY
from tests.test_runner_files import referenced_and_present
from tests.vectors_stream_driver import batch_rows

BATCHES = 6
CRASHES = [("after_index_catch_up", 2), ("after_dv_write", 3), ("vectors_committed", 4), ("after_index_update", 5)]


def _driver(warehouse: Path, table: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-m", "tests.vectors_stream_driver", str(warehouse), table, str(BATCHES)],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_sigkill_at_every_vectors_step_then_restart(spark: Any, tmp_path: Path) -> None:
    warehouse, table = tmp_path / "warehouse", "lake.crash.events"
    for point, batch in CRASHES:
        crashed = _driver(warehouse, table, {"ICETIDE_CRASH_AT": point, "ICETIDE_CRASH_BATCH": str(batch)})
        assert crashed.returncode == -signal.SIGKILL, (point, crashed.stderr[-3000:])
    done = _driver(warehouse, table)
    assert done.returncode == 0, done.stderr[-3000:]
    model = ReferenceModel(KEY, COLUMNS, "seq")
    for b in range(1, BATCHES + 1):
        model.apply(b, batch_rows(b))
    reader = warehouse_reader(spark, "lake", warehouse)
    assert table_rows(reader, table, COLUMNS, KEY) == model.rows
    content = {int(r[0]) for r in reader.sql(f"SELECT content FROM {table}.delete_files").collect()}
    assert content == {1}  # deletion vectors only: no equality delete ever committed
    referenced = [r[0] for r in reader.sql(f"SELECT referenced_data_file FROM {table}.delete_files").collect()]
    assert len(referenced) == len(set(referenced))
    batches = sorted(
        int(r[0]) for r in reader.sql(f"SELECT summary['icetide.batch-id'] FROM {table}.snapshots").collect() if r[0]
    )
    assert batches == list(range(1, BATCHES + 1))  # each batch landed once
    # No file is left that no snapshot holds: a restart deletes a killed batch's files, and the
    # equality-delete files a committed batch's DVs replaced (killed at `vectors_committed`).
    referenced, present = referenced_and_present(reader, table, warehouse)
    assert present and present <= referenced, sorted(present - referenced)[:3]
