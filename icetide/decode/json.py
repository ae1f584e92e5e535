"""Spark SQL conversions of JSON text into a table's columns, for the Spark SQL Debezium decoder
(decode/debezium.py); JSON records themselves are decoded in Python (decode/json_tasks.py), and
`BAD_DDL` and `source_position` give every dead-letter frame its shape.

The plan: parse every payload with Spark's `from_json` into a struct whose
fields are all STRING (Spark keeps a field's raw JSON text: numbers as written, objects and arrays
as JSON), then convert each field to its table type with `try_cast` and friends. A field present
but not convertible, a missing key, a missing NOT NULL column or an unknown op makes the record
bad, with an error naming the problem and the column. No Python runs per row.

Conversions (raw JSON text -> table type):
- numbers and booleans: Spark's `try_cast` from the text ("12" and 12 both fit INT; 12.5 does not;
  DECIMAL rounds to its scale; out-of-range values are errors);
- TIMESTAMP: ISO-8601 text (a zone or offset, else the session time zone), or an integer epoch in
  `epoch_unit` (default milliseconds); TIMESTAMP_NTZ the same, the epoch read as UTC wall time;
- DATE: ISO date text, or an integer count of days since 1970-01-01 (Debezium's io.debezium.time.Date);
- BINARY: base64 text; STRING: the raw text of any JSON value;
- STRUCT, ARRAY, MAP: parsed from the field's JSON with Spark's JSON reader.
Timestamps and dates must fall in years 0001-9999, and payloads within icetide.decode.limits
(size, UTF-8, nesting), or the record is bad. JSON fields are matched to columns by exact name;
other fields are ignored, or with schema evolution become nullable columns. A
null payload (a Kafka tombstone) is skipped, neither good nor bad. Text after the first JSON
object is ignored.

The good and bad frames derive from one projection of `df`: persist `df` (or the source it reads)
before acting on both, or the source is read twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, cast, get_args

from icetide.decode import limits as lim
from icetide.decode.limits import PayloadLimits
from icetide.errors import ConfigError
from icetide.sink.changelog import DELETE, OP_COLUMN

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType, StructType


OpMode = Literal["upsert", "append"]
EpochUnit = Literal["s", "ms", "us"]
BAD_DDL = "payload STRING, error STRING, source_position STRING"
BAD_COLUMNS = ("payload", "error", "source_position")
CORRUPT_FIELD = "_icetide_corrupt"
RAW_MESSAGE_CHARS = 60  # how much of a bad value an error message quotes
# The errors of a payload Spark's from_json cannot read as a JSON object (`malformed_error`).
MALFORMED = "malformed JSON"
EMPTY_PAYLOAD = "malformed JSON: empty payload"
NOT_AN_OBJECT = "malformed JSON: not an object"

# Internal column names of the decode plan; prefixed so they cannot clash with table columns.
PAYLOAD = "_icetide_payload"
POSITION = "_icetide_position"
PARSED = "_icetide_parsed"
PRE_ERROR = "_icetide_pre_error"
ERROR = "_icetide_error"
BARRIER = "_icetide_barrier"
_EPOCH_DIGITS = {"s": 12, "ms": 15, "us": 18}  # up to about the year 33658, far from overflowing
_EPOCH_PER_SECOND = {"s": 1, "ms": 1000, "us": 1_000_000}


def quote_name(name: str) -> str:
    """`name` quoted as a Spark SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


def raw_column(i: int) -> str:
    """The name of the column holding the raw text of table column `i` while a batch decodes."""
    return f"_icetide_r{i}"


def _typed(i: int) -> str:
    return f"_icetide_t{i}"


def type_name(dtype: DataType) -> str:
    """How error messages name a type: INT, BIGINT, DECIMAL(10,2), TIMESTAMP, array<int>..."""
    name = dtype.simpleString()
    return name if "<" in name else name.upper()


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


