"""Decode Debezium change events (JSON converter) into a table's columns, in the JVM.

Kept only for the batches the Python decoder does not read exactly yet: icetide.decode.decode_debezium
is decode/debezium_tasks.py, which calls this decoder from one place (`decode_by_spark_sql`) when a
record of the batch raises NotHere. It goes when tests/test_decoder_golden_conversions.py
NOT_YET_DEBEZIUM is empty.

Accepts the envelope with Kafka Connect's schema (`schemas.enable=true`: {"schema": ...,
"payload": {...}}) or without it. With a schema, each field is read by its Connect type and
logical name (icetide.decode.connect): precise decimals (base64 two's-complement bytes with the
schema's scale), epoch days, milli/micro/nano timestamps, times of day and so on. Each distinct
schema text is parsed once per batch, on the driver, and turned into one SQL conversion per
column; no Python runs per row. Without a schema, `DebeziumSettings` (the connector's
`decimal.handling.mode` and `time.precision.mode`) say how to read values.

Ops: c (create), r (snapshot read) and u (update) carry the row in `after` and become UPSERT
(INSERT in "append" mode); d (delete) takes its key from `before` and becomes DELETE. An update
whose `before` key differs from its `after` key becomes a DELETE of the old key and an UPSERT of
the new row. t (truncate) is applied (`on_truncate: apply`: everything committed before it goes,
the batch keeps what follows it) or sent to the dead-letter table. m (message) and unknown ops
are bad records. Tombstones (a null value, or a wrapper whose payload is null) are skipped.

Changes of one key are ordered by the source's own position (MySQL binlog file, pos and row;
PostgreSQL LSN), then by the Kafka offset (or the file line): `source.ts_ms` alone is not an
order (one-second resolution on MySQL).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Mapping, Sequence
from functools import reduce
from typing import TYPE_CHECKING, Any

from icetide.config import DebeziumSettings, OnTruncate
from icetide.decode import connect as C
from icetide.decode.debezium_changes import (
    SOURCE_ORDER_COLUMN,
    SOURCE_TS_COLUMN,
    TRUNCATE_DEAD_LETTER,
    DecodedChanges,
    check_options,
    evolved_types,
)
from icetide.decode.debezium_changes import new_columns as added_columns
from icetide.decode.json import (
    BARRIER,
    CORRUPT_FIELD,
    PARSED,
    PAYLOAD,
    POSITION,
    PRE_ERROR,
    EpochUnit,
    OpMode,
    convert,
    convert_sql,
    finish,
    malformed_error,
    payload_text,
    quote_name,
    raw_column,
    source_position,
)
from icetide.decode.limits import PayloadLimits
from icetide.sink.changelog import DELETE, INSERT, OP_COLUMN, UPSERT

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType, StructField, StructType

log = logging.getLogger(__name__)

# Schemaless adaptive timestamps: an epoch integer this large is microseconds (as milliseconds it
# would be after the year 5000; as microseconds it is after 1973).
_MICROS_FROM = 100_000_000_000_000

_SCHEMA_ID = "_icetide_schema_id"
_SCHEMA_TEXT = "_icetide_schema"
_OP = "_icetide_dbz_op"
_RAW_OP = "_icetide_raw_op"
_BEFORE = "_icetide_before"
_AFTER = "_icetide_after"
_UNKNOWN = "_icetide_unknown"
_SPLIT_ID = "_icetide_split_id"  # the head id of a value whose head the source split off, else null
_SPLIT_HEAD = "_icetide_split_head"
_READ_ERROR = "_icetide_read_error"  # why the source could not read the record (`error_col`), else null
# The JSON converter writes {"schema":{...},"payload":{...}}: the text before "payload" names the schema.
_HEAD_START, _PAYLOAD_KEY = '{"schema"', '"payload":'
_HEAD = re.compile(r'\{"schema"\s*:\s*')
# Schemas by id, across batches (see _schemas_by_id), with the heads that name them, newest last.
_KNOWN_SCHEMAS: dict[int, C.EnvelopeSchema | None] = {}
_KNOWN_HEADS: dict[int, str] = {}
_KNOWN_SCHEMAS_MAX = 1000
_KNOWN_LOCK = threading.Lock()  # a pipeline of many tables decodes them in threads
_HEADS_MATCHED = 16  # known heads a batch tests each message against before hashing its head


# -- conversions by Connect schema -------------------------------------------------------------


def _decimal_text(r: str, scale: str) -> str:
    """SQL: the decimal text of base64 big-endian two's-complement bytes `r` with `scale` digits."""
    h = f"hex(try_to_binary({r}, 'base64'))"
    padded = f"(CASE WHEN length({h}) > 32 THEN NULL ELSE lpad({h}, 32, CASE WHEN substr({h}, 1, 1) >= '8' THEN 'F' ELSE '0' END) END)"  # noqa: E501
    unscaled = (
        f"CAST(try_add(try_multiply(CAST(conv(substr({padded}, 1, 16), 16, -10) AS DECIMAL(38,0)), "
        f"18446744073709551616BD), CAST(conv(substr({padded}, 17, 16), 16, 10) AS DECIMAL(38,0))) AS STRING)"
    )
    magnitude = f"regexp_replace({unscaled}, '^-', '')"
    digits = f"lpad({magnitude}, greatest(length({magnitude}), {scale} + 1), '0')"  # lpad alone would cut
    return (
        f"(CASE WHEN {unscaled} IS NULL THEN NULL ELSE concat("
        f"CASE WHEN {unscaled} LIKE '-%' THEN '-' ELSE '' END, "
        f"substr({digits}, 1, length({digits}) - {scale}), "
        f"CASE WHEN {scale} > 0 THEN concat('.', substr({digits}, length({digits}) - {scale} + 1)) ELSE '' END) END)"
    )


