"""Decode JSON records on the Spark path: the Python decoder (decode/json/records.py) in Spark's tasks.

The Spark path reads a batch as a DataFrame of payloads (Kafka values, lines of landing files)
with the columns that say where each came from. `decode_json` runs `ArrowJsonDecoder` over it
with `mapInArrow`, one block per Arrow batch, so the conversion rules are those of the fast path:
one decoder per format (issue 23). Good rows and dead letters leave the task as one frame, which
is persisted once (into `keep`) and split: the source is read and parsed once.

Positions: a record's source position is "topic/partition@offset" for three position columns
(Kafka), the values joined by ":" otherwise (files: "file:line"), "?" for a null part, as the
dead-letter table has always had them.

With `nested_as_text`, each task's block carries its count of objects and arrays kept as JSON text
(AS_TEXT, on the block's first row, 0 on the others), so one sum over the decoded frame counts the
batch's: good rows cannot say which of their texts were objects.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from icetide.decode.frames import check_arguments
from icetide.decode.json.evolution import UNKNOWN, UNKNOWN_PAYLOAD, addable, count_unknown, sample_types
from icetide.decode.json.records import ArrowJsonDecoder
from icetide.decode.json.scalars import undecodable_columns
from icetide.decode.limits import PayloadLimits
from icetide.errors import ConfigError
from icetide.write.collapse import OP_COLUMN

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructField, StructType

    from icetide.decode.frames import OpMode

log = logging.getLogger(__name__)

ERROR = "_icetide_error"
PAYLOAD = "_icetide_payload"
POSITION = "_icetide_position"
AS_TEXT = "_icetide_nested_as_text"  # a block's count of objects and arrays kept as JSON text


_DECODER = json.JSONDecoder()


def position_texts(batch: pa.RecordBatch, position_cols: Sequence[str]) -> pa.Array:
    """Each row's source position as text (see the module docstring)."""
    parts = [pc.fill_null(batch.column(c).cast(pa.string()), "?") for c in position_cols]
    if not parts:
        return pa.nulls(batch.num_rows, pa.string())
    if len(parts) == 3:
        return pc.binary_join_element_wise(pc.binary_join_element_wise(parts[0], parts[1], "/"), parts[2], "@")
    return pc.binary_join_element_wise(*parts, ":")


