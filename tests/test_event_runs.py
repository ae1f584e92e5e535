"""Avro records read a run at a time into columns (decode/debezium/event_runs.py) against the per-record
decoder it must equal (decode/avro/decoder.py `AvroMessages.envelope` + decode/debezium/rows.py
`TableRows.add`): a run gives exactly the per-record changes, or is refused and read that way.

Records are produced by confluent-kafka's own AvroSerializer through the test registry
(tests/schema_registry_server.py, a stand-in: no Confluent-compatible registry is installable
here), from: bench/ingest_debezium.py's Debezium MySQL events, Flink's Debezium Avro test schema
and rows (flink-formats/flink-avro-confluent-registry, DebeziumAvroSerDeSchemaTest), Paimon's
all-types MySQL table (KafkaDebeziumAvroSyncTableActionITCase), and random rows of every column
type the columns read, extremes included.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from icetide.decode.avro.container import NotColumnar, container, encoded_sizes, run_reader
from icetide.decode.avro.decoder import AvroMessages
from icetide.decode.debezium.rows import NotHere, TableRows, source_order
from tests.schema_registry_server import SchemaRegistryServer
from tests.test_avro import FLINK_SCHEMA, flink_events, messages, serializer, source, table_rows
from tests.test_json_runs import BENCH_COLUMNS

PAIMON = Path(__file__).parent / "data" / "avro"
TS = pa.timestamp("us", tz="UTC")
FLINK_COLUMNS = pa.schema(
    [("id", pa.int64()), ("name", pa.string()), ("description", pa.string()), ("weight", pa.float64())]
)


@pytest.fixture(scope="module")
def registry() -> Any:
    server = SchemaRegistryServer().start()
    yield server
    server.stop()


def per_record(
    reader: AvroMessages, rows: TableRows, values: list[bytes], offsets: list[int], held: int, by_source: bool
) -> tuple[list[dict[str, Any]], dict[str, int]] | str:
    """What the per-record decoder makes of the run: (changes, unknown fields), or its NotHere."""
    try:
        for value, offset in zip(values, offsets, strict=True):
            envelope = reader.envelope(None, value)
            if envelope is None or offset < held:
                continue
            order = source_order(envelope.source, envelope.ts_ms, offset) if by_source else ""
            rows.add(envelope, order, evolving=False)
    except NotHere as exc:
        return f"NotHere: {exc}"
    return changes(rows), dict(rows.unknown)


def changes(rows: TableRows) -> list[dict[str, Any]]:
    """The rows' changes, NaN as text (NaN equals nothing, itself included)."""
    return [{k: "NaN" if v != v else v for k, v in change.items()} for change in rows.table().to_pylist()]


def as_run(
    reader: AvroMessages, rows: TableRows, values: list[bytes], offsets: list[int], held: int, by_source: bool
) -> tuple[list[dict[str, Any]], dict[str, int]] | None:
    """What the run reader makes of it, None when it refuses the run."""
    try:
        run = reader.read_run(values)
        run.add_to(rows, np.array(offsets, np.int64), held=held, by_source=by_source, evolving=False)
    except NotColumnar:
        return None
    return changes(rows), dict(rows.unknown)


def agree(
    reader: AvroMessages,
    columns: pa.Schema,
    key: list[str],
    values: list[bytes],
    *,
    held: int = -1,
    by_source: bool = True,
) -> bool:
    """The run reader gives the per-record changes, or refuses; True when it took the run."""
    offsets = list(range(1000, 1000 + len(values)))
    expected = per_record(reader, table_rows(columns, key), values, offsets, held, by_source)
    got = as_run(reader, table_rows(columns, key), values, offsets, held, by_source)
    if got is None:
        return False
    assert not isinstance(expected, str), f"the run was taken; record by record: {expected}"
    assert got[1] == expected[1]
    for i, (a, b) in enumerate(zip(got[0], expected[0], strict=True)):
        assert a == b, f"change {i}: " + ", ".join(f"{k}: {a[k]!r} != {b[k]!r}" for k in a if a[k] != b[k])
    return True