def _exact_number(name: str, scale: int) -> str:
    """SQL: field `name` of the row read again as DECIMAL(38, scale) straight from the payload.

    Spark's JSON reader renders a number it reads as a string through a double (17 digits), so a
    decimal sent as a JSON number (decimal.format=NUMERIC) is read once more, typed, when a row
    has one: exact to 38 digits."""
    field = f"STRUCT<`{name.replace('`', '``')}`: DECIMAL(38,{scale})>"
    parsed = f"from_json({PAYLOAD}, 'payload STRUCT<after: {field}, before: {field}>, after {field}, before {field}')"
    part = f"CASE WHEN {OP_COLUMN} = '{DELETE}' THEN 'before' ELSE 'after' END"
    value = (
        f"CASE WHEN {part} = 'before' THEN coalesce({parsed}.payload.before.`{name}`, {parsed}.before.`{name}`) "
        f"ELSE coalesce({parsed}.payload.after.`{name}`, {parsed}.after.`{name}`) END"
    )
    return f"CAST({value} AS STRING)"


def _number_or_base64(r: str, scale: str, exact: str | None = None) -> str:
    """SQL: the decimal text of `r`, a JSON number (decimal.format=NUMERIC, string or double
    handling) or base64 bytes (precise). Digits alone whose length is a multiple of 4 read as base64.
    `exact`: SQL for the number read exactly (see `_exact_number`), used instead of `r`."""
    number = (
        f"({r} RLIKE '^-?[0-9]+(\\\\.[0-9]+)?([eE][-+]?[0-9]+)?$' AND ({r} RLIKE '[.eE-]' OR length({r}) % 4 != 0))"
    )
    return f"(CASE WHEN {number} THEN {exact or r} ELSE {_decimal_text(r, scale)} END)"


