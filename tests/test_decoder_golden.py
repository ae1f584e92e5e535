"""The Debezium decoder's output on every real message file of tests/data/debezium, frozen as golden
files (tests/golden/debezium/) before the decoders are made one (issue 23, item 3): they are the
specification a new decoder must match, good rows and dead letters alike.

Each file is decoded as one batch into a table of every field its schemas name (nullable but the
key), by the Spark decoder as it stood at 277650a. Values are written in one spelling: timestamps
as epoch microseconds, dates as ISO text, decimals and floats as text (so a scale, -0.0 or NaN
count), binary as base64. `ICETIDE_UPDATE_GOLDEN=1` rewrites the files: do that only for a change
of rule that is meant, and say so in the commit.
"""

from __future__ import annotations

import base64
import json
import os
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

from icetide.decode.debezium.tasks import decode_debezium
from tests.test_debezium_arrow import FILES, KAFKA_POSITION, file_schema, kafka_frame

GOLDEN = Path(__file__).resolve().parent / "golden" / "debezium"
UPDATE = os.environ.get("ICETIDE_UPDATE_GOLDEN") == "1"
# Files the Python decoder does not read yet, with the reason decode/debezium/tasks.py logs: the
# Spark SQL decoder reads them (closing a gap is a visible change here).
CASES = sorted({(name, table, key) for name, table, key, _ in FILES})


def _spelling(v: Any) -> Any:
    if isinstance(v, Decimal | float):
        return repr(v) if isinstance(v, float) else str(v)
    if isinstance(v, bytes | bytearray):
        return base64.b64encode(bytes(v)).decode()
    if isinstance(v, date):
        return v.isoformat()
    if isinstance(v, list):
        return [_spelling(x) for x in v]
    if isinstance(v, dict):
        return {k: _spelling(x) for k, x in v.items()}
    return v


def decoded(spark: Any, name: str, table: str | None, key: tuple[str, ...]) -> dict[str, Any]:
    """What the decoder makes of the file: the table it was decoded into, good changes, dead letters."""
    values, schema = file_schema(name, key, table)
    keep: list[Any] = []
    out = decode_debezium(kafka_frame(spark, values), "value", schema, list(key), "upsert", KAFKA_POSITION, keep=keep)
    try:
        columns = [
            F.unix_micros(f.name).alias(f.name) if isinstance(f.dataType, T.TimestampType) else F.col(f"`{f.name}`")
            for f in schema.fields
        ]
        good = [
            {"_op": r["_op"], "_source_order": r["_source_order"], **{n: _spelling(r[n]) for n in schema.names}}
            for r in out.good.select(*columns, "_op", "_source_order").collect()
        ]
        bad = [{"source_position": r["source_position"], "error": r["error"]} for r in out.bad.collect()]
    finally:
        for frame in keep:
            frame.unpersist()
    good.sort(key=lambda r: (r["_source_order"], r["_op"]))
    bad.sort(key=lambda r: r["source_position"])
    return {
        "table": [[f.name, f.dataType.simpleString(), f.nullable] for f in schema.fields],
        "key": list(key),
        "good": good,
        "dead_letters": bad,
    }


@pytest.mark.parametrize(("name", "table", "key"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_decoder_output_matches_its_golden_file(spark: Any, name: str, table: str | None, key: tuple[str, ...]) -> None:
    path = GOLDEN / f"{name}{'-' + table if table else ''}.json"
    got = decoded(spark, name, table, key)
    if UPDATE or not path.exists():
        assert UPDATE, f"{path.name} is missing: run with ICETIDE_UPDATE_GOLDEN=1 to write it"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    assert got == json.loads(path.read_text())


def test_a_share_without_records_decodes_to_nothing(spark: Any) -> None:
    """A table's share of a batch can be empty once the offsets it holds are skipped (a batch read
    again after a kill between two tables' commits): it decodes to no row and no dead letter,
    where it once failed an assertion."""
    name, table, key = CASES[0]
    _, schema = file_schema(name, key, table)
    keep: list[Any] = []
    out = decode_debezium(kafka_frame(spark, []), "value", schema, list(key), "upsert", KAFKA_POSITION, keep=keep)
    try:
        assert out.good.count() == 0 and out.bad.count() == 0
    finally:
        for frame in keep:
            frame.unpersist()
