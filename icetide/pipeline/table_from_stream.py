"""A table created from the stream itself: the first Debezium message's schema and key.

For `format: debezium` pipelines whose file gives no `table.schema` and `table.key`: the
columns come from the first message's `after` (else `before`) Connect schema, typed as the
type table of docs/how-to/debezium-sync.md says (icetide.decode.debezium.connect_schema.column_ddl),
and the key from the message key's schema, which lists the source table's primary key.
`table.partition_by` still applies.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from icetide.config.pipeline import PipelineConfig, TableConfig
from icetide.decode.debezium.connect_schema import EnvelopeSchema, column_ddl, parse_envelope_schema, parse_key_schema
from icetide.errors import ConfigError, SourceError
from icetide.sources.base import raise_source_error_in
from icetide.table.create import create_table, table_exists

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from icetide.pipeline.spark_path import SourceAdapter

log = logging.getLogger(__name__)

SAMPLE_MESSAGES = 1000  # how many of the first messages are looked at for one with a schema and a key


def _text(value: Any) -> str | None:
    """The message's text; None for none, or for bytes that are not UTF-8 (such a message is a
    dead letter when decoded: its schema, repaired, would name columns the source has not)."""
    if value is None or not isinstance(value, bytes | bytearray):
        return None if value is None else str(value)
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError:
        return None


def definition_from_messages(rows: list[tuple[Any, Any]]) -> tuple[EnvelopeSchema, list[str]] | None:
    """(row schema, key columns) from the first (key, value) pair whose value has a Connect
    schema and whose key has one too; None when no such pair is among `rows`."""
    for key, value in rows:
        text, key_text = _text(value), _text(key)
        if not text or not key_text:
            continue
        try:
            doc = json.loads(text)
            if not isinstance(doc, dict) or not isinstance(doc.get("schema"), dict) or doc.get("payload") is None:
                continue
            envelope = parse_envelope_schema(json.dumps(doc["schema"]))
            columns = parse_key_schema(key_text)
        except ValueError:
            continue
        if columns and envelope.fields:
            return envelope, columns
    return None


def ensure_table_from_stream(spark: SparkSession, config: PipelineConfig, source: SourceAdapter) -> None:
    """Create the pipeline's table from its stream unless it exists; an error when it cannot be."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    t = config.table
    if table_exists(spark, t.name):
        return
    if source.kind != "kafka":
        raise ConfigError("table.schema and table.key: needed for landing files (they carry no message key)")
    plan = source.plan(None)
    found = None
    if plan.items:
        raw = source.read(spark, plan, StructType([]), whole_values=True)
        try:
            rows = raw.where(F.col("value").isNotNull()).select("key", "value").limit(SAMPLE_MESSAGES).collect()
        except Exception as exc:  # the source's (or its schema registry's) failure, as the one line it is
            raise_source_error_in(exc)
            raise
        found = definition_from_messages([(r["key"], r["value"]) for r in rows])
    create_from_definition(spark, t.created_for(config.mode), found)


def create_from_definition(spark: SparkSession, t: TableConfig, found: tuple[EnvelopeSchema, list[str]] | None) -> None:
    """Create table `t` from a stream's (row schema, key columns), as `definition_from_messages` found them."""
    if found is None:
        raise SourceError(
            f"cannot create {t.name} from the stream yet: no Debezium message with a schema and a key among the "
            "first messages; start again once the topic has one, or give table.schema and table.key"
        )
    envelope, key = found
    missing = [k for k in key if envelope.field(k) is None]
    if missing:
        raise SourceError(f"{t.name}: the message key names {', '.join(missing)}, which the row schema lacks")
    ddl = ", ".join(f"`{f.name}` {column_ddl(f)}{' NOT NULL' if f.name in key else ''}" for f in envelope.fields)
    log.info("creating %s from the stream's schema: %s; key %s", t.name, ddl, ", ".join(key))
    create_table(
        spark,
        t.name,
        schema=ddl,
        key=key,
        partition_by=list(t.partition_by),
        properties=t.properties,
        target_file_size=t.target_file_size,
        deletes=t.deletes,
    )