def _to_type(text: str, dtype: DataType) -> Column:
    """Decimal text to `dtype`; a DECIMAL column takes it only without rounding or overflow."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if isinstance(dtype, T.DecimalType):
        exact = f"^-?[0-9]*(\\\\.[0-9]{{0,{dtype.scale}}}0*)?$"
        cast = f"try_cast({text} AS {dtype.simpleString()})"
        return F.expr(f"CASE WHEN {text} RLIKE '[eE]' OR {text} RLIKE '{exact}' THEN {cast} END")
    return convert_sql(text, dtype, "ms")


def _epoch_micros(micros: str, dtype: DataType) -> Column:
    return convert_sql(f"CAST({micros} AS STRING)", dtype, "us")


def _time_of_day(r: str, per_unit_micros: int, dtype: DataType) -> Column:
    """A Time/MicroTime/NanoTime integer to `dtype`: STRING 'HH:MM:SS.ffffff' (hours may pass 24
    and carry a sign: MySQL TIME is a duration), or integral microseconds of the day."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    valid = f"{r} RLIKE '^-?[0-9]{{1,19}}$'"
    micros = (
        f"div(try_cast({r} AS BIGINT), 1000)"
        if per_unit_micros == 0
        else f"try_cast({r} AS BIGINT) * {per_unit_micros}"
    )
    if isinstance(dtype, T.StringType):
        a = f"abs({micros})"
        text = (
            f"concat(CASE WHEN {micros} < 0 THEN '-' ELSE '' END, format_string('%02d:%02d:%02d.%06d', "
            f"div({a}, 3600000000), pmod(div({a}, 60000000), 60), pmod(div({a}, 1000000), 60), pmod({a}, 1000000)))"
        )
        return F.expr(f"CASE WHEN {valid} THEN {text} END")
    if isinstance(dtype, T.IntegralType):
        return F.expr(f"CASE WHEN {valid} THEN try_cast({micros} AS {dtype.simpleString()}) END")
    return convert_sql(r, dtype, "ms")


def field_conversion(raw: str, f: C.ConnectField | None, dtype: DataType, settings: DebeziumSettings) -> Column:
    """The typed value of raw column `raw` for a table column of `dtype`, read as Connect field
    `f` says (None: the message has no schema, `settings` say how to read it)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    r = quote_name(raw)
    is_time = isinstance(dtype, T.TimestampType | T.TimestampNTZType)
    if f is None:
        if isinstance(dtype, T.DecimalType) and settings.decimal_handling_mode == "precise":
            return _to_type(_number_or_base64(r, str(dtype.scale)), dtype)
        if is_time and settings.time_precision_mode != "connect":
            micros = f"{r} RLIKE '^-?[0-9]{{15,18}}$' AND abs(CAST({r} AS BIGINT)) >= {_MICROS_FROM}"
            return F.when(F.expr(micros), convert(raw, dtype, "us")).otherwise(convert(raw, dtype, "ms"))
        return convert(raw, dtype, "ms")
    logical = f.logical
    if logical == C.DECIMAL:
        scale = f.scale or 0
        exact = _exact_number(f.name, scale) if 0 <= scale <= 38 else None
        return _to_type(_number_or_base64(r, str(scale), exact), dtype)
    if logical == C.VARIABLE_SCALE_DECIMAL:
        var_scale = f"from_json({r}, 'scale INT, value STRING').scale"
        value = f"from_json({r}, 'scale INT, value STRING').value"
        return _to_type(f"(CASE WHEN {var_scale} BETWEEN 0 AND 38 THEN {_decimal_text(value, var_scale)} END)", dtype)
    if logical in C.TIMESTAMP_UNITS and is_time:
        unit = C.TIMESTAMP_UNITS[logical]
        if unit == "ns":
            return F.when(
                F.expr(f"{r} RLIKE '^-?[0-9]{{1,19}}$'"), _epoch_micros(f"div(try_cast({r} AS BIGINT), 1000)", dtype)
            )
        return convert(raw, dtype, unit)
    if logical in C.TIME_MICROS:
        return _time_of_day(r, C.TIME_MICROS[logical], dtype)
    return convert(raw, dtype, "ms")


def _spec(f: C.ConnectField | None) -> tuple[Any, ...]:
    """What a field's conversion depends on: equal specs share one SQL expression."""
    return (None,) if f is None else (f.type, f.logical, f.parameters.get("scale"))


