"""Poison values: whatever a producer sends, the pipeline keeps going and every record lands once.

Hypothesis throws random bytes and random JSON (huge and tiny numbers, far timestamps and dates,
deep nesting, oversized payloads, invalid UTF-8, lone surrogate escapes, wrong types, missing
keys) at the pyarrow decoder and at real pipelines over Apache Kafka: the append fast path, the Spark
JSON path and the Spark Debezium path. A reference model, written from the documented rules
(docs/how-to/kafka-upserts.md, icetide/decode/limits.py) rather than from the decoders, says for each record whether it
lands, with which values, or goes to the dead-letter table, with which error.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from icetide.config.pipeline import PipelineConfig
from icetide.decode.json.records import ArrowJsonDecoder
from icetide.decode.limits import MAX_DATE, MAX_TIMESTAMP, MIN_DATE, MIN_TIMESTAMP, PayloadLimits, nesting_depth
from icetide.errors import ConfigError
from icetide.pipeline.table_runner import Runner
from tests.kafka_broker import create_topic, produce

MAX_RECORD_BYTES = 6000
MAX_DEPTH = 12
COLUMNS = ["event_id", "event_time", "n", "i", "price", "day", "label"]
SCHEMA = "event_id STRING NOT NULL, event_time TIMESTAMP, n BIGINT, i INT, price DOUBLE, day DATE, label STRING"
ARROW_SCHEMA = pa.schema(
    [
        pa.field("event_id", pa.string(), nullable=False),
        pa.field("event_time", pa.timestamp("us", tz="UTC")),
        pa.field("n", pa.int64()),
        pa.field("i", pa.int32()),
        pa.field("price", pa.float64()),
        pa.field("day", pa.date32()),
        pa.field("label", pa.string()),
    ]
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MIN_MS = (MIN_TIMESTAMP - _EPOCH) // _EPOCH.resolution // 1000
MAX_MS = (MAX_TIMESTAMP - _EPOCH) // _EPOCH.resolution // 1000
MIN_DAYS, MAX_DAYS = (MIN_DATE - date(1970, 1, 1)).days, (MAX_DATE - date(1970, 1, 1)).days


# -- the reference model ------------------------------------------------------------------------


@dataclass(frozen=True)
class Field:
    """One JSON member as sent (its raw value text, bytes) and what the table must get from it.

    `value` is the comparable table value (timestamps in epoch microseconds, dates in epoch days)
    when the value fits; `bad` says it does not (the record goes to the dead letters, naming the column).
    """

    raw: bytes | None  # None: the member is not sent
    value: Any = None
    bad: bool = False
    invalid_utf8: bool = False
    lone_surrogate: bool = False
    malformed: bool = False  # a number over 1000 characters: Spark's JSON reader refuses it


@dataclass
class Record:
    """A generated record; `fields` by column, plus an ignored member nested `depth` deep and padded."""

    fields: dict[str, Field]
    depth: int = 0  # arrays nested in the ignored member "extra" (0: no such member)
    padding: int = 0
    random: bytes | None = None  # random bytes sent instead of a JSON object
    shape: str = "object"  # or "array", "number", "string": valid JSON that is not an object
    key: str = ""

    def payload(self, fmt: str) -> bytes:
        if self.random is not None:
            return self.random
        if self.shape != "object":
            return {"array": b"[1, 2]", "number": b"42", "string": b'"event"'}[self.shape]
        members = [b'"%s":%s' % (name.encode(), f.raw) for name, f in self.fields.items() if f.raw is not None]
        if self.depth:
            members.append(b'"extra":' + b"[" * self.depth + b"]" * self.depth)
        if self.padding:
            members.append(b'"pad":"' + b"x" * self.padding + b'"')
        inner = b"{" + b",".join(members) + b"}"
        return inner if fmt == "json" else b'{"op":"c","after":' + inner + b"}"

    def expected_error(self, fmt: str) -> str | None:
        """A text the dead letter's error must contain, or None when the record lands."""
        payload = self.payload(fmt)
        if self.random is not None:
            return ""  # bad, for whatever reason comes first
        if len(payload) > MAX_RECORD_BYTES:
            return "max_record_bytes"
        if any(f.invalid_utf8 for f in self.fields.values()):
            return "not valid UTF-8"
        if self.shape != "object":
            return "not an object"  # in either format: the Debezium case sends it unwrapped
        wrapper_depth = 1 if fmt == "json" else 2
        if self.depth and self.depth + wrapper_depth > MAX_DEPTH:
            return "max_nesting_depth"
        if any(f.lone_surrogate for f in self.fields.values()):
            return "surrogate"
        if any(f.malformed for f in self.fields.values()):
            return "malformed JSON"
        key = self.fields["event_id"]
        if key.raw is None or key.raw == b"null":
            return "key column event_id is missing"
        for name in COLUMNS:
            if self.fields[name].bad:
                return f"column {name}: "
        return None

    def row(self) -> tuple[Any, ...]:
        return tuple(self.fields[c].value for c in COLUMNS)


