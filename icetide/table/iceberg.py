"""The py4j bridge to Iceberg's Java API on the driver: load tables, read their layout, build files.

Everything here runs on the driver. Executors never touch the JVM table; they get plain values
(an Arrow schema, partition expressions, a data folder) computed here.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from icetide.errors import ConfigError, SchemaError
from icetide.filesystems import ENV_PREFIX as S3_ENV_PREFIX
from icetide.filesystems import S3_CATALOG_KEYS, S3Settings, is_s3, s3_settings, use_s3_settings
from icetide.spark.py4j_collections import java_list
from icetide.table.format_version import FORMAT_VERSION_PROPERTY, parse_format_version
from icetide.table.spec import PartitionTransform

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

JavaObject = Any  # a py4j proxy; py4j ships no type information

FIELD_ID_KEY = b"PARQUET:field_id"
# fromPartitionString, which turns our strings into typed partition values, reads only these.
PARTITION_TYPES = {"boolean", "int", "long", "float", "double", "string", "date", "decimal", "uuid"}


def jvm(spark: SparkSession) -> Any:
    """The driver's py4j JVM view."""
    return spark._jvm


def _java_class(spark: SparkSession, name: str) -> Any:
    """The java.lang.Class `name` from the context class loader (where Spark put the session's jars)."""
    j = jvm(spark)
    loader = j.java.lang.Thread.currentThread().getContextClassLoader()
    return j.java.lang.Class.forName(name, True, loader)


def static_call(spark: SparkSession, class_name: str, method: str) -> Any:
    """A static method without arguments, called by reflection: py4j finds a static member by its
    name alone, so `Cls.get()` fails ("get does not exist in the JVM") where the class also has an
    instance `get(String)`, as Iceberg's SparkTableCache has."""
    j = jvm(spark)
    gateway: Any = spark.sparkContext._gateway
    found = _java_class(spark, class_name).getMethod(method, gateway.new_array(j.java.lang.Class, 0))
    return found.invoke(None, gateway.new_array(j.java.lang.Object, 0))


def declares_method(spark: SparkSession, class_name: str, method: str) -> bool:
    """Whether the class itself declares `method()` without arguments (False if the class is absent)."""
    j = jvm(spark)
    gateway: Any = spark.sparkContext._gateway
    try:
        _java_class(spark, class_name).getDeclaredMethod(method, gateway.new_array(j.java.lang.Class, 0))
    except Exception:
        return False
    return True


def split_name(name: str) -> tuple[str, str]:
    """'lake.db.events' -> ('lake', 'db.events'); a catalog and at least one namespace are required."""
    parts = name.split(".")
    if len(parts) < 3 or not all(parts):
        raise ConfigError(f"table name {name!r} must be <catalog>.<namespace>.<table>, e.g. lake.db.events")
    return parts[0], ".".join(parts[1:])


def load_table(spark: SparkSession, name: str) -> JavaObject:
    """The Iceberg Java Table behind a Spark table name.

    A table on S3 hands its FileIO's S3 settings (endpoint, region, path style, keys) to icetide's
    own S3 reads and writes, in this process and in the session's Python workers
    (`adopt_s3_settings`), so any session whose catalog reaches the table lets icetide reach it too.
    """
    jtable = jvm(spark).org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, name)
    adopt_s3_settings(spark, jtable)
    return jtable


def adopt_s3_settings(spark: SparkSession, jtable: JavaObject) -> None:
    """Use the S3 settings of the table's FileIO for icetide's own files, here and in the
    session's Python workers (PySpark hands each Python function the SparkContext's environment
    as it is when the function is sent). Nothing for a table that is not on S3."""
    if not is_s3(str(jtable.location())):
        return
    try:
        properties = jtable.io().properties()
        found = {key: properties.get(key) for key in S3_CATALOG_KEYS}
    except Exception:  # a FileIO without properties(): AWS's default chain decides
        log.debug("the FileIO of %s has no properties", jtable.name(), exc_info=True)
        return
    settings = S3Settings.from_catalog({k: str(v) for k, v in found.items() if v is not None})
    if settings == s3_settings():
        return
    use_s3_settings(settings)
    environment = getattr(spark.sparkContext, "environment", None)
    if isinstance(environment, dict):
        for name in [n for n in environment if n.startswith(S3_ENV_PREFIX)]:
            del environment[name]
        environment.update(settings.environment())


def iceberg_catalog(spark: SparkSession, catalog: str) -> JavaObject:
    """The Iceberg Java Catalog behind a Spark catalog name."""
    manager = spark._jsparkSession.sessionState().catalogManager()
    spark_catalog = manager.catalog(catalog)
    if not hasattr(spark_catalog, "icebergCatalog"):
        raise ConfigError(f"catalog {catalog!r} is not an Iceberg SparkCatalog")
    return spark_catalog.icebergCatalog()


def spark_schema(spark: SparkSession, jtable: JavaObject) -> Any:
    """The table's current schema as a PySpark StructType, from the (refreshed) Java table.

    Reading it from the Java table rather than `spark.table(...)` avoids Spark's table cache,
    which can hold an older schema after another process evolved the table.
    """
    return spark_schema_of(spark, jtable.schema())


