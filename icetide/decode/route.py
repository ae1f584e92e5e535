"""Route Debezium change events to tables: a table-name template filled from each record.

`lake.inventory.{table}` takes {db}, {schema} and {table} from the envelope's `source` block
(with or without the JSON converter's schema wrapper) and {topic} from the Kafka record. Each
value has every character that is not a letter, digit or '_' replaced by '_', so a name part is
always a valid identifier (`dbserver1.inventory.orders` as {topic} gives `dbserver1_inventory_orders`).

The route is one SQL expression per record, computed where the records are read: a tombstone
gets no route and no error (it carries no change), a record that names no table (not JSON, a
source block without a field the template needs, or one whose field holds bytes that are not
UTF-8) gets an error and goes to the dead-letter table.
"""

from __future__ import annotations

import re
import string
from typing import TYPE_CHECKING

from icetide.config.pipeline import table_name_placeholders

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

ROUTE_COLUMN = "_icetide_route"
ROUTE_ERROR_COLUMN = "_icetide_route_error"
_INVALID = "[^A-Za-z0-9_]"


def identifier_part(value: str) -> str:
    """`value` with every character invalid in an identifier replaced by '_' (as routes do)."""
    return re.sub(_INVALID, "_", value)


def with_routes(
    df: DataFrame,
    template: str,
    *,
    value_col: str = "value",
    topic_col: str = "topic",
    error_col: str | None = None,
) -> DataFrame:
    """`df` plus ROUTE_COLUMN (the table name, null for tombstones and unroutable records) and
    ROUTE_ERROR_COLUMN (why a record that is not a tombstone has no route, else null). A record
    whose `error_col` is set (the source could not read it) has no route and that error."""
    from pyspark.sql import functions as F

    if error_col is not None:
        routed = with_routes(df, template, value_col=value_col, topic_col=topic_col)
        read_error = F.col(error_col)
        return routed.withColumns(
            {
                ROUTE_COLUMN: F.when(read_error.isNull(), F.col(ROUTE_COLUMN)),
                ROUTE_ERROR_COLUMN: F.coalesce(read_error, F.col(ROUTE_ERROR_COLUMN)),
            }
        )

    needed = table_name_placeholders(template)
    text = F.col(value_col).cast("string")
    source_fields = [f for f in needed if f != "topic"]
    if not source_fields:
        route = _format(template, {"topic": F.col(topic_col)})
        return df.select(
            "*",
            F.when(F.col(value_col).isNotNull(), route).alias(ROUTE_COLUMN),
            F.lit(None).cast("string").alias(ROUTE_ERROR_COLUMN),
        )
    source = "STRUCT<db: STRING, schema: STRING, table: STRING>"
    parsed = F.from_json(
        text,
        f"schema STRING, payload STRUCT<op: STRING, source: {source}>, op STRING, source {source}",
        {"mode": "PERMISSIVE"},
    )
    wrapped = parsed["payload"].isNotNull()
    block = F.when(wrapped, parsed["payload"]["source"]).otherwise(parsed["source"])
    values = {f: block[f] for f in source_fields}
    values["topic"] = F.col(topic_col)
    route = _format(template, values)
    trimmed = F.trim(text)
    tombstone = (
        F.col(value_col).isNull()
        | (trimmed == "null")
        | (~wrapped & parsed["op"].isNull() & parsed["schema"].isNotNull())  # {"schema": ..., "payload": null}
    )
    not_json = parsed.isNull() | ~trimmed.startswith("{")
    error = F.when(tombstone, F.lit(None)).when(
        not_json, F.lit("not a JSON object: cannot route it to a table (table.name is a template)")
    )
    # Bytes that are not UTF-8 read as U+FFFD, which the route would turn into "_" (a table named from
    # them, issue 49): such a record is a dead letter naming the field. Re-encoding the text gives
    # other bytes exactly when they are not UTF-8.
    not_utf8 = F.encode(text, "UTF-8") != F.col(value_col)
    first_bad = _first_bad_byte(text, F.col(value_col))
    for f in source_fields:
        error = error.when(
            block[f].isNull(),
            F.lit(f"source.{f} is missing: cannot route the record to a table (table.name uses {{{f}}})"),
        ).when(
            not_utf8 & block[f].contains("\ufffd"),
            F.concat(
                F.lit("payload is not valid UTF-8 at byte "),
                first_bad,
                F.lit(f", source.{f} among its bad bytes: cannot route the record to a table"),
            ),
        )
    return df.select(
        "*",
        F.when(error.isNull() & ~tombstone, route).alias(ROUTE_COLUMN),
        error.alias(ROUTE_ERROR_COLUMN),
    )


def _first_bad_byte(text: Column, value: Column) -> Column:
    """The offset (as text) of the first byte of `value` that is not UTF-8: the length of what
    reads before its first U+FFFD. Spark's cast to STRING keeps the bytes as they are, so the
    replacement is made by `make_valid_utf8` (Spark 4) or by `decode`, which replaces on 3.5 and
    raises on 4. (A payload holding a real U+FFFD before its first bad byte names that one.)"""
    import pyspark
    from pyspark.sql import functions as F

    valid = (
        F.decode(value, "UTF-8") if pyspark.__version__.startswith("3.") else F.call_function("make_valid_utf8", text)
    )
    return F.octet_length(valid.substr(F.lit(1), F.instr(valid, "\ufffd") - 1)).cast("string")


def _format(template: str, values: dict[str, Column]) -> Column:
    """SQL concatenation of the template's literal parts and its (sanitised) values."""
    from pyspark.sql import functions as F

    parts: list[Column] = []
    for literal, field_name, _, _ in string.Formatter().parse(template):
        if literal:
            parts.append(F.lit(literal))
        if field_name is not None:
            parts.append(F.regexp_replace(values[field_name].cast("string"), _INVALID, "_"))
    return F.concat(*parts) if parts else F.lit(template)