def absent() -> Field:
    return Field(None)


def text(value: Any) -> bytes:
    return json.dumps(value).encode()


def _timestamp_iso(moment: datetime) -> Field:
    return Field(text(moment.isoformat()), (moment - _EPOCH) // _EPOCH.resolution)


event_times = st.one_of(
    st.integers(MIN_MS, MAX_MS).map(lambda ms: Field(text(ms), ms * 1000)),
    st.integers(MIN_MS, MAX_MS).map(lambda ms: Field(text(str(ms)), ms * 1000)),
    st.integers(MAX_MS + 1, 10**15 - 1).map(lambda ms: Field(text(ms), bad=True)),  # year 10000 to 33658
    st.integers(-(10**15) + 1, MIN_MS - 1).map(lambda ms: Field(text(ms), bad=True)),
    st.integers(10**15, 10**40).map(lambda ms: Field(text(ms), bad=True)),
    st.datetimes(MIN_TIMESTAMP.replace(tzinfo=None), MAX_TIMESTAMP.replace(tzinfo=None), timezones=st.just(UTC)).map(
        _timestamp_iso
    ),
    st.sampled_from(
        [
            "0000-12-31T23:00:00Z",
            "+10000-01-01T00:00:00Z",
            "0001-01-01T00:30:00+01:00",
            "9999-12-31T23:30:00-01:00",
            "not a time",
            "",
        ]
    ).map(lambda s: Field(text(s), bad=True)),
    st.sampled_from([b"true", b"[1]", b'{"t": 1}', b"1.5"]).map(lambda raw: Field(raw, bad=True)),
    st.just(Field(b"null")),
    st.just(absent()),
)


def integers(bits: int) -> st.SearchStrategy[Field]:
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return st.one_of(
        st.integers(low, high).map(lambda n: Field(text(n), n)),
        st.integers(low, high).map(lambda n: Field(text(str(n)), n)),
        st.integers(high + 1, 10**30).map(lambda n: Field(text(n), bad=True)),
        st.integers(-(10**30), low - 1).map(lambda n: Field(text(n), bad=True)),
        st.just(Field(b"9" * 4500, malformed=True)),  # longer than Spark's reader or Python's int() take
        st.sampled_from([b"2.5", b"true", b'"many"', b"[1]", b"{}"]).map(lambda raw: Field(raw, bad=True)),
        st.just(Field(b"null")),
        st.just(absent()),
    )


prices = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(lambda x: Field(text(x), x)),
    # beyond a double: a finite number, no infinity (issue 49; Spark and Python read infinity)
    st.sampled_from([b"1e400", b"-1e400", b'"1e400"']).map(lambda raw: Field(raw, bad=True)),
    st.just(Field(b'"Infinity"', float("inf"))),  # the text Infinity means infinity
    st.just(Field(b"-1e-400", -0.0)),
    st.sampled_from([b'"cheap"', b"[]", b"false"]).map(lambda raw: Field(raw, bad=True)),
    st.just(absent()),
)

days = st.one_of(
    st.integers(MIN_DAYS, MAX_DAYS).map(lambda d: Field(text(d), d)),
    st.dates(MIN_DATE, MAX_DATE).map(lambda d: Field(text(d.isoformat()), (d - date(1970, 1, 1)).days)),
    st.integers(MAX_DAYS + 1, 9_999_999).map(lambda d: Field(text(d), bad=True)),
    st.integers(-9_999_999, MIN_DAYS - 1).map(lambda d: Field(text(d), bad=True)),
    st.sampled_from(["0000-01-01", "yesterday"]).map(lambda s: Field(text(s), bad=True)),
    st.just(absent()),
)