def payload_text(df: DataFrame, value_col: str) -> Column:
    """The payload as a string column (Kafka's binary values are read as UTF-8)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if value_col not in df.columns:
        raise ConfigError(f"decode: value column {value_col!r} is not in the input ({', '.join(df.columns)})")
    column = F.col(value_col)
    dtype = df.schema[value_col].dataType
    if isinstance(dtype, T.BinaryType):
        return column.cast("string")
    if not isinstance(dtype, T.StringType):
        raise ConfigError(f"decode: value column {value_col!r} is {dtype.simpleString()}, not string or binary")
    return column


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
    if epoch_unit not in _EPOCH_DIGITS:
        raise ConfigError(f"decode: epoch_unit {epoch_unit!r} is not one of {', '.join(_EPOCH_DIGITS)}")
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


def convert(raw: str, dtype: DataType, epoch_unit: str) -> Column:
    """SQL conversion of the raw JSON text in column `raw` to `dtype`; null where it does not fit.

    Timestamps and dates fit in years 0001-9999 only (icetide.decode.limits): what every writer holds.
    """
    return convert_sql(quote_name(raw), dtype, epoch_unit)


def convert_sql(r: str, dtype: DataType, epoch_unit: str) -> Column:
    """`convert` of the text that SQL expression `r` yields."""
    from pyspark.sql import types as T

    value = _convert(r, dtype, epoch_unit)
    if isinstance(dtype, T.TimestampType | T.TimestampNTZType | T.DateType):
        return _within_range(value, dtype)
    return value


def _within_range(value: Column, dtype: DataType) -> Column:
    """`value` where it lies in years 0001-9999 (TIMESTAMP: in UTC), else null."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if isinstance(dtype, T.TimestampType):
        low = F.timestamp_micros(F.lit(lim.MIN_EPOCH_MICROS))
        high = F.timestamp_micros(F.lit(lim.MAX_EPOCH_MICROS))
    elif isinstance(dtype, T.TimestampNTZType):
        low = F.expr("TIMESTAMP_NTZ'0001-01-01 00:00:00'")
        high = F.expr("TIMESTAMP_NTZ'9999-12-31 23:59:59.999999'")
    else:
        low, high = F.expr("DATE'0001-01-01'"), F.expr("DATE'9999-12-31'")
    return F.when(value.between(low, high), value)


def _convert(r: str, dtype: DataType, epoch_unit: str) -> Column:
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    integral = f"{r} RLIKE '^-?[0-9]{{1,{_EPOCH_DIGITS[epoch_unit]}}}$'"
    if isinstance(dtype, T.StringType):
        return F.expr(r)
    if isinstance(dtype, T.TimestampType):
        epoch = {"s": "timestamp_seconds", "ms": "timestamp_millis", "us": "timestamp_micros"}[epoch_unit]
        return F.expr(f"CASE WHEN {integral} THEN {epoch}(CAST({r} AS BIGINT)) ELSE try_cast({r} AS TIMESTAMP) END")
    if isinstance(dtype, T.TimestampNTZType):
        per_day = 86_400 * _EPOCH_PER_SECOND[epoch_unit]
        per_second = _EPOCH_PER_SECOND[epoch_unit]
        epoch = (
            f"TIMESTAMP_NTZ'1970-01-01 00:00:00' + make_dt_interval("
            f"CAST(floor(CAST({r} AS BIGINT) / {per_day}) AS INT), 0, 0, "
            f"CAST(pmod(CAST({r} AS BIGINT), {per_day}) AS DECIMAL(20, 0)) / {per_second})"
        )
        return F.expr(f"CASE WHEN {integral} THEN {epoch} ELSE try_cast({r} AS TIMESTAMP_NTZ) END")
    if isinstance(dtype, T.DateType):
        days = f"{r} RLIKE '^-?[0-9]{{1,7}}$'"
        return F.expr(
            f"CASE WHEN {days} THEN date_add(DATE'1970-01-01', CAST({r} AS INT)) ELSE try_cast({r} AS DATE) END"
        )
    if isinstance(dtype, T.DoubleType | T.FloatType):
        # A JSON number beyond a double (1e400) reaches a STRING field as '"Infinity"', quotes
        # included (Jackson's text for it); Python's json, and so the fast path, read infinity.
        infinite = f"{r} IN ('\"Infinity\"', '\"-Infinity\"')"
        unquoted = f"CASE WHEN {infinite} THEN substring({r}, 2, length({r}) - 2) ELSE {r} END"
        return F.expr(f"try_cast({unquoted} AS {dtype.simpleString()})")
    if isinstance(dtype, T.BinaryType):
        return F.expr(f"try_to_binary({r}, 'base64')")
    if isinstance(dtype, T.StructType | T.ArrayType | T.MapType):
        return F.from_json(F.expr(r), cast(Any, dtype), {"mode": "PERMISSIVE"})
    return F.expr(f"try_cast({r} AS {dtype.simpleString()})")