def test_bench_debezium_mysql_events_read_as_columns(registry: SchemaRegistryServer) -> None:
    from bench.ingest import event
    from bench.ingest_debezium import debezium_event
    from tests.avro_messages import AvroEncoder

    encoder = AvroEncoder(registry.url)
    now = int(time.time() * 1000)
    values = [encoder.encode(debezium_event(json.loads(event(i, now)), i), "dbserver1.ads.events") for i in range(500)]
    columns = BENCH_COLUMNS
    reader = messages(registry.url)
    assert agree(reader, columns, ["event_id", "event_time"], values)  # type: ignore[arg-type]
    assert agree(reader, columns, ["event_id", "event_time"], values, held=1250)  # type: ignore[arg-type]
    assert agree(reader, columns, ["event_id", "event_time"], values, by_source=False)  # type: ignore[arg-type]
    fewer = pa.schema([f for f in columns if f.name not in ("country", "device")])
    assert agree(reader, fewer, ["event_id", "event_time"], values)  # type: ignore[arg-type]
    more = columns.append(pa.field("region", pa.string()))
    assert agree(reader, more, ["event_id", "event_time"], values)  # type: ignore[arg-type]


def flink_run(count: int) -> list[dict[str, Any]]:
    """Flink's insert, update and delete, for `count` ids."""
    out = []
    for i in range(count):
        for e in flink_events():
            e = json.loads(json.dumps(e))
            for part in ("before", "after"):
                if e[part] is not None:
                    e[part]["id"] = i
            e["source"]["pos"] += 100 * i
            out.append(e)
    return out


def test_flink_debezium_avro_inserts_updates_and_deletes(registry: SchemaRegistryServer) -> None:
    serialize = serializer(registry.url, FLINK_SCHEMA.read_text())
    reader = messages(registry.url)
    values = [serialize(e) for e in flink_run(40)]
    assert agree(reader, FLINK_COLUMNS, ["id"], values)
    assert agree(reader, FLINK_COLUMNS, ["id"], values, held=1060)


def test_runs_the_columns_refuse_read_as_the_records_read_them(registry: SchemaRegistryServer) -> None:
    """Key moves, truncates, rows missing, null keys, values out of the column's range, bytes after a
    body or a body cut short: the run is refused, and the per-record decoder decides."""
    serialize = serializer(registry.url, FLINK_SCHEMA.read_text())
    reader = messages(registry.url)
    events = flink_run(20)
    good = [serialize(e) for e in events]
    one = {"id": 1, "name": "a", "description": None, "weight": 1.0}
    base = {"ts_ms": 1, "transaction": None, "source": source(40)}
    odd = {
        "key move": {**base, "before": one, "after": {**one, "id": 2}, "op": "u"},
        "truncate": {**base, "before": None, "after": None, "op": "t"},
        "no row": {**base, "before": None, "after": None, "op": "c"},
        "op in capitals": {**base, "before": None, "after": one, "op": "C"},
    }
    for why, event in odd.items():
        values = [*good, serialize(event)]
        assert not agree(reader, FLINK_COLUMNS, ["id"], values), why
    assert not agree(reader, FLINK_COLUMNS, ["name"], good)  # a delete's row holds the name; fine, but:
    narrow = pa.schema([("id", pa.int8()), ("name", pa.string())])
    assert not agree(reader, narrow, ["id"], [serialize(e) for e in flink_run(200)])  # ids past 127
    assert agree(reader, narrow, ["id"], [serialize(e) for e in flink_run(100)])
    as_float = pa.schema([("id", pa.int64()), ("weight", pa.float32())])
    assert agree(reader, as_float, ["id"], good)  # a float32 by the column's own converter, value by value
    for bad in (good[5] + b"\x00", good[5][:-1]):
        values = [*good[:5], bad, *good[6:]]
        assert not agree(reader, FLINK_COLUMNS, ["id"], values)
        assert isinstance(
            per_record(reader, table_rows(FLINK_COLUMNS, ["id"]), values, list(range(len(values))), -1, True), str
        )


def test_unknown_fields_are_counted_per_event(registry: SchemaRegistryServer) -> None:
    serialize = serializer(registry.url, FLINK_SCHEMA.read_text())
    reader = messages(registry.url)
    values = [serialize(e) for e in flink_run(20)]
    narrow = pa.schema([("id", pa.int64()), ("name", pa.string())])
    assert agree(reader, narrow, ["id"], values)
    rows = table_rows(narrow, ["id"])
    reader.read_run(values).add_to(rows, np.arange(len(values)), held=-1, by_source=True, evolving=False)
    assert rows.unknown == {"description": 60, "weight": 60}
    with pytest.raises(NotColumnar):
        reader.read_run(values).add_to(
            table_rows(narrow, ["id"]), np.arange(len(values)), held=-1, by_source=True, evolving=True
        )


