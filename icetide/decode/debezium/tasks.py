"""Decode Debezium change events on the Spark path with the Python decoder (decode/debezium/rows.py) in its tasks.

The Spark path reads a batch as a DataFrame of Kafka values (or lines of landing files) with the
columns that say where each came from. `decode_debezium` runs the sync fast path's decoder
(`EnvelopeReader`, `TableRows`) over it with `mapInArrow` (decode/debezium/task.py), so one decoder
reads the format on every path (issue 23). As decode/json/tasks.py does for JSON, the good changes,
the dead letters and one summary row per Arrow batch leave a task as one frame, persisted once and
split: the source is read and parsed once.

The summary row carries what the driver decides for the whole batch: the truncates (their count and
the latest's `_source_order`: `on_truncate: apply` keeps only the changes after it), the fields the
table lacks (records per field, and a sample value of each for typing it without a schema) and the
message heads of the schemas the task met. With `schema_evolution`, the driver plans the new and
widened columns from those (decode/debezium/changes.py) and decodes the batch again with the
evolved schema.

The rules are those of the Spark SQL decoder icetide ran until issue 23 (its outputs are frozen in
tests/golden/debezium*/), but for the deliberate differences docs/design.md lists. A record the
decoder cannot read exactly is a dead letter saying why ("not decoded: ..."), never a lost record
nor a failed batch.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from icetide.config.pipeline import DebeziumSettings, OnTruncate
from icetide.decode.debezium.changes import (
    SOURCE_ORDER_COLUMN,
    SOURCE_TS_COLUMN,
    DecodedChanges,
    check_options,
    evolved_types,
    new_columns,
)
from icetide.decode.debezium.message import head_schema
from icetide.decode.debezium.rows import Conversions, NotHere, TableRows
from icetide.decode.debezium.task import (
    BAD,
    GOOD,
    HEADS,
    KIND,
    RECORDS,
    SAMPLES,
    SUMMARY,
    TRUNCATE_AT,
    TRUNCATES,
    UNKNOWN_COUNTS,
    DebeziumTask,
)
from icetide.decode.json.tasks import ERROR, PAYLOAD, POSITION
from icetide.decode.limits import PayloadLimits
from icetide.errors import SchemaError, one_line
from icetide.write.collapse import OP_COLUMN

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

    from icetide.decode.frames import EpochUnit, OpMode

log = logging.getLogger(__name__)


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
    arrival_col: str | None = None,
) -> DecodedChanges:
    """Decode Debezium change events in `df[value_col]` (string or binary) into the table's columns,
    with the Python decoder in Spark's tasks (see the module docstring).

    `good`: the table's columns (then `new_columns`), `_op`, `_source_ts` (the change's time at
    the source), `_source_order` (the order of one key's changes: decode/debezium/rows.py
    `source_order`) and `extra_cols`; `bad`: payload, error, source_position. Every event that is
    not a tombstone lands in exactly one of them, but for a truncate that is applied and the
    changes before the batch's latest one, which it removes (`truncated`). A DELETE holds the key
    from `before`. `epoch_unit` is kept for callers; schemas decide units.

    `split`: the columns (head id, head text) of a source that split the JSON converter's schema
    off its values (icetide.sources.head_split); dead letters still hold the whole record.
    `error_col`: a column saying why the source could not read a record (an Avro value,
    icetide.decode.avro.decoder); such a record is bad with that reason. `arrival_col`: the order records
    arrived in, where the last position column does not give it (landing files: sources/files.py
    ARRIVAL_COLUMN); it ends `_source_order`.
    With `keep` (a list), the decoded frame is persisted and appended to it, for the caller to
    unpersist (without it, good and bad each decode the batch again). Runs one Spark job to read
    the tasks' summaries, and decodes the batch again when `schema_evolution` changes its columns.
    A record the decoder cannot read exactly is a dead letter "not decoded: <why>".
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from icetide.decode.frames import check_value_column

    check_options(df, table_schema, key, op_mode, position_cols, extra_cols, epoch_unit, on_truncate)
    check_value_column(df, value_col)
    settings = settings or DebeziumSettings()
    limits = limits or PayloadLimits()
    options: dict[str, Any] = {
        "epoch_unit": epoch_unit,
        "extra_cols": extra_cols,
        "keep": keep,
        "settings": settings,
        "on_truncate": on_truncate,
        "schema_evolution": schema_evolution,
        "limits": limits,
        "split": split,
        "error_col": error_col,
        "arrival_col": arrival_col,
    }
    time_zone = df.sparkSession.conf.get("spark.sql.session.timeZone") or "UTC"
    conversions = Conversions(
        time_zone=time_zone,
        decimal_handling_mode=settings.decimal_handling_mode,
        time_precision_mode=settings.time_precision_mode,
    )
    cached_from = len(keep) if keep is not None else 0
    more_cols = [c for c in (error_col, arrival_col) if c]

    def once(schema: StructType) -> tuple[DataFrame, list[Any]]:
        """The batch decoded against `schema` and its summaries."""
        task = _task(df, value_col, schema, key, op_mode, position_cols, conversions, options)
        inputs = df.select(*dict.fromkeys([value_col, *position_cols, *extra_cols, *(split or ()), *more_cols]))
        decoded = inputs.mapInArrow(task, _spark_schema(df, schema, extra_cols))
        if keep is not None:
            from pyspark import StorageLevel

            decoded = decoded.persist(StorageLevel.MEMORY_AND_DISK)
            keep.append(decoded)
        return decoded, decoded.where(F.col(KIND) == SUMMARY).select(*_SUMMARY_COLUMNS).collect()

    decoded, summaries = once(table_schema)
    schemas = _schemas(summaries, limits)
    unknown: dict[str, int] = {}
    for r in summaries:
        for name, count in (r[UNKNOWN_COUNTS] or {}).items():
            unknown[name] = unknown.get(name, 0) + count
    added: list[Any] = []
    full_schema = table_schema
    if schema_evolution:
        if unknown:
            added = new_columns(unknown, schemas, lambda names: _samples(summaries, names))
        full_schema = T.StructType([*evolved_types(table_schema, schemas).fields, *added])
        if full_schema != table_schema:
            if keep is not None:
                for frame in keep[cached_from:]:  # the first decode lacks the new or wider columns
                    frame.unpersist()
                del keep[cached_from:]
            decoded, summaries = once(full_schema)
    truncates = sum(r[TRUNCATES] for r in summaries)
    cut = max((r[TRUNCATE_AT] for r in summaries if r[TRUNCATE_AT] is not None), default=None)
    kind = F.col(KIND)
    good = decoded.where(kind == GOOD).select(
        *[F.col(f"`{f.name}`") for f in full_schema.fields],
        OP_COLUMN,
        SOURCE_TS_COLUMN,
        SOURCE_ORDER_COLUMN,
        *[F.col(f"`{c}`") for c in extra_cols],
    )
    bad = decoded.where(kind == BAD).select(
        F.col(PAYLOAD).alias("payload"), F.col(ERROR).alias("error"), F.col(POSITION).alias("source_position")
    )
    truncated = on_truncate == "apply" and cut is not None
    if truncated:
        good = good.where(F.col(SOURCE_ORDER_COLUMN) > F.lit(cut))
    missing = {n: c for n, c in unknown.items() if n not in {f.name for f in added}}
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
        new_columns=added,
        schemas=[e for e in schemas if e is not None],
        records=sum(r[RECORDS] for r in summaries),
    )


