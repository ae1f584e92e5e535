"""How the stream removes the rows a batch replaces, per table, and what new tables get. No I/O.

`equality`: an equality delete on the key (cheap to write; PyIceberg refuses it and DuckDB reads
it slowly). `vectors`: deletion vectors found through the sink's key index (format v3 only; every
engine reads them like a compacted table's rows). A new table is format v3 with `vectors` when its
key fits the key index (integer, string, date or timestamp-with-zone columns), else `equality`;
the mode is written into the table (DELETES_PROPERTY), so a sink that is not told a mode keeps the
table's. A table without the property (made before this default, or by another tool) keeps
`equality`: changing an existing table's format or mode is the user's step (docs/design.md,
"The default: format v3 with deletion vectors").
"""

from __future__ import annotations

from typing import Any

from icetide.errors import ConfigError

DELETE_MODES = ("equality", "vectors")
DELETES_PROPERTY = "icetide.deletes"
DEFAULT_FORMAT_VERSION = 3  # of a new table
DELETES_OF_UNMARKED_TABLES = "equality"  # a table without DELETES_PROPERTY
# Iceberg type ids the key index holds (write/key_index.py `spark_form`); timestamps only with a zone.
INDEXABLE_KEY_TYPES = frozenset({"INTEGER", "LONG", "DATE", "STRING"})


def check_delete_mode(mode: str, key: str = "deletes") -> str:
    """`mode` if it is one of DELETE_MODES, else a ConfigError naming `key`."""
    if mode not in DELETE_MODES:
        raise ConfigError(f"{key}: {mode!r} is not one of {', '.join(DELETE_MODES)}")
    return mode


def indexable(field: Any) -> bool:
    """Whether the key index holds a key column (a Java NestedField; None: not found)."""
    if field is None:
        return False
    type_id = field.type().typeId().toString()
    if type_id == "TIMESTAMP":
        return bool(field.type().shouldAdjustToUTC())
    return type_id in INDEXABLE_KEY_TYPES


def new_table_deletes(version: int, key_fields: list[Any], asked: str | None) -> str:
    """The delete mode of a new table of format `version` whose key columns are `key_fields`:
    `asked`, checked, else `vectors` on v3 when the key index holds every key column."""
    if asked is not None:
        check_delete_mode(asked)
        if asked == "vectors" and version < 3:
            raise ConfigError(
                f"deletes: vectors needs format_version 3 (deletion vectors are a v3 feature), got {version}"
            )
        return asked
    if version >= 3 and key_fields and all(indexable(f) for f in key_fields):
        return "vectors"
    return "equality"


def table_deletes(properties: Any) -> str:
    """The mode a table was made with (its DELETES_PROPERTY; a Java or Python mapping), else
    DELETES_OF_UNMARKED_TABLES."""
    value = properties.get(DELETES_PROPERTY)
    if value is None:
        return DELETES_OF_UNMARKED_TABLES
    return check_delete_mode(str(value), f"table property {DELETES_PROPERTY}")
