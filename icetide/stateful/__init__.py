"""The stateful changelog stage: keyed state in Spark's state store turns events into changes."""
