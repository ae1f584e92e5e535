"""Avro records with a Schema Registry (`format: debezium-avro` and `format: avro`), in Python.

A value in Confluent's wire format (icetide.decode.schema_registry) is decoded with fastavro
against its writer schema, then given the shape Kafka Connect's JSON converter gives the same
record: a Connect schema (built once per schema id from the Avro schema's `connect.name`,
`connect.parameters` and `connect.type`, else from its Avro logical types) and a payload in the
JSON converter's value forms (bytes and decimals as base64, a float32 as its shortest text;
NaN and infinities stay floats, which the Debezium decoders read as the converter's "NaN"). From
there the Debezium decoders apply unchanged, so every rule (ops, key changes, truncates,
tombstones, ordering by source position, routing by the source block, Connect conversions,
schema evolution, dead-letter reasons) is the one `format: debezium` has:

- the sync fast path takes `AvroMessages.envelope`: the event as decode/debezium_arrow.py's
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
import io
import json
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from icetide.config import AVRO_FORMATS, RegistrySettings
from icetide.decode import connect as C
from icetide.decode import limits as lim
from icetide.decode.debezium_arrow import Envelope, NotHere
from icetide.decode.limits import PayloadLimits
from icetide.decode.schema_registry import BadAvroRecord, registry_schemas, split_wire
from icetide.sources.kafka_reader import VALUE_ERROR_COLUMN

__all__ = ["VALUE_ERROR_COLUMN", "AvroMessages", "AvroSettings", "compile_schema", "messages_for"]

_CONNECT_TYPES = {
    "boolean": "boolean",
    "int": "int32",
    "long": "int64",
    "float": "float",
    "double": "double",
    "bytes": "bytes",
    "string": "string",
}
# Avro logical types without a Connect name: the Connect logical name the JSON converter would carry.
_LOGICAL_NAMES = {
    "date": C.CONNECT_DATE,
    "time-millis": C.CONNECT_TIME,
    "time-micros": C.MICRO_TIME,
    "timestamp-millis": C.CONNECT_TIMESTAMP,
    "timestamp-micros": C.MICRO_TIMESTAMP,
    "local-timestamp-millis": C.TIMESTAMP,
    "local-timestamp-micros": C.MICRO_TIMESTAMP,
}
_PLAIN_ENVELOPE = "icetide.avro.Envelope"

Convert = Callable[[Any], Any]


def _b64(v: bytes) -> str:
    return base64.b64encode(v).decode("ascii")


def _single(v: float) -> Any:
    """A float32 as the JSON converter writes it: its shortest text (21.8, not 21.799999237060547)."""
    return float(repr(np.float32(v))) if math.isfinite(v) else v


def _union_text(v: Any) -> Any:
    if v is None or isinstance(v, str):
        return v
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False, default=_b64)


def _nullable(convert: Convert) -> Convert:
    return lambda v: None if v is None else convert(v)


@dataclass
class _Node:
    """One Avro schema node compiled: its Connect schema, value conversion and size bounds."""

    connect: dict[str, Any]
    convert: Convert | None  # None: the decoded value is already the JSON converter's
    depth: int | None  # JSON nesting of its values; None: unbounded (never, schemas are not recursive)
    zero_size: bool  # a value may take no bytes at all (null, a record of nothing)
    longest_name: int


class _Compiler:
    """Walks one Avro schema (JSON) with Avro's name resolution."""

    def __init__(self) -> None:
        self.names: dict[str, Any] = {}
        self.active: set[str] = set()
        self.unbounded = False  # an array or map of values that take no bytes: no size bound

    def node(self, schema: Any, namespace: str) -> _Node:
        if isinstance(schema, list):
            return self._union(schema, namespace)
        if isinstance(schema, str):
            if schema in _CONNECT_TYPES or schema == "null":
                return self.node({"type": schema}, namespace)
            fullname = schema if "." in schema else (f"{namespace}.{schema}" if namespace else schema)
            found = self.names.get(fullname, self.names.get(schema))
            if found is None:
                raise BadAvroRecord(f"avro: the schema names an unknown type {schema!r}")
            named, ns = found
            return self._named(named, ns)
        if not isinstance(schema, Mapping):
            raise BadAvroRecord("avro: a schema node that is not a type")
        kind = schema.get("type")
        if kind in ("record", "error", "enum", "fixed"):
            name = str(schema.get("name"))
            ns = str(schema.get("namespace", namespace) or "")
            fullname = name if "." in name else (f"{ns}.{name}" if ns else name)
            if "." in name:
                ns = name.rsplit(".", 1)[0]
            self.names[fullname] = (schema, ns)
            return self._named(schema, ns, fullname)
        if isinstance(kind, list | Mapping):
            return self.node(kind, namespace)
        return self._primitive(schema, namespace)

    def _named(self, schema: Mapping[str, Any], ns: str, fullname: str | None = None) -> _Node:
        fullname = fullname or (f"{ns}.{schema['name']}" if ns and "." not in str(schema["name"]) else schema["name"])
        if fullname in self.active:
            raise BadAvroRecord(f"avro: recursive type {fullname}, which icetide does not read")
        kind = schema["type"]
        if kind == "enum":
            return _Node(_connect_attrs(schema, {"type": "string"}), None, 0, False, 0)
        if kind == "fixed":
            return self._primitive({**schema, "type": "bytes"}, ns, fixed=True)
        self.active.add(fullname)
        try:
            fields = []
            converts: list[tuple[str, Convert]] = []
            depth: int | None = 0
            longest, zero = 0, True
            for f in schema.get("fields", []):
                name = str(f["name"])
                child = self.node(f["type"], ns)
                fields.append({**child.connect, "field": name})
                if child.convert is not None:
                    converts.append((name, child.convert))
                depth = max(depth, child.depth) if depth is not None and child.depth is not None else None
                longest = max(longest, len(name), child.longest_name)
                zero = zero and child.zero_size
        finally:
            self.active.discard(fullname)
        connect = _connect_attrs(schema, {"type": "struct", "fields": fields, "optional": False, "name": fullname})
        convert = _record_converter(converts) if converts else None
        return _Node(connect, convert, None if depth is None else depth + 1, zero, longest)

    def _union(self, branches: list[Any], namespace: str) -> _Node:
        real = [b for b in branches if b != "null" and not (isinstance(b, Mapping) and b.get("type") == "null")]
        if len(real) == 1:
            inner = self.node(real[0], namespace)
            convert = _nullable(inner.convert) if inner.convert is not None else None
            return _Node({**inner.connect, "optional": True}, convert, inner.depth, True, inner.longest_name)
        if not real:
            return _Node({"type": "string", "optional": True}, None, 0, True, 0)
        children = [self.node(b, namespace) for b in real]  # validated, and their names registered
        return _Node(
            {"type": "string", "optional": len(real) < len(branches)},
            _union_text,
            0,
            len(real) < len(branches),
            max(c.longest_name for c in children),
        )

    def _container(self, schema: Mapping[str, Any], namespace: str) -> _Node:
        """An array (a list) or a map (an object: Avro's map keys are strings)."""
        is_array = schema.get("type") == "array"
        inner = self.node(schema.get("items" if is_array else "values"), namespace)
        self.unbounded = self.unbounded or inner.zero_size
        c = inner.convert
        convert: Convert | None = None
        if c is not None:
            convert = (lambda v: [c(x) for x in v]) if is_array else (lambda v: {k: c(x) for k, x in v.items()})
        if is_array:
            connect = {"type": "array", "items": inner.connect, "optional": False}
        else:
            connect = {"type": "map", "keys": {"type": "string", "optional": False}, "values": inner.connect}
            connect["optional"] = False
        depth = None if inner.depth is None else inner.depth + 1
        return _Node(_connect_attrs(schema, connect), convert, depth, False, inner.longest_name)

    def _primitive(self, schema: Mapping[str, Any], namespace: str, *, fixed: bool = False) -> _Node:
        kind = schema.get("type")
        if kind in ("array", "map"):
            return self._container(schema, namespace)
        if kind == "null":
            return _Node({"type": "string", "optional": True}, None, 0, True, 0)
        if kind not in _CONNECT_TYPES:
            raise BadAvroRecord(f"avro: unknown type {kind!r} in the schema")
        connect_type = _CONNECT_TYPES[str(kind)]
        if kind == "int" and schema.get("connect.type") in ("int8", "int16"):
            connect_type = str(schema["connect.type"])
        connect: dict[str, Any] = {"type": connect_type, "optional": False}
        logical = schema.get("logicalType")
        if "connect.name" not in schema and logical == "decimal":
            parameters = {"scale": str(schema.get("scale", 0))}
            if schema.get("precision") is not None:
                parameters["connect.decimal.precision"] = str(schema["precision"])
            connect.update(name=C.DECIMAL, parameters=parameters)
        elif "connect.name" not in schema and logical in _LOGICAL_NAMES:
            connect["name"] = _LOGICAL_NAMES[str(logical)]
        convert: Convert | None = None
        if kind == "bytes" or fixed:
            convert = _b64
        elif kind == "float":
            convert = _single
        return _Node(_connect_attrs(schema, connect), convert, 0, False, 0)


