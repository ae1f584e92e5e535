"""Debezium change events: Kafka Connect schemas and their per-field conversions, messages, rows and tasks."""
