"""Debezium messages that are not laid out as Kafka Connect's JSON converter writes them, or not JSON
at all, for tests/test_decoder_golden_messages.py: each a real message of tests/data/debezium/
flink_mysql_products_schema.jsonl (source in tests/data/debezium/SOURCES.md) changed in the way
its case id says, or a change of `ProductsStream` (that file's schema and source block) where the
id says so; the orders group, the real orders snapshot row of debezium_server_iceberg_mysql_inventory.jsonl."""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import types as T

from icetide.decode.debezium.connect_schema import parse_envelope_schema, table_schema
from icetide.decode.limits import PayloadLimits
from tests.debezium_messages import ProductsStream, lines

SOURCE = "flink_mysql_products_schema"
Case = tuple[str, bytes | None]  # (stable id, Kafka value)
# A products message is about 2340 bytes: the truncates group pads one past this.
LIMITS = PayloadLimits(max_record_bytes=2600, max_nesting_depth=8)
_PAYLOAD = ',"payload":'


def products_table() -> T.StructType:
    """The products table, NOT NULL where the Connect schema's field is not optional (id, name)."""
    envelope = parse_envelope_schema(json.dumps(ProductsStream().schema))
    required = {f.name for f in envelope.fields if not f.optional}
    return T.StructType(
        [
            T.StructField(f.name, f.dataType, f.nullable and f.name not in required)
            for f in table_schema(envelope, ["id"])
        ]
    )


def _edit(text: str, marker: str, replacement: str) -> str:
    assert text.count(marker) == 1, marker
    return text.replace(marker, replacement)


def _parts(message: str) -> tuple[str, str]:
    """(schema text, payload text) of a message as the JSON converter writes it."""
    cut = message.index(_PAYLOAD)
    return message[len('{"schema":') : cut], message[cut + len(_PAYLOAD) : -1]


def message_groups() -> dict[str, list[Case]]:
    """Batches of changed real messages (the products table, key id), by group: a batch with a
    schema that describes no row made the Spark SQL decoder lose the schemaless messages of the
    batch (no conversion took them: each column a dead letter), so those schemas have a batch of their own."""
    real = lines(SOURCE)
    create, delete = real[11], real[15]  # line 12: op c of row 110 (jacket); line 16: op d of row 111
    schema, payload = _parts(create)
    row = '{"id":110,"name":"jacket","description":"water resistent white wind breaker","weight":0.20000000298023224}'
    gone = '{"id":111,"name":"scooter","description":"Big 2-wheel scooter ","weight":5.170000076293945}'
    after_schema = json.dumps(json.loads(schema)["fields"][1], separators=(",", ":"))
    layouts: list[tuple[str, str]] = [
        # deletes whose before lacks a NOT NULL column (as PostgreSQL's REPLICA IDENTITY DEFAULT sends them)
        ("delete, before cut to its key", _edit(delete, gone, '{"id":111}')),
        ("delete, its name null", _edit(delete, '"name":"scooter"', '"name":null')),
        # JSON, laid out otherwise than the JSON converter writes it
        ("create, pretty-printed", json.dumps(json.loads(create), indent=2)),
        ("create, payload first", '{"payload":' + payload + ',"schema":' + schema + "}"),
        ("create, its payload alone in the wrapper", '{"payload":' + payload + "}"),
        ("create, payload first, its schema null", '{"payload":' + payload + ',"schema":null}'),
        ("create, a space after the opening brace", "{ " + create[1:]),
        ("create after a newline", "\n" + create),
        ("create with CR LF after it", create + "\r\n"),
        ("create, a space before the payload's colon", _edit(create, _PAYLOAD, ',"payload" :')),
        ("create, a key after the payload", create[:-1] + ',"extra":1}'),
        ("create, its schema alone", '{"schema":' + schema + "}"),
        ("create, its schema beside the payload's fields", '{"schema":' + schema + "," + payload[1:]),
        ("converter tombstone, a space before the payload's colon", '{"schema":' + schema + ',"payload" : null}'),
        ("create, op a number", _edit(create, '"op":"c"', '"op":1')),
    ]
    schemas = [
        ("create, its schema followed by another key", _edit(create, _PAYLOAD, ',"extra":1' + _PAYLOAD)),
        (
            "create, the row's schema alone (as full_types line 2)",
            '{"schema":' + after_schema + _PAYLOAD + payload + "}",
        ),
        ("create, its schema a string", '{"schema":"x"' + _PAYLOAD + payload + "}"),
        ("create, its schema not JSON", _edit(create, '"name":"dbserver1.inventory.products.Envelope"', '"name":x')),
    ]
    not_json = [  # some of it Jackson (Spark's from_json) reads
        ("create, cut by its last byte", create[:-1]),
        ("create, cut in its row", create[: create.index('"jacket"')]),
        (
            "create with a field the table lacks, cut by its last byte",
            _edit(create, row, row[:-1] + ',"extra":1}')[:-1],
        ),
        ("create, text after it", create + " trailing"),
        ("create, twice in a row", create + create),
        ("create, in single quotes", create.replace('"', "'")),
        ("create, a comment in its row", _edit(create, '"after":{', '"after":/* row */{')),
        ("create, a trailing comma in its row", _edit(create, row, row[:-1] + ",}")),
        ("create, an unquoted field name", _edit(create, '"name":"jacket"', 'name:"jacket"')),
        ("create, a raw tab in a value", _edit(create, '"jacket"', '"jac\tket"')),
        ("create, a leading zero in a number", _edit(create, '"id":110,', '"id":0110,')),
        ("create, a backslash before a plain letter", _edit(create, '"jacket"', '"ja\\qcket"')),
        ("create, its name a number of 1001 digits", _edit(create, '"name":"jacket"', '"name":' + "7" * 1001)),
    ]
    groups = {"layouts": layouts, "schemas": schemas, "not_json": not_json}
    ids = [c for cases in groups.values() for c, _ in cases]
    assert len(set(ids)) == len(ids), "case ids must be unique"
    return {group: [(c, v.encode()) for c, v in cases] for group, cases in groups.items()}