def _record_converter(converts: list[tuple[str, Convert]]) -> Convert:
    """A record's conversion: its fields that need one converted, the others as they are."""

    def convert(v: dict[str, Any]) -> dict[str, Any]:
        out = dict(v)
        for name, c in converts:
            out[name] = c(out[name])
        return out

    return convert


def _connect_attrs(schema: Mapping[str, Any], connect: dict[str, Any]) -> dict[str, Any]:
    """`connect` with the Avro node's Connect name, version and parameters, as AvroConverter wrote them."""
    if isinstance(schema.get("connect.name"), str):
        connect["name"] = schema["connect.name"]
    if schema.get("connect.version") is not None:
        connect["version"] = schema["connect.version"]
    parameters = schema.get("connect.parameters")
    if isinstance(parameters, Mapping):
        connect["parameters"] = {str(k): str(v) for k, v in parameters.items()}
    return connect


def _strip_logical(schema: Any) -> Any:
    """The schema without logical types: fastavro then returns the stored ints, longs and bytes."""
    if isinstance(schema, list):
        return [_strip_logical(s) for s in schema]
    if isinstance(schema, Mapping):
        return {k: _strip_logical(v) for k, v in schema.items() if k != "logicalType"}
    return schema


@dataclass
class CompiledSchema:
    """One registry schema, read once per process: how its records are decoded and shaped."""

    schema_id: int
    parsed: Any  # fastavro's parsed schema, logical types removed
    connect: dict[str, Any]  # the value's Connect schema
    convert: Convert | None
    is_record: bool
    depth: int | None
    bytes_factor: int | None  # JSON converter bytes per Avro body byte, at most; None: no bound

    def decode(self, body: memoryview) -> Any:
        """The body's value in the JSON converter's forms; BadAvroRecord when it does not decode."""
        from fastavro import schemaless_reader

        stream = io.BytesIO(body)
        try:
            value = schemaless_reader(stream, self.parsed, None)
        except Exception as exc:
            raise BadAvroRecord(
                f"avro: the body does not decode with schema id {self.schema_id}: {type(exc).__name__}: {exc}"[:300]
            ) from None
        if stream.tell() != len(body):
            raise BadAvroRecord(
                f"avro: {len(body) - stream.tell()} byte(s) after the body of schema id {self.schema_id}"
            )
        return self.convert(value) if self.convert is not None else value


