"""Step 4 of a batch: one atomic, idempotent Iceberg commit per batch, and the pipeline's state it records."""
