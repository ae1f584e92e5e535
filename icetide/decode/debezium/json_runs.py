"""Debezium JSON-converter messages read a run at a time as columns: the sync fast path's quick read.

Per message, `EnvelopeReader.read` (the payload's `json.loads`, with its checks) and `TableRows.add`
are most of a one-table Debezium pipeline's CPU (docs/benchmarks.md, bench/profile_sync_task.py).
Consecutive messages with one schema head are read instead by one `pyarrow.json.read_json` call
against an Arrow type made from the head's Connect schema, and Debezium's rules then apply to
whole columns, as for Avro runs (decode/debezium/event_runs.py `EventRun`, shared). The per-message decoder
stays the specification: a run is read as columns only where that gives exactly what reading its
messages one by one gives; otherwise `NotColumnar`, and they are read one by one. So a run takes:

- messages laid out as the JSON converter writes them (the head, then the payload object, on one
  line), each passing the checks `read` makes before it parses (size, lone surrogates, UTF-8,
  nesting, numbers longer than Spark reads);
- a head whose schema is an envelope whose every field is an integer, string, bytes, boolean or
  double, or a struct of those (Debezium's before, after, source and transaction blocks);
- payloads pyarrow reads against that type: it refuses a key repeated in an object, a key the
  schema lacks and a value of another JSON type, and every key the schema names must be in the
  text (the colons after keys are counted, as `EnvelopeReader` counts them; a run with '\\":'
  in a string is refused);
- doubles that are finite and not a negative zero (`json.loads` reads `-0` as the integer 0), and
  only into DOUBLE columns: `json.loads` reads a double's text as a `Decimal`, which other
  columns keep digit for digit; no number longer than Spark reads, sign, point and exponent
  counted;
- a head that is UTF-8 without a lone surrogate escaped in it.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.json as pj

from icetide.decode import limits as lim
from icetide.decode.avro.container import NotColumnar, present
from icetide.decode.debezium.conversions import NotHere
from icetide.decode.debezium.event_runs import EventRun
from icetide.decode.debezium.message import EnvelopeReader
from icetide.decode.limits import PayloadLimits
from icetide.decode.spark_compat.json_values import MAX_NUMBER_LENGTH

_TYPES = {
    "int8": pa.int64(),
    "int16": pa.int64(),
    "int32": pa.int64(),
    "int64": pa.int64(),
    "string": pa.string(),
    "bytes": pa.string(),  # the JSON converter's base64 text, which the converters take
    "boolean": pa.bool_(),
    "double": pa.float64(),
}
_LONE_SURROGATE = re.compile(lim.LONE_SURROGATE.encode())
_KEY_END = b'":'
# A run of number characters longer than Spark reads a number: digits, sign, point, exponent.
_LONG_NUMBER = re.compile(rb"[-+0-9.eE]{%d}" % (MAX_NUMBER_LENGTH + 1))
_DEPTH = 3  # the message, its payload, a block of it: a run's schema nests no deeper, and pyarrow holds it to that
_PAYLOAD_KEY = b'"payload":'


@dataclass(frozen=True)
class _Shape:
    """What a head's schema says a run is read as: the payload's Arrow schema, and for each
    struct field its position and number of keys (the colons a present one adds)."""

    schema: pa.Schema
    structs: tuple[tuple[int, int], ...]  # (field index, keys)
    doubles: frozenset[str]  # row fields of type double


def _shape(schema_text: Any) -> _Shape | None:
    """The run shape of an envelope schema (the head's parsed JSON), or None: read one by one."""
    if not isinstance(schema_text, Mapping) or schema_text.get("type") != "struct":
        return None
    top = schema_text.get("fields")
    if not isinstance(top, list) or not {"op", "after"} <= {f.get("field") for f in top if isinstance(f, Mapping)}:
        return None
    fields: list[pa.Field] = []
    structs: list[tuple[int, int]] = []
    doubles: set[str] = set()
    for i, f in enumerate(top):
        if not isinstance(f, Mapping) or not isinstance(f.get("field"), str):
            return None
        if f.get("type") == "struct":
            children = f.get("fields")
            if not isinstance(children, list):
                return None
            types = []
            for child in children:
                t = _TYPES.get(str(child.get("type"))) if isinstance(child, Mapping) else None
                if t is None or not isinstance(child.get("field"), str):
                    return None
                types.append(pa.field(child["field"], t))
                if f["field"] in ("before", "after") and child.get("type") == "double":
                    doubles.add(child["field"])
            if len({t.name for t in types}) != len(types):
                return None
            fields.append(pa.field(f["field"], pa.struct(types)))
            structs.append((i, len(types)))
        else:
            t = _TYPES.get(str(f.get("type")))
            if t is None or t == pa.float64():
                return None
            fields.append(pa.field(f["field"], t))
    names = [f.name for f in fields]
    if len(set(names)) != len(names):
        return None
    return _Shape(pa.schema(fields), tuple(structs), frozenset(doubles))


def _plain_text(text: bytes) -> bool:
    """UTF-8 without a lone surrogate escaped in it (what `EnvelopeReader.read` checks of a message)."""
    if b"\\" in text and _LONE_SURROGATE.search(text):
        return False
    if not text.isascii():
        try:
            text.decode("utf-8")
        except UnicodeDecodeError:
            return False
    return True


def _colons(bodies: Sequence[bytes]) -> np.ndarray:
    """Each payload's colons right after a quote: one per key (`read` refuses a run with '\\":',
    the only other place they can be)."""
    return np.fromiter((b.count(_KEY_END) for b in bodies), np.int64, len(bodies))


def _keys(parts: Sequence[pa.Array], shape: _Shape, bodies: Sequence[bytes]) -> np.ndarray:
    """The keys each payload has when a block that has a value has every field of its schema: a
    block's own key where its value is not null, or its key is in the text (the JSON converter
    writes `"transaction":null`; a hand-made producer may leave the key out, which reads alike:
    `envelope_of` takes a missing block as a null one), plus its fields when it is present."""
    keys = np.zeros(len(bodies), np.int64)
    for field, values in zip(shape.schema, parts, strict=True):
        there = present(values)
        if not there.all():
            text = b'"' + field.name.encode() + b'":'  # escaped in a string: \"name\": never matches
            there = there | np.fromiter((text in b for b in bodies), bool, len(bodies))
        keys += there
    for i, n in shape.structs:
        keys += present(parts[i]) * n
    return keys


class JsonRuns:
    """Finds and reads runs of one task's JSON-converter messages, beside the task's own
    `EnvelopeReader` (whose heads, and so schema ids, they share)."""

    def __init__(self, reader: EnvelopeReader, limits: PayloadLimits) -> None:
        self.reader = reader
        self.limits = limits
        self._shapes: dict[bytes, _Shape | None] = {}

    def run(self, messages: Sequence[Any], start: int) -> tuple[int, list[Any], list[bytes], bytes]:
        """(end, events, bodies, head) of the run of messages from `start` that share one head, as
        the JSON converter lays them out (the payload object right after the head, then the
        message's closing brace), each within the size limit and without a number longer than
        Spark reads: the messages up to `end` (tombstones, which follow a delete and change
        nothing, included), those that carry a value, and their payloads' text. `end == start`:
        the message there starts no run. The checks of the whole run's text are `read`'s."""
        events: list[Any] = []
        bodies: list[bytes] = []
        end = start
        head = self._head(messages, start)
        if head is None:
            return end, events, bodies, b""
        at, most = len(head), self.limits.max_record_bytes
        for message in messages[start:]:
            value = message.value()
            if value is None:
                end += 1
                continue
            if not value.startswith(head) or len(value) > most or not value.endswith(b"}}") or value[at] != 123:
                break  # 123: "{", the payload object
            body = value[at:-1]
            if len(body) > MAX_NUMBER_LENGTH and _LONG_NUMBER.search(body):
                break  # a number (or text like one) longer than Spark reads: json.loads's checks decide
            events.append(message)
            bodies.append(body)
            end += 1
        return end, events, bodies, head

    def _head(self, messages: Sequence[Any], start: int) -> bytes | None:
        """The head of the first message from `start` that carries a value, when its schema is one
        runs are read by; else None."""
        value = next((v for v in (m.value() for m in messages[start : start + 64]) if v is not None), None)
        if value is None:
            return None
        try:
            head = self.reader.head(value)
        except NotHere:  # laid out otherwise: read one by one
            return None
        return head if self._shape_of(head) is not None else None

    def _shape_of(self, head: bytes) -> _Shape | None:
        if head not in self._shapes and not _plain_text(head):  # `read` checks what every message holds
            self._shapes[head] = None
        if head not in self._shapes:
            text = head[: -len(_PAYLOAD_KEY)].decode("utf-8", "replace").rstrip()
            try:  # `{"schema":<schema>,` as an object
                schema = json.loads(text[:-1] + "}").get("schema") if text.endswith(",") else None
            except (ValueError, AttributeError):
                schema = None
            self._shapes[head] = _shape(schema) if self.reader.heads[head][1] is not None else None
        return self._shapes[head]

    def check(self, head: bytes, columns: pa.Schema) -> None:
        """NotColumnar when the run's events go to a table of `columns` that only reading them one
        by one fills exactly (a double into another type than DOUBLE)."""
        shape = self._shapes.get(head)
        for name in shape.doubles if shape is not None else ():
            if name in columns.names and columns.field(name).type != pa.float64():
                raise NotColumnar(f"column {name}: a double into another type")

    def read(self, head: bytes, bodies: Sequence[bytes]) -> EventRun:
        """The run's events as columns; NotColumnar when its messages must be read one by one.
        Before adding them to a table, `check` its columns."""
        shape = self._shapes.get(head)
        schema_id, schema = self.reader.heads[head]
        if shape is None or schema is None:
            raise NotColumnar("a schema read message by message")
        joined = b"\n".join(bodies)
        if joined.count(b"\n") != len(bodies) - 1 or b"\r" in joined:
            raise NotColumnar("a payload over several lines")
        if not _plain_text(joined):
            raise NotColumnar("a lone surrogate, or text that is not UTF-8")  # a dead letter, read alone
        if b'\\":' in joined:
            raise NotColumnar('\\": in a string, which the colon count would take for a key')
        if self.limits.max_nesting_depth < _DEPTH:
            raise NotColumnar("a nesting limit below the envelope's depth")
        try:
            table = pj.read_json(
                io.BytesIO(joined),
                read_options=pj.ReadOptions(use_threads=False, block_size=max(len(joined) + 1, 1 << 20)),
                parse_options=pj.ParseOptions(explicit_schema=shape.schema, unexpected_field_behavior="error"),
            )
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise NotColumnar(f"pyarrow does not read the run: {exc}") from None
        if table.num_rows != len(bodies):
            raise NotColumnar("pyarrow read another number of events")
        parts = [c.combine_chunks() for c in table.columns]
        if not np.array_equal(_colons(bodies), _keys(parts, shape, bodies)):
            raise NotColumnar("a key missing from a block")
        for i, _ in shape.structs:
            for child in parts[i].type:
                if child.type == pa.float64():
                    numbers = parts[i].field(child.name).fill_null(1.0).to_numpy(zero_copy_only=False)
                    if not np.isfinite(numbers).all():
                        raise NotColumnar(f"{child.name}: a double that is not finite")
                    if (np.signbit(numbers) & (numbers == 0)).any():  # "-0" is the integer 0 to json.loads
                        raise NotColumnar(f"{child.name}: a negative zero")
        records = pa.StructArray.from_arrays(parts, fields=list(shape.schema))
        return EventRun(records, schema_id, schema, True)