def spark_schema_of(spark: SparkSession, jschema: JavaObject) -> Any:
    """An Iceberg Java Schema as a PySpark StructType."""
    from pyspark.sql.types import _parse_datatype_json_string

    jstruct = jvm(spark).org.apache.iceberg.spark.SparkSchemaUtil.convert(jschema)
    return _parse_datatype_json_string(jstruct.json())


def arrow_type(jtype: JavaObject) -> pa.DataType:
    """The Arrow type icetide writes for an Iceberg type, nested fields carrying their ids."""
    type_id = jtype.typeId().toString()
    simple = {
        "BOOLEAN": pa.bool_(),
        "INTEGER": pa.int32(),
        "LONG": pa.int64(),
        "FLOAT": pa.float32(),
        "DOUBLE": pa.float64(),
        "DATE": pa.date32(),
        "TIME": pa.time64("us"),
        "STRING": pa.string(),
        "BINARY": pa.binary(),
    }
    if type_id in simple:
        return simple[type_id]
    if type_id == "TIMESTAMP":
        return pa.timestamp("us", tz="UTC") if jtype.shouldAdjustToUTC() else pa.timestamp("us")
    if type_id == "DECIMAL":
        return pa.decimal128(jtype.precision(), jtype.scale())
    if type_id == "FIXED":
        return pa.binary(jtype.length())
    if type_id == "STRUCT":
        return pa.struct([arrow_field(f) for f in java_list(jtype.asStructType().fields())])
    if type_id == "LIST":
        lt = jtype.asListType()
        element = _with_id("element", arrow_type(lt.elementType()), lt.isElementOptional(), lt.elementId())
        return pa.list_(element)
    if type_id == "MAP":
        mt = jtype.asMapType()
        key = _with_id("key", arrow_type(mt.keyType()), False, mt.keyId())
        value = _with_id("value", arrow_type(mt.valueType()), mt.isValueOptional(), mt.valueId())
        return pa.map_(key, value)
    raise SchemaError(f"Iceberg type {jtype.toString()} is not supported by icetide's writer")


def _with_id(name: str, dtype: pa.DataType, nullable: bool, field_id: int) -> pa.Field:
    return pa.field(name, dtype, nullable=nullable, metadata={FIELD_ID_KEY: str(field_id).encode()})


def arrow_field(jfield: JavaObject) -> pa.Field:
    """An Iceberg NestedField as an Arrow field with its Parquet field id."""
    return _with_id(jfield.name(), arrow_type(jfield.type()), jfield.isOptional(), jfield.fieldId())


def arrow_schema(jschema: JavaObject) -> pa.Schema:
    """The Arrow schema (with field ids) that data files of this Iceberg schema are written in."""
    return pa.schema([arrow_field(f) for f in java_list(jschema.columns())])


@dataclass(frozen=True)
class PartitionField:
    """One field of a table's partition spec, with what the writer needs to compute it."""

    name: str
    transform: PartitionTransform | None  # None: a void (dropped) field, always null
    result_type: str
    field_id: int


def partition_fields(jtable: JavaObject) -> list[PartitionField]:
    """The table's current partition spec as plain values."""
    return spec_fields(jtable.spec(), jtable.schema())


def spec_fields(spec: JavaObject, schema: JavaObject) -> list[PartitionField]:
    """A partition spec as plain values; refuses partition types the writer cannot produce."""
    result_types = java_list(spec.partitionType().fields())
    fields = []
    for i, pf in enumerate(java_list(spec.fields())):
        transform = pf.transform().toString()
        result_type = result_types[i].type().typeId().toString().lower()
        result_type = "int" if result_type == "integer" else result_type
        if transform == "void":
            fields.append(PartitionField(pf.name(), None, result_type, pf.fieldId()))
            continue
        column = schema.findColumnName(pf.sourceId())
        if result_type not in PARTITION_TYPES:
            raise SchemaError(
                f"partition field {pf.name()!r} ({transform} of {column!r}) has type {result_type}, "
                "which icetide cannot write; partition timestamps with hours/days/months/years instead"
            )
        transform_spec = PartitionTransform.from_iceberg(transform, column)
        fields.append(PartitionField(pf.name(), transform_spec, result_type, pf.fieldId()))
    return fields


def live_spec_ids(jtable: JavaObject) -> set[int]:
    """Ids of the partition specs the current snapshot's live data files were written under.

    Reads only the manifest list (one small file), not the manifests.
    """
    snapshot = jtable.currentSnapshot()
    if snapshot is None:
        return set()
    return {
        int(m.partitionSpecId())
        for m in java_list(snapshot.dataManifests(jtable.io()))
        if m.hasAddedFiles() or m.hasExistingFiles()
    }


def key_columns(jtable: JavaObject) -> list[str]:
    """The table's identifier fields (its primary key), in schema order."""
    schema = jtable.schema()
    ids = {int(i) for i in java_list(schema.identifierFieldIds())}
    return [f.name() for f in java_list(schema.columns()) if f.fieldId() in ids]


