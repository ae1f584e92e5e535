"""A table's definition as plain values: schema text, primary key and partition transforms. No I/O."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from icetide.errors import ConfigError

TransformName = Literal["identity", "years", "months", "days", "hours", "bucket", "truncate"]

# Accepted spellings, mapped to the Spark function names Iceberg registers under <catalog>.system.
_TRANSFORM_ALIASES: dict[str, TransformName] = {
    "identity": "identity",
    "year": "years",
    "years": "years",
    "month": "months",
    "months": "months",
    "day": "days",
    "days": "days",
    "date": "days",
    "hour": "hours",
    "hours": "hours",
    "date_hour": "hours",
    "bucket": "bucket",
    "truncate": "truncate",
}
_WITH_WIDTH = ("bucket", "truncate")
_CALL = re.compile(r"^\s*(\w+)\s*\((.*)\)\s*$")
_NAME = re.compile(r"^\s*`?([A-Za-z_][\w]*)`?\s*$")


@dataclass(frozen=True)
class PartitionTransform:
    """One partition field: a transform applied to a source column, e.g. hours(ts), bucket(16, id)."""

    transform: TransformName
    column: str
    width: int | None = None

    @classmethod
    def parse(cls, text: str) -> PartitionTransform:
        """Parse `col`, `identity(col)`, `hours(col)`, `bucket(16, col)`, `truncate(4, col)`, ..."""
        plain = _NAME.match(text)
        if plain:
            return cls("identity", plain.group(1))
        call = _CALL.match(text)
        if not call:
            raise ConfigError(f"partition_by: cannot read {text!r}; expected e.g. hours(ts) or bucket(16, id)")
        name = call.group(1).lower()
        transform = _TRANSFORM_ALIASES.get(name)
        if transform is None:
            known = ", ".join(sorted(set(_TRANSFORM_ALIASES.values())))
            raise ConfigError(f"partition_by: unknown transform {name!r} in {text!r}; known: {known}")
        args = [a.strip() for a in call.group(2).split(",")]
        if transform in _WITH_WIDTH:
            if len(args) != 2 or not args[0].isdigit() or int(args[0]) <= 0:
                raise ConfigError(f"partition_by: {text!r} needs a positive width and a column, e.g. {name}(16, id)")
            column = _NAME.match(args[1])
            if not column:
                raise ConfigError(f"partition_by: {text!r} has no valid column name")
            return cls(transform, column.group(1), int(args[0]))
        column = _NAME.match(args[0]) if len(args) == 1 else None
        if not column:
            raise ConfigError(f"partition_by: {text!r} takes exactly one column")
        return cls(transform, column.group(1))

    @classmethod
    def from_iceberg(cls, transform: str, column: str) -> PartitionTransform:
        """From Iceberg's own spelling (`hour`, `bucket[16]`, `truncate[4]`, `identity`)."""
        match = re.match(r"^(\w+)(?:\[(\d+)\])?$", transform)
        if not match or match.group(1) not in _TRANSFORM_ALIASES:
            raise ConfigError(f"partition transform {transform!r} on {column!r} is not supported by icetide")
        width = int(match.group(2)) if match.group(2) else None
        return cls(_TRANSFORM_ALIASES[match.group(1)], column, width)

    def spark_expression(self, catalog: str) -> str:
        """A Spark SQL expression computing this field with Iceberg's own transform functions."""
        col = f"`{self.column}`"
        if self.transform == "identity":
            return col
        if self.width is not None:
            return f"{catalog}.system.{self.transform}({self.width}, {col})"
        return f"{catalog}.system.{self.transform}({col})"

    def __str__(self) -> str:
        if self.transform == "identity":
            return self.column
        if self.width is not None:
            return f"{self.transform}({self.width}, {self.column})"
        return f"{self.transform}({self.column})"


@dataclass(frozen=True)
class TableSpec:
    """What create_table needs: a Spark DDL column list, the primary key and partition transforms."""

    schema: str
    key: tuple[str, ...]
    partition_by: tuple[PartitionTransform, ...] = ()
    properties: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        schema: str,
        key: list[str] | tuple[str, ...],
        partition_by: list[str] | tuple[str, ...] = (),
        properties: dict[str, str] | None = None,
    ) -> TableSpec:
        """Parse and validate; raises ConfigError naming the offending key or column."""
        if not schema or not schema.strip():
            raise ConfigError("schema: a column list is required, e.g. 'id BIGINT NOT NULL, v STRING'")
        if not key:
            raise ConfigError("key: at least one primary-key column is required")
        transforms = tuple(PartitionTransform.parse(p) for p in partition_by)
        spec = cls(schema, tuple(key), transforms, dict(properties or {}))
        spec.check_partition_columns_in_key()
        return spec

    def check_partition_columns_in_key(self) -> None:
        """Upserts delete by key in the row's own partition, so partition sources must be key columns."""
        for transform in self.partition_by:
            if transform.column not in self.key:
                raise ConfigError(
                    f"partition_by: column {transform.column!r} of {transform} is not part of the key "
                    f"{list(self.key)}; an upsert's delete must land in the row's own partition, "
                    f"so add {transform.column!r} to the key"
                )
