"""Kafka Connect schemas, as Debezium's JSON converter sends them (`schemas.enable=true`).

A message is `{"schema": {...}, "payload": {...}}`; the schema describes the envelope, whose
`before` and `after` structs list the row's fields with their Connect type (int8...int64,
float, double, boolean, string, bytes, struct, array, map), an optional logical `name`
(org.apache.kafka.connect.data.Decimal, io.debezium.time.MicroTimestamp, ...) and `parameters`
(a Decimal's `scale` and `connect.decimal.precision`). This module is pure Python: it reads a
schema once per distinct schema text and says how icetide types each field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructType

DECIMAL = "org.apache.kafka.connect.data.Decimal"
VARIABLE_SCALE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
CONNECT_DATE = "org.apache.kafka.connect.data.Date"
CONNECT_TIME = "org.apache.kafka.connect.data.Time"
CONNECT_TIMESTAMP = "org.apache.kafka.connect.data.Timestamp"
DATE = "io.debezium.time.Date"
TIME = "io.debezium.time.Time"
MICRO_TIME = "io.debezium.time.MicroTime"
NANO_TIME = "io.debezium.time.NanoTime"
TIMESTAMP = "io.debezium.time.Timestamp"
MICRO_TIMESTAMP = "io.debezium.time.MicroTimestamp"
NANO_TIMESTAMP = "io.debezium.time.NanoTimestamp"
ZONED_TIMESTAMP = "io.debezium.time.ZonedTimestamp"
ZONED_TIME = "io.debezium.time.ZonedTime"
YEAR = "io.debezium.time.Year"
BITS = "io.debezium.data.Bits"

# Epoch integers of each timestamp kind, in the unit they count.
TIMESTAMP_UNITS = {
    CONNECT_TIMESTAMP: "ms",
    TIMESTAMP: "ms",
    MICRO_TIMESTAMP: "us",
    NANO_TIMESTAMP: "ns",
}
# Times of day: what one unit of the integer is worth in microseconds.
TIME_MICROS = {CONNECT_TIME: 1000, TIME: 1000, MICRO_TIME: 1, NANO_TIME: 0}  # 0: nanoseconds, divide
DATES = {CONNECT_DATE, DATE}
VARIABLE_SCALE_DDL = "DECIMAL(38,10)"  # the column a table created from the stream gives VariableScaleDecimal


@dataclass(frozen=True)
class ConnectField:
    """One field of a Connect struct: its name, Connect type, logical name and parameters."""

    name: str
    type: str
    logical: str | None = None
    optional: bool = True
    parameters: Mapping[str, str] = field(default_factory=dict)
    # What a struct, array or map declares inside it (the JSON converter's `fields`, `items`,
    # `keys` and `values`): the fields of a struct; an array's element, a map's key and value
    # schemas (their `name` empty). None or empty where the schema says nothing.
    fields: tuple[ConnectField, ...] = ()
    items: ConnectField | None = None
    keys: ConnectField | None = None
    values: ConnectField | None = None

    @property
    def scale(self) -> int | None:
        """A Decimal's scale (from the schema's parameters), else None."""
        value = self.parameters.get("scale")
        return int(value) if value is not None and str(value).lstrip("-").isdigit() else None

    @property
    def precision(self) -> int | None:
        """A Decimal's precision when the connector sends it (`connect.decimal.precision`)."""
        value = self.parameters.get("connect.decimal.precision")
        return int(value) if value is not None and str(value).isdigit() else None


@dataclass(frozen=True)
class EnvelopeSchema:
    """What one distinct envelope schema says about the row (`after`, else `before`)."""

    fields: tuple[ConnectField, ...]

    def field(self, name: str) -> ConnectField | None:
        """The row field called `name`, or None."""
        for f in self.fields:
            if f.name == name:
                return f
        return None

    @property
    def names(self) -> list[str]:
        """The row's field names, in the schema's order."""
        return [f.name for f in self.fields]


