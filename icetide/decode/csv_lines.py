"""CSV lines into a table's columns, exactly: each line is one row or one dead letter.

Spark's CSV reader repairs what it cannot read (issue 49): bytes that are not UTF-8 become U+FFFD,
a field that does not fit its column becomes null, missing fields null and extra fields are
dropped. Here the lines come as bytes (sources/files.py `read_csv_lines_task`, the header and
comment lines left out) and are parsed by Spark's own CSV parser (`from_csv`, with the reader's
options), twice: into the table's column types and into text, each with a corrupt-record column.
The table's columns are matched by position, as Spark's reader matches a schema. A line is a dead
letter (payload: the line, as text with U+FFFD where its bytes are not UTF-8) when

- its bytes are not UTF-8: "payload is not valid UTF-8 at byte 12, in column note";
- it has more or fewer fields than the table has columns: "csv: the line has 3 fields, the table
  has 4 columns";
- a field does not parse as its column's type: "column clicks: 'many' is not an INT";
- a finite number beyond its FLOAT or DOUBLE column's range, which Spark reads as infinity:
  "column price: '1e400' is out of DOUBLE range" (the words Spark reads as infinity stay values);
- a key column or a NOT NULL column is null: "key column ad_id is missing or null".

A field equal to the `nullValue` option (default: empty) is null in any column, as in Spark.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from icetide.decode.frames import OpMode, source_position
from icetide.decode.json.scalars import RAW_MESSAGE_CHARS
from icetide.write.collapse import INSERT, OP_COLUMN, UPSERT

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

CORRUPT = "_icetide_corrupt"
# Reader options that say which lines are records: sources/files.py has applied them already.
_LINE_OPTIONS = {"header", "comment", "inferschema", "enforceschema", "samplingratio"}
_BAD_BYTES, _FIELD_COUNT = "\x00bytes", "\x00count"  # markers, replaced by `problem_text`


def parse_options(options: Mapping[str, str]) -> dict[str, str]:
    """`from_csv`'s options for a landing folder's reader `options`: those that pick the lines
    left out, and a corrupt-record column of ours added (PERMISSIVE keeps a bad line to refuse)."""
    kept = {k: v for k, v in options.items() if k.lower() not in _LINE_OPTIONS}
    return {**kept, "mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}


def decode_csv(
    lines: DataFrame,
    value_col: str,
    table_schema: StructType,
    key: Sequence[str],
    op_mode: OpMode,
    position_cols: Sequence[str],
    options: Mapping[str, str],
    *,
    keep: list[DataFrame],
) -> tuple[DataFrame, DataFrame]:
    """(good rows: the table's columns and `_op`; bad records: BAD_DDL's columns), from the
    binary lines in `value_col`. The parsed lines are persisted once and appended to `keep`."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    names = [f.name for f in table_schema.fields]
    lowered = {k.lower(): v for k, v in options.items()}
    # The texts Spark's CSV parser reads as infinity: its own words and the options' (default Inf, -Inf).
    infinity_words = [
        *(w.lower() for w in (lowered.get("positiveinf", "Inf"), lowered.get("negativeinf", "-Inf"))),
        *(s + w for s in ("", "+", "-") for w in ("inf", "infinity")),
    ]
    typed_ddl = ", ".join(
        [*(f"c{i} {f.dataType.simpleString()}" for i, f in enumerate(table_schema.fields)), f"{CORRUPT} STRING"]
    )
    text_ddl = ", ".join([*(f"c{i} STRING" for i in range(len(names))), f"{CORRUPT} STRING"])
    opts = parse_options(options)
    text = F.col(value_col).cast("string")
    parsed = lines.select(
        *[F.col(c) for c in position_cols],
        F.col(value_col).alias("_raw"),
        text.alias("_text"),
        F.from_csv(text, typed_ddl, opts).alias("_typed"),
        F.from_csv(text, text_ddl, opts).alias("_fields"),
    )
    problem = (
        F.when(F.encode(F.col("_text"), "UTF-8") != F.col("_raw"), F.lit(_BAD_BYTES))
        .when(F.col(f"_fields.{CORRUPT}").isNotNull(), F.lit(_FIELD_COUNT))
        .when(F.col(f"_typed.{CORRUPT}").isNotNull(), _unfit(table_schema))
    )
    for i, f in enumerate(table_schema.fields):  # as the JSON decoder words them
        value, field = F.col(f"_typed.c{i}"), F.col(f"_fields.c{i}")
        if f.name in key or not f.nullable:
            why = f"key column {f.name} is missing or null" if f.name in key else f"column {f.name} is missing or null"
            problem = problem.when(value.isNull(), F.lit(why + ("" if f.name in key else " (NOT NULL)")))
        if isinstance(f.dataType, T.FloatType | T.DoubleType):
            # Spark reads a number beyond the type's range as infinity: a finite number, refused (issue 49)
            beyond = (F.abs(value) == F.lit(math.inf)) & ~F.lower(F.trim(field)).isin(*infinity_words)
            problem = problem.when(
                beyond,
                F.concat(
                    F.lit(f"column {f.name}: '"),
                    _quoted(field),
                    F.lit(f"' is out of {f.dataType.simpleString().upper()} range"),
                ),
            )
    parsed = parsed.withColumn("_problem", problem).persist(StorageLevel.MEMORY_AND_DISK)
    keep.append(parsed)
    op = F.lit(INSERT if op_mode == "append" else UPSERT)
    good = parsed.where(F.col("_problem").isNull()).select(
        *[F.col(f"_typed.c{i}").alias(name) for i, name in enumerate(names)], op.alias(OP_COLUMN)
    )
    explain = F.udf(_problem_explainer(names, opts), "string", useArrow=False)
    bad = parsed.where(F.col("_problem").isNotNull()).select(
        # U+FFFD where the bytes are not UTF-8: the cast alone keeps them, which no writer takes.
        F.encode(F.col("_text"), "UTF-8").cast("string").alias("payload"),
        explain(F.col("_problem"), F.col("_raw")).alias("error"),
        source_position(position_cols).alias("source_position"),
    )
    return good, bad


