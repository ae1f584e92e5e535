"""Decode Debezium change events (JSON) into a table's columns, in the JVM.

Accepts the envelope with or without Kafka Connect's schema wrapper ({"schema": ..., "payload":
{...}}). Ops: c (create), r (snapshot read) and u (update) carry the row in `after` and become
UPSERT (INSERT in "append" mode); d (delete) takes its key from `before` and becomes DELETE.
t (truncate), m (message) and anything else are bad records. Tombstones (a null value, or a
wrapper whose payload is null) are skipped. Column values convert as in `icetide.decode.json`;
configure the connector with decimal.handling.mode=string (or double): the default "precise"
mode sends base64 bytes that only the schema can interpret, and such values land in `bad`.
Debezium's integer timestamps are epoch milliseconds (io.debezium.time.Timestamp) unless
`epoch_unit` says otherwise (MicroTimestamp: "us").
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from icetide.decode.json import (
    BARRIER,
    CORRUPT_FIELD,
    PARSED,
    PAYLOAD,
    POSITION,
    PRE_ERROR,
    EpochUnit,
    OpMode,
    _raw,
    check_arguments,
    finish,
    malformed_error,
    payload_text,
    source_position,
)
from icetide.decode.limits import PayloadLimits
from icetide.errors import ConfigError
from icetide.sink.changelog import DELETE, INSERT, OP_COLUMN, UPSERT

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

SOURCE_TS_COLUMN = "_source_ts"
_UNSUPPORTED = {"t": "truncate", "m": "message"}


def decode_debezium(
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
) -> tuple[DataFrame, DataFrame]:
    """Decode Debezium change events in `df[value_col]` (string or binary) into the table's columns.

    Returns (good, bad) shaped as `decode_json`'s, with one more good column after `_op`:
    `_source_ts` (TIMESTAMP), the change's time at the source database (`source.ts_ms`, else the
    envelope's `ts_ms`; null when neither is there), to order several changes of one key. A DELETE
    row holds the key from `before` (other columns as far as `before` has them). Every event that
    is not a tombstone lands in exactly one of good and bad.
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    check_arguments(df, table_schema, key, op_mode, position_cols, extra_cols, epoch_unit)
    if SOURCE_TS_COLUMN in [f.name for f in table_schema.fields] or SOURCE_TS_COLUMN in extra_cols:
        raise ConfigError(f"decode: {SOURCE_TS_COLUMN} is the source timestamp column of a Debezium change")
    payload = payload_text(df, value_col)
    fields = list(table_schema.fields)
    row_type = T.StructType([T.StructField(f.name, T.StringType()) for f in fields])
    envelope = [
        T.StructField("before", row_type),
        T.StructField("after", row_type),
        T.StructField("op", T.StringType()),
        T.StructField("ts_ms", T.StringType()),
        T.StructField("source", T.StructType([T.StructField("ts_ms", T.StringType())])),
    ]
    parse_schema = T.StructType(
        [
            T.StructField("schema", T.StringType()),
            T.StructField("payload", T.StructType(envelope)),
            *envelope,
            T.StructField(CORRUPT_FIELD, T.StringType()),
        ]
    )
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT_FIELD}
    staged = df.where(payload.isNotNull()).select(
        payload.alias(PAYLOAD),
        source_position(position_cols).alias(POSITION),
        *extra_cols,
        F.from_json(payload, parse_schema, options).alias(PARSED),
        F.spark_partition_id().alias(BARRIER),
    )
    parsed = F.col(PARSED)
    wrapped = parsed["payload"].isNotNull()

    def part(name: str) -> Column:
        return F.when(wrapped, parsed["payload"][name]).otherwise(parsed[name])

    # A null value, or the converter's {"schema": ..., "payload": null}; the key check runs last, rarely.
    tombstone = (F.trim(F.col(PAYLOAD)) == "null") | (
        ~wrapped
        & parsed["op"].isNull()
        & parsed[CORRUPT_FIELD].isNull()
        & F.array_contains(F.json_object_keys(F.col(PAYLOAD)), "payload")
    )
    # One column per envelope part first, so the expressions below read them instead of re-deriving them.
    # BARRIER keeps this filter above the parse (see icetide.decode.json.finish): parse once.
    envelope_cols = staged.where(~tombstone & (F.col(BARRIER) >= 0)).select(
        PAYLOAD,
        POSITION,
        *extra_cols,
        malformed_error(F.col(PAYLOAD), parsed[CORRUPT_FIELD]).alias("_icetide_malformed"),
        part("op").alias("_icetide_raw_op"),
        F.lower(F.trim(part("op"))).alias("_icetide_dbz_op"),
        part("before").alias("_icetide_before"),
        part("after").alias("_icetide_after"),
        F.coalesce(part("source")["ts_ms"], part("ts_ms")).alias("_icetide_ts"),
    )
    raw_op, op = F.col("_icetide_raw_op"), F.col("_icetide_dbz_op")
    before, after, ts_text = F.col("_icetide_before"), F.col("_icetide_after"), F.col("_icetide_ts")
    op_error = F.when(raw_op.isNull(), F.lit("not a Debezium change event: op is missing"))
    for code, name in _UNSUPPORTED.items():
        op_error = op_error.when(op == code, F.lit(f"unsupported op '{code}' ({name})"))
    op_error = (
        op_error.when(~op.isin("c", "r", "u", "d"), F.concat(F.lit("unknown op '"), raw_op, F.lit("'")))
        .when((op == "d") & before.isNull(), F.lit("before is missing for op 'd' (a delete needs the key)"))
        .when((op != "d") & after.isNull(), F.concat(F.lit("after is missing for op '"), raw_op, F.lit("'")))
    )
    row = F.when(op == "d", before).otherwise(after)
    upsert = INSERT if op_mode == "append" else UPSERT
    rows = envelope_cols.select(
        PAYLOAD,
        POSITION,
        *extra_cols,
        F.when(op == "d", F.lit(DELETE)).otherwise(F.lit(upsert)).alias(OP_COLUMN),
        F.coalesce(F.col("_icetide_malformed"), op_error).alias(PRE_ERROR),
        F.when(ts_text.rlike("^-?[0-9]{1,15}$"), F.expr("timestamp_millis(CAST(_icetide_ts AS BIGINT))")).alias(
            SOURCE_TS_COLUMN
        ),
        *[row[f.name].alias(_raw(i)) for i, f in enumerate(fields)],
    )
    return finish(rows, table_schema, key, [SOURCE_TS_COLUMN, *extra_cols], epoch_unit, keep, limits=limits)
