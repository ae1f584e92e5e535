"""decode/json_tasks.py, the Python JSON decoder run inside Spark's tasks, against the golden
files the Spark decoder wrote (tests/golden/json/, see tests/test_decoder_golden_json.py): each
group decoded as one batch, as the golden files were written."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

from icetide.decode.json_tasks import decode_in_tasks
from tests.test_debezium_arrow import KAFKA_POSITION, kafka_frame
from tests.test_decoder_golden_conversions import GOLDEN
from tests.test_decoder_golden_json import JSON_GROUPS, _json_row


def decoded(spark: Any, group: str) -> list[dict[str, Any]]:
    make_cases, make_table, key, op_mode = JSON_GROUPS[group]
    cases, schema = make_cases(), make_table()
    keep: list[Any] = []
    good, bad = decode_in_tasks(
        kafka_frame(spark, [v for _, v in cases]),
        "value",
        schema,
        key,
        op_mode,
        KAFKA_POSITION,
        extra_cols=["offset"],
        keep=keep,
    )
    try:
        columns = [
            F.unix_micros(f.name).alias(f.name) if isinstance(f.dataType, T.TimestampType) else F.col(f"`{f.name}`")
            for f in schema.fields
        ]
        rows = [
            (r["offset"], _json_row(r.asDict(), schema, r["_op"]))
            for r in good.select(*columns, "_op", "offset").collect()
        ]
        errors = {int(r["source_position"].rpartition("@")[2]): r["error"] for r in bad.collect()}
        payloads = {int(r["source_position"].rpartition("@")[2]): r["payload"] for r in bad.collect()}
    finally:
        for frame in keep:
            frame.unpersist()
    for offset, payload in payloads.items():
        value = cases[offset][1]
        assert value is not None and payload == value.decode("utf-8", "replace")
    return [
        {
            "id": case,
            "good": [row for at, row in rows if at == offset],
            "dead_letters": [errors[offset]] if offset in errors else [],
        }
        for offset, (case, _) in enumerate(cases)
    ]


@pytest.mark.parametrize("group", list(JSON_GROUPS))
def test_json_decoded_in_tasks_matches_the_golden_files(spark: Any, group: str) -> None:
    golden = json.loads((GOLDEN / "json" / f"{group}.json").read_text())["cases"]
    expected = [{k: c[k] for k in ("id", "good", "dead_letters")} for c in golden]
    assert decoded(spark, group) == expected
