"""The key index's sorted runs against a plain dict of key -> (file, position), step by step.

Random adds (new files, their rows in file order or shuffled), kills by (file, position)
(deletion vectors, with positions the runs do not hold), and kills of whole files (compaction),
for one BIGINT key (looked up by its exact form) and for a (STRING, BIGINT) key (looked up by
hash, then checked): after every step every probe finds what the dict holds, the live rows are
exactly the dict's, and every run is in both its orders.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from icetide.write.key_runs import KeyRuns, file_and_position, where_of


def _table(keys: list[Any], composite: bool) -> pa.Table:
    if composite:
        return pa.table(
            {"f1": pa.array([k[0] for k in keys], pa.string()), "f2": pa.array([k[1] for k in keys], pa.int64())}
        )
    return pa.table({"f1": pa.array(keys, pa.int64())})


@pytest.mark.parametrize("composite", [False, True], ids=["bigint", "string-bigint"])
@pytest.mark.parametrize("seed", range(12))
def test_runs_equal_the_model_after_every_step(composite: bool, seed: int) -> None:
    rng = random.Random(seed)
    runs = KeyRuns(["f1", "f2"] if composite else ["f1"])
    model: dict[Any, int] = {}  # key -> where
    files = 0

    def key(k: int) -> Any:
        return (f"k{k % 7}-{k}", -k) if composite else k * 1_000_003 - 2**40  # negative keys too

    for _ in range(80):
        op = rng.random()
        if op < 0.55:  # a data file of new keys (an upsert's replaced rows were killed first)
            fresh = list(dict.fromkeys(key(rng.randrange(400)) for _ in range(rng.randint(0, 60))))
            fresh = [k for k in fresh if k not in model]
            where = where_of(np.full(len(fresh), files, np.int64), np.arange(len(fresh), dtype=np.int64))
            model.update(zip(fresh, where.tolist(), strict=True))
            if rng.random() < 0.5:  # as Spark returns a table's rows (build), not in file order
                shuffled = rng.sample(range(len(fresh)), len(fresh))
                fresh, where = [fresh[i] for i in shuffled], where[shuffled]
            runs.add(_table(fresh, composite), where)
            files += 1
        elif op < 0.85 and model:  # a DV: some rows, and a position no run holds
            gone = rng.sample(sorted(model, key=str), min(len(model), rng.randint(1, 25)))
            marks = [model.pop(k) for k in gone] + [int(where_of(np.array([files + 5]), np.array([3]))[0])]
            runs.kill(np.array(marks, np.int64))
        elif files:  # compaction removed a file
            f = rng.randrange(files)
            model = {k: w for k, w in model.items() if w >> 32 != f}
            runs.kill_files([f])
        probes = [key(rng.randrange(450)) for _ in range(50)]
        assert runs.find(_table(probes, composite)).tolist() == sorted({model[k] for k in probes if k in model})
        live = runs.table()
        file_ids, positions = file_and_position(np.array(sorted(model.values()), np.int64))
        rows = sorted(zip(live["file"].to_pylist(), live["pos"].to_pylist(), strict=True))
        assert rows == sorted(zip(file_ids.tolist(), positions.tolist(), strict=True))
        assert runs.live_rows() == len(model)
        assert len(runs.runs) <= max(1, len(model)).bit_length() + 2  # merged as they grow
        for run in runs.runs:  # both orders of every run, however it was made (new rows or a merge)
            assert np.all(run.forms[1:] >= run.forms[:-1])
            assert np.array_equal(run.where[run.by_where], run.where_sorted)
            assert np.all(run.where_sorted[1:] > run.where_sorted[:-1])


def test_bigint_keys_come_back_as_they_went_in() -> None:
    keys = np.array([-(2**63), -1, 0, 1, 2**63 - 1], np.int64)
    runs = KeyRuns(["f1"])
    runs.add(pa.table({"f1": keys}), where_of(np.zeros(5, np.int64), np.arange(5, dtype=np.int64)))
    assert sorted(runs.table()["f1"].to_pylist()) == sorted(keys.tolist())
    assert runs.find(pa.table({"f1": pa.array([2**63 - 1], pa.int64())})).tolist() == [4]
