"""Schema evolution while streaming: which batch columns change the table, and how.

Rules (UpsertSink(schema_evolution=True), pipeline key `schema_evolution: true`):
- a batch column the table lacks adds a nullable column of the batch's type (nested types too);
- a wider batch type widens the column the ways Iceberg allows: int to bigint, float to double,
  decimal(p,s) to decimal(p',s) with p' > p;
- a narrower batch type (int into bigint, say) keeps the table's column and writes the value;
- anything else (bigint to string, a scale change, a new field inside a struct) raises
  SchemaEvolutionError naming the column and both types: no value is ever silently converted.

The change is planned on the driver before the batch is written, so writers write the new
columns under the field ids the change will assign; the committer applies the same change in
the batch's own transaction and checks that it still assigns those ids.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from icetide.errors import SchemaEvolutionError
from icetide.table.iceberg import java_message, jvm

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import DataType, StructType

log = logging.getLogger(__name__)

MAX_DECIMAL_PRECISION = 38


@dataclass(frozen=True)
class SchemaChange:
    """Columns a batch adds or widens, as Spark type JSON, and the ids and Iceberg types it must yield."""

    adds: tuple[tuple[str, str], ...] = ()  # (column, Spark type JSON)
    widenings: tuple[tuple[str, str], ...] = ()  # (column, Spark type JSON of the wider type)
    expected: tuple[tuple[str, int, str], ...] = ()  # (column, field id, Iceberg type) after the change

    def __bool__(self) -> bool:
        return bool(self.adds or self.widenings)

    def describe(self) -> str:
        """One line for the log: what the change does."""
        parts = [f"add {n}" for n, _ in self.adds] + [f"widen {n}" for n, _ in self.widenings]
        return ", ".join(parts)


def widened(source: DataType, target: DataType) -> DataType | None:
    """The wider type a column of `target` becomes to hold `source` values, or None if Iceberg allows none.

    Called only when `source` does not already fit `target`.
    """
    from pyspark.sql import types as T

    if isinstance(target, T.IntegerType) and isinstance(source, T.LongType):
        return T.LongType()
    if isinstance(target, T.FloatType) and isinstance(source, T.DoubleType):
        return T.DoubleType()
    if isinstance(target, T.DecimalType) and isinstance(source, T.DecimalType) and source.scale <= target.scale:
        # Iceberg widens a decimal's precision, never its scale: keep the scale, add integer digits.
        precision = target.scale + max(target.precision - target.scale, source.precision - source.scale)
        if precision <= MAX_DECIMAL_PRECISION:
            return T.DecimalType(precision, target.scale)
    return None


def plan_change(
    table: StructType, batch: StructType, *, ignore: set[str], fits: Any, table_name: str
) -> tuple[SchemaChange, StructType]:
    """The change a batch needs and the table's Spark schema after it.

    `fits(source, target)` says whether a batch type is written into a table type as is (the
    sink's compatibility rule). Raises SchemaEvolutionError for a type no change can hold.
    """
    from pyspark.sql import types as T

    fields = {f.name: f for f in table.fields}
    adds: list[tuple[str, str]] = []
    widenings: list[tuple[str, str]] = []
    evolved = list(table.fields)
    for f in batch.fields:
        if f.name in ignore:
            continue
        current = fields.get(f.name)
        if current is None:
            if isinstance(f.dataType, T.NullType):
                log.info("column %r of a batch has no type (all values null): not added to %s", f.name, table_name)
                continue
            adds.append((f.name, f.dataType.json()))
            evolved.append(T.StructField(f.name, f.dataType, nullable=True))
            continue
        if fits(f.dataType, current.dataType):
            continue
        wider = widened(f.dataType, current.dataType)
        if wider is None:
            raise SchemaEvolutionError(
                f"column {f.name!r}: the batch has {f.dataType.simpleString()}, table {table_name} has "
                f"{current.dataType.simpleString()}, and Iceberg cannot change one into the other without "
                "converting values; the batch was not committed"
            )
        widenings.append((f.name, wider.json()))
        evolved = [T.StructField(x.name, wider, x.nullable) if x.name == f.name else x for x in evolved]
    return SchemaChange(tuple(adds), tuple(widenings)), T.StructType(evolved)


def _iceberg_type(spark: SparkSession, type_json: str) -> Any:
    j = jvm(spark)
    spark_type = j.org.apache.spark.sql.types.DataType.fromJson(type_json)
    return j.org.apache.iceberg.spark.SparkSchemaUtil.convert(spark_type)


def stage_change(spark: SparkSession, update: Any, base_schema: Any, change: SchemaChange) -> int:
    """Put `change` on an UpdateSchema, skipping what `base_schema` already has; how many steps it staged."""
    staged = 0
    for name, type_json in change.adds:
        if base_schema.findField(name) is None:
            update.addColumn(name, _iceberg_type(spark, type_json))
            staged += 1
    for name, type_json in change.widenings:
        target = _iceberg_type(spark, type_json)
        existing = base_schema.findField(name)
        if existing is not None and not existing.type().equals(target):
            update.updateColumn(name, target.asPrimitiveType())
            staged += 1
    return staged


def evolved_schema(spark: SparkSession, jtable: Any, change: SchemaChange) -> tuple[Any, SchemaChange]:
    """The table's schema after `change` (not committed), and the change with the ids it assigns."""
    update = jtable.updateSchema()
    try:
        stage_change(spark, update, jtable.schema(), change)
        schema = update.apply()
    except Exception as exc:  # Iceberg refused the change (e.g. a rule of its own on a partition source)
        log.debug("schema change %s refused", change.describe(), exc_info=True)
        raise SchemaEvolutionError(
            f"cannot {change.describe()} in table {jtable.name()}: {java_message(exc)}; the batch was not committed"
        ) from exc
    names = [n for n, _ in change.adds] + [n for n, _ in change.widenings]
    expected = tuple((n, int(schema.findField(n).fieldId()), str(schema.findField(n).type().toString())) for n in names)
    return schema, SchemaChange(change.adds, change.widenings, expected)


def apply_in_transaction(spark: SparkSession, txn: Any, change: SchemaChange, *, batch_id: int) -> None:
    """Stage `change` in the batch's transaction, checking it yields the field ids the files were written with.

    Raises SchemaEvolutionError when another writer changed the schema so that a column now has
    another id or type: the batch's files do not fit the table any more and must be written again.
    """
    base = txn.table().schema()
    update = txn.updateSchema()
    staged = stage_change(spark, update, base, change)
    schema = update.apply()
    for name, field_id, type_text in change.expected:
        field = schema.findField(name)
        if field is None or int(field.fieldId()) != field_id or str(field.type().toString()) != type_text:
            found = "missing" if field is None else f"id {field.fieldId()} type {field.type().toString()}"
            raise SchemaEvolutionError(
                f"batch {batch_id}: the table's schema changed while the batch was written: column {name!r} "
                f"was written as id {field_id} type {type_text}, the table now gives {found}; "
                "the batch was not committed, write it again"
            )
    if staged:
        update.commit()


def fits_column(source: DataType, target: DataType) -> bool:
    """May a batch column of type `source` be written to a table column of type `target`?"""
    from pyspark.sql import types as T

    if source == target or isinstance(source, T.NullType):
        return True
    integral = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
    if isinstance(source, integral) and isinstance(target, integral):
        return integral.index(type(source)) <= integral.index(type(target))
    if isinstance(source, T.FloatType) and isinstance(target, T.DoubleType):
        return True
    if isinstance(source, (*integral, T.DecimalType)) and isinstance(target, T.DoubleType):
        return True
    if isinstance(source, integral) and isinstance(target, T.DecimalType):
        return True
    if isinstance(source, T.DecimalType) and isinstance(target, T.DecimalType):
        return source.scale <= target.scale and source.precision - source.scale <= target.precision - target.scale
    if isinstance(source, T.TimestampNTZType | T.DateType) and isinstance(target, T.TimestampType):
        return True
    if isinstance(source, T.StructType) and isinstance(target, T.StructType):
        return [f.name for f in source.fields] == [f.name for f in target.fields] and all(
            fits_column(s.dataType, t.dataType) for s, t in zip(source.fields, target.fields, strict=True)
        )
    if isinstance(source, T.ArrayType) and isinstance(target, T.ArrayType):
        return fits_column(source.elementType, target.elementType)
    if isinstance(source, T.MapType) and isinstance(target, T.MapType):
        return fits_column(source.keyType, target.keyType) and fits_column(source.valueType, target.valueType)
    return False