labels = st.one_of(
    st.text(max_size=30).map(lambda s: Field(text(s), s)),  # \\u escapes (surrogate pairs above the BMP)
    st.text(max_size=30).map(lambda s: Field(json.dumps(s, ensure_ascii=False).encode(), s)),
    st.integers(-(10**6), 10**6).map(lambda n: Field(text(n), str(n))),
    st.just(Field(b"7" * 999, "7" * 999)),
    st.just(Field(b"7" * 1001, malformed=True)),
    st.just(Field(b'"\\\\ud800"', "\\ud800")),  # an escaped backslash, then text: no surrogate
    st.sampled_from([b'"a\\ud800b"', b'"\\udc00"', b'"\\ud83d"']).map(lambda raw: Field(raw, lone_surrogate=True)),
    st.sampled_from([b'"a\xffb"', b'"\xc3("', b'"\xed\xa0\x80"', b'"\xf8\x88\x80\x80\x80"']).map(
        lambda raw: Field(raw, invalid_utf8=True)
    ),
    st.just(absent()),
)

keys = st.sampled_from(["id", "id", "id", "id", "id", "id", "missing", "null"])


@st.composite
def records(draw: st.DrawFn) -> Record:
    kind = draw(st.sampled_from(["object"] * 8 + ["random", "shape"]))
    if kind == "random":
        raw = draw(st.binary(min_size=1, max_size=48).filter(lambda b: not b.lstrip().startswith(b"{")))
        return Record({}, random=raw)
    if kind == "shape":
        return Record({}, shape=draw(st.sampled_from(["array", "number", "string"])))
    key = draw(keys)
    fields = {
        "event_id": {"id": Field(b"", None), "missing": absent(), "null": Field(b"null")}[key],
        "event_time": draw(event_times),
        "n": draw(integers(64)),
        "i": draw(integers(32)),
        "price": draw(prices),
        "day": draw(days),
        "label": draw(labels),
    }
    depth = draw(st.one_of(st.just(0), st.integers(1, MAX_DEPTH + 4)))
    padding = draw(st.one_of(st.just(0), st.integers(0, MAX_RECORD_BYTES + 200)))
    return Record(fields, depth=depth, padding=padding)


def with_keys(recs: list[Record]) -> list[Record]:
    """Give every record with an id a unique key (the model compares rows by key)."""
    for n, r in enumerate(recs):
        r.key = f"r{n}-{uuid.uuid4().hex[:6]}"
        if r.fields and r.fields["event_id"].raw == b"":
            r.fields["event_id"] = Field(text(r.key), r.key)
    return recs


# -- the limits' configuration ---------------------------------------------------------------------


def test_limits_are_validated_at_load() -> None:
    base = {"pipeline": "p", "source": {"kafka": {}}, "table": {"name": "a.b.c", "schema": "x INT", "key": ["x"]}}
    config = PipelineConfig.from_dict(base)
    assert (config.max_record_bytes, config.max_nesting_depth) == (16 * 1024 * 1024, 64)
    config = PipelineConfig.from_dict({**base, "max_record_bytes": 4096, "max_nesting_depth": 8})
    assert (config.max_record_bytes, config.max_nesting_depth) == (4096, 8)
    for key, value in [
        ("max_record_bytes", 0),
        ("max_record_bytes", "1MB"),
        ("max_record_bytes", 64 * 1024 * 1024),
        ("max_nesting_depth", 0),
        ("max_nesting_depth", 501),
        ("max_nesting_depth", True),
    ]:
        with pytest.raises(ConfigError, match=f"^{key}: "):
            PipelineConfig.from_dict({**base, key: value})


def test_nesting_depth_ignores_brackets_in_strings() -> None:
    cases = {
        json.dumps({"a": 'x"[[[', "b": [[1]]}): 3,  # an escaped quote inside a string
        json.dumps({"a": "\\", "e": [[[]]]}): 4,  # an escaped backslash ends right before the quote
        json.dumps({"a": "]]]", "e": [{"x": "[["}]}): 3,
        '{"a": "a\\ud800b", "e": [[[]]]}': 4,
        "[[[": 3,  # malformed JSON gets a depth too
    }
    for text, depth in cases.items():
        assert nesting_depth(text) == depth, text


