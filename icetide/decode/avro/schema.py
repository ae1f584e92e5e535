"""Avro schemas read as the Connect schemas Kafka Connect's AvroConverter wrote into them.

Each registry schema is compiled once per process (`compile_schema`): its fastavro parse with the
logical types removed (values stay the ints, longs and bytes they are stored as: what the JSON
converter sends), the Connect schema it stands for (from `connect.name`, `connect.version`,
`connect.parameters` and `connect.type`, else from Avro's logical types), the conversion of its
decoded values to the JSON converter's forms (bytes as base64, a float32 as its shortest text),
and bounds on its JSON size and nesting (so payload limits are checked only when they can bite).

Avro strings are UTF-8: a body whose string bytes are not is a bad record naming the byte (in the
record, its wire-format header counted) and the field, never a value with U+FFFD (issue 49).
"""

from __future__ import annotations

import base64
import io
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from icetide.decode import limits as lim
from icetide.decode.avro.schema_registry import HEADER_BYTES, BadAvroRecord
from icetide.decode.debezium import connect_schema as C

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
Convert = Callable[[Any], Any]


def base64_text(v: bytes) -> str:
    """Avro bytes as the JSON converter sends them."""
    return base64.b64encode(v).decode("ascii")


def float32_text(v: float) -> Any:
    """A float32 as the JSON converter writes it: its shortest text (21.8, not 21.799999237060547)."""
    return float(str(np.float32(v))) if math.isfinite(v) else v


def _union_text(v: Any) -> Any:
    if v is None or isinstance(v, str):
        return v
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False, default=base64_text)


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
            convert = base64_text
        elif kind == "float":
            convert = float32_text
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
    writer: Any  # the schema's JSON, logical types removed (decode/debezium/event_runs.py reads runs with it)
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
        except UnicodeDecodeError as exc:  # raised once the string's bytes are read: the stream is past them
            at = HEADER_BYTES + stream.tell() - len(exc.object) + exc.start
            raise BadAvroRecord(
                f"avro: a string is not valid UTF-8 at byte {at} of the record{self._place(body)}"
            ) from None
        except Exception as exc:
            raise BadAvroRecord(
                f"avro: the body does not decode with schema id {self.schema_id}: {type(exc).__name__}: {exc}"[:300]
            ) from None
        if stream.tell() != len(body):
            raise BadAvroRecord(
                f"avro: {len(body) - stream.tell()} byte(s) after the body of schema id {self.schema_id}"
            )
        return self.convert(value) if self.convert is not None else value

    def _place(self, body: memoryview) -> str:
        """ ", in field a.b" (or "the name of field a.b", a map's key) for the first string of
        `body` that is not UTF-8; empty when it cannot be told."""
        from fastavro import schemaless_reader

        try:
            value = schemaless_reader(io.BytesIO(body), self.parsed, None, handle_unicode_errors="surrogateescape")
        except Exception:
            return ""
        place = lim.escaped_place(value)
        return f", in {place}" if place else ""


def compile_schema(schema_id: int, text: str) -> CompiledSchema:
    """Compile a registry schema's text; BadAvroRecord when icetide cannot read its records."""
    from fastavro import parse_schema

    try:
        schema = json.loads(text)
    except ValueError as exc:
        raise BadAvroRecord(f"avro: schema id {schema_id} is not JSON") from exc
    compiler = _Compiler()
    node = compiler.node(schema, "")
    writer = _strip_logical(schema)
    try:
        parsed = parse_schema(writer)
    except Exception as exc:
        raise BadAvroRecord(f"avro: schema id {schema_id} does not parse: {exc}"[:300]) from None
    factor = None if compiler.unbounded else max(8, node.longest_name + 10)
    return CompiledSchema(
        schema_id=schema_id,
        parsed=parsed,
        writer=writer,
        connect={**node.connect, "optional": False},
        convert=node.convert,
        is_record=node.connect.get("type") == "struct",
        depth=node.depth,
        bytes_factor=factor,
    )
