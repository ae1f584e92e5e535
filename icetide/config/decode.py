"""How a pipeline file says records are decoded: Schema Registry client settings (the Avro
formats), Debezium's settings for messages that carry no schema, and what plain JSON may relax."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args
from urllib.parse import urlsplit, urlunsplit

from icetide.config.secrets import redact, remember_secret
from icetide.errors import ConfigError

DecimalHandling = Literal["precise", "string", "double"]
TimePrecision = Literal["adaptive_time_microseconds", "adaptive", "connect"]
OnTruncate = Literal["apply", "dead_letter"]
DEBEZIUM_KEYS = (
    "decimal.handling.mode",
    "time.precision.mode",
    "provide.transaction.metadata",
    "topic.prefix",
    "topic.transaction",
)
JSON_KEYS = ("nested_as_text",)

_REGISTRY_SECRETS = ("basic.auth.user.info", "bearer.auth.token", "bearer.auth.client.secret", "ssl.key.password")


def public_url(url: str) -> str:
    """The registry URL(s) without any user:password part, for messages."""
    out = []
    for one in url.split(","):
        parts = urlsplit(one.strip())
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
        out.append(urlunsplit((parts.scheme, netloc, parts.path, "", "")))
    return ",".join(out)


@dataclass(frozen=True)
class RegistrySettings:
    """The `schema_registry:` block: confluent-kafka SchemaRegistryClient settings, as given."""

    conf: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        """Secret settings as `***`, the URL without its user:password."""
        return f"RegistrySettings(conf={redact({**self.conf, 'url': self.url})!r})"

    @property
    def url(self) -> str:
        """The registry URL(s), without credentials."""
        return public_url(str(self.conf.get("url", "")))

    @classmethod
    def from_dict(cls, d: Any, where: str = "schema_registry") -> RegistrySettings:
        """Validated by building a client (no request is sent); ConfigError naming the key."""
        if not isinstance(d, Mapping):
            raise ConfigError(f"{where}: expected a mapping of Schema Registry client settings with a url")
        conf = {str(k): v for k, v in d.items()}
        url = conf.get("url")
        if not isinstance(url, str) or not url.strip():
            raise ConfigError(f"{where}.url: required, e.g. http://127.0.0.1:8081")
        for name in _REGISTRY_SECRETS:
            if conf.get(name):
                remember_secret(conf[name])
        userinfo = urlsplit(url.split(",")[0].strip()).password
        if userinfo:
            remember_secret(userinfo)
        try:
            from confluent_kafka.schema_registry import SchemaRegistryClient
        except ImportError as exc:
            raise ConfigError(
                f"{where}: Schema Registry support is not installed: pip install 'icetide[kafka]'"
            ) from exc
        try:
            SchemaRegistryClient(dict(conf))
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{where}: {exc}") from exc
        return cls(conf)

    def key(self) -> str:
        """The settings as one text, for a per-process cache."""
        return json.dumps(self.conf, sort_keys=True, default=str)


@dataclass(frozen=True)
class DebeziumSettings:
    """The connector's settings that change how its messages are read, with the connector's own
    key names: how values are written when a message carries no schema (with a schema in the
    message these are not needed: the schema says what each value is), and whether the connector
    writes transaction metadata (`provide.transaction.metadata`, its transaction topic
    `<topic.prefix>.<topic.transaction>`), so a sync commits whole source transactions only.
    """

    decimal_handling_mode: DecimalHandling = "precise"
    time_precision_mode: TimePrecision = "adaptive_time_microseconds"
    provide_transaction_metadata: bool = False
    topic_prefix: str | None = None
    topic_transaction: str = "transaction"

    @property
    def transaction_topic(self) -> str | None:
        """The connector's transaction metadata topic, when the pipeline reads it."""
        if not self.provide_transaction_metadata or self.topic_prefix is None:
            return None
        return f"{self.topic_prefix}.{self.topic_transaction}"

    @classmethod
    def from_dict(cls, d: Any, where: str = "debezium.") -> DebeziumSettings:
        """From a pipeline file's `debezium:` block (the connector's own key names)."""
        if d is None:
            return cls()
        if not isinstance(d, Mapping):
            raise ConfigError(f"{where.rstrip('.')}: expected a mapping with {', '.join(DEBEZIUM_KEYS)}")
        for k in d:
            if k not in DEBEZIUM_KEYS:
                raise ConfigError(f"{where}{k}: unknown key (allowed: {', '.join(DEBEZIUM_KEYS)})")
        decimal = d.get("decimal.handling.mode", "precise")
        if decimal not in get_args(DecimalHandling):
            raise ConfigError(
                f"{where}decimal.handling.mode: {decimal!r} is not one of {', '.join(get_args(DecimalHandling))}"
            )
        time = d.get("time.precision.mode", "adaptive_time_microseconds")
        if time not in get_args(TimePrecision):
            raise ConfigError(
                f"{where}time.precision.mode: {time!r} is not one of {', '.join(get_args(TimePrecision))}"
            )
        metadata = d.get("provide.transaction.metadata", False)
        if not isinstance(metadata, bool):
            raise ConfigError(f"{where}provide.transaction.metadata: expected true or false, got {metadata!r}")
        prefix = d.get("topic.prefix")
        if prefix is not None and (not isinstance(prefix, str) or not prefix):
            raise ConfigError(f"{where}topic.prefix: expected the connector's topic.prefix, got {prefix!r}")
        if metadata and prefix is None:
            raise ConfigError(
                f"{where}topic.prefix: required with provide.transaction.metadata (the connector's own "
                "topic.prefix: its transaction topic is <topic.prefix>.transaction)"
            )
        suffix = d.get("topic.transaction", "transaction")
        if not isinstance(suffix, str) or not suffix:
            raise ConfigError(f"{where}topic.transaction: expected a topic name suffix, got {suffix!r}")
        return cls(
            decimal_handling_mode=decimal,
            time_precision_mode=time,
            provide_transaction_metadata=metadata,
            topic_prefix=prefix,
            topic_transaction=suffix,
        )


@dataclass(frozen=True)
class JsonSettings:
    """The `json:` block of `format: json`: leniencies, each off by default and counted when used.

    `nested_as_text`: an object or array in a STRING column (or a STRING element or field of an
    ARRAY, STRUCT or MAP column) lands as its JSON text, as Spark's JSON reader keeps it, instead
    of a dead letter (each such value counted in the metrics).
    """

    nested_as_text: bool = False

    @classmethod
    def from_dict(cls, d: Any, fmt: str, where: str = "json.") -> JsonSettings:
        """From a pipeline file's `json:` block, read only with `format: json`."""
        if d is None:
            return cls()
        if fmt != "json":
            raise ConfigError(f"{where.rstrip('.')}: only read with format: json, not {fmt}")
        if not isinstance(d, Mapping):
            raise ConfigError(f"{where.rstrip('.')}: expected a mapping with {', '.join(JSON_KEYS)}")
        for k in d:
            if k not in JSON_KEYS:
                raise ConfigError(f"{where}{k}: unknown key (allowed: {', '.join(JSON_KEYS)})")
        nested_as_text = d.get("nested_as_text", False)
        if not isinstance(nested_as_text, bool):
            raise ConfigError(f"{where}nested_as_text: expected true or false, not {nested_as_text!r}")
        return cls(nested_as_text=nested_as_text)
