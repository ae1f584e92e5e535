"""The `table` block of a pipeline file, and the per-table overrides of one that routes to many.

Also the table-name template's placeholders, the `deletes` mode and the format version a
block asks for; each error names its key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from icetide.config.values import parse_size, reject_unknown_keys, require_key
from icetide.errors import ConfigError
from icetide.table.format_version import FORMAT_VERSION_PROPERTY, parse_format_version

# The placeholders a table-name template may hold (Debezium's source block, and the Kafka topic).
TABLE_NAME_PLACEHOLDERS = ("db", "schema", "table", "topic")
TABLE_OVERRIDE_KEYS = {"partition_by", "properties", "target_file_size", "format_version", "deletes"}
# How the stream removes the rows a batch replaces: equality deletes, or deletion vectors (v3 only).
DELETE_MODES = ("equality", "vectors")
# Iceberg format versions icetide writes: v2, and v3 (deletion vectors, row lineage). v1 has no
# equality deletes, so no upserts.
TABLE_KEYS = {"name", "schema", "key", "key_index_memory", *TABLE_OVERRIDE_KEYS}
# deletes: vectors keeps a key index per table in memory (about 30 MB per million BIGINT keys);
# the indexes one process holds are bounded by `table.key_index_memory` (write/key_index_memory.py).
# 1 GiB holds some 35 million BIGINT keys, every table of most databases, and stays beside the
# driver's JVM (1 GiB heap by default) on a small machine; a fraction of the machine's memory
# would change with the host and cannot see a container's limit.
KEY_INDEX_MEMORY_DEFAULT = 1024**3


@dataclass(frozen=True)
class TableConfig:
    """The target table's definition."""

    name: str
    schema: str | None  # None: created from the stream's own schema (Debezium with schemas)
    key: tuple[str, ...]
    partition_by: tuple[str, ...] = ()
    properties: dict[str, str] = field(default_factory=dict)
    target_file_size: int | None = None
    # "equality" or "vectors" (deletion vectors, format v3); None: a new table gets v3 and vectors
    # (equality when its key does not fit the key index), an existing one keeps its mode
    deletes: str | None = None
    key_index_memory: int = KEY_INDEX_MEMORY_DEFAULT  # bytes of key indexes the process holds (vectors)

    @classmethod
    def from_dict(cls, d: Any, *, from_stream: bool = False) -> TableConfig:
        """With `from_stream` (Debezium), schema and key may be omitted: the stream's schemas give them."""
        if not isinstance(d, Mapping):
            raise ConfigError("table: expected a mapping with name, schema, key")
        reject_unknown_keys(d, TABLE_KEYS, "table.")
        if from_stream and not d.get("schema"):
            if d.get("key"):
                raise ConfigError(
                    "table.key: given without table.schema; give both, or neither to take them from the stream"
                )
            key: Any = []
        else:
            key = require_key(d, "key", "table.")
        if isinstance(key, str) or not all(isinstance(k, str) for k in key):
            raise ConfigError("table.key: expected a list of column names")
        partition_by = d.get("partition_by") or []
        if isinstance(partition_by, str):
            raise ConfigError("table.partition_by: expected a list, e.g. ['hours(event_time)']")
        name = str(require_key(d, "name", "table."))
        if len(name.split(".")) < 3:
            raise ConfigError(f"table.name: {name!r} must be <catalog>.<namespace>.<table>")
        size = d.get("target_file_size")
        return cls(
            name=name,
            schema=str(require_key(d, "schema", "table.")) if not from_stream or d.get("schema") else None,
            key=tuple(key),
            partition_by=tuple(str(p) for p in partition_by),
            properties=_with_format_version(d, "table"),
            target_file_size=parse_size(size, "table.target_file_size") if size is not None else None,
            deletes=_deletes(d, "table", _with_format_version(d, "table")),
            key_index_memory=_key_index_memory(d.get("key_index_memory")),
        )

    def created_for(self, mode: str) -> TableConfig:
        """The definition a pipeline of `mode` creates the table with: an `append` pipeline's new
        table, unless `deletes` is set, gets equality mode (its batches are INSERTs, which write no
        delete, so a key index would hold every row for nothing; a rare DELETE still lands)."""
        if mode == "append" and self.deletes is None:
            return replace(self, deletes="equality")
        return self

    @property
    def format_version(self) -> int | None:
        """The Iceberg format version asked for (`format_version`, or the `format-version` property)."""
        value = self.properties.get(FORMAT_VERSION_PROPERTY)
        return int(value) if value is not None else None


def table_name_placeholders(name: str, key: str = "table.name") -> tuple[str, ...]:
    """The placeholders of a table-name template (`lake.inventory.{table}` -> ("table",)), in order.

    A name without any is a plain table name. Raises ConfigError naming `key` for a placeholder
    other than {db}, {schema}, {table} and {topic}, a malformed brace, or one in the catalog part
    (a pipeline writes to one catalog).
    """
    import string

    try:
        parts = list(string.Formatter().parse(name))
    except ValueError as exc:
        raise ConfigError(f"{key}: {name!r} is not a valid template ({exc})") from None
    fields: list[str] = []
    for _, field_name, spec, conversion in parts:
        if field_name is None:
            continue
        if field_name not in TABLE_NAME_PLACEHOLDERS or spec or conversion:
            raise ConfigError(
                f"{key}: unknown placeholder {{{field_name}}} in {name!r} "
                f"(allowed: {', '.join('{' + p + '}' for p in TABLE_NAME_PLACEHOLDERS)})"
            )
        fields.append(field_name)
    if fields and "{" in name.split(".")[0]:
        raise ConfigError(f"{key}: the catalog part of {name!r} must be fixed (a pipeline writes to one catalog)")
    return tuple(fields)