def key_field_ids(jtable: JavaObject) -> list[int]:
    """Field ids of the identifier fields, the equality ids of icetide's delete files."""
    schema = jtable.schema()
    return [schema.findField(name).fieldId() for name in key_columns(jtable)]


def data_location(jtable: JavaObject) -> str:
    """The folder new data files go to (write.data.path, else <table location>/data)."""
    props = jtable.properties()
    path = props.get("write.data.path") or props.get("write.folder-storage.path")
    return str(path or f"{jtable.location().rstrip('/')}/data")


def format_version(jtable: JavaObject) -> int:
    """The table's Iceberg format version, from its current metadata."""
    return int(jtable.operations().current().formatVersion())


def requested_format_version(format_version: int | None, properties: dict[str, str]) -> int | None:
    """The format version a table definition asks for (`format_version`, else its `format-version`
    property), validated; None when it asks for none. Both given must agree."""
    from_properties = properties.get(FORMAT_VERSION_PROPERTY)
    version = parse_format_version(format_version, "format_version") if format_version is not None else None
    if from_properties is not None:
        asked = parse_format_version(from_properties, f"properties.{FORMAT_VERSION_PROPERTY}")
        if version is not None and asked != version:
            raise ConfigError(f"format_version: {version} disagrees with properties.{FORMAT_VERSION_PROPERTY}={asked}")
        version = asked
    return version


def check_format_version(name: str, jtable: JavaObject, wanted: int | None) -> None:
    """Refuse an existing table below the format version asked for (a later one serves: a table
    upgraded beside a running pipeline keeps it running); upgrading is a separate, explicit step."""
    found = format_version(jtable)
    if wanted is not None and found < wanted:
        raise SchemaError(
            f"table {name} is format v{found}, asked for v{wanted}: "
            f"upgrade it with `icetide maintain --upgrade-v3 {name}`"
        )


def table_property(jtable: JavaObject, key: str, default: str) -> str:
    """A table property as a string, or `default`."""
    value = jtable.properties().get(key)
    return default if value is None else str(value)


DEFAULT_TARGET_FILE_SIZE = 512 * 1024 * 1024  # write.target-file-size-bytes, as Iceberg's default
DEFAULT_ROW_GROUP_BYTES = 128 * 1024 * 1024  # write.parquet.row-group-size-bytes, as Iceberg's default


def target_file_size(jtable: JavaObject) -> int:
    """The table's `write.target-file-size-bytes`."""
    return int(table_property(jtable, "write.target-file-size-bytes", str(DEFAULT_TARGET_FILE_SIZE)))


@dataclass(frozen=True)
class ParquetSettings:
    """How the table's Parquet files are written (its write.parquet.* properties): by the stream's
    writers and by compaction's driver rewrite alike."""

    row_group_bytes: int
    compression: str  # lower case, e.g. zstd
    compression_level: int | None


def parquet_settings(jtable: JavaObject) -> ParquetSettings:
    """The table's Parquet write properties, Iceberg's defaults where unset."""
    level = table_property(jtable, "write.parquet.compression-level", "")
    return ParquetSettings(
        row_group_bytes=int(table_property(jtable, "write.parquet.row-group-size-bytes", str(DEFAULT_ROW_GROUP_BYTES))),
        compression=table_property(jtable, "write.parquet.compression-codec", "zstd").lower(),
        compression_level=int(level) if level else None,
    )


def java_exception_class(exc: BaseException) -> str:
    """The Java class name behind a Py4JJavaError, or '' for anything else."""
    java_exc = getattr(exc, "java_exception", None)
    if java_exc is None:
        return ""
    try:
        return str(java_exc.getClass().getName())
    except Exception:
        return ""


def java_message(exc: BaseException) -> str:
    """The Java exception's own message (first line), without the py4j trace."""
    java_exc = getattr(exc, "java_exception", None)
    if java_exc is not None:
        try:
            return str(java_exc.getMessage()).splitlines()[0]
        except Exception:
            pass
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


SpecTransforms = list[tuple[str, PartitionTransform | None]]  # (field name, transform; None: void)


def spec_transforms(jtable: JavaObject) -> dict[int, SpecTransforms]:
    """Every partition spec of the table (by spec id) as (field name, transform) pairs, for labels.

    Unlike `spec_fields`, nothing is refused: a transform icetide does not write is shown as its
    identity value, so a status report never fails on a table another engine partitioned.
    """
    schema = jtable.schema()
    out: dict[int, SpecTransforms] = {}
    for spec in list(jtable.specs().values()):
        fields: SpecTransforms = []
        for pf in java_list(spec.fields()):
            transform = pf.transform().toString()
            if transform == "void":
                fields.append((str(pf.name()), None))
                continue
            column = str(schema.findColumnName(pf.sourceId()) or pf.name())
            try:
                fields.append((str(pf.name()), PartitionTransform.from_iceberg(transform, column)))
            except ConfigError:
                fields.append((str(pf.name()), PartitionTransform("identity", column)))
        out[int(spec.specId())] = fields
    return out