def compile_schema(schema_id: int, text: str) -> CompiledSchema:
    """Compile a registry schema's text; BadAvroRecord when icetide cannot read its records."""
    from fastavro import parse_schema

    try:
        schema = json.loads(text)
    except ValueError as exc:
        raise BadAvroRecord(f"avro: schema id {schema_id} is not JSON") from exc
    compiler = _Compiler()
    node = compiler.node(schema, "")
    try:
        parsed = parse_schema(_strip_logical(schema))
    except Exception as exc:
        raise BadAvroRecord(f"avro: schema id {schema_id} does not parse: {exc}"[:300]) from None
    factor = None if compiler.unbounded else max(8, node.longest_name + 10)
    return CompiledSchema(
        schema_id=schema_id,
        parsed=parsed,
        connect={**node.connect, "optional": False},
        convert=node.convert,
        is_record=node.connect.get("type") == "struct",
        depth=node.depth,
        bytes_factor=factor,
    )


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
        self._compiled: dict[int, CompiledSchema] = {}
        self._values: dict[int, _Shape] = {}
        self._deletes: dict[int, _Shape] = {}  # format avro: a tombstone's delete, by key schema id
        self._keys: dict[int, bytes] = {}

    def compiled(self, schema_id: int) -> CompiledSchema:
        """The compiled schema of `schema_id` (fetched and compiled on first use)."""
        found = self._compiled.get(schema_id)
        if found is None:
            found = self._compiled[schema_id] = compile_schema(schema_id, self.registry.text(schema_id))
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
        op = payload.get("op")
        if type(op) is not str:
            raise NotHere("a message without an op")
        before, after, source = payload.get("before"), payload.get("after"), payload.get("source")
        if any(part is not None and not isinstance(part, dict) for part in (before, after, source)):
            raise NotHere("a message whose before, after or source is not an object (malformed for Spark)")
        return Envelope(
            op=op,
            before=before,
            after=after,
            source=source or {},
            ts_ms=payload.get("ts_ms"),
            schema=shape.envelope,
            schema_id=schema_id,
        )

    def _check_limits(self, shape: _Shape, payload: dict[str, Any], size: int) -> None:
        """The payload limits of the message the Spark path would read (decode/debezium_arrow.py's
        EnvelopeReader checks), computed only when the schema's bounds cannot rule a break out."""
        limits = self.settings.limits
        factor, depth = shape.schema.bytes_factor, shape.schema.depth
        room = limits.max_nesting_depth - 1  # the payload is inside the message
        small = factor is not None and len(shape.head) + 2 * factor * size + 64 <= limits.max_record_bytes
        shallow = depth is not None and depth + 2 <= room
        if small and shallow:
            return
        body = _dumps(payload)
        if len(shape.head) + len(body) + 1 > limits.max_record_bytes:
            raise NotHere("a message over the payload size limit")
        if lim.nesting_depth(body.decode("utf-8")) > room:
            raise NotHere("a message nested beyond the limit")

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
