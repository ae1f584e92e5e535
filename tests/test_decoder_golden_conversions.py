"""The Spark decoders' output on the conversion cases of the tests, frozen as golden files before
the decoders are made one (issue 23, item 3): with tests/golden/debezium/ (the real messages, see
tests/test_decoder_golden.py) they are the specification the Python decoders must match.

tests/golden/debezium_conversions/: `decode_debezium` on the synthetic messages of
tests/test_debezium_arrow.py (`CONVERSIONS` on the real full_types schema, `_events()` on the
real products schema in both op modes). tests/golden/json/ (tests/test_decoder_golden_json.py):
`decode_json` on the payloads of tests/test_decode.py and tests/test_fast_append.py. One file per
group of cases, all of a group
decoded as one batch (one Kafka offset per case, from 0), one case per line under a stable id:
its good rows (with `_op`, and `_source_order` for Debezium) and its dead letters' errors. Values
are spelled as tests/test_decoder_golden.py spells them. Written by the decoders as they stood at
ea61af6; `ICETIDE_UPDATE_GOLDEN=1` rewrites the files: do that only for a change of rule that is
meant, and say so in the commit.

Each group is decoded as one batch by `decode_debezium` (the Python decoder in Spark's tasks,
decode/debezium/tasks.py), which must give the golden output: by the Spark SQL decoder when the
group has a case the Python decoder does not read yet (the fallback), and by itself once those
cases are left out (replaced by tombstones, so that every other case keeps its offset).

Each case is also decoded alone by the Python decoder of its format (decode/debezium/rows.py,
decode/json/records.py), which must give exactly the golden output, or not decode it: the cases it
does not decode yet are NOT_YET below, by reason, so that closing a gap is a visible change here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import types as T

from icetide.decode.debezium.connect_schema import parse_envelope_schema, table_schema
from icetide.decode.debezium.rows import NotHere
from icetide.decode.debezium.tasks import decode_debezium
from tests.debezium_messages import ProductsStream
from tests.test_debezium_arrow import (
    _FULL_TYPES_TABLE,
    CONVERSIONS,
    _events,
    full_types,
    python_changes,
    spark_rows,
)
from tests.test_decoder_golden import _spelling

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("ICETIDE_UPDATE_GOLDEN") == "1"
Case = tuple[str, bytes | None]  # (stable id, Kafka value)
Output = dict[str, Any]  # {"good": [row, ...], "dead_letters": [error, ...]}
ALL = "every case of the group"


def check_golden(path: Path, head: dict[str, Any], cases: list[dict[str, Any]]) -> dict[str, Any]:
    """The golden file at `path` equals `head` and `cases` (written first with ICETIDE_UPDATE_GOLDEN=1)."""
    got = {**head, "cases": cases}
    if UPDATE or not path.exists():
        assert UPDATE, f"{path.name} is missing: run with ICETIDE_UPDATE_GOLDEN=1 to write it"
        path.parent.mkdir(parents=True, exist_ok=True)
        opening = json.dumps(head, sort_keys=True)[:-1] + ', "cases": [\n'
        lines = ",\n".join(json.dumps(c, sort_keys=True, ensure_ascii=False) for c in cases)
        path.write_text(opening + lines + "\n]}\n")
    golden = json.loads(path.read_text())
    assert got == golden
    return golden


def check_python(
    group: str,
    cases: Sequence[Case],
    golden: dict[str, Any],
    decode: Callable[[int, bytes | None], Output],
    known: dict[str, str] | None = None,
) -> dict[str, str]:
    """Each case decoded alone: exactly its golden output, or NotHere. Returns id -> NotHere reason;
    a case of `known` (id -> how) must give another output than its golden one (else it leaves the list)."""
    expected = {c["id"]: {"good": c["good"], "dead_letters": c["dead_letters"]} for c in golden["cases"]}
    not_yet: dict[str, str] = {}
    differs: dict[str, Output] = {}
    for offset, (case, value) in enumerate(cases):
        try:
            mine = decode(offset, value)
        except NotHere as exc:
            not_yet[case] = str(exc)
            continue
        if mine != expected[case]:
            differs[case] = mine
    known = known or {}
    unexpected = [
        f"{case}: Python {mine} != golden {expected[case]}" for case, mine in differs.items() if case not in known
    ]
    assert not unexpected, f"{group}:\n" + "\n".join(unexpected)
    assert set(differs) == set(known), f"{group}: now as golden: {set(known) - set(differs)}"
    return not_yet


def by_reason(not_yet: dict[str, str], cases: Sequence[Case]) -> dict[str, Any]:
    """reason -> sorted ids, or ALL when a reason covers every case of the group."""
    grouped: dict[str, list[str]] = {}
    for case, reason in not_yet.items():
        grouped.setdefault(reason, []).append(case)
    return {r: ALL if len(ids) == len(cases) else tuple(sorted(ids)) for r, ids in grouped.items()}


def unique(cases: list[Case]) -> list[Case]:
    ids = [c for c, _ in cases]
    assert len(set(ids)) == len(ids), "case ids must be unique"
    return cases


# -- Debezium ---------------------------------------------------------------------------------------


def _conversion_id(column: str, value: Any) -> str:
    shown = repr(value)
    return f"{column}={shown if len(shown) <= 60 else f'{shown[:20]}...({len(shown)} chars)'}"


def conversion_cases() -> list[Case]:
    """CONVERSIONS as test_conversions_decode_as_on_the_spark_path builds them (row id = offset)."""
    return unique(
        [
            (_conversion_id(column, value), full_types(i, **{column: value}))
            for i, (column, value, _) in enumerate(CONVERSIONS)
        ]
    )


def event_cases() -> list[Case]:
    return unique([(name, value) for name, value, _ in _events()])


def _debezium_rows(rows: dict[tuple[str, str], tuple[Any, ...]], schema: T.StructType) -> list[dict[str, Any]]:
    spelled = [
        {"_op": op, "_source_order": order, **{n: _spelling(v) for n, v in zip(schema.names, row, strict=True)}}
        for (op, order), row in rows.items()
    ]
    return sorted(spelled, key=lambda r: (r["_source_order"], r["_op"]))


DEBEZIUM_GROUPS: dict[str, tuple[Callable[[], list[Case]], Callable[[], T.StructType], list[str], str]] = {
    # group -> (cases, table, key, op mode)
    "conversions": (conversion_cases, lambda: _FULL_TYPES_TABLE, ["int_c"], "upsert"),
    **{
        f"change_events-{mode}": (
            event_cases,
            lambda: table_schema(parse_envelope_schema(json.dumps(ProductsStream().schema)), ["id"]),
            ["id"],
            mode,
        )
        for mode in ("upsert", "append")
    },
}

# What the Python Debezium decoder does not decode yet: group -> NotHere reason -> case ids. Its dead
# letters are the golden ones; these are the cases where the Spark path's output is not known to it.
_EVENTS_NOT_YET: dict[str, Any] = {
    "op 't': a truncate (the Spark path applies it)": ("truncate",),
}
# Where the Python decoder gives another output than the golden file on purpose: case id -> its output.
# A key repeated in an object: the Spark SQL decoder gave nothing at all (neither a row nor a dead
# letter, so the record vanished); the Python decoder makes it a dead letter.
_REPEATED_KEY = {"good": [], "dead_letters": ["malformed JSON: key 'id' repeated in an object"]}
DELIBERATE: dict[str, dict[str, dict[str, Any]]] = {
    "change_events-upsert": {"a row twice": _REPEATED_KEY},
    "change_events-append": {"a row twice": _REPEATED_KEY},
}
NOT_YET_DEBEZIUM: dict[str, dict[str, Any]] = {
    "change_events-upsert": _EVENTS_NOT_YET,
    "change_events-append": _EVENTS_NOT_YET,
}


# Cases the Python decoder does not read alone (NotHere) but reads in a batch: a truncate needs the batch.
BATCH_READS = {"truncate"}


def batch_cases(
    spark: Any, values: Sequence[bytes | None], schema: T.StructType, key: list[str], op_mode: str
) -> list[dict[str, Any]]:
    """`decode_debezium`'s output of `values` as one batch (one Kafka offset each, from 0), per case."""
    good, bad = spark_rows(spark, values, schema, key, op_mode=op_mode, decode=decode_debezium)
    per_case: list[dict[str, Any]] = []
    for offset in range(len(values)):
        mine = {c: row for c, row in good.items() if int(c[1].rpartition("|")[2]) == offset}
        per_case.append(
            {
                "offset": offset,
                "good": _debezium_rows(mine, schema),
                "dead_letters": [bad[offset]] if offset in bad else [],
            }
        )
    assert sum(len(c["good"]) for c in per_case) == len(good)
    return per_case