def _unfit(table_schema: StructType) -> Column:
    """The error naming the first column whose field is there as text but not as its type."""
    from pyspark.sql import functions as F

    cases = None
    for i, f in enumerate(table_schema.fields):
        field = F.col(f"_fields.c{i}")
        shown = _quoted(field)
        shown_type = f.dataType.simpleString().upper()
        article = "an" if shown_type[:1] in "AEIOU" else "a"
        message = F.concat(F.lit(f"column {f.name}: '"), shown, F.lit(f"' is not {article} {shown_type}"))
        fails = field.isNotNull() & F.col(f"_typed.c{i}").isNull()
        cases = F.when(fails, message) if cases is None else cases.when(fails, message)
    fallback = F.lit(f"csv: the line does not parse into the table's {len(table_schema.fields)} columns")
    return fallback if cases is None else cases.otherwise(fallback)


def _quoted(field: Column) -> Column:
    """A field's text as an error quotes it: at most RAW_MESSAGE_CHARS characters."""
    from pyspark.sql import functions as F

    return F.when(F.length(field) <= RAW_MESSAGE_CHARS, field).otherwise(
        F.concat(F.substring(field, 1, RAW_MESSAGE_CHARS), F.lit("..."))
    )


def _problem_explainer(names: list[str], options: Mapping[str, str]) -> Callable[[str, bytes], str]:
    """The function that turns a problem marker into its error; called on bad lines only."""
    lowered = {k.lower(): v for k, v in options.items()}
    dialect = CsvDialect(
        lowered.get("sep", lowered.get("delimiter", ",")), lowered.get("quote", '"'), lowered.get("escape", "\\")
    )

    def explain(problem: str, raw: bytes) -> str:
        return problem_text(problem, raw, names, dialect)

    return explain


@dataclass(frozen=True)
class CsvDialect:
    """The reader options Python's csv reader needs to count a line's fields as Spark's does."""

    sep: str
    quote: str
    escape: str


def problem_text(problem: str, raw: bytes, names: Sequence[str], dialect: CsvDialect) -> str:
    """A bad line's error. Spark's parser has found the problem; the byte offset, the column of
    bad bytes and the number of fields come from Python's csv reader with the same separator,
    quote and escape (only for the message: the line is a dead letter either way)."""
    if problem == _BAD_BYTES:
        try:
            raw.decode("utf-8")
            return "payload is not valid UTF-8"  # Java's decoder and Python's disagree
        except UnicodeDecodeError as exc:
            offset = exc.start
        where = _fields(raw[:offset].decode("utf-8") + "x", dialect)
        column = f", in column {names[len(where) - 1]}" if where and len(where) <= len(names) else ""
        return f"payload is not valid UTF-8 at byte {offset}{column}"
    if problem == _FIELD_COUNT:
        found = _fields(raw.decode("utf-8"), dialect)
        if found is not None and len(found) != len(names):
            return f"csv: the line has {len(found)} fields, the table has {len(names)} columns"
        return f"csv: the line's fields do not match the table's {len(names)} columns"
    return problem


def _fields(line: str, dialect: CsvDialect) -> list[str] | None:
    try:
        return next(
            csv.reader(
                [line],
                delimiter=dialect.sep,
                quotechar=dialect.quote or None,
                escapechar=dialect.escape or None,
                quoting=csv.QUOTE_MINIMAL if dialect.quote else csv.QUOTE_NONE,
            ),
            [],
        )
    except (csv.Error, TypeError):  # a separator Python's reader does not take (Spark's can be longer)
        return None