def _column_conversion(
    i: int,
    column: StructField,
    schemas: Mapping[int, C.EnvelopeSchema | None],
    schemaless: bool,
    settings: DebeziumSettings,
) -> Column:
    """One column's conversion across the batch's distinct schemas (one branch per distinct field
    spec). A schema that describes no row (None) is read as if the message had none."""
    from pyspark.sql import functions as F

    by_spec: dict[tuple[Any, ...], tuple[C.ConnectField | None, list[int]]] = {}
    for sid, envelope in schemas.items():
        f = envelope.field(column.name) if envelope is not None else None
        by_spec.setdefault(_spec(f), (f, []))[1].append(sid)
    if schemaless:
        by_spec.setdefault(_spec(None), (None, []))
    branches = [(ids, field_conversion(raw_column(i), f, column.dataType, settings)) for f, ids in by_spec.values()]
    if len(branches) == 1:
        return branches[0][1]
    if not branches:  # no row in the batch (all of it held already): the column is never read
        return F.lit(None).cast(column.dataType)
    chain = None
    for ids, expr in branches:
        test = F.col(_SCHEMA_ID).isin(*ids) if ids else F.col(_SCHEMA_ID).isNull()
        chain = F.when(test, expr) if chain is None else chain.when(test, expr)
    assert chain is not None
    return chain


# -- the decode plan ----------------------------------------------------------------------------


def schema_identity(text: Column, wrapped: Column, split_id: Column | None = None) -> list[Column]:
    """The columns that identify a message's schema without parsing it: _SCHEMA_ID, the hash of
    the text before `"payload":` when the message starts `{"schema"` as the JSON converter writes
    it, and _SCHEMA_TEXT, the schema's own text, only for other layouts (payload first, say),
    read by a second parse of those rows alone. `split_id`: the id of the head the source split
    off (null where it did not), which is then the schema's id."""
    from pyspark.sql import functions as F

    cut_at = F.instr(text, _PAYLOAD_KEY)
    compact = text.startswith(_HEAD_START) & (cut_at > 0)
    if split_id is not None:
        wrapped = wrapped & split_id.isNull()
    other = F.get_json_object(text, "$.schema")
    # Finding "payload" costs more than parsing the rest: a head seen in an earlier batch is
    # recognised by comparing the message's start with it.
    with _KNOWN_LOCK:
        known = list(_KNOWN_HEADS.items())[-_HEADS_MATCHED:]
    head_id = F.when(F.lit(False), F.lit(None).cast("bigint"))
    for sid, head in known:
        head_id = head_id.when(text.startswith(head + _PAYLOAD_KEY), F.lit(sid))
    head_id = head_id.when(compact, F.xxhash64(text.substr(F.lit(1), cut_at - 1)))
    schema_id = F.when(wrapped, F.coalesce(head_id, F.when(other.isNotNull(), F.xxhash64(other))))
    if split_id is not None:
        schema_id = F.when(split_id.isNotNull(), split_id).otherwise(schema_id)
    return [F.when(wrapped & ~compact, other).alias(_SCHEMA_TEXT), schema_id.alias(_SCHEMA_ID)]


def _schema_of(text: str | None) -> C.EnvelopeSchema | None:
    """A message's schema from the text `schema_identity` hashed: a compact message's head
    (`{"schema":<schema>`) or a schema's own text. None for a null schema or one that describes
    no row (its messages are then read as schemaless)."""
    import json

    try:
        head = _HEAD.match(text or "")
        if head is not None and text is not None:  # a head: {"schema": <schema>,
            value, end = json.JSONDecoder().raw_decode(text, head.end())
            if text[end:].strip() != ",":
                raise ValueError("the message's schema is not followed by its payload")
        else:
            value = None if text is None else json.loads(text)
        return None if value is None else C.parse_envelope_schema(json.dumps(value))
    except (ValueError, TypeError) as exc:
        log.warning("a message schema describes no row (%s); its messages are read as schemaless", exc)
        return None


def _schema_texts(env: DataFrame, ids: Sequence[int]) -> list[Any]:
    """Rows (_SCHEMA_ID, text) of `ids`: the text schema_identity hashed, from one message each."""
    from pyspark.sql import functions as F

    text = F.col(PAYLOAD)
    head = F.coalesce(F.col(_SCHEMA_TEXT), text.substr(F.lit(1), F.instr(text, _PAYLOAD_KEY) - 1))
    if _SPLIT_ID in env.columns:  # a split value's head is on its first row of each Arrow batch
        head = F.when(F.col(_SPLIT_ID).isNotNull(), F.col(_SPLIT_HEAD)).otherwise(head)
    return (
        env.where(F.col(_SCHEMA_ID).isin(*ids))
        .groupBy(_SCHEMA_ID)
        .agg(F.first(head, ignorenulls=True).alias("text"))
        .collect()
    )


