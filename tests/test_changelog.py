"""In-batch collapse of changes to one key: pure pyarrow, no Spark."""

import pyarrow as pa
import pytest

from icetide.write.collapse import ARRIVAL_COLUMN, OP_COLUMN, BadOperationError, collapse


def batch(rows: list[tuple[int, str | None, int | None, str | None]]) -> pa.Table:
    """rows: (id, v, seq, op) in arrival order."""
    return pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "v": pa.array([r[1] for r in rows], pa.string()),
            "seq": pa.array([r[2] for r in rows], pa.int64()),
            OP_COLUMN: pa.array([r[3] for r in rows], pa.string()),
            ARRIVAL_COLUMN: pa.array(range(len(rows)), pa.int64()),
        }
    )


def as_dict(table: pa.Table) -> dict[int, str | None]:
    return dict(zip(table["id"].to_pylist(), table["v"].to_pylist(), strict=True))


def test_last_by_order_then_arrival() -> None:
    out = collapse(
        batch([(1, "a", 2, None), (1, "b", 1, "UPSERT"), (2, "x", 5, "upsert"), (2, "y", 5, "UPSERT")]),
        key=["id"],
        order_by="seq",
        changelog=False,
    )
    assert as_dict(out.rows) == {1: "a", 2: "y"}
    assert sorted(out.deletes["id"].to_pylist()) == [1, 2]


def test_null_order_is_oldest() -> None:
    out = collapse(batch([(1, "new", 1, None), (1, "old", None, None)]), key=["id"], order_by="seq", changelog=False)
    assert as_dict(out.rows) == {1: "new"}


def test_delete_then_insert_leaves_row_and_keeps_delete_in_changelog_mode() -> None:
    for changelog in (False, True):
        out = collapse(
            batch([(1, None, 1, "DELETE"), (1, "back", 2, "INSERT")]), key=["id"], order_by="seq", changelog=changelog
        )
        assert as_dict(out.rows) == {1: "back"}
        assert out.deletes["id"].to_pylist() == [1]


def test_changelog_insert_writes_no_delete() -> None:
    out = collapse(
        batch([(1, "a", 1, "INSERT"), (2, "b", 1, "UPSERT"), (3, None, 1, "DELETE")]),
        key=["id"],
        order_by="seq",
        changelog=True,
    )
    assert as_dict(out.rows) == {1: "a", 2: "b"}
    assert sorted(out.deletes["id"].to_pylist()) == [2, 3]


def test_default_insert_behaves_as_upsert() -> None:
    out = collapse(batch([(1, "a", 1, "INSERT")]), key=["id"], order_by="seq", changelog=False)
    assert out.deletes["id"].to_pylist() == [1]


def test_unknown_op_is_named() -> None:
    with pytest.raises(BadOperationError, match="'MERGE'"):
        collapse(batch([(1, "a", 1, "MERGE")]), key=["id"], order_by="seq", changelog=False)


def test_no_order_column_uses_arrival() -> None:
    out = collapse(
        batch([(1, "first", None, None), (1, "second", None, None)]), key=["id"], order_by=None, changelog=False
    )
    assert as_dict(out.rows) == {1: "second"}


def test_append_mode_keeps_every_insert_of_a_key() -> None:
    rows = [(1, "a", 1, "INSERT"), (1, "b", 2, "INSERT"), (2, "c", 1, "INSERT")]
    out = collapse(batch(rows), key=["id"], order_by="seq", changelog=True, keep_inserts=True)
    assert sorted(out.rows["v"].to_pylist()) == ["a", "b", "c"]
    assert out.deletes.num_rows == 0
    # Without keep_inserts the same batch collapses to the last INSERT of each key.
    assert as_dict(collapse(batch(rows), key=["id"], order_by="seq", changelog=True).rows) == {1: "b", 2: "c"}


def test_append_mode_collapses_only_the_keys_with_a_change() -> None:
    rows = [
        (1, "a", 1, "INSERT"),
        (1, "b", 2, "INSERT"),
        (2, "old", 1, "INSERT"),
        (2, None, 2, "DELETE"),
        (3, "x", 1, "INSERT"),
        (3, "y", 2, "UPSERT"),
    ]
    out = collapse(batch(rows), key=["id"], order_by="seq", changelog=True, keep_inserts=True)
    assert sorted(zip(out.rows["id"].to_pylist(), out.rows["v"].to_pylist(), strict=True)) == [
        (1, "a"),
        (1, "b"),
        (3, "y"),
    ]
    assert sorted(out.deletes["id"].to_pylist()) == [2, 3]
