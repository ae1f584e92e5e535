"""Splitting the JSON converter's schema off Debezium values where they are read
(icetide.sources.head_split): the values come back byte for byte, other shapes are left whole,
and decoding split values gives exactly what decoding the whole values gives, dead letters
included. Real messages from tests/data/debezium (sources in its SOURCES.md), written compactly
as Kafka's JsonConverter writes them; the bad ones are hand-made from them."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
from pyspark.sql import types as T

from icetide.decode.debezium.connect_schema import parse_envelope_schema, table_schema
from icetide.decode.debezium.tasks import decode_debezium
from icetide.decode.limits import PayloadLimits
from icetide.sources.head_split import HeadSplitter, JsonHeadSplit, rejoin
from icetide.sources.kafka_reader import SPLIT_RECORD_ARROW_SCHEMA, OffsetRange, RangeReader
from tests.debezium_messages import messages

SPLIT = JsonHeadSplit("schema", "payload")
KAFKA_POSITION = ["topic", "partition", "offset"]


def compact(value: dict[str, Any]) -> bytes:
    """A message as Kafka's JsonConverter writes it: no whitespace, the schema first."""
    return json.dumps(value, separators=(",", ":")).encode()


def products() -> list[bytes]:
    return [compact(m) for m in messages("flink_mysql_products_schema")]


def test_split_values_rejoin_byte_for_byte_and_each_head_ships_once() -> None:
    values = products() + [compact(m) for m in messages("flink_cdc_mysql_full_types_schema")]
    rests, ids, heads = HeadSplitter(SPLIT).arrays(values)
    distinct = {json.dumps(json.loads(v)["schema"]) for v in values}
    assert ids.null_count == 0 and len(set(ids.to_pylist())) == len(distinct) == 3
    assert heads.to_pylist().count(None) == len(values) - 3
    by_id = {i: h for i, h in zip(ids.to_pylist(), heads.to_pylist(), strict=True) if h is not None}
    for value, rest, sid in zip(values, rests.to_pylist(), ids.to_pylist(), strict=True):
        assert rest.startswith(b'{"payload":') and len(rest) < len(value)
        assert rejoin(by_id[sid], rest.decode()).encode() == value


def test_other_shapes_are_left_whole() -> None:
    schema = messages("flink_mysql_products_schema")[0]["schema"]
    good = compact(messages("flink_mysql_products_schema")[0])
    others = [
        None,
        b"",
        b"null",
        b"garbage",
        json.dumps(messages("flink_mysql_products_schema")[0]).encode(),  # a space after each colon
        compact({"payload": {"op": "c"}, "schema": schema}),  # payload first
        compact({"op": "c", "after": {"id": 1}}),  # schemaless
        b'{"schema":{"type":"struct","fields":[,"payload":{"op":"c"}}',  # a head that does not parse
        b'{"schema":{"type":"struct"} x,"payload":{"op":"c"}}',  # text after the schema
        b'{"schema":{"name":"a\\u00e9"},"payload":{"op":"c"}}',  # an escape in the head
        b'{"schema":{"x":NaN},"payload":{"op":"c"}}',  # not JSON
        b'{"schema":{"name":"\xff"},"payload":{"op":"c"}}',  # not UTF-8
        good.replace(b'"payload":', b'"payload" :'),
    ]
    rests, ids, heads = HeadSplitter(SPLIT).arrays([*others, good])
    assert rests.to_pylist()[:-1] == others
    assert ids.to_pylist()[:-1] == [None] * len(others) and heads.to_pylist()[:-1] == [None] * len(others)
    assert ids.to_pylist()[-1] is not None


class _Message:
    def __init__(self, offset: int, value: bytes | None) -> None:
        self.offset_, self.value_ = offset, value

    def error(self) -> None:
        return None

    def offset(self) -> int:
        return self.offset_

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000 + self.offset_)

    def key(self) -> bytes | None:
        return None

    def value(self) -> bytes | None:
        return self.value_


class _Consumer:
    """Serves `values` from offset 0, two records per consume."""

    def __init__(self, values: list[bytes | None]) -> None:
        self.values, self.at = values, 0

    def assign(self, partitions: list[Any]) -> None:
        self.at = partitions[0][2]

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Any]:
        end = min(len(self.values), self.at + min(2, num_messages))
        out = [_Message(o, self.values[o]) for o in range(self.at, end)]
        self.at += len(out)
        return out

    def close(self) -> None:
        pass


def test_range_reader_ships_each_head_once_per_arrow_batch() -> None:
    values: list[bytes | None] = [*products()[:5], None, b"garbage", *products()[5:9]]
    reader = RangeReader(
        _Consumer(values),
        OffsetRange("cdc", 0, 0, len(values)),
        read_timeout=5.0,
        batch_rows=4,
        topic_partition=lambda t, p, o: (t, p, o),
        split=SPLIT,
    )
    batches = list(reader.batches())
    assert [b.num_rows for b in batches] == [4, 4, 3] and all(b.schema == SPLIT_RECORD_ARROW_SCHEMA for b in batches)
    heads = [b.column("value_head").to_pylist() for b in batches]
    assert [sum(h is not None for h in hs) for hs in heads] == [1, 1, 1]  # the same schema in all
    head = next(h for h in heads[0] if h is not None)
    got = [
        v if i is None else rejoin(head, v.decode()).encode()
        for b in batches
        for v, i in zip(b.column("value").to_pylist(), b.column("value_head_id").to_pylist(), strict=True)
    ]
    assert got == values


