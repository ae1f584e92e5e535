"""Dimension enrichment: join a batch's changed rows with dimension tables, at their latest snapshot.

Dimension tables are ordinary Iceberg tables, typically kept current by a CDC pipeline
(`format: debezium`). Every batch reloads each dimension's metadata and reads the snapshot that
is current at that moment, so a cached, stale version is never used. A row is enriched when it
is emitted: a dimension change reaches the rows of keys that change afterwards, and rows written
earlier keep the dimension values of their batch (see docs/stateful.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from icetide.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


ENRICH_KEYS = {"table", "join", "columns"}  # the keys of one `enrich` entry


@dataclass(frozen=True)
class Enrichment:
    """Left-join rows with `table` where row[event column] == dim[dimension column] for each `on` pair,
    adding `columns` of the dimension (optionally renamed: {dim column: row column})."""

    table: str
    on: tuple[tuple[str, str], ...]  # (row column, dimension column)
    columns: tuple[tuple[str, str], ...]  # (dimension column, output column)

    @classmethod
    def from_dict(cls, d: Any, where: str) -> Enrichment:
        """`{table: lake.dim.campaigns, join: {campaign_id: id}, columns: [name, budget]}`; `join` may be a
        list of columns named alike on both sides, `columns` a mapping of dim column -> new name."""
        if not isinstance(d, Mapping):
            raise ConfigError(f"{where}: expected a mapping with table, on, columns")
        if True in d:
            raise ConfigError(f"{where}.on: YAML reads a bare `on` as true; name the join columns with `join:`")
        extra = sorted(str(k) for k in set(d) - ENRICH_KEYS)
        if extra:
            raise ConfigError(f"{where}.{extra[0]}: unknown key (allowed: {', '.join(sorted(ENRICH_KEYS))})")
        table = str(d.get("table") or "")
        if len(table.split(".")) < 3:
            raise ConfigError(f"{where}.table: {table!r} must be <catalog>.<namespace>.<table>")
        on_raw, cols_raw = d.get("join"), d.get("columns")
        if isinstance(on_raw, str):
            on_raw = [on_raw]
        if isinstance(on_raw, Mapping):
            on = tuple((str(k), str(v)) for k, v in on_raw.items())
        elif isinstance(on_raw, list) and on_raw:
            on = tuple((str(c), str(c)) for c in on_raw)
        else:
            raise ConfigError(f"{where}.join: expected the join columns, e.g. {{campaign_id: id}}")
        if isinstance(cols_raw, Mapping):
            columns = tuple((str(k), str(v)) for k, v in cols_raw.items())
        elif isinstance(cols_raw, list) and cols_raw:
            columns = tuple((str(c), str(c)) for c in cols_raw)
        else:
            raise ConfigError(f"{where}.columns: expected the dimension columns to add")
        return cls(table, on, columns)

    @property
    def outputs(self) -> list[str]:
        """The columns this enrichment adds."""
        return [out for _, out in self.columns]

    def latest(self, spark: SparkSession) -> DataFrame:
        """The dimension at the snapshot current now (metadata reloaded, never a cached version)."""
        from icetide.table.iceberg import load_table

        jtable = load_table(spark, self.table)
        jtable.refresh()
        snapshot = jtable.currentSnapshot()
        reader = spark.read.format("iceberg")
        if snapshot is not None:
            reader = reader.option("versionAsOf", str(snapshot.snapshotId()))
        return reader.load(self.table)

    def apply(self, rows: DataFrame) -> DataFrame:
        """`rows` with the dimension's columns added (null where no dimension row matches)."""
        from pyspark.sql import functions as F

        dim = self.latest(rows.sparkSession)
        missing = [c for c, _ in self.on if c not in rows.columns]
        if missing:
            raise ConfigError(f"enrich {self.table}: join column {missing[0]} is not a column of the rows")
        prefix = "_icetide_dim_"
        picked = dim.select(
            *[F.col(f"`{d}`").alias(f"{prefix}key_{i}") for i, (_, d) in enumerate(self.on)],
            *[F.col(f"`{d}`").alias(f"{prefix}{out}") for d, out in self.columns],
        ).dropDuplicates([f"{prefix}key_{i}" for i in range(len(self.on))])
        condition = None
        for i, (r, _) in enumerate(self.on):
            term = rows[f"`{r}`"] == picked[f"{prefix}key_{i}"]
            condition = term if condition is None else condition & term
        joined = rows.drop(*[c for c in self.outputs if c in rows.columns]).join(picked, condition, "left")
        return joined.select(
            *[F.col(f"`{c}`") for c in rows.columns if c not in self.outputs],
            *[F.col(f"{prefix}{out}").alias(out) for out in self.outputs],
        )
