"""Avro with a Schema Registry: schemas, container blocks, the decoder."""
