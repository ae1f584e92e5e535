"""The rules kept for compatibility with Spark's own parsers, in one place."""
