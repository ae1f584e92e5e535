"""Create or load an icetide table: format v3 with deletion vectors (table/delete_modes.py),
merge-on-read, a primary key, hidden partitioning."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from icetide.errors import ConfigError, SchemaError
from icetide.spark.py4j_collections import java_list
from icetide.table.definition import Column, Definition, compare
from icetide.table.delete_modes import DEFAULT_FORMAT_VERSION, DELETES_PROPERTY, new_table_deletes
from icetide.table.iceberg import (
    check_format_version,
    iceberg_catalog,
    jvm,
    load_table,
    requested_format_version,
    spec_fields,
    split_name,
)
from icetide.table.spec import TableSpec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# Bounded metadata and history that streaming readers can use (docs/operations.md). Iceberg's own
# property names, so Spark's `expire_snapshots` procedure and other engines honour them too.
METADATA_DELETE_AFTER_COMMIT = "write.metadata.delete-after-commit.enabled"
METADATA_PREVIOUS_VERSIONS_MAX = "write.metadata.previous-versions-max"
MAX_SNAPSHOT_AGE_MS = "history.expire.max-snapshot-age-ms"
MIN_SNAPSHOTS_TO_KEEP = "history.expire.min-snapshots-to-keep"
RETENTION_DEFAULTS = {
    METADATA_DELETE_AFTER_COMMIT: "true",
    # Old metadata.json files serve no reader (snapshots live in the current one); 20 of them are
    # a short trail for debugging. Iceberg's own default keeps 100 and never deletes without the flag.
    METADATA_PREVIOUS_VERSIONS_MAX: "20",
    # Snapshots younger than an hour survive expiry: a streaming reader or a time-travel query can
    # fall an hour behind. Iceberg's own default is 5 days, which on a 1 s trigger is 432,000 snapshots.
    MAX_SNAPSHOT_AGE_MS: str(3600 * 1000),
    MIN_SNAPSHOTS_TO_KEEP: "10",
}
TABLE_DEFAULTS = {
    "format-version": str(DEFAULT_FORMAT_VERSION),
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.merge.mode": "merge-on-read",
    "write.parquet.compression-codec": "zstd",
    **RETENTION_DEFAULTS,
}


def apply_retention_defaults(spark: SparkSession, name: str) -> dict[str, str]:
    """Set each of RETENTION_DEFAULTS the table lacks (tables made before icetide set them);
    properties the table already has, whatever their value, are left alone.

    Returns what was set (empty: nothing to do, and nothing was committed). The change is a
    metadata-only commit that Iceberg retries on top of concurrent commits, so it is safe beside
    a running stream.
    """
    table = load_table(spark, name)
    table.refresh()
    present = table.properties()
    missing = {k: v for k, v in RETENTION_DEFAULTS.items() if not present.containsKey(k)}
    if missing:
        update = table.updateProperties()
        for k, v in missing.items():
            update = update.set(k, v)
        update.commit()
        log.info("%s: set retention defaults %s", name, missing)
    return missing


def _definition(jschema: Any, jspec: Any) -> Definition:
    """Schema, key and partitioning of a Java schema and spec as plain values."""
    ids = {int(i) for i in java_list(jschema.identifierFieldIds())}
    fields = java_list(jschema.columns())
    columns = tuple(Column(f.name(), f.type().toString(), bool(f.isRequired())) for f in fields)
    key = tuple(sorted(f.name() for f in fields if f.fieldId() in ids))
    parts = tuple((f.transform().toString(), jschema.findColumnName(f.sourceId())) for f in java_list(jspec.fields()))
    return Definition(columns, key, parts)


# (table, difference) pairs already logged by this process: a pipeline restarted in a loop by
# supervision says once what differs, not on every start.
_LOGGED_DIFFERENCES: set[tuple[str, str]] = set()


def check_existing(name: str, declared: Definition, found: Definition) -> None:
    """Accept an existing table that evolved from the declared definition; raise SchemaError naming
    every conflict (see icetide.table.definition), and log each difference once per process."""
    comparison = compare(declared, found)
    if comparison.conflicts:
        raise SchemaError(f"table {name} exists and does not fit the pipeline: {'; '.join(comparison.conflicts)}")
    for difference in comparison.differences:
        if (name, difference) not in _LOGGED_DIFFERENCES:
            _LOGGED_DIFFERENCES.add((name, difference))
            log.info("table %s differs from its declared definition: %s", name, difference)


def _build_schema_and_spec(spark: SparkSession, spec: TableSpec) -> tuple[Any, Any]:
    j = jvm(spark)
    try:
        struct = j.org.apache.spark.sql.types.StructType.fromDDL(spec.schema)
    except Exception as exc:
        raise ConfigError(f"schema: cannot parse {spec.schema!r}: {str(exc).splitlines()[0]}") from exc
    fresh = j.org.apache.iceberg.spark.SparkSchemaUtil.convert(struct)
    names = [f.name() for f in java_list(fresh.columns())]
    ids = []
    for column in spec.key:
        field = fresh.findField(column)
        if field is None:
            raise ConfigError(f"key: column {column!r} is not in the schema {names}")
        if field.isOptional():
            raise ConfigError(f"key: column {column!r} must be declared NOT NULL in the schema")
        ids.append(field.fieldId())
    schema = j.org.apache.iceberg.Schema(fresh.columns(), j.java.util.HashSet(ids))
    builder = j.org.apache.iceberg.PartitionSpec.builderFor(schema)
    for p in spec.partition_by:
        if schema.findField(p.column) is None:
            raise ConfigError(f"partition_by: column {p.column!r} of {p} is not in the schema {names}")
        if p.transform == "identity":
            builder = builder.identity(p.column)
        elif p.transform == "bucket":
            builder = builder.bucket(p.column, p.width)
        elif p.transform == "truncate":
            builder = builder.truncate(p.column, p.width)
        else:  # years/months/days/hours: the builder's methods are singular
            builder = getattr(builder, p.transform[:-1])(p.column)
    try:
        jspec = builder.build()
    except Exception as exc:
        raise ConfigError(f"partition_by: {str(exc).splitlines()[0]}") from exc
    spec_fields(jspec, schema)  # refuses partition types the writer cannot produce
    return schema, jspec


def create_table(
    spark: SparkSession,
    name: str,
    *,
    schema: str,
    key: list[str],
    partition_by: list[str] | None = None,
    properties: dict[str, str] | None = None,
    target_file_size: int | None = None,
    format_version: int | None = None,
    deletes: str | None = None,
) -> Any:
    """Create the table, or load it if it exists and fits the definition; returns the Java Table.

    The table is Iceberg format v3 with merge-on-read, `key` as its identifier fields and
    `partition_by` as hidden partition transforms, and RETENTION_DEFAULTS (bounded metadata
    files, an hour of snapshot history) unless `properties` says otherwise. An existing table fits
    when it has every declared column with the same or a wider type and the same key; it may have
    more columns and another partition spec (it evolved), and what differs is logged once.
    Raises SchemaError naming the column or key that conflicts, and ConfigError for an invalid
    definition.
    `format_version` (2 or 3; or the `format-version` property) is the version of a new table
    (default 3) and the least an existing one must have (SchemaError otherwise).
    `deletes` ("equality" or "vectors") is how a sink not told otherwise removes the rows a batch
    replaces, recorded in a new table's `icetide.deletes` property: by default `vectors` on v3 when
    the key index holds every key column (integers, strings, dates, timestamps with a zone), else
    `equality`. An existing table keeps its format and its mode.
    """
    spec = TableSpec.of(schema, key, partition_by or [], properties)
    version = requested_format_version(format_version, spec.properties)
    catalog_name, ident_text = split_name(name)
    j = jvm(spark)
    jschema, jspec = _build_schema_and_spec(spark, spec)
    catalog = iceberg_catalog(spark, catalog_name)
    ident = j.org.apache.iceberg.catalog.TableIdentifier.parse(ident_text)
    if catalog.tableExists(ident):
        table = load_table(spark, name)
        check_format_version(name, table, version)
        check_existing(name, _definition(jschema, jspec), _definition(table.schema(), table.spec()))
        return table
    props = dict(TABLE_DEFAULTS)
    if target_file_size:
        props["write.target-file-size-bytes"] = str(int(target_file_size))
    props.update(spec.properties)
    if version is not None:
        props["format-version"] = str(version)
    key_fields = [jschema.findField(k) for k in spec.key]
    asked = deletes if deletes is not None else spec.properties.get(DELETES_PROPERTY)
    props[DELETES_PROPERTY] = new_table_deletes(int(props["format-version"]), key_fields, asked)
    namespace = ".".join(f"`{part}`" for part in ident_text.split(".")[:-1])
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS `{catalog_name}`.{namespace}")
    jprops = j.java.util.HashMap()
    for k, v in props.items():
        jprops.put(k, v)
    table = catalog.buildTable(ident, jschema).withPartitionSpec(jspec).withProperties(jprops).create()
    log.info(
        "created table %s (format v%s, deletes: %s) partitioned by %s",
        name,
        props["format-version"],
        props[DELETES_PROPERTY],
        [str(p) for p in spec.partition_by],
    )
    return table


def table_exists(spark: SparkSession, name: str) -> bool:
    """Whether the Iceberg table `<catalog>.<namespace>.<table>` exists."""
    catalog_name, ident_text = split_name(name)
    ident = jvm(spark).org.apache.iceberg.catalog.TableIdentifier.parse(ident_text)
    return bool(iceberg_catalog(spark, catalog_name).tableExists(ident))
