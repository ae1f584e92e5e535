"""Spark session building: jar discovery, catalog configuration, Java checks."""

from icetide.spark.session import DEFAULT_CATALOG, iceberg_runtime_jar, spark_session

__all__ = ["DEFAULT_CATALOG", "iceberg_runtime_jar", "spark_session"]