@dataclass(frozen=True)
class JsonTask:
    """What a task needs to decode its share of a batch; picklable, built on the driver."""

    decoder: ArrowJsonDecoder
    value_col: str
    position_cols: tuple[str, ...]
    extra_cols: tuple[str, ...]
    # table columns, _op, extra columns, ERROR, PAYLOAD, POSITION[, UNKNOWN[, UNKNOWN_PAYLOAD]][, AS_TEXT]
    output: pa.Schema

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            if batch.num_rows:
                yield self.decode(batch)

    def decode(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        values = batch.column(self.value_col)
        if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
            values = values.cast(pa.binary())
        payloads: list[bytes | None] = values.to_pylist()
        decoded = self.decoder.decode(payloads, str)
        positions = position_texts(batch, self.position_cols)
        bad_at = [int(b.source_position) for b in decoded.bad]
        failed = set(bad_at)
        good_at = [i for i, v in enumerate(payloads) if v is not None and i not in failed]
        rows = decoded.rows
        assert rows.num_rows == len(good_at), "the decoder lost or made records"
        unknown = self._unknown(payloads, good_at) if decoded.unknown_fields else None
        n_good, n_bad = len(good_at), len(bad_at)
        take_good, take_bad = pa.array(good_at, pa.int64()), pa.array(bad_at, pa.int64())
        columns: list[pa.Array] = []
        for f in self.output:
            if f.name in rows.column_names:
                good = rows.column(f.name).combine_chunks().cast(f.type)
                columns.append(pa.concat_arrays([good, pa.nulls(n_bad, f.type)]))
            elif f.name == OP_COLUMN:
                columns.append(pa.concat_arrays([decoded.ops(), pa.nulls(n_bad, pa.string())]))
            elif f.name in self.extra_cols:
                column = batch.column(f.name)
                columns.append(pa.concat_arrays([column.take(take_good), pa.nulls(n_bad, column.type)]))
            elif f.name == ERROR:
                columns.append(pa.array([None] * n_good + [b.error for b in decoded.bad], pa.string()))
            elif f.name == PAYLOAD:
                columns.append(pa.array([None] * n_good + [b.payload for b in decoded.bad], pa.string()))
            elif f.name == POSITION:
                columns.append(pa.concat_arrays([pa.nulls(n_good, pa.string()), positions.take(take_bad)]))
            elif f.name == AS_TEXT:
                counts = [decoded.nested_as_text] + [0] * (n_good + n_bad - 1) if n_good + n_bad else []
                columns.append(pa.array(counts, pa.int64()))
            elif f.name == UNKNOWN:
                keys = [k for k, _ in unknown] if unknown is not None else [[]] * n_good
                columns.append(pa.array(keys + [None] * n_bad, f.type))
            else:
                assert f.name == UNKNOWN_PAYLOAD
                texts = [t for _, t in unknown] if unknown is not None else [None] * n_good
                columns.append(pa.array(texts + [None] * n_bad, pa.string()))
        return pa.RecordBatch.from_arrays(columns, schema=self.output)

    def _unknown(self, payloads: list[bytes | None], good_at: list[int]) -> list[tuple[list[str], str | None]]:
        """Per good record: its keys that are no column (null values too, as Spark's
        json_object_keys lists them; then those inside its struct values, `ArrowJsonDecoder.unknown_keys`)
        and its payload when it has any (for typing new columns)."""
        out: list[tuple[list[str], str | None]] = []
        for i in good_at:
            payload = payloads[i]
            assert payload is not None
            text = payload.decode("utf-8")
            keys = self.decoder.unknown_keys(_DECODER.raw_decode(text.strip())[0])
            out.append((keys, text if keys else None))
        return out


def undecodable(table_schema: StructType) -> list[str]:
    """The columns (as 'name TYPE') of a table the Python decoder cannot produce; empty: it decodes it."""
    from pyspark.sql.pandas.types import to_arrow_type

    out = []
    for f in table_schema.fields:
        try:
            undecodable = undecodable_columns(pa.schema([pa.field(f.name, to_arrow_type(f.dataType))]))
        except TypeError:
            undecodable = [f"{f.name} {f.dataType.simpleString()}"]
        out += undecodable
    return out


def decode_json(
    df: DataFrame,
    value_col: str,
    table_schema: StructType,
    key: Sequence[str],
    op_mode: OpMode,
    position_cols: Sequence[str],
    *,
    extra_cols: Sequence[str] = (),
    keep: list[DataFrame] | None = None,
    limits: PayloadLimits | None = None,
    unknown_fields: dict[str, int] | None = None,
    schema_evolution: bool = False,
    new_columns: list[StructField] | None = None,
    nested_as_text: list[int] | None = None,
) -> tuple[DataFrame, DataFrame]:
    """Decode the JSON objects in `df[value_col]` (string or binary) into `table_schema`'s columns
    with `ArrowJsonDecoder` (its module docstring has the rules), in the tasks: (good, bad).

    good: the table's columns, then `_op` (the record's own, else UPSERT in "upsert" mode and
    INSERT in "append" mode), then `extra_cols`; bad: payload, error (one line naming the problem
    and the column), source_position. Every non-null payload lands in exactly one of the two, in
    input order within a Spark partition; null payloads (tombstones) are skipped.
    With `keep` (a list), the decoded frame is persisted and appended to it, for the caller to
    unpersist: good and bad then read one cache (without it, each reads and decodes the source).
    With `unknown_fields`, the good records' keys that are no column are counted into it (one
    Spark job); with `schema_evolution` too, they become nullable columns
    (decode/json/evolution.py), appended to `new_columns`: the batch is then decoded again.
    With `nested_as_text` (a list), an object or array in a STRING column is kept as its JSON
    text instead of a dead letter, and the batch's count of such values is appended to it (one
    Spark job)."""
    from pyspark.sql import types as T

    check_arguments(df, table_schema, key, op_mode, position_cols, extra_cols, "ms")
    if value_col not in df.columns:
        raise ConfigError(f"decode: value column {value_col!r} is not in the input ({', '.join(df.columns)})")
    others = undecodable(table_schema)
    if others:
        raise ConfigError(f"decode: column(s) of a type the JSON decoder does not produce: {', '.join(others)}")
    if schema_evolution and (keep is None or unknown_fields is None):
        raise ConfigError("decode: schema_evolution needs keep and unknown_fields (a batch is read twice without)")
    count = unknown_fields is not None and keep is not None
    as_text = nested_as_text is not None
    cached_from = len(keep) if keep is not None else 0

    def once(schema: StructType) -> DataFrame:
        return _decode_once(
            df, value_col, schema, key, op_mode, position_cols, extra_cols, limits, count, keep, as_text
        )

    def split(decoded: DataFrame, schema: StructType) -> tuple[DataFrame, DataFrame]:
        if nested_as_text is not None:
            from pyspark.sql import functions as F

            total = decoded.agg(F.sum(AS_TEXT)).first()
            nested_as_text.append(int(total[0] or 0) if total is not None else 0)
        return _split(decoded, schema, extra_cols)

    decoded = once(table_schema)
    if unknown_fields is None or keep is None:
        return split(decoded, table_schema)
    counts = count_unknown(decoded)
    added: list[StructField] = []
    names = addable(counts, table_schema, extra_cols) if schema_evolution and counts else []
    if names:
        added = sample_types(decoded, names)
        for frame in keep[cached_from:]:  # the first decode lacks the new columns
            frame.unpersist()
        del keep[cached_from:]
        table_schema = T.StructType([*table_schema.fields, *added])
        decoded = once(table_schema)
        counts = count_unknown(decoded)  # what stays unknown, among the records still good
        log.info(
            "the table lacks field(s) the source sends, added as nullable column(s): %s",
            ", ".join(f"{f.name} {f.dataType.simpleString().upper()}" for f in added),
        )
    if new_columns is not None:
        new_columns.extend(added)
    unknown_fields.update(counts)
    if counts:
        log.warning(
            "the table lacks field(s) the source sends, not written%s: %s",
            " (no valid column names)" if schema_evolution else "",
            ", ".join(f"{n} ({c} records)" for n, c in sorted(counts.items())),
        )
    return split(decoded, table_schema)


def _decode_once(
    df: DataFrame,
    value_col: str,
    table_schema: StructType,
    key: Sequence[str],
    op_mode: OpMode,
    position_cols: Sequence[str],
    extra_cols: Sequence[str],
    limits: PayloadLimits | None,
    carry_unknown: bool,
    keep: list[DataFrame] | None,
    nested_as_text: bool,
) -> DataFrame:
    """The batch decoded against one schema, good rows and dead letters in one persisted frame."""
    from pyspark import StorageLevel
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import to_arrow_schema

    time_zone = df.sparkSession.conf.get("spark.sql.session.timeZone") or "UTC"
    decoder = ArrowJsonDecoder(
        to_arrow_schema(table_schema),
        key,
        op_mode=op_mode,
        time_zone=time_zone,
        limits=limits,
        nested_as_text=nested_as_text,
    )
    carried = (
        [T.StructField(UNKNOWN, T.ArrayType(T.StringType())), T.StructField(UNKNOWN_PAYLOAD, T.StringType())]
        if carry_unknown
        else []
    )
    if nested_as_text:
        carried.append(T.StructField(AS_TEXT, T.LongType()))
    out = T.StructType(
        [
            T.StructField(f.name, f.dataType, True)
            for f in [
                *table_schema.fields,
                T.StructField(OP_COLUMN, T.StringType()),
                *[df.schema[c] for c in extra_cols],
                T.StructField(ERROR, T.StringType()),
                T.StructField(PAYLOAD, T.StringType()),
                T.StructField(POSITION, T.StringType()),
                *carried,
            ]
        ]
    )
    task = JsonTask(
        decoder,
        value_col,
        tuple(position_cols),
        tuple(extra_cols),
        to_arrow_schema(out),
    )
    inputs = df.select(*dict.fromkeys([value_col, *position_cols, *extra_cols]))
    decoded = inputs.mapInArrow(task, out)
    if keep is not None:
        decoded = decoded.persist(StorageLevel.MEMORY_AND_DISK)
        keep.append(decoded)
    return decoded


def _split(decoded: DataFrame, table_schema: StructType, extra_cols: Sequence[str]) -> tuple[DataFrame, DataFrame]:
    from pyspark.sql import functions as F

    error = F.col(ERROR)
    good = decoded.where(error.isNull()).select(
        *[F.col(f"`{f.name}`") for f in table_schema.fields], OP_COLUMN, *[F.col(f"`{c}`") for c in extra_cols]
    )
    bad = decoded.where(error.isNotNull()).select(
        F.col(PAYLOAD).alias("payload"), error.alias("error"), F.col(POSITION).alias("source_position")
    )
    return good, bad