_SUMMARY_COLUMNS = (RECORDS, TRUNCATES, TRUNCATE_AT, UNKNOWN_COUNTS, SAMPLES, HEADS)


def _task(
    df: DataFrame,
    value_col: str,
    table_schema: StructType,
    key: Sequence[str],
    op_mode: str,
    position_cols: Sequence[str],
    conversions: Conversions,
    options: dict[str, Any],
) -> DebeziumTask:
    """The task of one decode against `table_schema`; SchemaError for a column type the decoder
    does not produce."""
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        schema = to_arrow_schema(table_schema)
        TableRows(schema, key, op_mode, conversions)  # NotHere for a column type it does not produce
    except (TypeError, NotHere) as exc:
        raise SchemaError(f"a table column that Debezium messages are not decoded into: {one_line(exc)}") from None
    extra = tuple(options["extra_cols"])
    output = to_arrow_schema(_spark_schema(df, table_schema, extra))
    return DebeziumTask(
        schema=schema,
        key=tuple(key),
        op_mode=op_mode,
        conversions=conversions,
        limits=options["limits"],
        value_col=value_col,
        position_cols=tuple(position_cols),
        extra_cols=extra,
        split=options["split"],
        error_col=options["error_col"],
        arrival_col=options["arrival_col"],
        on_truncate=options["on_truncate"],
        sample=options["schema_evolution"],
        output=output,
    )


def _spark_schema(df: DataFrame, table_schema: StructType, extra_cols: Sequence[str]) -> StructType:
    """The decoded frame's columns: the changes', the dead letters', the summaries'."""
    from pyspark.sql import types as T

    string = T.StringType()
    fields = [
        *table_schema.fields,
        T.StructField(OP_COLUMN, string),
        T.StructField(SOURCE_TS_COLUMN, T.TimestampType()),
        T.StructField(SOURCE_ORDER_COLUMN, string),
        *[df.schema[c] for c in extra_cols],
        T.StructField(KIND, string),
        T.StructField(ERROR, string),
        T.StructField(PAYLOAD, string),
        T.StructField(POSITION, string),
        T.StructField(RECORDS, T.LongType()),
        T.StructField(TRUNCATES, T.LongType()),
        T.StructField(TRUNCATE_AT, string),
        T.StructField(UNKNOWN_COUNTS, T.MapType(string, T.LongType())),
        T.StructField(SAMPLES, T.MapType(string, string)),
        T.StructField(HEADS, T.ArrayType(string)),
    ]
    return T.StructType([T.StructField(f.name, f.dataType, True) for f in fields])


def _schemas(summaries: list[Any], limits: PayloadLimits) -> list[Any]:
    """The batch's distinct envelope schemas (None: one that describes no row), from the heads the tasks met."""
    heads = dict.fromkeys(h for r in summaries for h in r[HEADS] or [])
    return [head_schema(h.encode(), limits) for h in heads]


def _samples(summaries: list[Any], names: list[str]) -> dict[str, str | None]:
    """A value's text of each of `names`: the first the tasks met."""
    out: dict[str, str | None] = {}
    for r in summaries:
        for name, text in (r[SAMPLES] or {}).items():
            if name in names and out.get(name) is None:
                out[name] = text
    return out