@dataclass(frozen=True)
class TableOverride:
    """Settings for one table of a pipeline that routes to many (`tables: {<name>: {...}}`)."""

    partition_by: tuple[str, ...] | None = None
    properties: dict[str, str] = field(default_factory=dict)
    target_file_size: int | None = None
    deletes: str | None = None

    @classmethod
    def from_dict(cls, d: Any, where: str) -> TableOverride:
        if not isinstance(d, Mapping):
            raise ConfigError(f"{where}: expected a mapping, e.g. {{partition_by: ['bucket(16, id)']}}")
        reject_unknown_keys(d, TABLE_OVERRIDE_KEYS, f"{where}.")
        partition_by = d.get("partition_by")
        if partition_by is not None and (
            isinstance(partition_by, str) or not all(isinstance(p, str) for p in partition_by)
        ):
            raise ConfigError(f"{where}.partition_by: expected a list, e.g. ['bucket(16, id)']")
        if not isinstance(d.get("properties") or {}, Mapping):
            raise ConfigError(f"{where}.properties: expected a mapping of table properties")
        size = d.get("target_file_size")
        return cls(
            partition_by=tuple(partition_by) if partition_by is not None else None,
            properties=_with_format_version(d, where),
            target_file_size=parse_size(size, f"{where}.target_file_size") if size is not None else None,
            deletes=_deletes(d, where, None),
        )


def _key_index_memory(value: Any) -> int:
    """`table.key_index_memory`: a size >= 0 (0 keeps only the index of the table being written)."""
    if value is None:
        return KEY_INDEX_MEMORY_DEFAULT
    size = parse_size(value, "table.key_index_memory")
    if size < 0:
        raise ConfigError(f"table.key_index_memory: must not be negative, got {value!r}")
    return size


def _deletes(d: Mapping[str, Any], where: str, properties: Mapping[str, str] | None) -> str | None:
    """A table block's `deletes` mode, checked; with the block's `properties`, `vectors` must come
    with format version 3 (a per-table override is checked against the table block it overrides)."""
    mode = d.get("deletes")
    if mode is None:
        return None
    if mode not in DELETE_MODES:
        raise ConfigError(f"{where}.deletes: must be one of {', '.join(DELETE_MODES)}, got {mode!r}")
    if properties is not None:
        check_vectors_version(str(mode), properties, where)
    return str(mode)


def check_vectors_version(mode: str | None, properties: Mapping[str, str], where: str) -> None:
    """`deletes: vectors` needs a format v3 table (deletion vectors are a v3 feature): refused
    beside format_version 2 (without a version, a new table is v3; an existing v2 table is refused
    by the sink, naming the upgrade)."""
    if mode == "vectors" and properties.get(FORMAT_VERSION_PROPERTY, "3") != "3":
        raise ConfigError(f"{where}.deletes: vectors needs format_version: 3 (deletion vectors are a v3 feature)")


def _with_format_version(d: Mapping[str, Any], where: str) -> dict[str, str]:
    """A table block's `properties`, with its `format_version` as Iceberg's `format-version`
    property (the one way a table's version travels to `create_table`); both given must agree."""
    properties = {str(k): str(v) for k, v in (d.get("properties") or {}).items()}
    if FORMAT_VERSION_PROPERTY in properties:
        properties[FORMAT_VERSION_PROPERTY] = str(
            parse_format_version(properties[FORMAT_VERSION_PROPERTY], f"{where}.properties.{FORMAT_VERSION_PROPERTY}")
        )
    if d.get("format_version") is not None:
        version = str(parse_format_version(d["format_version"], f"{where}.format_version"))
        if properties.get(FORMAT_VERSION_PROPERTY, version) != version:
            raise ConfigError(
                f"{where}.format_version: {version} disagrees with properties.{FORMAT_VERSION_PROPERTY}="
                f"{properties[FORMAT_VERSION_PROPERTY]}; give one of them"
            )
        properties[FORMAT_VERSION_PROPERTY] = version
    return properties


def table_overrides(d: Any) -> dict[str, TableOverride]:
    """The `tables:` block: each routed table's full name -> its TableOverride ({} when absent)."""
    if d is None:
        return {}
    if not isinstance(d, Mapping):
        raise ConfigError("tables: expected a mapping of table name to settings, e.g. {lake.db.orders: {...}}")
    out = {}
    for name, settings in d.items():
        if len(str(name).split(".")) < 3 or "{" in str(name):
            raise ConfigError(f"tables.{name}: must be a table's full name <catalog>.<namespace>.<table>")
        out[str(name)] = TableOverride.from_dict(settings, f"tables.{name}")
    return out