def test_paimon_all_types_read_as_the_records_read_them(registry: SchemaRegistryServer) -> None:
    """Paimon's all-types table, every column the per-record decoder reads (decimals, dates, times,
    FLOAT, ...): the run gives the same changes."""
    from tests.avro_messages import avro_value

    lines = [json.loads(line) for line in (PAIMON / "paimon_debezium_avro_data_1.jsonl").read_text().splitlines()]
    serialize = serializer(registry.url, (PAIMON / "paimon_all_types_value.avsc").read_text())
    values = []
    for value_line in lines[1::2]:
        payload = value_line["payload"]
        row_schema = next(f for f in value_line["schema"]["fields"] if f["field"] == "after")
        after = avro_value(row_schema, payload["after"])
        record = {"before": None, "after": after, "source": payload["source"], "op": payload["op"]}
        values.append(serialize({**record, "ts_ms": payload["ts_ms"], "transaction": None}, "all_type"))
    reader = messages(registry.url)
    envelope = reader.envelope(None, values[0])
    assert envelope is not None and envelope.schema is not None
    from icetide.decode.debezium.connect_schema import column_ddl

    arrow = {"INT": pa.int32(), "BIGINT": pa.int64(), "FLOAT": pa.float32(), "DOUBLE": pa.float64()}
    arrow |= {"BOOLEAN": pa.bool_(), "STRING": pa.string(), "DATE": pa.date32(), "TIMESTAMP": TS}
    arrow |= {"SMALLINT": pa.int16(), "TINYINT": pa.int8()}
    columns = []
    for f in envelope.schema.fields:
        ddl = column_ddl(f)
        decimal = re.fullmatch(r"DECIMAL\((\d+),(\d+)\)", ddl)
        if f.type in ("struct", "array", "map"):
            continue
        if decimal:
            columns.append((f.name, pa.decimal128(int(decimal[1]), int(decimal[2]))))
        elif ddl in arrow:
            columns.append((f.name, arrow[ddl]))
    assert len(columns) > 50
    assert agree(reader, pa.schema(columns), ["_id"], values * 20)


