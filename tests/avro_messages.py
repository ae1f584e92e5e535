"""Debezium messages re-encoded as Confluent's AvroConverter writes them, for tests.

A JSON-converter message (`{"schema": <Connect schema>, "payload": ...}`) becomes the Avro
schema AvroConverter derives from the same Connect schema (`connect.name`, `connect.version`,
`connect.parameters`, `connect.type` for int8/int16, Decimal as bytes with the decimal logical
type, optional fields as a union with null) and a value that confluent-kafka's own AvroSerializer
encodes, through a schema registry, in the wire format (magic byte, schema id, body).
"""

from __future__ import annotations

import base64
import json
from typing import Any

_PRIMITIVES = {
    "int8": "int",
    "int16": "int",
    "int32": "int",
    "int64": "long",
    "float": "float",
    "float32": "float",
    "double": "double",
    "float64": "double",
    "boolean": "boolean",
    "string": "string",
    "bytes": "bytes",
}


def avro_schema(connect: dict[str, Any]) -> dict[str, Any]:
    """The Avro schema of a Connect schema (a struct at the top), as AvroConverter makes it."""
    return _avro(connect, set(), top=True)  # type: ignore[return-value]


def _avro(connect: dict[str, Any], defined: set[str], *, top: bool = False) -> Any:
    kind = connect["type"]
    out: Any
    if kind == "struct":
        full = connect.get("name") or "io.confluent.connect.avro.ConnectDefault"
        if full in defined:
            out = full
        else:
            defined.add(full)
            namespace, _, name = full.rpartition(".")
            fields = []
            for f in connect["fields"]:
                field: dict[str, Any] = {"name": f["field"], "type": _avro(f, defined)}
                if f.get("optional", True):
                    field["default"] = None
                fields.append(field)
            out = {"type": "record", "name": name, "fields": fields}
            if namespace:
                out["namespace"] = namespace
            _connect_attrs(connect, out)
    elif kind == "array":
        out = {"type": "array", "items": _avro(connect["items"], defined)}
    elif kind == "map":
        out = {"type": "map", "values": _avro(connect["values"], defined)}
    else:
        out = {"type": _PRIMITIVES[kind]}
        if kind in ("int8", "int16"):
            out["connect.type"] = kind
        _connect_attrs(connect, out)
        if connect.get("name") == "org.apache.kafka.connect.data.Decimal":
            parameters = connect.get("parameters", {})
            out.update(logicalType="decimal", scale=int(parameters.get("scale", 0)))
            out["precision"] = int(parameters.get("connect.decimal.precision", 64))
        if len(out) == 1:
            out = out["type"]
    if connect.get("optional", True) and not top:
        return ["null", out]
    return out


def _connect_attrs(connect: dict[str, Any], out: dict[str, Any]) -> None:
    if connect.get("version") is not None:
        out["connect.version"] = connect["version"]
    if connect.get("parameters"):
        out["connect.parameters"] = connect["parameters"]
    if connect.get("name"):
        out["connect.name"] = connect["name"]


def avro_value(connect: dict[str, Any], value: Any) -> Any:
    """A JSON-converter payload as the value AvroSerializer takes (base64 text back to bytes)."""
    if value is None:
        return None
    kind = connect["type"]
    if kind == "struct":
        return {f["field"]: avro_value(f, value.get(f["field"])) for f in connect["fields"]}
    if kind == "array":
        return [avro_value(connect["items"], v) for v in value]
    if kind == "map":
        return {k: avro_value(connect["values"], v) for k, v in value.items()}
    if kind == "bytes":
        return base64.b64decode(value)
    return value


class AvroEncoder:
    """Encodes JSON-converter messages (keys and values) with AvroSerializer through `registry_url`,
    a serializer per distinct schema (each registered under `<topic>-key` / `<topic>-value`)."""

    def __init__(self, registry_url: str) -> None:
        from confluent_kafka.schema_registry import SchemaRegistryClient

        self.client = SchemaRegistryClient({"url": registry_url})
        self._serializers: dict[str, Any] = {}

    def encode(self, message: bytes | None, topic: str, *, key: bool = False) -> bytes | None:
        """The Avro wire-format bytes of a JSON-converter message (None stays None: a tombstone)."""
        if message is None:
            return None
        from confluent_kafka.schema_registry.avro import AvroSerializer
        from confluent_kafka.serialization import MessageField, SerializationContext

        doc = json.loads(message)
        schema_text = json.dumps(avro_schema(doc["schema"]))
        serializer = self._serializers.get(schema_text)
        if serializer is None:
            serializer = self._serializers[schema_text] = AvroSerializer(self.client, schema_text)
        field = MessageField.KEY if key else MessageField.VALUE
        return bytes(serializer(avro_value(doc["schema"], doc["payload"]), SerializationContext(topic, field)))
