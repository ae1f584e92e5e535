"""Debezium JSON-converter messages read a run at a time as columns (decode/debezium/json_runs.py) against
the per-message decoder it must equal (decode/debezium/message.py `EnvelopeReader.read` +
decode/debezium/rows.py `TableRows.add`): a run gives exactly the per-message changes and unknown
fields, or is refused and read that way.

Messages: bench/ingest_debezium.py's MySQL events (the JSON converter's layout, schema in every
message), every real connector message file of tests/data/debezium (tests/data/debezium/SOURCES.md
names each one's repository), and those messages changed in the ways a run must refuse.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from icetide.decode.avro.container import NotColumnar
from icetide.decode.debezium.json_runs import JsonRuns
from icetide.decode.debezium.message import EnvelopeReader
from icetide.decode.debezium.rows import Conversions, NotHere, TableRows, source_order
from icetide.decode.limits import PayloadLimits
from tests.test_debezium_arrow import FILES, arrow_schema, file_schema

TS = pa.timestamp("us", tz="UTC")
BENCH_COLUMNS = pa.schema(
    [
        pa.field("event_id", pa.string(), nullable=False),
        pa.field("event_time", TS, nullable=False),
        ("ad_id", pa.int64()),
        ("campaign_id", pa.int32()),
        ("country", pa.string()),
        ("device", pa.string()),
        ("price", pa.float64()),
        ("clicks", pa.int32()),
        ("produced_at", TS),
    ]
)
BENCH_KEY = ["event_id", "event_time"]


@dataclass
class Message:
    """A Kafka message as confluent-kafka's reader hands it to a task."""

    _value: bytes | None
    _offset: int

    def value(self) -> bytes | None:
        return self._value

    def key(self) -> bytes | None:
        return None

    def offset(self) -> int:
        return self._offset


def changes(rows: TableRows) -> list[dict[str, Any]]:
    """The rows' changes, NaN as text (NaN equals nothing, itself included)."""
    return [{k: "NaN" if v != v else v for k, v in change.items()} for change in rows.table().to_pylist()]


def one_by_one(
    values: Sequence[bytes | None], columns: pa.Schema, key: list[str], held: int, by_source: bool
) -> tuple[list[dict[str, Any]], dict[str, int]] | str:
    """What the per-message decoder makes of the messages: (changes, unknown fields), or why not."""
    reader, rows = EnvelopeReader(PayloadLimits()), TableRows(columns, key, "upsert", Conversions())
    try:
        for offset, value in enumerate(values, start=1000):
            envelope = None if value is None else reader.read(value)
            if envelope is None or offset < held:
                continue
            order = source_order(envelope.source, envelope.ts_ms, offset) if by_source else ""
            errors = rows.add(envelope, order, evolving=False)
            if errors:
                return f"dead letter: {errors}"
    except NotHere as exc:
        return f"NotHere: {exc}"
    return changes(rows), dict(rows.unknown)


def as_run(
    values: Sequence[bytes | None], columns: pa.Schema, key: list[str], held: int, by_source: bool
) -> tuple[list[dict[str, Any]], dict[str, int]] | None:
    """What a run makes of the messages, None when it refuses them (or they are no one run)."""
    limits = PayloadLimits()
    runs = JsonRuns(EnvelopeReader(limits), limits)
    rows = TableRows(columns, key, "upsert", Conversions())
    messages = [Message(v, 1000 + i) for i, v in enumerate(values)]
    end, events, bodies, head = runs.run(messages, 0)
    if end != len(messages) or not bodies:
        return None
    try:
        run = runs.read(head, bodies)
        runs.check(head, columns)
        offsets = np.array([m.offset() for m in events], np.int64)
        run.add_to(rows, offsets, held=held, by_source=by_source, evolving=False)
    except NotColumnar:
        return None
    return changes(rows), dict(rows.unknown)


def agree(
    values: Sequence[bytes | None], columns: pa.Schema, key: list[str], *, held: int = -1, by_source: bool = True
) -> bool:
    """The run gives the per-message changes, or refuses; True when it took the messages."""
    expected = one_by_one(values, columns, key, held, by_source)
    got = as_run(values, columns, key, held, by_source)
    if got is None:
        return False
    assert not isinstance(expected, str), f"the run was taken; one by one: {expected}"
    assert got[1] == expected[1]
    assert len(got[0]) == len(expected[0])
    for i, (a, b) in enumerate(zip(got[0], expected[0], strict=True)):
        assert a == b, f"change {i}: " + ", ".join(f"{k}: {a[k]!r} != {b[k]!r}" for k in a if a[k] != b[k])
    return True


def bench_messages(count: int) -> list[bytes]:
    from bench.ingest import event
    from bench.ingest_debezium import debezium_event

    now = int(time.time() * 1000)
    return [debezium_event(json.loads(event(i, now)), i) for i in range(count)]


def with_changes(values: list[bytes]) -> list[bytes | None]:
    """The bench's creates turned into updates (every third, the row before it with one click
    less) and deletes (every fifth, then its tombstone), laid out as the JSON converter writes them."""
    out: list[bytes | None] = []
    for i, value in enumerate(values):
        message = json.loads(value)
        payload = message["payload"]
        if i % 5 == 4:
            payload.update(op="d", before=payload["after"], after=None)
        elif i % 3 == 2:
            payload.update(op="u", before={**payload["after"], "clicks": payload["after"]["clicks"] - 1})
        out.append(json.dumps(message, separators=(",", ":")).encode())
        if i % 5 == 4:
            out.append(None)
    return out


