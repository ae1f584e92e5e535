"""icetide.write.arrow_sort on the installed pyarrow (17 on the Spark 3.5 venv, 26 on the default one)."""

from __future__ import annotations

import warnings

import pyarrow as pa

from icetide.write.arrow_sort import sort_indices


def test_nulls_go_where_asked_without_a_warning() -> None:
    table = pa.table({"a": [2, None, 1, 1], "b": ["y", "x", None, "a"]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # pyarrow >= 25 warns about the whole-sort null_placement
        assert sort_indices(table, ["a", "b"], "at_end").to_pylist() == [3, 2, 0, 1]
        assert sort_indices(table, ["a", "b"], "at_start").to_pylist() == [1, 2, 3, 0]
