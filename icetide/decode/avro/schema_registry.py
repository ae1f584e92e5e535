"""Confluent's wire format and the Schema Registry that names its schemas.

A record serialized by Confluent's `AvroConverter` / `AvroSerializer` is a magic byte 0, a 4-byte
big-endian schema id and the Avro body. The schema is fetched by id with confluent-kafka's
`SchemaRegistryClient` (the `schema_registry:` block of a pipeline file, passed through), once per
id and process: every Spark task of a Python worker shares one client and one cache.

What a failure means:
- a value not in the wire format, or a schema id the registry does not have: that record is bad
  (`BadAvroRecord`, a dead letter with the reason);
- the registry unreachable, or answering 5xx (or 408/429): `RegistryUnavailableError`, a
  transient source error; supervision retries the batch and nothing reaches the dead-letter table;
- 401/403: `RegistryAccessError`, terminal, one line naming the registry's URL (never its
  credentials).
"""

from __future__ import annotations

import threading
import time

from icetide.config.pipeline import RegistrySettings
from icetide.sources.base import ExecutorSourceAccessError, ExecutorSourceError

MAGIC_BYTE = 0
HEADER_BYTES = 5
UNKNOWN_ID_SECONDS = 30.0  # an id the registry did not have is asked again after this long


class BadAvroRecord(Exception):
    """One record that cannot be read: its message is the dead-letter reason."""


class RegistryUnavailableError(ExecutorSourceError):
    """The Schema Registry could not be reached or failed (5xx): transient, the batch is retried."""


class RegistryAccessError(ExecutorSourceAccessError):
    """The Schema Registry refused icetide's credentials (401/403): terminal."""


def split_wire(value: bytes) -> tuple[int, memoryview]:
    """(schema id, Avro body) of a value in Confluent's wire format; BadAvroRecord otherwise."""
    if len(value) < HEADER_BYTES or value[0] != MAGIC_BYTE:
        first = f"0x{value[0]:02x}" if value else "none (an empty value)"
        raise BadAvroRecord(f"avro: unknown magic byte {first}: not Confluent's wire format (magic byte 0, schema id)")
    return int.from_bytes(value[1:HEADER_BYTES], "big"), memoryview(value)[HEADER_BYTES:]


class RegistrySchemas:
    """Schemas by id from one registry: each fetched once per process, then from memory."""

    def __init__(self, settings: RegistrySettings) -> None:
        from confluent_kafka.schema_registry import SchemaRegistryClient

        self.settings = settings
        self._client = SchemaRegistryClient(dict(settings.conf))
        self._texts: dict[int, str] = {}
        self._unknown: dict[int, float] = {}  # id -> when the registry said it has none
        self._lock = threading.Lock()

    def text(self, schema_id: int) -> str:
        """The schema text of `schema_id`. BadAvroRecord when the registry has no such id,
        RegistryUnavailableError / RegistryAccessError when the registry cannot answer."""
        found = self._texts.get(schema_id)
        if found is not None:
            return found
        with self._lock:
            found = self._texts.get(schema_id)
            if found is not None:
                return found
            told = self._unknown.get(schema_id)
            if told is not None and time.monotonic() - told < UNKNOWN_ID_SECONDS:
                raise BadAvroRecord(f"avro: schema id {schema_id} is not in the schema registry")
            found = self._fetch(schema_id)
            self._texts[schema_id] = found
            return found

    def _fetch(self, schema_id: int) -> str:
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        url = self.settings.url
        try:
            schema = self._client.get_schema(schema_id)
        except SchemaRegistryError as exc:
            status = exc.http_status_code
            if status == 404:
                self._unknown[schema_id] = time.monotonic()
                raise BadAvroRecord(f"avro: schema id {schema_id} is not in the schema registry") from None
            if status in (401, 403):
                raise RegistryAccessError(
                    f"schema registry {url} refused the credentials (HTTP {status}) fetching schema id "
                    f"{schema_id}; check schema_registry.basic.auth.user.info"
                ) from None
            raise RegistryUnavailableError(
                f"schema registry {url}: HTTP {status} fetching schema id {schema_id}: {exc.error_message}"
            ) from None
        except Exception as exc:
            raise RegistryUnavailableError(
                f"schema registry {url} unreachable fetching schema id {schema_id}: {type(exc).__name__}"
            ) from None
        kind = (schema.schema_type or "AVRO").upper()
        if kind != "AVRO":
            raise BadAvroRecord(f"avro: schema id {schema_id} is a {kind} schema, not Avro")
        if schema.references:
            raise BadAvroRecord(f"avro: schema id {schema_id} has schema references, which icetide does not read")
        return str(schema.schema_str)


_REGISTRIES: dict[str, RegistrySchemas] = {}
_REGISTRIES_LOCK = threading.Lock()


def registry_schemas(settings: RegistrySettings) -> RegistrySchemas:
    """The process's one `RegistrySchemas` for these settings (tasks of a worker share it)."""
    key = settings.key()
    with _REGISTRIES_LOCK:
        found = _REGISTRIES.get(key)
        if found is None:
            found = _REGISTRIES[key] = RegistrySchemas(settings)
        return found
