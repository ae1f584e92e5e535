"""Iceberg tables: the pure table spec, and the py4j bridge to Iceberg's Java API."""
