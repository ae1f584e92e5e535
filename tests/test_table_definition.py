"""How a declared table definition meets an existing, possibly evolved, table (pure logic, no Spark)."""

from __future__ import annotations

from icetide.table.definition import Column, Definition, compare, same_or_wider

DECLARED = Definition(
    (Column("id", "int", True), Column("name", "string", False), Column("price", "decimal(10, 2)", False)),
    ("id",),
    (("day", "id"),),
)


def test_promotions_follow_iceberg() -> None:
    assert same_or_wider("int", "long") and same_or_wider("float", "double")
    assert same_or_wider("decimal(10, 2)", "decimal(12, 2)") and same_or_wider("string", "string")
    assert not same_or_wider("long", "int") and not same_or_wider("double", "float")
    assert not same_or_wider("decimal(10, 2)", "decimal(12, 3)") and not same_or_wider(
        "decimal(12, 2)", "decimal(10, 2)"
    )
    assert not same_or_wider("int", "string") and not same_or_wider("string", "int")


def test_an_evolved_table_fits_and_its_differences_are_named() -> None:
    evolved = Definition(
        (
            Column("id", "int", True),
            Column("name", "string", False),
            Column("price", "decimal(14, 2)", False),
            Column("age", "long", False),
        ),
        ("id",),
        (("hour", "id"),),
    )
    result = compare(DECLARED, evolved)
    assert result.conflicts == ()
    assert result.differences == (
        "column 'price' was widened to decimal(14, 2) (declared decimal(10, 2))",
        "the table has columns the pipeline does not declare: age",
        "the table is partitioned by [hour(id)], the pipeline declares [day(id)]",
    )
    assert compare(DECLARED, DECLARED) == compare(DECLARED, DECLARED).__class__((), ())


def test_conflicts_name_the_key_and_the_columns() -> None:
    other = Definition((Column("id", "int", True), Column("price", "decimal(8, 2)", False)), ("id", "price"), ())
    result = compare(DECLARED, other)
    assert result.conflicts == (
        "key: the table's key is ['id', 'price'], the pipeline declares ['id']",
        "column 'name' (string) is declared but the table has no such column",
        "column 'price' is decimal(8, 2) in the table, which cannot hold the declared decimal(10, 2)",
    )