def truncate_cases() -> list[Case]:
    """One batch: a real create, then a `ProductsStream` truncate padded past LIMITS, a change after
    it, and a truncate whose source block is text (its order then sorts after every binlog position)."""
    stream = ProductsStream()
    first = lines(SOURCE)[11]  # binlog position 1068, before the stream's
    truncate = stream.truncate() + b" " * 600
    assert len(truncate) > LIMITS.max_record_bytes
    row: dict[str, Any] = {"id": 120, "name": "kite", "description": None, "weight": 1.5}
    cases = [
        ("real create before the truncate", first.encode()),
        ("stream truncate, padded past max_record_bytes", truncate),
        ("stream create after the truncate", stream.change("c", None, row)),
    ]
    malformed = json.loads(stream.truncate())
    malformed["payload"]["source"] = "x"
    return [*cases, ("stream truncate, its source text", json.dumps(malformed, separators=(",", ":")).encode())]


ORDERS_SOURCE = "debezium_server_iceberg_mysql_inventory"


def orders_table() -> T.StructType:
    """The orders table of ORDERS_SOURCE's first message (order_date: io.debezium.time.Date)."""
    envelope = parse_envelope_schema(json.dumps(json.loads(lines(ORDERS_SOURCE)[0])["schema"]))
    return table_schema(envelope, ["order_number"])


def orders_cases() -> list[Case]:
    """One batch of the real orders snapshot row of ORDERS_SOURCE (line 1), changed as each id says:
    a schema whose Date the Spark SQL decoder read, or not, by where the schema sits."""
    snapshot = lines(ORDERS_SOURCE)[0]
    return [
        ("orders snapshot row", snapshot.encode()),
        ("orders snapshot row, pretty-printed", json.dumps(json.loads(snapshot), indent=2).encode()),
        (
            "orders snapshot row, its schema followed by another key",
            _edit(snapshot, _PAYLOAD, ',"x":1' + _PAYLOAD).encode(),
        ),
    ]
