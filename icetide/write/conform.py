"""A batch conformed to its table: its columns checked against the table's (the schema evolved
where the sink allows it), cast to the table's types, missing nullable columns added as nulls,
and the op and arrival columns added (write/collapse.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from icetide.errors import SchemaError
from icetide.table.iceberg import spark_schema, spark_schema_of
from icetide.write.collapse import ARRIVAL_COLUMN, OP_COLUMN, UPSERT
from icetide.write.evolution import SchemaChange, evolved_schema, fits_column, plan_change

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def conform_batch(
    spark: SparkSession,
    jtable: Any,
    df: DataFrame,
    batch_id: int,
    *,
    table_name: str,
    order_by: str | None,
    schema_evolution: bool,
) -> tuple[DataFrame, Any, SchemaChange]:
    """`df` in the table's columns plus op and arrival (and `order_by` when it is no table column);
    the Iceberg schema its files are written in; and the schema change the commit must apply
    (empty without one). Raises SchemaError naming the column a batch does not fit."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import NullType

    table_struct = spark_schema(spark, jtable)
    table_fields = {f.name: f for f in table_struct.fields}
    batch_types = {f.name: f.dataType for f in df.schema.fields}
    extra_order = order_by if order_by and order_by not in table_fields else None
    if extra_order and extra_order not in batch_types:
        raise SchemaError(
            f"batch {batch_id}: order_by column {extra_order!r} is neither in the batch nor in {table_name}"
        )
    jschema = jtable.schema()
    change = SchemaChange()
    if schema_evolution:
        change, _ = plan_change(
            table_struct,
            df.schema,
            ignore={OP_COLUMN, *([extra_order] if extra_order else [])},
            fits=fits_column,
            table_name=table_name,
        )
        if change:
            jschema, change = evolved_schema(spark, jtable, change)
            table_fields = {f.name: f for f in spark_schema_of(spark, jschema).fields}
    for name, dtype in batch_types.items():
        if schema_evolution and isinstance(dtype, NullType):
            continue  # an untyped, all-null column adds nothing (evolution.plan_change logs it)
        if name not in (OP_COLUMN, extra_order) and name not in table_fields:
            raise SchemaError(f"batch {batch_id}: column {name!r} is not in table {table_name}")
    columns = []
    for name, field in table_fields.items():
        if name not in batch_types:
            if not field.nullable:
                raise SchemaError(f"batch {batch_id}: NOT NULL column {name!r} of {table_name} is missing")
            columns.append(F.lit(None).cast(field.dataType).alias(name))
        elif not fits_column(batch_types[name], field.dataType):
            raise SchemaError(
                f"batch {batch_id}: column {name!r} is {batch_types[name].simpleString()}, "
                f"table {table_name} has {field.dataType.simpleString()}"
            )
        elif batch_types[name] != field.dataType:
            columns.append(F.col(f"`{name}`").cast(field.dataType).alias(name))
        else:
            columns.append(F.col(f"`{name}`"))
    op = F.col(OP_COLUMN).cast("string") if OP_COLUMN in batch_types else F.lit(UPSERT)
    # Arrival order is fixed before any shuffle: partition index, then position in it.
    if extra_order:  # orders changes of one key (e.g. a CDC source timestamp), never written
        columns.append(F.col(f"`{extra_order}`"))
    prepared = df.select(*columns, op.alias(OP_COLUMN), F.monotonically_increasing_id().alias(ARRIVAL_COLUMN))
    return prepared, jschema, change
