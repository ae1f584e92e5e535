"""What a decoded batch of Debezium change events is, and how the batch's schemas change the table.

The Spark path's Debezium decoder (decode/debezium/tasks.py) returns `DecodedChanges`. The schema
evolution rules: a field the table lacks becomes a nullable column typed by its Connect schema (or
by a sample value without one), and a column a schema sends wider is widened; a type no column
change can hold is a SchemaEvolutionError.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, get_args

from icetide.config.pipeline import OnTruncate
from icetide.decode.debezium import connect_schema as C
from icetide.decode.frames import check_arguments
from icetide.decode.json.evolution import infer_ddl
from icetide.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import DataType, StructField, StructType

SOURCE_TS_COLUMN = "_source_ts"
SOURCE_ORDER_COLUMN = "_source_order"
TRUNCATE_DEAD_LETTER = "truncate event (on_truncate: dead_letter keeps the table as it is)"


@dataclass
class DecodedChanges:
    """One batch of Debezium events, decoded.

    `good` has the table's columns (plus `new_columns` when evolution is on), `_op`,
    `_source_ts`, `_source_order` and the extra columns; `bad` the dead letters. With
    `truncated`, a truncate was applied: `good` holds only what came after the last one, and
    the sink must remove every row committed before.
    """

    good: DataFrame
    bad: DataFrame
    order_by: str = SOURCE_ORDER_COLUMN
    truncated: bool = False
    truncates: int = 0
    unknown_fields: dict[str, int] = field(default_factory=dict)  # field -> records that carry it
    new_columns: list[StructField] = field(default_factory=list)
    schemas: list[C.EnvelopeSchema] = field(default_factory=list)
    # The source records the batch read, tombstones and bad ones included (as the sync paths count
    # them, for max_bad_fraction).
    records: int = 0


def check_options(
    df: DataFrame,
    table_schema: StructType,
    key: Sequence[str],
    op_mode: str,
    position_cols: Sequence[str],
    extra_cols: Sequence[str],
    epoch_unit: str,
    on_truncate: str,
) -> None:
    """ConfigError naming the argument of `decode_debezium` that cannot work with `df` and the table."""
    if on_truncate not in get_args(OnTruncate):
        raise ConfigError(f"on_truncate: {on_truncate!r} is not one of {', '.join(get_args(OnTruncate))}")
    check_arguments(df, table_schema, key, op_mode, position_cols, extra_cols, epoch_unit)
    names = [f.name for f in table_schema.fields]
    for reserved in (SOURCE_TS_COLUMN, SOURCE_ORDER_COLUMN):
        if reserved in names or reserved in extra_cols:
            raise ConfigError(f"decode: {reserved} is a column of every decoded Debezium change")


def fits_column(source: DataType, target: DataType) -> bool:
    """Whether a Connect field's type is written into a column of `target` as it is: the sink's rule,
    and any timestamp into either timestamp kind (a DATETIME kept as the source's wall time)."""
    from pyspark.sql import types as T

    from icetide.write.evolution import fits_column

    timestamps = (T.TimestampType, T.TimestampNTZType)
    return fits_column(source, target) or (isinstance(source, timestamps) and isinstance(target, timestamps))


def wider(name: str, source: DataType, current: DataType | None) -> DataType:
    """The type of column `name` that holds both `current` and a schema's `source` values;
    SchemaEvolutionError when none does (a value would have to be converted)."""
    from icetide.errors import SchemaEvolutionError
    from icetide.write.evolution import widened

    if current is None or fits_column(source, current):
        return current or source
    if fits_column(current, source):
        return source
    wide = widened(source, current)
    if wide is None:
        raise SchemaEvolutionError(
            f"column {name!r}: the source now sends {source.simpleString()} where the table has "
            f"{current.simpleString()}, which no schema change can hold without converting values; "
            "the batch was not committed"
        )
    return wide


def evolved_types(table_schema: StructType, schemas: Sequence[C.EnvelopeSchema | None]) -> StructType:
    """The table's columns as the batch's schemas send them: widened where a schema sends a wider
    type (the sink then widens the column), SchemaEvolutionError where one sends an incompatible type."""
    from pyspark.sql import types as T

    fields = []
    for column in table_schema.fields:
        dtype = column.dataType
        for envelope in schemas:
            f = envelope.field(column.name) if envelope is not None else None
            if f is not None:
                dtype = wider(column.name, C.spark_type(f), dtype)
        fields.append(T.StructField(column.name, dtype, column.nullable, column.metadata))  # comments kept
    return T.StructType(fields)


def new_columns(
    unknown: Mapping[str, int],
    schemas: Sequence[C.EnvelopeSchema | None],
    samples: Callable[[list[str]], Mapping[str, str | None]],
) -> list[StructField]:
    """Nullable columns for the fields the table lacks (`unknown`), in its order: typed by the
    batch's Connect schemas, else by a sample value's text (`samples` of the untyped names: one
    record's value of each, as Spark's JSON reader keeps it for a STRING field)."""
    from pyspark.sql import types as T

    typed: dict[str, Any] = {}
    for envelope in schemas:
        for f in envelope.fields if envelope is not None else ():
            if f.name in unknown:
                typed[f.name] = wider(f.name, C.spark_type(f), typed.get(f.name))
    rest = [n for n in unknown if n not in typed]
    if rest:
        sample = samples(rest)
        for n in rest:
            typed[n] = T._parse_datatype_string(infer_ddl(sample.get(n)).lower())
    return [T.StructField(n, typed[n], nullable=True) for n in unknown]