def _type_error(name: str, raw: str, dtype: DataType) -> Column:
    from pyspark.sql import functions as F

    shown = type_name(dtype)
    article = "an" if shown[:1].upper() in "AEIOU" else "a"
    value = F.col(raw)
    quoted = F.when(
        F.length(value) > RAW_MESSAGE_CHARS, F.concat(F.substring(value, 1, RAW_MESSAGE_CHARS), F.lit("..."))
    )
    return F.concat(
        F.lit(f"column {name}: '"),
        quoted.otherwise(value),
        F.lit(f"' is not {article} {shown}"),
    )


def malformed_error(payload: Column, corrupt: Column) -> Column:
    """The error of a payload from_json could not read as a JSON object, else null."""
    from pyspark.sql import functions as F

    text = F.trim(payload)
    return (
        F.when(text == "", F.lit(EMPTY_PAYLOAD))
        .when(corrupt.isNotNull() & ~text.startswith("{"), F.lit(NOT_AN_OBJECT))
        .when(corrupt.isNotNull(), F.lit(MALFORMED))
    )


def limit_error(
    payload: Column, limits: PayloadLimits, *, size: Column | None = None, too_deep: Column | None = None
) -> Column:
    """The first limit of icetide.decode.limits the payload breaks, as its error, else null.

    Checked in the order (and with the errors) of `icetide.decode.limits.payload_error`. A
    Kafka payload cast from binary keeps its bytes, valid UTF-8 or not: decoding it and encoding
    it again changes it exactly when it is not valid UTF-8. `size` and `too_deep` (true: nested
    too deep whatever `payload` is) for a payload that is part of its record (decode/debezium.py).
    """
    from pyspark.sql import functions as F

    size = F.octet_length(payload) if size is None else size
    raw = payload.cast("binary")
    # Counted by byte-level replace: Spark's translate builds a string per character (10x slower).
    openers = (
        F.octet_length(payload) * 2
        - F.octet_length(F.replace(payload, F.lit("["), F.lit("")))
        - F.octet_length(F.replace(payload, F.lit("{"), F.lit("")))
    )
    deep = (openers > limits.max_nesting_depth) & (_nesting_depth(payload) > limits.max_nesting_depth)
    if too_deep is not None:
        deep = too_deep | deep
    return (
        F.when(
            size > limits.max_record_bytes,
            F.concat(
                F.lit("payload is "),
                size.cast("string"),
                F.lit(f" bytes, over max_record_bytes ({limits.max_record_bytes})"),
            ),
        )
        .when(F.encode(F.decode(raw, "UTF-8"), "UTF-8") != raw, F.lit(lim.invalid_utf8_error()))
        .when(deep, F.lit(lim.depth_error(limits)))
        .when(F.instr(payload, "\\") > 0, F.when(payload.rlike(lim.LONE_SURROGATE), F.lit(lim.surrogate_error())))
    )


def _nesting_depth(payload: Column) -> Column:
    """icetide.decode.limits.nesting_depth in SQL: two regular expressions keep the brackets
    outside strings (escape pairs and runs of other characters, then quoted stretches), then one
    step per bracket."""
    from pyspark.sql import functions as F

    structure = F.regexp_replace(payload, lim.NOT_NESTING_RUNS, "")
    brackets = F.split(F.regexp_replace(structure, lim.QUOTED, ""), "")

    def step(acc: Column, c: Column) -> Column:
        depth, deepest = acc["d"], acc["m"]
        opened = F.struct((depth + 1).alias("d"), F.greatest(deepest, depth + 1).alias("m"))
        closed = F.struct((depth - 1).alias("d"), deepest.alias("m"))
        return F.when(c.isin("[", "{"), opened).when(c == "", acc).otherwise(closed)  # "": split's last

    start = F.struct(F.lit(0).alias("d"), F.lit(0).alias("m"))
    return F.aggregate(brackets, start, step, lambda acc: acc["m"])