ROW = {
    "type": "record",
    "name": "Row",
    "namespace": "t",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "small", "type": ["null", "int"], "default": None},
        {"name": "text", "type": ["null", "string"], "default": None},
        {"name": "flag", "type": ["null", "boolean"], "default": None},
        {"name": "ratio", "type": ["null", "double"], "default": None},
        {"name": "at", "type": ["null", {"type": "long", "connect.name": "org.apache.kafka.connect.data.Timestamp"}]},
        {"name": "at_us", "type": ["null", {"type": "long", "connect.name": "io.debezium.time.MicroTimestamp"}]},
        {"name": "blob", "type": ["null", "bytes"], "default": None},
        {"name": "colour", "type": ["null", {"type": "enum", "name": "Colour", "symbols": ["RED", "GREEN"]}]},
        {"name": "cost", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}]},
        {"name": "day", "type": ["null", {"type": "int", "connect.name": "org.apache.kafka.connect.data.Date"}]},
        {"name": "f32", "type": ["null", "float"]},
        {"name": "at_ns", "type": ["null", {"type": "long", "connect.name": "io.debezium.time.NanoTimestamp"}]},
    ],
}
RANDOM_COLUMNS = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("small", pa.int16()),
        ("text", pa.string()),
        ("flag", pa.bool_()),
        ("ratio", pa.float64()),
        ("at", TS),
        ("at_us", TS),
        ("cost", pa.decimal128(12, 2)),
        ("day", pa.date32()),
        ("f32", pa.float32()),
        ("at_ns", TS),
        ("colour", pa.string()),
    ]
)
LONGS = st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from([0, -1, 63, 64, -65, 2**31, 2**53 + 1]))
ROWS = st.fixed_dictionaries(
    {
        "id": LONGS,
        "small": st.none() | st.integers(-(2**15), 2**15 - 1),
        "text": st.none() | st.text(max_size=200),
        "flag": st.none() | st.booleans(),
        "ratio": st.none() | st.floats(allow_nan=True, allow_infinity=True),
        "at": st.none() | st.integers(-62_135_596_800_000, 253_402_300_799_999),
        "at_us": st.none() | st.integers(-62_135_596_800_000_000, 253_402_300_799_999_999),
        "blob": st.none() | st.binary(max_size=300),
        "colour": st.none() | st.sampled_from(["RED", "GREEN"]),
        "cost": st.none() | st.decimals(min_value=-(10**9), max_value=10**9, places=2),
        "day": st.none() | st.integers(-719_162, 2_932_896),
        "f32": st.none() | st.floats(width=32),
        # whole microseconds: the column holds microseconds (finer values are dead letters, below)
        "at_ns": st.none() | st.integers(-(2**63) // 1000 + 1, (2**63 - 1) // 1000).map(lambda n: n * 1000),
    }
)

OUT_OF_RANGE = st.fixed_dictionaries(
    {
        "id": LONGS,
        "small": st.integers(-(2**31), 2**31 - 1),
        "at": LONGS,
        "at_us": LONGS,
        "ratio": st.floats(),
        "day": st.integers(-(2**31), 2**31 - 1),
        "cost": st.decimals(min_value=-(10**10) + 1, max_value=10**10 - 1, places=2),
        "at_ns": st.integers(-(2**63), 2**63 - 1),
    }
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(ROWS, min_size=1, max_size=40), odd=st.lists(OUT_OF_RANGE, min_size=1, max_size=3))
def test_values_beyond_a_column_are_refused_or_read_alike(
    registry: SchemaRegistryServer, rows: list[dict[str, Any]], odd: list[dict[str, Any]]
) -> None:
    serialize, reader = serializer(registry.url, ROW), messages(registry.url, envelope=False)
    values = [serialize(r, "t.rows") for r in [*rows, *odd]]
    agree(reader, RANDOM_COLUMNS, ["id"], values)


_NULLS = dict.fromkeys(
    ["small", "text", "flag", "ratio", "at", "at_us", "blob", "colour", "cost", "day", "f32", "at_ns"],
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(ROWS, min_size=1, max_size=80), plain=st.booleans())
@example(  # found by Hypothesis: the largest FLOAT in a delete's before (the 15th record)
    rows=[{**_NULLS, "id": 0}] * 14 + [{**_NULLS, "id": 0, "f32": 3.4028234663852886e38}], plain=False
)
def test_random_rows_read_as_the_records_read_them(
    registry: SchemaRegistryServer, rows: list[dict[str, Any]], plain: bool
) -> None:
    if plain:
        serialize, reader = serializer(registry.url, ROW), messages(registry.url, envelope=False)
        values = [serialize(r, "t.rows") for r in rows]
    else:
        envelope = {
            "type": "record",
            "name": "Envelope",
            "namespace": "t",
            "fields": [
                {"name": "before", "type": ["null", ROW], "default": None},
                {"name": "after", "type": ["null", "t.Row"], "default": None},
                {"name": "op", "type": "string"},
                {"name": "ts_ms", "type": ["null", "long"], "default": None},
            ],
        }
        serialize, reader = serializer(registry.url, envelope), messages(registry.url)
        values = [
            serialize(
                {
                    "before": r if i % 3 == 2 else None,
                    "after": None if i % 3 == 2 else r,
                    "op": "cud"[i % 3],
                    "ts_ms": i,
                },
                "t.env",
            )
            for i, r in enumerate(rows)
        ]
    assert agree(reader, RANDOM_COLUMNS, ["id"], values)
    held = 1000 + len(values) // 2
    assert agree(reader, RANDOM_COLUMNS, ["id"], values, held=held)


def test_encoded_sizes_are_the_bodies_lengths(registry: SchemaRegistryServer) -> None:
    serialize = serializer(registry.url, ROW)
    rows = [
        {"id": i * 977, "text": "é" * (i % 70), "blob": b"x" * i, "colour": "GREEN", "at": None, "at_us": -i}
        for i in range(300)
    ]
    bodies = [serialize(r, "t.sizes")[5:] for r in rows]
    records = run_reader().decode(ROW, bodies)
    assert list(encoded_sizes(ROW, records)) == [len(b) for b in bodies]
    assert container(json.dumps(ROW), bodies).startswith(b"Obj\x01")


def test_without_duckdb_runs_are_refused_with_one_warning(monkeypatch: Any, caplog: Any) -> None:
    """No duckdb installed: every run is refused (read record by record), and the process says so once."""
    import sys

    import icetide.decode.avro.container as ac

    monkeypatch.setitem(sys.modules, "duckdb", None)  # `import duckdb` raises ImportError
    monkeypatch.setattr(ac, "_READER", None)
    with caplog.at_level("WARNING", logger="icetide.decode.avro.container"):
        for _ in range(3):
            with pytest.raises(NotColumnar, match="duckdb is not installed"):
                run_reader()
    warnings = [r for r in caplog.records if "read one by one" in r.getMessage()]
    assert len(warnings) == 1 and "pip install 'icetide[kafka]'" in warnings[0].getMessage()
