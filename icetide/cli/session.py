"""The catalog and table a table command (`icetide status`, `icetide maintain`) works on."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from icetide.config.secrets import redact
from icetide.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from icetide.config.pipeline import PipelineConfig


def catalog_options(pairs: list[str] | None) -> dict[str, str] | None:
    """`--catalog-option KEY=VALUE` pairs as a mapping (None when there are none)."""
    out: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--catalog-option: {pair!r} is not KEY=VALUE, e.g. type=rest")
        out[key.strip()] = value
    return out or None


def table_session(args: argparse.Namespace) -> tuple[SparkSession, str, dict[str, Any]]:
    """The Spark session, table and (redacted) catalog settings `status` and `maintain` work on.

    With `--pipeline`, the pipeline file's catalog (warehouse or catalog block, Spark settings)
    and, unless a table is named, the table its maintenance looks after; otherwise the
    `--warehouse` / `--catalog-option` settings and the named table.
    """
    from icetide.spark.session import spark_session

    if args.pipeline:
        from icetide.config.pipeline import load_config
        from icetide.pipeline.provision import pipeline_session

        config = load_config(args.pipeline)
        if args.warehouse or args.catalog_option:
            raise ConfigError("--pipeline: the pipeline file names the catalog; drop --warehouse / --catalog-option")
        table = args.table or config.maintained_table
        if table.split(".")[0] != config.catalog:
            raise ConfigError(f"table: {table} is not in the pipeline's catalog {config.catalog!r}")
        shown = {"warehouse": config.warehouse, **redact(config.catalog_options or {})}
        return pipeline_session(config), table, shown
    if not args.table:
        raise ConfigError("table: name the table (catalog.namespace.table) or give --pipeline FILE")
    options = catalog_options(args.catalog_option)
    warehouse = args.warehouse or (None if options else "warehouse")
    spark = spark_session(warehouse=warehouse, catalog=args.table.split(".")[0], catalog_options=options)
    return spark, args.table, {"warehouse": warehouse, **redact(options or {})}


def routing_pipeline(args: argparse.Namespace) -> PipelineConfig | None:
    """The pipeline file's config when it routes to many tables and no single table is named."""
    if not args.pipeline or args.table:
        return None
    from icetide.config.pipeline import load_config

    config = load_config(args.pipeline)
    if not config.routes_tables:
        return None
    if args.warehouse or args.catalog_option:
        raise ConfigError("--pipeline: the pipeline file names the catalog; drop --warehouse / --catalog-option")
    return config