def _field(d: Mapping[str, Any], name: str | None = None) -> ConnectField:
    """A field's schema (a struct's field, or with `name` "" an array's or map's inner schema)."""
    parameters = d.get("parameters") or {}
    inner = d.get("fields")
    return ConnectField(
        name=str(d.get("field")) if name is None else name,
        type=str(d.get("type")),
        logical=d.get("name") if isinstance(d.get("name"), str) else None,
        optional=bool(d.get("optional", True)),
        parameters={str(k): str(v) for k, v in parameters.items()} if isinstance(parameters, Mapping) else {},
        fields=tuple(_field(f) for f in inner if isinstance(f, Mapping)) if isinstance(inner, list) else (),
        items=_inner(d.get("items")),
        keys=_inner(d.get("keys")),
        values=_inner(d.get("values")),
    )


def _inner(d: Any) -> ConnectField | None:
    return _field(d, "") if isinstance(d, Mapping) else None


def parse_envelope_schema(text: str) -> EnvelopeSchema:
    """The row fields of a Debezium envelope schema (JSON text); ValueError if it has none.

    Accepts the envelope's schema (a struct with `before` and `after` struct fields) and, for
    messages produced without the envelope (e.g. after Debezium's unwrap transform), the row's
    own struct schema.
    """
    schema = json.loads(text)
    if not isinstance(schema, Mapping) or not isinstance(schema.get("fields"), list):
        raise ValueError("the message's schema is not a Connect struct")
    parts = {f.get("field"): f for f in schema["fields"] if isinstance(f, Mapping)}
    for part in ("after", "before"):
        row = parts.get(part)
        if isinstance(row, Mapping) and isinstance(row.get("fields"), list):
            return EnvelopeSchema(tuple(_field(f) for f in row["fields"] if isinstance(f, Mapping)))
    if "op" in parts:
        raise ValueError("the envelope schema has neither an after nor a before struct")
    return EnvelopeSchema(tuple(_field(f) for f in schema["fields"] if isinstance(f, Mapping)))


def parse_key_schema(text: str) -> list[str]:
    """The primary-key column names from a Debezium message key (`{"schema": ..., "payload": ...}`)."""
    doc = json.loads(text)
    schema = doc.get("schema") if isinstance(doc, Mapping) else None
    if not isinstance(schema, Mapping) or not isinstance(schema.get("fields"), list):
        raise ValueError("the message key carries no Connect struct schema")
    return [str(f["field"]) for f in schema["fields"] if isinstance(f, Mapping) and "field" in f]


def column_ddl(f: ConnectField) -> str:
    """The Spark SQL type a table created from the stream gives this field (docs/how-to/debezium-sync.md)."""
    logical = f.logical
    if logical == DECIMAL:
        scale = f.scale or 0
        precision = f.precision or 38
        if precision > 38 or scale > precision:
            return "STRING"  # wider than Iceberg's decimal(38): keep every digit as text
        return f"DECIMAL({precision},{scale})"
    if logical == VARIABLE_SCALE_DECIMAL:
        return VARIABLE_SCALE_DDL
    if logical in DATES:
        return "DATE"
    if logical in TIMESTAMP_UNITS or logical == ZONED_TIMESTAMP:
        return "TIMESTAMP"
    if logical in TIME_MICROS or logical == ZONED_TIME:
        return "STRING"
    if logical == YEAR:
        return "INT"
    if logical == BITS:
        return "BINARY"
    return {
        "int8": "INT",
        "int16": "INT",
        "int32": "INT",
        "int64": "BIGINT",
        "float": "FLOAT",  # the JSON converter's names for float32 and float64
        "float32": "FLOAT",
        "double": "DOUBLE",
        "float64": "DOUBLE",
        "boolean": "BOOLEAN",
        "bytes": "BINARY",
    }.get(f.type, "STRING")  # string, and struct/array/map kept as their JSON text


def spark_type(f: ConnectField) -> DataType:
    """`column_ddl` as a Spark DataType."""
    from pyspark.sql.types import _parse_datatype_string

    return _parse_datatype_string(column_ddl(f).lower())


def table_schema(envelope: EnvelopeSchema, key: list[str]) -> StructType:
    """A table schema for the stream's rows: every field, nullable unless it is part of the key."""
    from pyspark.sql.types import StructField, StructType

    return StructType([StructField(f.name, spark_type(f), nullable=f.name not in key) for f in envelope.fields])
