"""Avro records with a Schema Registry (`format: debezium-avro` and `format: avro`), in Python.

A value in Confluent's wire format (icetide.decode.avro.schema_registry) is decoded with fastavro
against its writer schema, then given the shape Kafka Connect's JSON converter gives the same
record: a Connect schema (built once per schema id from the Avro schema's `connect.name`,
`connect.parameters` and `connect.type`, else from its Avro logical types) and a payload in the
JSON converter's value forms (bytes and decimals as base64, a float32 as its shortest text;
NaN and infinities stay floats, which the Debezium decoders read as the converter's "NaN"). From
there the Debezium decoders apply unchanged, so every rule (ops, key changes, truncates,
tombstones, ordering by source position, routing by the source block, Connect conversions,
schema evolution, dead-letter reasons) is the one `format: debezium` has:

- the sync fast path takes `AvroMessages.envelope`: the event as decode/debezium/rows.py's
  `Envelope`, with no JSON text in between;
- the Spark path and the driver's table-from-stream take `AvroMessages.transcode_block`, run in
  the Kafka read task: each record becomes the JSON converter's message (key too), and a record
  that cannot be read keeps its bytes (base64) as the payload and its reason in `value_error`.

`format: avro` (flat records: a JDBC source, Debezium's ExtractNewRecordState) reads a record
as the `after` of a create event and a tombstone as a delete of the key its Avro key holds.

Logical types are read as the integers and bytes they are stored as (the schema is parsed with
them removed), exactly what the JSON converter sends. Not read (the record is a dead letter):
schemas with references to other subjects, recursive schemas, non-record values. A union of
several non-null types becomes a STRING holding its value's JSON text.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from icetide.config.pipeline import AVRO_FORMATS, RegistrySettings
from icetide.decode import limits as lim
from icetide.decode.avro.container import NotColumnar, run_reader
from icetide.decode.avro.schema import CompiledSchema, compile_schema
from icetide.decode.avro.schema_registry import HEADER_BYTES, BadAvroRecord, registry_schemas, split_wire
from icetide.decode.debezium import connect_schema as C
from icetide.decode.debezium.event_runs import EventRun
from icetide.decode.debezium.message import Envelope, envelope_of
from icetide.decode.debezium.rows import NotHere
from icetide.decode.limits import PayloadLimits
from icetide.sources.kafka_reader import VALUE_ERROR_COLUMN

__all__ = ["VALUE_ERROR_COLUMN", "AvroMessages", "AvroSettings", "messages_for"]

_PLAIN_ENVELOPE = "icetide.avro.Envelope"


@dataclass(frozen=True)
class AvroSettings:
    """What the executors need to read Avro values: the registry, the format, the payload limits."""

    registry: RegistrySettings
    envelope: bool  # debezium-avro: the value is Debezium's envelope; avro: a flat record
    limits: PayloadLimits
    keys: bool = True  # transcode the keys too (a table created from the stream takes its key from them)

    @classmethod
    def of(cls, fmt: str, registry: RegistrySettings, limits: PayloadLimits) -> AvroSettings:
        """The settings of `format: debezium-avro` or `format: avro`."""
        if fmt not in AVRO_FORMATS:
            raise ValueError(f"not an Avro format: {fmt}")
        return cls(registry, fmt == "debezium-avro", limits)

    def transcode_block(
        self, keys: Sequence[bytes | None], values: Sequence[bytes | None]
    ) -> tuple[list[bytes | None], list[bytes | None], list[str | None]]:
        """`AvroMessages.transcode_block` with this process's reader (the Kafka read task's hook)."""
        return messages_for(self).transcode_block(keys, values)


@dataclass(frozen=True)
class _Shape:
    """How one schema id's records become JSON converter messages."""

    schema: CompiledSchema
    head: bytes  # b'{"schema":<Connect schema>,"payload":'
    envelope: C.EnvelopeSchema  # the row fields, for the fast path


