"""The key index's hash (icetide/write/key_hash.py): one value per key however the key's
Arrow arrays are chunked or sliced, distinct for keys that differ in their last byte, their
length or a column boundary, and spread over the top bits the runs' directory buckets by.
The keys are made here: the hash is pure arithmetic over Arrow buffers, no producer involved."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icetide.write.key_hash import key_hashes

STRINGS = ["", "a", "a\x00", "abcdefg", "abcdefgh", "abcdefgh\x00", "abcdefghi", "é" * 40, "日本" * 9, "x" * 300]


def test_distinct_strings_hash_apart() -> None:
    hashes = key_hashes(pa.table({"s": STRINGS}))
    assert len(set(hashes.tolist())) == len(STRINGS)


def test_a_column_boundary_counts() -> None:
    """("ab", "c") and ("a", "bc") are different keys."""
    left = key_hashes(pa.table({"a": ["ab"], "b": ["c"]}))
    right = key_hashes(pa.table({"a": ["a"], "b": ["bc"]}))
    assert left[0] != right[0]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.text(max_size=30), st.integers(-(2**63), 2**63 - 1)), min_size=1, max_size=60),
    st.data(),
)
def test_chunks_and_slices_do_not_change_a_hash(rows: list[tuple[str, int]], data: st.DataObject) -> None:
    table = pa.table({"s": [r[0] for r in rows], "n": pa.array([r[1] for r in rows], pa.int64())})
    whole = key_hashes(table)
    cut = data.draw(st.integers(0, len(rows)))
    chunked = pa.concat_tables([table.slice(0, cut), table.slice(cut)])
    assert (key_hashes(chunked) == whole).all()
    start = data.draw(st.integers(0, len(rows) - 1))
    assert (key_hashes(table.slice(start)) == whole[start:]).all()
    by_key = {}
    for row, h in zip(rows, whole.tolist(), strict=True):  # equal keys, equal hashes
        assert by_key.setdefault(row, h) == h


def test_top_bits_are_spread() -> None:
    """Sequential ids (the usual key) fill the directory's buckets evenly."""
    n = 1 << 16
    hashes = key_hashes(pa.table({"s": [f"evt-{i:012d}" for i in range(n)], "t": pa.array(range(n), pa.int64())}))
    counts = np.bincount((hashes >> np.uint64(64 - 10)).astype(np.int64), minlength=1 << 10)
    assert counts.max() < 3 * n / (1 << 10)
    assert len(np.unique(hashes)) == n


def test_other_types_are_refused() -> None:
    with pytest.raises(TypeError, match="double"):
        key_hashes(pa.table({"x": pa.array([1.5])}))