def _schemas_by_id(env: DataFrame, ids: set[int]) -> dict[int, C.EnvelopeSchema | None]:
    """The schemas of `ids`: remembered from earlier batches, else read from one message each
    (one small Spark job when a batch brings new schemas) and parsed once."""
    with _KNOWN_LOCK:
        new = sorted(ids - _KNOWN_SCHEMAS.keys())
    if new:
        found = _schema_texts(env, new)
        parsed = {r[_SCHEMA_ID]: (_schema_of(r["text"]), r["text"]) for r in found}
        with _KNOWN_LOCK:
            if len(_KNOWN_SCHEMAS) + len(parsed) > _KNOWN_SCHEMAS_MAX:
                _KNOWN_SCHEMAS.clear()
                _KNOWN_HEADS.clear()
            for sid, (schema, text) in parsed.items():
                _KNOWN_SCHEMAS[sid] = schema
                if text is not None and _HEAD.match(text):
                    _KNOWN_HEADS[sid] = text
        return {sid: parsed[sid][0] if sid in parsed else _KNOWN_SCHEMAS.get(sid) for sid in ids}
    with _KNOWN_LOCK:
        return {sid: _KNOWN_SCHEMAS.get(sid) for sid in ids}


def _heads_by_id(env: DataFrame, ids: set[int]) -> dict[int, str]:
    """The heads the source split off, by id: remembered (see _schemas_by_id), else read again."""
    with _KNOWN_LOCK:
        heads = {sid: _KNOWN_HEADS[sid] for sid in ids if sid in _KNOWN_HEADS}
    missing = sorted(ids - heads.keys())
    if missing:
        heads.update({r[_SCHEMA_ID]: r["text"] for r in _schema_texts(env, missing)})
    return heads


def _split_checks(
    rest: Column, split_id: Column, heads: Mapping[int, str], limits: PayloadLimits
) -> tuple[Column, Column]:
    """(the whole record, its payload limits' error) of records whose head the source split off
    (`split_id` not null, `rest` the value without it) and of the others (`rest` is then the value).

    The limits are checked as on the whole record without building it: its size is the rest's
    plus the head's, it nests as deep as the deeper of the two, and a split head is valid UTF-8
    and holds no escape (icetide.sources.head_split). The whole record is built for dead letters."""
    from pyspark.sql import functions as F

    from icetide.decode.json import limit_error
    from icetide.decode.limits import nesting_depth

    def by_head(values: Mapping[int, Any]) -> Column:
        distinct = set(values.values())
        if len(distinct) == 1:
            return F.lit(next(iter(distinct)))
        chain = F.when(F.lit(False), F.lit(None))
        for sid, value in values.items():
            chain = chain.when(split_id == sid, F.lit(value))
        return chain

    if not heads:
        return rest, limit_error(rest, limits)
    head_bytes = by_head({sid: len(h.encode()) - 1 for sid, h in heads.items()})  # the rest's "{" is not the record's
    deep = [sid for sid, h in heads.items() if nesting_depth(h) > limits.max_nesting_depth]
    size = F.octet_length(rest) + F.when(split_id.isNotNull(), head_bytes).otherwise(F.lit(0))
    error = limit_error(rest, limits, size=size, too_deep=split_id.isin(*deep) if deep else None)
    whole = F.when(split_id.isNull(), rest).otherwise(F.concat(by_head(heads), rest.substr(F.lit(2), F.lit(2**31 - 1))))
    return whole, error