def test_one_deep_record_in_a_block_of_flat_ones_is_caught() -> None:
    """The fast path bounds each line's depth by the block's openers less one per other line (every
    line opens with "{"): a block of many flat records must not hide one nested too deep, wherever
    it sits, nor one whose line opens otherwise."""
    schema = pa.schema([("id", pa.int64(), False), ("s", pa.string())])
    decoder = ArrowJsonDecoder(schema, ["id"], limits=PayloadLimits(max_nesting_depth=8))
    deep = '{"id": 7, "s": "x", "n": ' + "[" * 8 + "]" * 8 + "}"
    for where in (0, 7, 19):
        lines = [json.dumps({"id": i, "s": "x"}) for i in range(20)]
        lines[where] = deep
        for shape in (deep, " " + deep):
            lines[where] = shape
            decoded = decoder.decode([line.encode() for line in lines], lambda i: f"t/0@{i}")
            assert [b.error for b in decoded.bad] == ["JSON nested deeper than max_nesting_depth (8)"], (where, shape)
            assert decoded.rows.num_rows == 19


# -- the pyarrow decoder, many examples (no Spark) -------------------------------------------------


def arrow_row(row: dict[str, Any]) -> tuple[Any, ...]:
    ts, day = row["event_time"], row["day"]
    return (
        row["event_id"],
        None if ts is None else (ts - _EPOCH) // _EPOCH.resolution,
        row["n"],
        row["i"],
        row["price"],
        None if day is None else (day - date(1970, 1, 1)).days,
        row["label"],
    )


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(records(), min_size=1, max_size=12).map(with_keys), st.booleans())
def test_arrow_decoder_against_the_model(recs: list[Record], joined: bool) -> None:
    decoder = ArrowJsonDecoder(ARROW_SCHEMA, ["event_id"], limits=PayloadLimits(MAX_RECORD_BYTES, MAX_DEPTH))
    payloads = [r.payload("json") for r in recs]
    if joined and all(b"\n" not in p for p in payloads):
        decoded = decoder.decode_joined(b"\n".join(payloads), len(payloads), lambda: payloads, str)
    else:
        decoded = decoder.decode(payloads, str)
    bad = {int(b.source_position): b.error for b in decoded.bad}
    assert len(bad) == len(decoded.bad)
    rows = [arrow_row(r) for r in decoded.rows.to_pylist()]
    want_rows = [r.row() for r in recs if r.expected_error("json") is None]
    assert rows == want_rows
    for n, r in enumerate(recs):
        error = r.expected_error("json")
        assert (n in bad) == (error is not None), (r.payload("json")[:200], bad.get(n))
        if error:
            assert error in bad[n], (r.payload("json")[:200], bad[n])


# -- real pipelines over Apache Kafka ----------------------------------------------------------------------


@dataclass
class Landed:
    rows: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    dead: dict[int, str] = field(default_factory=dict)  # offset -> error


def run_pipeline(spark: Any, bootstrap: str, topic: str, name: str, fmt: str, **extra: Any) -> Landed:
    doc = {
        "pipeline": name,
        # A loaded machine can be slow to fetch to a partition's end (docs/runner.md): no early stop.
        "source": {"kafka": {"bootstrap_servers": bootstrap, "topic": topic, "probe_timeout_seconds": 30}},
        "table": {"name": f"lake.poison.{name}", "schema": SCHEMA, "key": ["event_id"]},
        "format": fmt,
        "mode": "append" if fmt == "json" else "upsert",
        "trigger": {"interval": "1s", "max_records": 25},
        "dead_letter": f"lake.poison.{name}_dead",
        "max_record_bytes": MAX_RECORD_BYTES,
        "max_nesting_depth": MAX_DEPTH,
        **({"debezium": {"time.precision.mode": "connect"}} if fmt == "debezium" else {}),  # epoch millis, as json
        **extra,
    }
    runner = Runner(PipelineConfig.from_dict(doc), spark)
    runner.run(once=True, handle_signals=False)
    assert (runner.fast is not None) == (fmt == "json" and extra.get("fast_path") != "off")
    landed = Landed()
    table = spark.table(f"lake.poison.{name}").selectExpr(
        "event_id", "unix_micros(event_time) AS event_time", "n", "i", "price", "unix_date(day) AS day", "label"
    )
    for r in table.collect():
        assert r["event_id"] not in landed.rows, f"{r['event_id']} landed twice"
        landed.rows[r["event_id"]] = tuple(r[c] for c in COLUMNS)
    if spark.catalog.tableExists(f"lake.poison.{name}_dead"):
        for r in spark.table(f"lake.poison.{name}_dead").select("source_position", "error").collect():
            offset = int(r["source_position"].rsplit("@", 1)[1])
            assert r["source_position"].startswith(f"{topic}/0@") and offset not in landed.dead
            landed.dead[offset] = r["error"]
    return landed