def finish(
    rows: DataFrame,
    table_schema: StructType,
    key: Sequence[str],
    extra_cols: Sequence[str],
    epoch_unit: str,
    keep: list[DataFrame] | None = None,
    conversions: Mapping[str, Column] | None = None,
    *,
    limits: PayloadLimits | None = None,
    check_limits: bool = True,
    one_per_record: bool = False,
) -> tuple[DataFrame, DataFrame]:
    """Convert and check the raw columns of `rows`, and split them into good and bad.

    With `one_per_record`, a record whose two changes are both bad (a key-moving update: a
    DELETE, then an upsert) gives one dead letter, the DELETE's.

    `conversions` replaces `convert` for the columns it names (a decoder that knows more about a
    field than its JSON text, e.g. Debezium's Connect schema). A payload over `limits` (default
    PayloadLimits()), not valid UTF-8 or escaping a lone surrogate is bad before anything else
    (icetide.decode.limits); its dead letter holds the payload with U+FFFD where its bytes are not UTF-8.
    Without `check_limits`, the caller has checked them (into PRE_ERROR).

    With `keep` (a list), the checked records are persisted and appended to it: good and bad
    then read one cache, the source is read and parsed once, and the caller unpersists it.

    `rows` has PAYLOAD, POSITION, OP_COLUMN, PRE_ERROR (null unless the record is already known
    to be bad), `extra_cols`, and `raw_column(i)` (the raw text of table column i) for every column.
    """
    from pyspark.sql import functions as F

    fields = list(table_schema.fields)
    typed = rows.select(
        PAYLOAD,
        POSITION,
        OP_COLUMN,
        PRE_ERROR,
        *extra_cols,
        *[F.col(raw_column(i)) for i in range(len(fields))],
        *[
            (conversions or {}).get(f.name, convert(raw_column(i), f.dataType, epoch_unit)).alias(_typed(i))
            for i, f in enumerate(fields)
        ],
        F.spark_partition_id().alias(BARRIER),
    )
    keys = set(key)
    not_delete = F.col(OP_COLUMN) != F.lit(DELETE)
    checks: list[Column] = [limit_error(F.col(PAYLOAD), limits or PayloadLimits())] if check_limits else []
    checks.append(F.col(PRE_ERROR))
    for i, f in enumerate(fields):
        raw, value = F.col(raw_column(i)), F.col(_typed(i))
        if f.name in keys:
            checks.append(
                F.when(raw.isNull(), F.lit(f"key column {f.name} is missing or null")).when(
                    value.isNull(), _type_error(f.name, raw_column(i), f.dataType)
                )
            )
    for i, f in enumerate(fields):
        if f.name in keys:
            continue
        raw, value = F.col(raw_column(i)), F.col(_typed(i))
        check = F.when(not_delete & raw.isNotNull() & value.isNull(), _type_error(f.name, raw_column(i), f.dataType))
        if not f.nullable:
            check = check.when(not_delete & raw.isNull(), F.lit(f"column {f.name} is missing or null (NOT NULL)"))
        checks.append(check)
    checked = typed.withColumn(ERROR, F.coalesce(*checks))
    if keep is not None:
        from pyspark import StorageLevel

        # Cache only what good and bad read: typed values, and the payload of bad records only.
        error = F.col(ERROR)
        checked = checked.select(
            F.when(error.isNotNull(), F.col(PAYLOAD)).alias(PAYLOAD),
            POSITION,
            OP_COLUMN,
            *extra_cols,
            *[F.col(_typed(i)) for i in range(len(fields))],
            ERROR,
            BARRIER,
        ).persist(StorageLevel.MEMORY_AND_DISK)
        keep.append(checked)
    # Spark pushes a filter below the projections it reads, inlining their expressions: every
    # from_json field and conversion would run once per reference. BARRIER is nondeterministic, so
    # the filter stops above the projection that converts (and, below it, the one that parses once).
    good_rows = F.col(ERROR).isNull() & (F.col(BARRIER) >= 0)
    bad_rows = F.col(ERROR).isNotNull() & (F.col(BARRIER) >= 0)
    good = checked.where(good_rows).select(
        *[F.col(_typed(i)).alias(f.name) for i, f in enumerate(fields)],
        OP_COLUMN,
        *extra_cols,
    )
    bad_changes = checked.where(bad_rows)
    if one_per_record:
        from pyspark.sql import Window

        first = Window.partitionBy(POSITION).orderBy(F.when(F.col(OP_COLUMN) == F.lit(DELETE), 0).otherwise(1))
        bad_changes = bad_changes.withColumn("_icetide_nth", F.row_number().over(first)).where("_icetide_nth = 1")
    bad = bad_changes.select(
        F.decode(F.col(PAYLOAD).cast("binary"), "UTF-8").alias("payload"),
        F.col(ERROR).alias("error"),
        F.col(POSITION).alias("source_position"),
    )
    return good, bad