@pytest.mark.parametrize("group", list(DEBEZIUM_GROUPS))
def test_debezium_decoders_match_the_golden_files(spark: Any, group: str) -> None:
    make_cases, make_table, key, op_mode = DEBEZIUM_GROUPS[group]
    cases, schema = make_cases(), make_table()
    values = [v for _, v in cases]
    per_case = [
        {"id": case, **c} for (case, _), c in zip(cases, batch_cases(spark, values, schema, key, op_mode), strict=True)
    ]
    deliberate = DELIBERATE.get(group, {})
    golden_cases = {
        c["id"]: c for c in json.loads((GOLDEN / "debezium_conversions" / f"{group}.json").read_text())["cases"]
    }
    for c in per_case:
        if c["id"] in deliberate:  # checked here, then compared with the golden file as the golden output
            assert {"good": c["good"], "dead_letters": c["dead_letters"]} == deliberate[c["id"]], c["id"]
            assert {k: golden_cases[c["id"]][k] for k in ("good", "dead_letters")} != deliberate[c["id"]]
            c.update(good=golden_cases[c["id"]]["good"], dead_letters=golden_cases[c["id"]]["dead_letters"])
    head = {
        "decoder": "icetide.decode.debezium.decode_debezium",  # the Spark SQL decoder that wrote the file
        "table": [[f.name, f.dataType.simpleString(), f.nullable] for f in schema.fields],
        "key": key,
        "op_mode": op_mode,
    }
    golden = check_golden(GOLDEN / "debezium_conversions" / f"{group}.json", head, per_case)
    not_yet_ids = {i for ids in NOT_YET_DEBEZIUM.get(group, {}).values() for i in ids} - BATCH_READS

    # The batch without the cases the Python decoder does not read yet: read by it alone.
    kept = [None if case in not_yet_ids else v for case, v in cases]
    alone = batch_cases(spark, kept, schema, key, op_mode)
    for case, mine, expected in zip(cases, alone, golden["cases"], strict=True):
        want = {"good": [], "dead_letters": []} if case[0] in not_yet_ids else deliberate.get(case[0], expected)
        assert {"good": mine["good"], "dead_letters": mine["dead_letters"]} == {
            "good": want["good"],
            "dead_letters": want["dead_letters"],
        }, case[0]

    def python(offset: int, value: bytes | None) -> Output:
        rows, dead = python_changes([value], schema, key, op_mode=op_mode, first_offset=offset)
        return {"good": _debezium_rows(rows, schema), "dead_letters": dead.get(offset, [])}

    not_yet = check_python(group, cases, golden, python, {c: "on purpose: see DELIBERATE" for c in deliberate})
    for offset, (case, value) in enumerate(cases):
        if case in deliberate:
            assert python(offset, value) == deliberate[case], case
    assert by_reason(not_yet, cases) == NOT_YET_DEBEZIUM.get(group, {})
