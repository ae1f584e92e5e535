"""The Spark settings of one Iceberg catalog: the embedded Hadoop catalog on a local warehouse, or
the catalog a pipeline file names (REST, JDBC, Hive, Glue), with S3FileIO on an S3 warehouse."""

from __future__ import annotations

import os
from collections.abc import Mapping

from icetide.config.pipeline import check_catalog_for_warehouse
from icetide.errors import ConfigError
from icetide.filesystems import is_s3

DEFAULT_CATALOG = "lake"
# The embedded catalog's commit lock across processes (spark/jvm/FileLockManager.java, docs/design.md).
COMMIT_LOCK_IMPL = "icetide.catalog.FileLockManager"
S3_FILE_IO = "org.apache.iceberg.aws.s3.S3FileIO"


def catalog_conf(
    catalog: str,
    *,
    warehouse: str | None,
    options: Mapping[str, str] | None,
    lock_impl: str | None = None,
) -> dict[str, str]:
    """Spark conf entries for one Iceberg catalog.

    With `options` (REST, Hive, Glue, JDBC, ...) they are passed through unchanged under
    `spark.sql.catalog.<catalog>.`; without, an embedded Hadoop catalog on `warehouse`.
    A Hadoop catalog (the embedded one, or `type: hadoop` in `options`) gets `lock_impl` as its
    `lock-impl` unless `options` name one.
    A Hadoop catalog on an object-store warehouse (s3a://, gs://, abfs://, ...) is refused with
    a ConfigError: it cannot commit safely there.
    A catalog other than REST whose warehouse is on S3 (s3://, s3a://, s3n://) gets Iceberg's
    S3FileIO as its `io-impl` unless `options` name one: the JDBC and Hive catalogs default to
    HadoopFileIO, which needs Hadoop's S3A jars. A REST client resolves each table's files by
    their scheme (ResolvingFileIO), S3 through S3FileIO.
    """
    check_catalog_for_warehouse(warehouse, options)
    prefix = f"spark.sql.catalog.{catalog}"
    conf = {prefix: "org.apache.iceberg.spark.SparkCatalog"}
    if options:
        for key, value in options.items():
            conf[f"{prefix}.{key}"] = str(value)
        if warehouse and "warehouse" not in options:
            conf[f"{prefix}.warehouse"] = warehouse_uri(warehouse)
        rest = options.get("type") == "rest" or "RESTCatalog" in str(options.get("catalog-impl", ""))
        if is_s3(conf.get(f"{prefix}.warehouse", "")) and not rest and "io-impl" not in options:
            conf[f"{prefix}.io-impl"] = S3_FILE_IO
        if lock_impl and options.get("type") == "hadoop" and "lock-impl" not in options:
            conf[f"{prefix}.lock-impl"] = lock_impl
        return conf
    if not warehouse:
        raise ConfigError("warehouse: a folder for the embedded catalog is required without a catalog block")
    conf[f"{prefix}.type"] = "hadoop"
    conf[f"{prefix}.warehouse"] = warehouse_uri(warehouse)
    if lock_impl:
        conf[f"{prefix}.lock-impl"] = lock_impl
    return conf


def warehouse_uri(warehouse: str) -> str:
    """A warehouse as a catalog's `warehouse` setting: a URI as it is, a local folder made absolute."""
    if "://" in warehouse or warehouse.startswith("file:"):
        return warehouse
    return os.path.abspath(warehouse)
