"""Schema evolution without a schema: the keys of JSON records that are no column, counted, and
typed from their first value, for `decode_json` and decode/json/tasks.py.

Both decoders carry, for each good record, UNKNOWN (its top-level keys that are no column nor
`_op`) and, when the table may evolve, UNKNOWN_PAYLOAD (its payload, for records with such keys
only); `count_unknown` and `sample_types` then run one Spark job each over the decoded cache.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from icetide.write.collapse import OP_COLUMN

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructField, StructType

UNKNOWN = "_icetide_unknown"  # a record's top-level keys that are not columns
UNKNOWN_PAYLOAD = "_icetide_unknown_payload"  # the payload of a record with such keys
_PARSED = "_icetide_parsed"
_ARRIVAL = "_icetide_arrival"


def infer_ddl(text: str | None) -> str:
    """The column type a JSON value's text asks for, for schema evolution without a schema:
    BOOLEAN, BIGINT (up to 18 digits), DOUBLE, else STRING (null: STRING). The text is what
    Spark's JSON reader keeps for a STRING field, so a quoted "12" reads as 12 does."""
    if text is None:
        return "STRING"
    if text in ("true", "false"):
        return "BOOLEAN"
    if re.fullmatch(r"-?[0-9]{1,18}", text):
        return "BIGINT"
    if re.fullmatch(r"-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?", text):
        return "DOUBLE"
    return "STRING"


def count_unknown(good: DataFrame) -> dict[str, int]:
    """Good records per top-level key that is no column (one Spark job)."""
    from pyspark.sql import functions as F

    counts = (
        good.where(F.size(UNKNOWN) > 0).select(F.explode(UNKNOWN).alias("field")).groupBy("field").count().collect()
    )
    return {r["field"]: r["count"] for r in counts}


def addable(unknown: Mapping[str, int], table_schema: StructType, extra_cols: Sequence[str]) -> list[str]:
    """The unknown keys schema evolution can add, in name order. Not: an empty name or one with
    a dot (Iceberg reads a dot in a new top-level name as a path), icetide's internal names, and
    names equal but for case to a column, an extra column or another such key (Spark resolves
    names without regard to case, so the batch could not tell them apart)."""
    taken = [f.name.lower() for f in table_schema.fields] + [c.lower() for c in [*extra_cols, OP_COLUMN]]
    lowered = [n.lower() for n in unknown]
    return [
        n
        for n in sorted(unknown)
        if n
        and "." not in n
        and not n.lower().startswith("_icetide_")
        and n.lower() not in taken
        and lowered.count(n.lower()) == 1
    ]


def sample_types(good: DataFrame, names: Sequence[str]) -> list[StructField]:
    """Nullable columns for `names`, each typed by `infer_ddl` of its first non-null value in
    `good` (first by Spark partition, then by position in it). One Spark job over the cache."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    parse = T.StructType([T.StructField(n, T.StringType()) for n in names])
    values = good.where(F.size(UNKNOWN) > 0).select(
        F.from_json(F.col(UNKNOWN_PAYLOAD), parse).alias(_PARSED), F.monotonically_increasing_id().alias(_ARRIVAL)
    )
    parsed, arrival = F.col(_PARSED), F.col(_ARRIVAL)
    sample = values.agg(
        *[F.min_by(parsed[n], F.when(parsed[n].isNotNull(), arrival)).alias(_sample(i)) for i, n in enumerate(names)]
    ).first()
    return [
        T.StructField(n, T._parse_datatype_string(infer_ddl(sample[_sample(i)] if sample else None).lower()), True)
        for i, n in enumerate(names)
    ]


def _sample(i: int) -> str:
    return f"_icetide_sample_{i}"