def _order(position_cols: Sequence[str], source: Column, ts_ms: Column) -> Column:
    """A text that sorts one key's changes: the source's own position (MySQL binlog file, pos,
    row; PostgreSQL LSN), else the source time; then the Kafka offset or file line."""
    from pyspark.sql import functions as F

    mysql = F.when(
        source["file"].isNotNull() & source["pos"].isNotNull(),
        F.concat(
            F.lit("m"),
            source["file"],
            F.lit("/"),
            F.lpad(source["pos"], 20, "0"),
            F.lit("/"),
            F.lpad(F.coalesce(source["row"], F.lit("0")), 10, "0"),
        ),
    )
    postgres = F.when(source["lsn"].isNotNull(), F.concat(F.lit("p"), F.lpad(source["lsn"], 20, "0")))
    # Without a source position, the source time orders across seconds and arrival within one.
    clock = F.when(ts_ms.rlike("^[0-9]{1,15}$"), F.concat(F.lit("t"), F.lpad(ts_ms, 15, "0")))
    arrival = F.lpad(F.col(position_cols[-1]).cast("string"), 20, "0") if position_cols else F.lit("")
    return F.concat(F.coalesce(mysql, postgres, clock, F.lit("")), F.lit("|"), arrival)


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
    settings: DebeziumSettings | None = None,
    on_truncate: OnTruncate = "apply",
    schema_evolution: bool = False,
    limits: PayloadLimits | None = None,
    split: tuple[str, str] | None = None,
    error_col: str | None = None,
) -> DecodedChanges:
    """Decode Debezium change events in `df[value_col]` (string or binary) into the table's columns.

    `good` is shaped as `decode_json`'s, with `_source_ts` (the change's time at the source) and
    `_source_order` (the order of one key's changes, see the module docstring) after `_op`. A
    DELETE row holds the key from `before`. Every event that is not a tombstone lands in exactly
    one of good and bad, except a truncate that is applied and the events before it in the batch,
    which the truncate removes. Runs one Spark job to read the batch's distinct schemas (and
    materialize `keep`'s cache). `epoch_unit` is kept for callers; schemas decide units.

    `split`: the columns (head id, head text) of a source that split the JSON converter's schema
    off its values (icetide.sources.head_split with JsonHeadSplit("schema", "payload")); the
    schema is then known by its id, and dead letters still hold the whole record.

    `error_col`: a column saying why the source could not read a record (e.g. an Avro value,
    icetide.decode.avro); such a record is bad with that reason, whatever its value.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    settings = settings or DebeziumSettings()
    check_options(df, table_schema, key, op_mode, position_cols, extra_cols, epoch_unit, on_truncate)
    names = [f.name for f in table_schema.fields]
    payload = payload_text(df, value_col)
    row_type = T.MapType(T.StringType(), T.StringType())
    source_type = T.StructType([T.StructField(n, T.StringType()) for n in ("ts_ms", "file", "pos", "row", "lsn")])
    envelope = [
        T.StructField("before", row_type),
        T.StructField("after", row_type),
        T.StructField("op", T.StringType()),
        T.StructField("ts_ms", T.StringType()),
        T.StructField("source", source_type),
    ]
    parse_schema = T.StructType(
        [
            T.StructField("payload", T.StructType(envelope)),
            *envelope,
            T.StructField(CORRUPT_FIELD, T.StringType()),
        ]
    )
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT_FIELD}
    order_inputs = [c for c in position_cols[-1:] if c not in extra_cols]
    staged = df.where(payload.isNotNull()).select(
        payload.alias(PAYLOAD),
        source_position(position_cols).alias(POSITION),
        *extra_cols,
        *order_inputs,
        F.from_json(payload, parse_schema, options).alias(PARSED),
        *([F.col(split[0]).alias(_SPLIT_ID), F.col(split[1]).alias(_SPLIT_HEAD)] if split else []),
        (F.col(error_col) if error_col else F.lit(None).cast("string")).alias(_READ_ERROR),
        F.spark_partition_id().alias(BARRIER),
    )
    split_cols = [_SPLIT_ID, _SPLIT_HEAD] if split else []
    parsed = F.col(PARSED)
    wrapped = parsed["payload"].isNotNull()

    def part(name: str) -> Column:
        return F.when(wrapped, parsed["payload"][name]).otherwise(parsed[name])

    # A null value, or the converter's {"schema": ..., "payload": null}; the key check runs last, rarely.
    # Null-safe: for an empty or blank payload the key test is null, and a null filter drops the record.
    tombstone = F.coalesce(
        (F.trim(F.col(PAYLOAD)) == "null")
        | (
            ~wrapped
            & parsed["op"].isNull()
            & parsed[CORRUPT_FIELD].isNull()
            & F.array_contains(F.json_object_keys(F.col(PAYLOAD)), "payload")
        ),
        F.lit(False),
    )
    row = F.coalesce(part("after"), part("before"))
    known = F.array(*[F.lit(n) for n in names])
    # One column per envelope part; BARRIER keeps the filter above the parse (decode.json.finish).
    env = staged.where(~tombstone & (F.col(BARRIER) >= 0)).select(
        PAYLOAD,
        POSITION,
        *extra_cols,
        malformed_error(F.col(PAYLOAD), parsed[CORRUPT_FIELD]).alias("_icetide_malformed"),
        part("op").alias(_RAW_OP),
        F.lower(F.trim(part("op"))).alias(_OP),
        part("before").alias(_BEFORE),
        part("after").alias(_AFTER),
        F.coalesce(part("source")["ts_ms"], part("ts_ms")).alias("_icetide_ts"),
        _order(position_cols, part("source"), F.coalesce(part("source")["ts_ms"], part("ts_ms"))).alias(
            SOURCE_ORDER_COLUMN
        ),
        *schema_identity(F.col(PAYLOAD), wrapped, F.col(_SPLIT_ID) if split else None),
        F.coalesce(F.array_except(F.map_keys(row), known), F.array()).alias(_UNKNOWN),
        *split_cols,
        _READ_ERROR,
    )
    if keep is not None:
        env = env.persist(StorageLevel.MEMORY_AND_DISK)
        keep.append(env)
    op = F.col(_OP)
    truncate_order = F.when(op == "t", F.col(SOURCE_ORDER_COLUMN))
    summary = (
        env.groupBy(_SCHEMA_ID, _UNKNOWN)
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.max(truncate_order).alias("truncate_at"),
            F.count(truncate_order).alias("truncates"),
            (F.max(F.col(_SPLIT_ID).isNotNull()) if split else F.lit(False)).alias("split"),
        )
        .collect()
    )
    schemas = _schemas_by_id(env, {s[_SCHEMA_ID] for s in summary if s[_SCHEMA_ID] is not None})
    unknown: dict[str, int] = {}
    schemaless = any(s[_SCHEMA_ID] is None for s in summary)
    cut: str | None = None
    truncates = 0
    for s in summary:
        for name in s[_UNKNOWN]:
            unknown[name] = unknown.get(name, 0) + s["n"]
        truncates += s["truncates"]
        if s["truncate_at"] is not None and (cut is None or s["truncate_at"] > cut):
            cut = s["truncate_at"]

    new_columns: list[StructField] = []
    if schema_evolution and unknown:
        new_columns = added_columns(unknown, list(schemas.values()), lambda names: _samples(env, names))
    if schema_evolution:
        table_schema = evolved_types(table_schema, list(schemas.values()))
    full_schema = T.StructType([*table_schema.fields, *new_columns])

    raw_op, before, after = F.col(_RAW_OP), F.col(_BEFORE), F.col(_AFTER)
    key_moved = reduce(
        lambda a, b: a | b,
        [before[k].isNotNull() & ~before[k].eqNullSafe(after[k]) for k in key],
        F.lit(False),
    )
    moved = (op == "u") & before.isNotNull() & after.isNotNull() & key_moved
    change = F.struct(op.alias("op"), F.when(op == "d", before).otherwise(after).alias("row"))
    changes = F.when(
        moved,
        F.array(
            F.struct(F.lit("d").alias("op"), before.alias("row")), F.struct(F.lit("u").alias("op"), after.alias("row"))
        ),
    ).otherwise(F.array(change))
    events = env if on_truncate == "dead_letter" else env.where(op.isNull() | (op != "t"))
    exploded = events.select(
        PAYLOAD,
        POSITION,
        *extra_cols,
        "_icetide_malformed",
        _RAW_OP,
        "_icetide_ts",
        SOURCE_ORDER_COLUMN,
        _SCHEMA_ID,
        *split_cols[:1],
        _READ_ERROR,
        F.explode(changes).alias("_icetide_change"),
    )
    cop, crow = F.col("_icetide_change.op"), F.col("_icetide_change.row")
    op_error = F.when(raw_op.isNull(), F.lit("not a Debezium change event: op is missing"))
    op_error = (
        op_error.when(cop == "t", F.lit(TRUNCATE_DEAD_LETTER))
        .when(cop == "m", F.lit("unsupported op 'm' (message)"))
        .when(~cop.isin("c", "r", "u", "d"), F.concat(F.lit("unknown op '"), raw_op, F.lit("'")))
        .when((cop == "d") & crow.isNull(), F.lit("before is missing for op 'd' (a delete needs the key)"))
        .when((cop != "d") & crow.isNull(), F.concat(F.lit("after is missing for op '"), raw_op, F.lit("'")))
    )
    upsert = INSERT if op_mode == "append" else UPSERT
    ts_text = F.col("_icetide_ts")
    whole, pre_errors = F.col(PAYLOAD), [F.col("_icetide_malformed"), op_error]
    if split:  # the payload limits are checked here, on the rest and the head
        split_ids = {s[_SCHEMA_ID] for s in summary if s["split"] and s[_SCHEMA_ID] is not None}
        heads = _heads_by_id(env, split_ids)
        whole, limit = _split_checks(F.col(PAYLOAD), F.col(_SPLIT_ID), heads, limits or PayloadLimits())
        pre_errors.insert(0, limit)
    pre_errors.insert(0, F.col(_READ_ERROR))
    rows = exploded.select(
        whole.alias(PAYLOAD),
        POSITION,
        *extra_cols,
        F.when(cop == "d", F.lit(DELETE)).otherwise(F.lit(upsert)).alias(OP_COLUMN),
        F.coalesce(*pre_errors).alias(PRE_ERROR),
        F.when(ts_text.rlike("^-?[0-9]{1,15}$"), F.expr("timestamp_millis(CAST(_icetide_ts AS BIGINT))")).alias(
            SOURCE_TS_COLUMN
        ),
        SOURCE_ORDER_COLUMN,
        _SCHEMA_ID,
        *[crow[f.name].alias(raw_column(i)) for i, f in enumerate(full_schema.fields)],
    )
    conversions = {
        f.name: _column_conversion(i, f, schemas, schemaless, settings) for i, f in enumerate(full_schema.fields)
    }
    good, bad = finish(
        rows,
        full_schema,
        key,
        [SOURCE_TS_COLUMN, SOURCE_ORDER_COLUMN, *extra_cols],
        epoch_unit,
        keep,
        conversions,
        limits=limits,
        check_limits=not split,
        one_per_record=bool(position_cols),  # without a position, records cannot be told apart
    )
    truncated = on_truncate == "apply" and cut is not None
    if truncated:
        good = good.where(F.col(SOURCE_ORDER_COLUMN) > F.lit(cut))
    missing = {n: c for n, c in unknown.items() if n not in {f.name for f in new_columns}}
    if missing:
        log.warning(
            "the table lacks field(s) the source sends, not written (schema_evolution is off): %s",
            ", ".join(f"{n} ({c} records)" for n, c in sorted(missing.items())),
        )
    return DecodedChanges(
        good=good,
        bad=bad,
        truncated=truncated,
        truncates=truncates,
        unknown_fields=missing,
        new_columns=new_columns,
        schemas=[e for e in schemas.values() if e is not None],
    )


def _samples(env: DataFrame, names: list[str]) -> dict[str, str | None]:
    """One record's value of each of `names` (a field the table lacks), as Spark's map of the row keeps it."""
    from pyspark.sql import functions as F

    row = F.coalesce(F.col(_AFTER), F.col(_BEFORE))
    sample = env.agg(*[F.first(row[n], ignorenulls=True).alias(n) for n in names]).first()
    return {n: sample[n] if sample else None for n in names}
