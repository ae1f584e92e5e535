"""What every decoder's output and arguments share: the op modes and epoch units, the dead-letter
frame (payload, error, source position), the source position's text, the dead-letter texts of a
payload that is no JSON object, and the checks of a decode's arguments."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, get_args

from icetide.errors import ConfigError
from icetide.write.collapse import OP_COLUMN

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType


OpMode = Literal["upsert", "append"]
EpochUnit = Literal["s", "ms", "us"]
BAD_DDL = "payload STRING, error STRING, source_position STRING"
BAD_COLUMNS = ("payload", "error", "source_position")
# The errors of a payload that cannot be read as a JSON object.
MALFORMED = "malformed JSON"
EMPTY_PAYLOAD = "malformed JSON: empty payload"
NOT_AN_OBJECT = "malformed JSON: not an object"


def source_position(position_cols: Sequence[str]) -> Column:
    """A record's source position as text: "topic/partition@offset" for three columns
    (Kafka), "file:line" for two (files), the value itself for one, ":"-joined otherwise."""
    from pyspark.sql import functions as F

    parts = [F.coalesce(F.col(c).cast("string"), F.lit("?")) for c in position_cols]
    if not parts:
        return F.lit(None).cast("string")
    if len(parts) == 3:
        return F.concat(parts[0], F.lit("/"), parts[1], F.lit("@"), parts[2])
    return F.concat_ws(":", *parts)


def check_value_column(df: DataFrame, value_col: str) -> None:
    """ConfigError unless `value_col` is a text or binary column of `df` (Kafka's values are binary)."""
    from pyspark.sql import types as T

    if value_col not in df.columns:
        raise ConfigError(f"decode: value column {value_col!r} is not in the input ({', '.join(df.columns)})")
    dtype = df.schema[value_col].dataType
    if not isinstance(dtype, T.BinaryType | T.StringType):
        raise ConfigError(f"decode: value column {value_col!r} is {dtype.simpleString()}, not string or binary")


def check_arguments(
    df: DataFrame,
    table_schema: StructType,
    key: Sequence[str],
    op_mode: str,
    position_cols: Sequence[str],
    extra_cols: Sequence[str],
    epoch_unit: str,
) -> None:
    """ConfigError naming the argument that cannot work with `df` and the table."""
    names = [f.name for f in table_schema.fields]
    if op_mode not in get_args(OpMode):
        raise ConfigError(f"decode: op_mode {op_mode!r} is not one of {', '.join(get_args(OpMode))}")
    if epoch_unit not in get_args(EpochUnit):
        raise ConfigError(f"decode: epoch_unit {epoch_unit!r} is not one of {', '.join(get_args(EpochUnit))}")
    if OP_COLUMN in names:
        raise ConfigError(f"decode: the table has a column named {OP_COLUMN}, which is the op column of a change")
    for k in key:
        if k not in names:
            raise ConfigError(f"decode: key column {k!r} is not a table column")
    for c in [*position_cols, *extra_cols]:
        if c not in df.columns:
            raise ConfigError(f"decode: column {c!r} is not in the input ({', '.join(df.columns)})")
    for c in extra_cols:
        if c in names or c == OP_COLUMN:
            raise ConfigError(f"decode: extra column {c!r} clashes with a table column or {OP_COLUMN}")
