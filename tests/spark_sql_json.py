"""The Spark SQL JSON decoder icetide ran until the Python decoder replaced it on every path
(issue 23, item 3; decode/json_tasks.py): kept here, outside the product, as the oracle of the
differential tests that measured the Python decoder's rules against it on the same batches
(tests/test_arrow_json_values.py, test_arrow_json_nested.py, test_arrow_json_numbers.py).
Its conversions are decode/json.py's, which the Spark SQL Debezium decoder still uses; when that
goes, these tests' expected outputs are to be frozen as golden files first, as tests/golden/json/
froze the conversion cases."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from icetide.decode.json import (
    CORRUPT_FIELD,
    PARSED,
    PAYLOAD,
    POSITION,
    PRE_ERROR,
    EpochUnit,
    OpMode,
    check_arguments,
    finish,
    malformed_error,
    payload_text,
    raw_column,
    source_position,
    type_name,
)
from icetide.decode.json_evolution import UNKNOWN, UNKNOWN_PAYLOAD, addable, count_unknown, sample_types
from icetide.decode.limits import PayloadLimits
from icetide.errors import ConfigError
from icetide.sink.changelog import INSERT, OP_COLUMN, OPS, UPSERT

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructField, StructType

log = logging.getLogger(__name__)


def decode_json(
    df: DataFrame,
    value_col: str,
    table_schema: StructType,
    key: Sequence[str],
    op_mode: OpMode,
    position_cols: Sequence[str],
    *,
    epoch_unit: EpochUnit = "ms",
    extra_cols: Sequence[str] = (),
    keep: list[DataFrame] | None = None,
    limits: PayloadLimits | None = None,
    unknown_fields: dict[str, int] | None = None,
    schema_evolution: bool = False,
    new_columns: list[StructField] | None = None,
) -> tuple[DataFrame, DataFrame]:
    """Decode JSON objects in `df[value_col]` (string or binary) into `table_schema`'s columns.

    Returns (good, bad). good: exactly the table's columns, converted as the module docstring
    says, then `_op` and `extra_cols` (carried unchanged, e.g. "offset" for ordering). `_op` is
    the record's own `_op` field when present (INSERT, UPSERT or DELETE, any case), else UPSERT in
    "upsert" mode and INSERT in "append" mode. A DELETE needs only its key columns. bad: `payload`
    (the raw text), `error` (one line naming the problem and the column) and `source_position`
    (from `position_cols`, see `source_position`). Every non-null payload lands in exactly one of
    the two, in input order within a Spark partition; null payloads are skipped.

    With `unknown_fields` (a dict) and `keep`, the top-level keys of good records that are not
    columns (nor `_op`) are counted into it, field -> records, and named in one warning: they
    are not written. This runs one Spark job, which materializes `keep`'s cache.

    With `schema_evolution` (needs `unknown_fields` and `keep`), those keys become nullable
    columns instead, after the table's in `good` and appended to `new_columns`: each typed by
    `infer_ddl` of its first non-null value among the batch's good records (first by Spark
    partition, then position in it), its values then converted and checked as any column of
    that type (a value that does not fit makes its record bad, naming the column). A batch that
    adds columns is decoded twice: the first decode's cache is dropped and the source read
    again. Keys that cannot be a column (see `addable`) stay unknown.
    """
    from pyspark.sql import types as T

    if schema_evolution and (keep is None or unknown_fields is None):
        raise ConfigError("decode: schema_evolution needs keep and unknown_fields (a batch is read twice without)")
    counting = unknown_fields is not None and keep is not None

    def once(schema: StructType) -> tuple[DataFrame, DataFrame]:
        return _decode_once(
            df,
            value_col,
            schema,
            key,
            op_mode,
            position_cols,
            epoch_unit=epoch_unit,
            extra_cols=extra_cols,
            keep=keep,
            limits=limits,
            carry_unknown=counting,
            carry_payload=schema_evolution,
        )

    cached_from = len(keep) if keep is not None else 0
    good, bad = once(table_schema)
    if not counting or unknown_fields is None:
        return good, bad
    counts = count_unknown(good)
    added: list[StructField] = []
    if schema_evolution and counts:
        names = addable(counts, table_schema, extra_cols)
        if names:
            added = sample_types(good, names)
            assert keep is not None
            for frame in keep[cached_from:]:  # the first decode lacks the new columns
                frame.unpersist()
            del keep[cached_from:]
            good, bad = once(T.StructType([*table_schema.fields, *added]))
            counts = count_unknown(good)  # what stays unknown, among the records still good
            log.info(
                "the table lacks field(s) the source sends, added as nullable column(s): %s",
                ", ".join(f"{f.name} {type_name(f.dataType)}" for f in added),
            )
    if new_columns is not None:
        new_columns.extend(added)
    unknown_fields.update(counts)
    good = good.drop(UNKNOWN, UNKNOWN_PAYLOAD)
    if counts:
        log.warning(
            "the table lacks field(s) the source sends, not written%s: %s",
            " (no valid column names)" if schema_evolution else "",
            ", ".join(f"{n} ({c} records)" for n, c in sorted(counts.items())),
        )
    return good, bad


def _decode_once(
    df: DataFrame,
    value_col: str,
    table_schema: StructType,
    key: Sequence[str],
    op_mode: OpMode,
    position_cols: Sequence[str],
    *,
    epoch_unit: EpochUnit,
    extra_cols: Sequence[str],
    keep: list[DataFrame] | None,
    limits: PayloadLimits | None,
    carry_unknown: bool,
    carry_payload: bool,
) -> tuple[DataFrame, DataFrame]:
    """`decode_json` against one schema. With `carry_unknown`, good has UNKNOWN (the record's
    keys that are no column); with `carry_payload` too, UNKNOWN_PAYLOAD (the payload of a record
    with such keys, else null: cached only for those few records, to type new columns)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    check_arguments(df, table_schema, key, op_mode, position_cols, extra_cols, epoch_unit)
    payload = payload_text(df, value_col)
    fields = list(table_schema.fields)
    parse_schema = T.StructType(
        [T.StructField(f.name, T.StringType()) for f in fields]
        + [T.StructField(OP_COLUMN, T.StringType()), T.StructField(CORRUPT_FIELD, T.StringType())]
    )
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT_FIELD}
    staged = df.where(payload.isNotNull()).select(
        payload.alias(PAYLOAD),
        source_position(position_cols).alias(POSITION),
        *extra_cols,
        F.from_json(payload, parse_schema, options).alias(PARSED),
    )
    carried = list(extra_cols)
    if carry_unknown:  # the keys alone, a second but shallow read (Jackson skips the values)
        known = F.array(*[F.lit(f.name) for f in fields], F.lit(OP_COLUMN))
        keys = F.coalesce(F.array_except(F.json_object_keys(F.col(PAYLOAD)), known), F.array().cast("array<string>"))
        staged = staged.withColumn(UNKNOWN, keys)
        carried.append(UNKNOWN)
        if carry_payload:
            staged = staged.withColumn(UNKNOWN_PAYLOAD, F.when(F.size(UNKNOWN) > 0, F.col(PAYLOAD)))
            carried.append(UNKNOWN_PAYLOAD)
    parsed = F.col(PARSED)
    raw_op = parsed[OP_COLUMN]
    op = F.upper(F.trim(raw_op))
    default_op = INSERT if op_mode == "append" else UPSERT
    pre_error = F.coalesce(
        malformed_error(F.col(PAYLOAD), parsed[CORRUPT_FIELD]),
        F.when(raw_op.isNotNull() & ~op.isin(*OPS), F.concat(F.lit("unknown op '"), raw_op, F.lit("'"))),
    )
    rows = staged.select(
        PAYLOAD,
        POSITION,
        *carried,
        F.when(raw_op.isNull(), F.lit(default_op)).otherwise(op).alias(OP_COLUMN),
        pre_error.alias(PRE_ERROR),
        *[parsed[f.name].alias(raw_column(i)) for i, f in enumerate(fields)],
    )
    return finish(rows, table_schema, key, carried, epoch_unit, keep, limits=limits)