def check(recs: list[Record], fmt: str, landed: Landed) -> None:
    """Every record once: in the table with the model's values, or a dead letter with the model's
    error; but a Debezium message whose value is the text `null` (spaces around it at most), which
    is a tombstone (decode/debezium/message.py `_not_an_object`, as the Spark path read it): neither."""

    def tombstone(r: Record) -> bool:
        return fmt == "debezium" and r.random is not None and r.random.strip(b" ") == b"null"

    assert len(landed.rows) + len(landed.dead) == sum(1 for r in recs if not tombstone(r))
    for offset, r in enumerate(recs):
        if tombstone(r):
            assert offset not in landed.dead, (fmt, offset, landed.dead.get(offset))
            continue
        error = r.expected_error(fmt)
        where = (fmt, offset, r.payload(fmt)[:200])
        if error is None:
            assert offset not in landed.dead, (*where, landed.dead.get(offset))
            assert landed.rows[r.key] == r.row(), where
        else:
            assert offset in landed.dead, where
            assert error in landed.dead[offset], (*where, landed.dead[offset])


@settings(
    max_examples=2,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # no shrinking: each example costs seconds
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
@given(st.lists(records(), min_size=10, max_size=35).map(with_keys))
def test_pipelines_keep_going_and_lose_nothing(spark: Any, kafka_broker: str, recs: list[Record]) -> None:
    """The fast path, the Spark JSON path and the Spark Debezium path, each over several batches."""
    run = uuid.uuid4().hex[:8]
    json_topic = create_topic(kafka_broker, partitions=1)
    produce(kafka_broker, json_topic, [(0, None, r.payload("json"), None) for r in recs])
    check(recs, "json", run_pipeline(spark, kafka_broker, json_topic, f"fast_{run}", "json"))
    check(recs, "json", run_pipeline(spark, kafka_broker, json_topic, f"spark_{run}", "json", fast_path="off"))
    dbz_topic = create_topic(kafka_broker, partitions=1)
    produce(kafka_broker, dbz_topic, [(0, None, r.payload("debezium"), None) for r in recs])
    check(recs, "debezium", run_pipeline(spark, kafka_broker, dbz_topic, f"dbz_{run}", "debezium"))


# -- the Spark decoders on a real session, more examples than whole pipelines -----------------------


@settings(
    max_examples=5,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
@given(st.lists(records(), min_size=5, max_size=40).map(with_keys))
def test_spark_decoders_against_the_model(spark: Any, recs: list[Record]) -> None:
    from pyspark.sql import types as T

    from icetide.config.pipeline import DebeziumSettings
    from icetide.decode import decode_debezium, decode_json

    types = [T.StringType(), T.TimestampType(), T.LongType(), T.IntegerType(), T.DoubleType(), T.DateType()]
    schema = T.StructType(
        [T.StructField(c, t, nullable=c != "event_id") for c, t in zip(COLUMNS, [*types, T.StringType()], strict=True)]
    )
    limits = PayloadLimits(MAX_RECORD_BYTES, MAX_DEPTH)
    for fmt in ("json", "debezium"):
        frame = spark.createDataFrame(
            [(r.payload(fmt), "t", 0, n) for n, r in enumerate(recs)],
            "value BINARY, topic STRING, partition INT, offset BIGINT",
        )
        position = ["topic", "partition", "offset"]
        if fmt == "debezium":  # epoch millis, as json reads them
            millis = DebeziumSettings(time_precision_mode="connect")
            changes = decode_debezium(
                frame, "value", schema, ["event_id"], "upsert", position, limits=limits, settings=millis
            )
            good, bad = changes.good, changes.bad
        else:
            good, bad = decode_json(frame, "value", schema, ["event_id"], "upsert", position, limits=limits)
        landed = Landed()
        rows = good.selectExpr(
            "event_id", "unix_micros(event_time) AS event_time", "n", "i", "price", "unix_date(day) AS day", "label"
        ).collect()
        landed.rows = {r["event_id"]: tuple(r[c] for c in COLUMNS) for r in rows}
        assert len(landed.rows) == len(rows)
        for r in bad.collect():
            landed.dead[int(r["source_position"].rsplit("@", 1)[1])] = r["error"]
        check(recs, fmt, landed)