def _frame(spark: Any, values: list[bytes | None], *, split: bool) -> Any:
    rows: dict[str, list[Any]] = {"topic": [], "partition": [], "offset": [], "value": []}
    for i, v in enumerate(values):
        rows["topic"].append("cdc")
        rows["partition"].append(0)
        rows["offset"].append(i)
        rows["value"].append(v)
    columns = [pa.array(rows["topic"]), pa.array(rows["partition"], pa.int32()), pa.array(rows["offset"], pa.int64())]
    ddl = "topic STRING, partition INT, offset BIGINT, value BINARY"
    if split:
        columns.extend(HeadSplitter(SPLIT).arrays(values))
        ddl += ", value_head_id BIGINT, value_head STRING"
    else:
        columns.append(pa.array(values, pa.binary()))
    table = pa.Table.from_arrays(columns, names=[f.split()[0] for f in ddl.split(", ")])
    return spark.createDataFrame(table.to_pandas(), ddl)


def test_decoding_split_values_equals_decoding_whole_values(spark: Any) -> None:
    """Good rows, dead letters (with the whole record, byte for byte) and unknown fields agree,
    for real messages and bad ones of every kind: a value that does not fit, a malformed payload,
    a record over max_record_bytes only with its head, a head nested too deep, tombstones."""
    stream = messages("flink_mysql_products_schema")
    values: list[bytes | None] = products()
    bad_value = json.loads(values[0])
    bad_value["payload"]["after"]["weight"] = "heavy"
    deep_schema = json.loads(values[1])
    deep_schema["schema"]["parameters"] = {"a": json.loads("[" * 20 + "]" * 20)}
    values += [
        compact(bad_value),
        values[2][:-40] + b"}",  # the payload cut short
        compact(deep_schema),
        compact({"schema": stream[0]["schema"], "payload": None}),  # a tombstone
        None,
        compact({"payload": stream[3]["payload"], "schema": stream[3]["schema"]}),  # payload first
        values[0].replace(b'"scooter"', b'"sc\xffooter"'),  # not UTF-8 after the head
        b"not json",
    ]
    envelope = parse_envelope_schema(json.dumps(stream[0]["schema"]))
    schema = T.StructType(
        [T.StructField(f.name, f.dataType, f.name != "id") for f in table_schema(envelope, ["id"]).fields]
    )

    def both_ways(limits: PayloadLimits) -> tuple[Any, Any, Any]:
        """(good rows, bad rows, unknown fields) of whole and split values, which must agree."""
        results = []
        for split in (False, True):
            decoded = decode_debezium(
                # one partition, as a Kafka range's records are read: a head's text is on its first row
                _frame(spark, values, split=split).coalesce(1),
                "value",
                schema,
                ["id"],
                "upsert",
                KAFKA_POSITION,
                limits=limits,
                split=("value_head_id", "value_head") if split else None,
            )
            good = sorted(tuple(r) for r in decoded.good.collect())
            results.append((good, sorted(tuple(r) for r in decoded.bad.collect()), decoded.unknown_fields))
        assert results[0] == results[1]
        return results[1]

    # Every message is about 1,900 bytes, its payload part about 400: only the whole is over.
    good, bad, _ = both_ways(PayloadLimits(max_record_bytes=1_500, max_nesting_depth=16))
    assert not good and len(bad) == len(values) - 2  # over max_record_bytes: all but the tombstones
    sent = {v.decode("utf-8", "replace"): v for v in values if v is not None and v != values[len(stream) + 3]}
    assert {r[0] for r in bad} == sent.keys()  # the whole records, not only what was left after the head
    for payload, error, _ in bad:
        if payload != "not json":
            assert error == f"payload is {len(sent[payload])} bytes, over max_record_bytes (1500)"

    good, bad, _ = both_ways(PayloadLimits(max_nesting_depth=16))
    errors = sorted(r[1] for r in bad)
    assert len(good) == len(stream) + 1  # each change once, the payload-first one again
    assert any(e.startswith("column weight") for e in errors)
    assert "JSON nested deeper than max_nesting_depth (16)" in errors
    assert sum(e.startswith("malformed JSON") for e in errors) == 2  # the cut one says where it is cut
    assert any(e.startswith("payload is not valid UTF-8 at byte ") for e in errors)
    cut_short, not_utf8 = values[len(stream) + 1], values[-2].decode("utf-8", "replace").encode()
    assert {r[0].encode() for r in bad} == {compact(bad_value), cut_short, compact(deep_schema), not_utf8, b"not json"}
