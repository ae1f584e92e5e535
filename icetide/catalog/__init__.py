"""Catalogs: the Spark settings of the catalog a pipeline names, and `icetide catalog serve` (REST)."""