def test_bench_debezium_mysql_events_read_as_columns() -> None:
    values: list[bytes | None] = list(bench_messages(400))
    assert agree(values, BENCH_COLUMNS, BENCH_KEY)
    assert agree(values, BENCH_COLUMNS, BENCH_KEY, held=1250)
    assert agree(values, BENCH_COLUMNS, BENCH_KEY, by_source=False)
    fewer = pa.schema([f for f in BENCH_COLUMNS if f.name not in ("country", "device")])
    assert agree(values, fewer, BENCH_KEY)  # the fields the table lacks are counted per event
    more = BENCH_COLUMNS.append(pa.field("region", pa.string()))
    assert agree(values, more, BENCH_KEY)
    changed = with_changes(bench_messages(300))
    assert agree(changed, BENCH_COLUMNS, BENCH_KEY)
    assert agree(changed, BENCH_COLUMNS, BENCH_KEY, held=1100, by_source=False)


@pytest.mark.parametrize(("name", "table", "key", "_refusals"), FILES, ids=[f"{f[0]}-{f[1]}" for f in FILES])
@pytest.mark.usefixtures("spark")  # table schemas are Spark SQL types, parsed in its JVM
def test_real_messages_read_as_one_by_one_or_refused(
    name: str, table: str | None, key: tuple[str, ...], _refusals: Any
) -> None:
    """Each file's messages, by runs of one schema head: every run the reader takes gives what
    reading its messages one by one gives."""
    values, schema = file_schema(name, key, table)
    columns = arrow_schema(schema)
    run: list[bytes] = []
    for value in [*values, b""]:
        if run and not value.startswith(run[0][: run[0].find(b'"payload":')]):
            agree(run, columns, list(key))  # taken only where one by one makes rows of every message
            run = []
        run.append(value)


def test_the_real_messages_of_simple_types_are_read_as_columns(spark: Any) -> None:
    """The connector messages whose columns are integers, text and doubles are taken: the run
    reader serves real producers, not only the bench's."""
    taken = []
    for name, table, key in (
        ("debezium_doc_tutorial_mysql_customers", None, ("id",)),
        ("debezium_server_iceberg_mysql_inventory", "customers", ("id",)),
        ("flink_mysql_products_schema", None, ("id",)),
    ):
        values, schema = file_schema(name, key, table)
        head = values[0][: values[0].find(b'"payload":')]
        same = [v for v in values if v.startswith(head)]
        if agree(same, arrow_schema(schema), list(key)):
            taken.append(name)
    assert len(taken) >= 2, taken


REFUSED = {
    "a key repeated": lambda v: v.replace(b'"op":"c"', b'"op":"c","op":"c"'),
    "a key missing": lambda v: re.sub(rb',"device":"[^"]*"', b"", v, count=1),
    "a key the schema lacks": lambda v: v.replace(b'"op":"c"', b'"op":"c","extra":1'),
    "an integer as text": lambda v: re.sub(rb'"ad_id":([0-9]+)', rb'"ad_id":"\1"', v, count=1),
    "a double beyond a double": lambda v: re.sub(rb'"price":[-0-9.eE]+', b'"price":1e999', v, count=1),
    "a truncate": lambda v: v.replace(b'"op":"c"', b'"op":"t"'),
    "an op missing": lambda v: v.replace(b'"op":"c",', b""),
    "a payload on two lines": lambda v: v.replace(b'"op":"c"', b'"op":\n"c"'),
    "a lone surrogate": lambda v: v.replace(b'"country":"', b'"country":"\\ud800'),
    "a colon-quote in a value": lambda v: v.replace(b'"country":"', b'"country":"a\\":'),
    # Found in review (helper-29): each read as columns differently from one by one, before refused.
    "a negative zero as an integer": lambda v: re.sub(rb'"price":[-0-9.eE]+', b'"price":-0', v, count=1),
    "a double of 1001 characters": lambda v: re.sub(rb'"price":[-0-9.eE]+', b'"price":1.' + b"0" * 999, v, count=1),
}


@pytest.mark.parametrize("change", list(REFUSED), ids=list(REFUSED))
def test_messages_a_run_must_refuse_are_read_one_by_one(change: str) -> None:
    """One message of a run changed: the run is refused or stops before it, and what it took
    agrees with one by one (which decides the changed message: a dead letter, NotHere, a row)."""
    values: list[bytes | None] = list(bench_messages(40))
    assert values[20] is not None
    changed = REFUSED[change](values[20])
    assert changed != values[20], "the change must apply to the bench's message"
    values[20] = changed
    limits = PayloadLimits()
    runs = JsonRuns(EnvelopeReader(limits), limits)
    end, _, _, _ = runs.run([Message(v, i) for i, v in enumerate(values)], 0)
    if end == len(values):  # the message is in the run: reading it as columns must refuse
        assert as_run(values, BENCH_COLUMNS, BENCH_KEY, -1, True) is None
    else:
        assert end == 20
    assert agree(values[:20], BENCH_COLUMNS, BENCH_KEY)


def test_a_head_with_a_lone_surrogate_is_never_read_as_a_run() -> None:
    """Every message's head escapes a lone surrogate (found in review, helper-29): one by one each is
    a dead letter; the run reader must not make rows of them."""
    values: list[bytes | None] = [
        v.replace(b'{"schema":{', b'{"schema":{"doc":"\\ud800",', 1) for v in bench_messages(300) if v is not None
    ]
    assert values[0] is not None and b"ud800" in values[0]
    assert isinstance(one_by_one(values, BENCH_COLUMNS, BENCH_KEY, -1, True), str)
    assert as_run(values, BENCH_COLUMNS, BENCH_KEY, -1, True) is None
