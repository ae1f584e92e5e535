"""A table's definition as plain values, and how a declared definition meets an existing table. No I/O.

A pipeline file's `table.schema`, `key` and `partition_by` say how a table is created. Once the
table exists it may have evolved: columns added by schema evolution or by hand, types widened,
another partition spec. None of that is a conflict. A conflict is what would make the pipeline
write wrong or unwritable data: another key, a declared column the table lacks, or a column
whose table type is narrower than or incompatible with the declared one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_DECIMAL = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")
# Iceberg's allowed primitive promotions (the spec's "Schema Evolution" table): from -> wider.
_PROMOTIONS = {("int", "long"), ("float", "double")}


@dataclass(frozen=True)
class Column:
    """One top-level column: its name, Iceberg type text (as `Type.toString()` writes it), required or not."""

    name: str
    type: str
    required: bool


@dataclass(frozen=True)
class Definition:
    """Columns in order, key column names, and partition fields as (Iceberg transform text, source column)."""

    columns: tuple[Column, ...]
    key: tuple[str, ...]
    partition_by: tuple[tuple[str, str], ...]

    def column(self, name: str) -> Column | None:
        """The column named `name`, or None."""
        return next((c for c in self.columns if c.name == name), None)


@dataclass(frozen=True)
class Comparison:
    """How an existing table meets a declared definition: conflicts stop a pipeline, differences are logged."""

    conflicts: tuple[str, ...]
    differences: tuple[str, ...]


def same_or_wider(declared: str, found: str) -> bool:
    """Whether a column of Iceberg type `found` holds every value of type `declared` unchanged:
    the same type, or one Iceberg may promote it to (int -> long, float -> double,
    decimal(p, s) -> decimal(p', s) with p' >= p)."""
    if declared == found or (declared, found) in _PROMOTIONS:
        return True
    d, f = _DECIMAL.match(declared), _DECIMAL.match(found)
    return bool(d and f and d.group(2) == f.group(2) and int(f.group(1)) >= int(d.group(1)))


def compare(declared: Definition, found: Definition) -> Comparison:
    """Compare a declared definition with an existing table's (see the module's docstring)."""
    conflicts: list[str] = []
    differences: list[str] = []
    if sorted(declared.key) != sorted(found.key):
        conflicts.append(f"key: the table's key is {sorted(found.key)}, the pipeline declares {sorted(declared.key)}")
    for want in declared.columns:
        have = found.column(want.name)
        if have is None:
            conflicts.append(f"column {want.name!r} ({want.type}) is declared but the table has no such column")
        elif not same_or_wider(want.type, have.type):
            conflicts.append(
                f"column {want.name!r} is {have.type} in the table, which cannot hold the declared {want.type}"
            )
        else:
            if have.type != want.type:
                differences.append(f"column {want.name!r} was widened to {have.type} (declared {want.type})")
            if have.required and not want.required:
                differences.append(f"column {want.name!r} is required in the table but declared nullable")
    extra = [c for c in found.columns if declared.column(c.name) is None]
    if extra:
        differences.append("the table has columns the pipeline does not declare: " + ", ".join(c.name for c in extra))
    if declared.partition_by != found.partition_by:
        differences.append(
            f"the table is partitioned by {_spec_text(found.partition_by)}, "
            f"the pipeline declares {_spec_text(declared.partition_by)}"
        )
    return Comparison(tuple(conflicts), tuple(differences))


def _spec_text(fields: tuple[tuple[str, str], ...]) -> str:
    return "[" + ", ".join(f"{transform}({column})" for transform, column in fields) + "]" if fields else "nothing"