class AvroMessages:
    """Reads wire-format keys and values; one per Python worker and settings (`messages_for`)."""

    def __init__(self, settings: AvroSettings) -> None:
        self.settings = settings
        self.registry = registry_schemas(settings.registry)
        self._compiled: dict[int, CompiledSchema | BadAvroRecord] = {}
        self._values: dict[int, _Shape] = {}
        self._deletes: dict[int, _Shape] = {}  # format avro: a tombstone's delete, by key schema id
        self._keys: dict[int, bytes] = {}

    def compiled(self, schema_id: int) -> CompiledSchema:
        """The compiled schema of `schema_id` (fetched and compiled on first use; a schema icetide
        cannot read is remembered as the BadAvroRecord it raised)."""
        found = self._compiled.get(schema_id)
        if found is None:
            text = self.registry.text(schema_id)
            try:
                found = compile_schema(schema_id, text)
            except BadAvroRecord as exc:
                found = exc
            self._compiled[schema_id] = found
        if isinstance(found, BadAvroRecord):
            raise BadAvroRecord(str(found))
        return found

    def read(self, data: bytes) -> tuple[CompiledSchema, Any]:
        """(schema, value in the JSON converter's forms) of a wire-format key or value."""
        schema_id, body = split_wire(data)
        schema = self.compiled(schema_id)
        return schema, schema.decode(body)

    # -- shapes ---------------------------------------------------------------------------------

    def _value_shape(self, schema: CompiledSchema) -> _Shape:
        found = self._values.get(schema.schema_id)
        if found is None:
            if not schema.is_record:
                raise BadAvroRecord(f"avro: schema id {schema.schema_id} is not a record")
            connect = schema.connect
            if not self.settings.envelope:
                after = {**connect, "optional": True, "field": "after"}
                op = {"type": "string", "optional": False, "field": "op"}
                connect = {"type": "struct", "fields": [after, op], "optional": False, "name": _PLAIN_ENVELOPE}
            found = self._values[schema.schema_id] = _shape(schema, connect)
        return found

    def _delete_shape(self, key: CompiledSchema) -> _Shape:
        found = self._deletes.get(key.schema_id)
        if found is None:
            if not key.is_record:
                raise BadAvroRecord(f"avro: a tombstone whose key (schema id {key.schema_id}) is not a record")
            before = {**key.connect, "optional": True, "field": "before"}
            op = {"type": "string", "optional": False, "field": "op"}
            connect = {"type": "struct", "fields": [before, op], "optional": False, "name": _PLAIN_ENVELOPE}
            found = self._deletes[key.schema_id] = _shape(key, connect)
        return found

    def _event(self, key: bytes | None, value: bytes | None) -> tuple[_Shape, dict[str, Any]] | None:
        """(shape, payload) of a record; None for a tombstone that deletes nothing."""
        if value is None:
            if self.settings.envelope or key is None:
                return None
            try:
                schema, row = self.read(key)
            except BadAvroRecord as exc:
                raise BadAvroRecord(f"{exc} (the key of a tombstone)") from None
            return self._delete_shape(schema), {"before": row, "op": "d"}
        schema, payload = self.read(value)
        shape = self._value_shape(schema)
        if not self.settings.envelope:
            payload = {"after": payload, "op": "c"}
        return shape, payload

    # -- the fast path --------------------------------------------------------------------------

    def envelope(self, key: bytes | None, value: bytes | None) -> Envelope | None:
        """The record's change event, None when it carries none; NotHere for a record the
        Spark path reads (a dead letter there), the payload limits included."""
        try:
            event = self._event(key, value)
        except BadAvroRecord as exc:
            raise NotHere(str(exc)) from None
        if event is None:
            return None
        shape, payload = event
        self._check_limits(shape, payload, len(value if value is not None else key or b""))
        if not self.settings.envelope and value is None:
            schema_id = -1 - shape.schema.schema_id  # a key schema's delete: never a value schema's plan
        else:
            schema_id = shape.schema.schema_id
        return envelope_of(payload, shape.envelope, schema_id)

    def _within_bounds(self, shape: _Shape, size: int) -> bool:
        """Do the schema's bounds rule out a payload limit break for a record of `size` bytes?"""
        limits = self.settings.limits
        factor, depth = shape.schema.bytes_factor, shape.schema.depth
        room = limits.max_nesting_depth - 1  # the payload is inside the message
        small = factor is not None and len(shape.head) + 2 * factor * size + 64 <= limits.max_record_bytes
        return small and depth is not None and depth + 2 <= room

    def _check_limits(self, shape: _Shape, payload: dict[str, Any], size: int) -> None:
        """The payload limits of the message the Spark path would read (decode/debezium/rows.py's
        EnvelopeReader checks), computed only when the schema's bounds cannot rule a break out."""
        if self._within_bounds(shape, size):
            return
        limits = self.settings.limits
        room = limits.max_nesting_depth - 1
        body = _dumps(payload)
        if len(shape.head) + len(body) + 1 > limits.max_record_bytes:
            raise NotHere("a message over the payload size limit")
        if lim.nesting_depth(body.decode("utf-8")) > room:
            raise NotHere("a message nested beyond the limit")

    def read_run(self, values: Sequence[bytes]) -> EventRun:
        """A run of records with one schema id (none a tombstone) read as columns
        (decode/debezium/event_runs.py); NotColumnar when it must be read record by record."""
        try:
            schema = self.compiled(int.from_bytes(values[0][1:5], "big"))
            shape = self._value_shape(schema)
        except BadAvroRecord as exc:
            raise NotColumnar(str(exc)) from None
        if not self._within_bounds(shape, max(map(len, values))):
            raise NotColumnar("a record the payload limits may refuse")
        records = run_reader().decode(schema.writer, [memoryview(v)[HEADER_BYTES:] for v in values])
        return EventRun(records, schema.schema_id, shape.envelope, self.settings.envelope)

    # -- the Spark path's read ------------------------------------------------------------------

    def message(self, key: bytes | None, value: bytes | None) -> bytes | None:
        """The JSON converter's message of the record (None: a tombstone); BadAvroRecord."""
        event = self._event(key, value)
        if event is None:
            return None
        shape, payload = event
        return shape.head + _dumps(payload) + b"}"

    def key_message(self, key: bytes | None) -> bytes | None:
        """A wire-format key as the JSON converter's key message; any other key as it is."""
        if key is None or len(key) < 5 or key[0] != 0:
            return key
        try:
            schema, row = self.read(key)
        except BadAvroRecord:
            return key
        head = self._keys.get(schema.schema_id)
        if head is None:
            head = self._keys[schema.schema_id] = b'{"schema":' + _dumps(schema.connect) + b',"payload":'
        return head + _dumps(row) + b"}"

    def transcode_block(
        self, keys: Sequence[bytes | None], values: Sequence[bytes | None]
    ) -> tuple[list[bytes | None], list[bytes | None], list[str | None]]:
        """(keys, values, errors) of a block of records: each as its JSON converter message; a
        record that cannot be read keeps its value's bytes in base64 and its reason in errors."""
        out_keys = [self.key_message(k) for k in keys] if self.settings.keys else list(keys)
        out: list[bytes | None] = []
        errors: list[str | None] = []
        for key, value in zip(keys, values, strict=True):
            try:
                out.append(self.message(key, value))
                errors.append(None)
            except BadAvroRecord as exc:
                raw = value if value is not None else key or b""
                out.append(base64.b64encode(raw))
                errors.append(str(exc))
        return out_keys, out, errors


def _shape(schema: CompiledSchema, connect: dict[str, Any]) -> _Shape:
    text = _dumps(connect)
    try:
        envelope = C.parse_envelope_schema(text.decode("utf-8"))
    except ValueError as exc:
        raise BadAvroRecord(f"avro: schema id {schema.schema_id} describes no row ({exc})") from None
    return _Shape(schema, b'{"schema":' + text + b',"payload":', envelope)


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


_MESSAGES: dict[str, AvroMessages] = {}
_MESSAGES_LOCK = threading.Lock()


def messages_for(settings: AvroSettings) -> AvroMessages:
    """The process's one reader for `settings`: schemas compiled once per Python worker."""
    key = f"{settings.registry.key()}|{settings.envelope}|{settings.keys}|{settings.limits!r}"
    with _MESSAGES_LOCK:
        found = _MESSAGES.get(key)
        if found is None:
            found = _MESSAGES[key] = AvroMessages(settings)
        return found
