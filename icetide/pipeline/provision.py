"""The Spark session and the table a pipeline file asks for."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from icetide.config.pipeline import PipelineConfig, TableConfig
from icetide.table.create import create_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def pipeline_session(config: PipelineConfig) -> SparkSession:
    """The Spark session a pipeline file asks for (warehouse or catalog block, extra Spark conf)."""
    from icetide.spark.session import spark_session

    return spark_session(
        warehouse=config.warehouse,
        catalog=config.catalog,
        catalog_options=config.catalog_options,
        conf=config.spark,
    )


def create_config_table(spark: SparkSession, t: TableConfig) -> Any:
    """Create (or check) the table a pipeline file defines; returns the Java Table."""
    assert t.schema is not None, "a table without a schema is created from the stream"
    return create_table(
        spark,
        t.name,
        schema=t.schema,
        key=list(t.key),
        partition_by=list(t.partition_by),
        properties=t.properties,
        target_file_size=t.target_file_size,
        deletes=t.deletes,
    )
