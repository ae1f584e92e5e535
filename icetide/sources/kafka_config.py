"""The Kafka source's settings (`source.kafka`): where to read, how long to wait, and the
librdkafka settings its consumers get; validated on construction, each error naming its key."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from icetide.config.secrets import redacted_repr
from icetide.config.values import reject_unknown_keys
from icetide.errors import ConfigError

EARLIEST, LATEST = "earliest", "latest"
DEFAULT_GROUP_ID = "icetide"
# Settings icetide owns: offsets are never committed, ends are detected by EOF events, a read
# below the log start is reported (then skipped explicitly) rather than silently reset, and only
# committed records are read. With read_committed (librdkafka's default, stated here so no consumer
# setting can turn it off), records of aborted transactions are never delivered, and the end a
# plan sees (ListOffsets and the EOF event) is the last stable offset: a batch never takes records
# of a transaction still open, whose outcome is unknown. Transaction markers and aborted records
# occupy offsets no message is delivered for; readers step over such gaps (as over a compacted
# topic's) and count only the records delivered.
FORCED_CONSUMER_SETTINGS = {
    "enable.auto.commit": "false",
    "enable.auto.offset.store": "false",
    "enable.partition.eof": "true",
    "auto.offset.reset": "error",
    "isolation.level": "read_committed",
}
# Defaults for the executors' range readers, below the user's `consumer` settings: a range is read
# from start to end in one go, so fetch in bulk (librdkafka's defaults, 1 MiB per partition and
# fetch, suit a consumer that keeps up with a live stream). Measured on bench/ingest.py: the
# decoding thread waited about 5x less for Kafka and a task's read took about 10% less CPU.
# fetch.wait.max.ms stays librdkafka's 500: with 10, a loaded in-memory test broker answered with (nearly) empty
# fetches and batches stalled for minutes in bench/soak.py; a range read costs the same with both
# (docs/design.md, "Range readers' fetch wait").
READER_DEFAULTS = {
    "fetch.max.bytes": str(64 << 20),
    "max.partition.fetch.bytes": str(16 << 20),
    "queued.min.messages": "500000",
    "fetch.wait.max.ms": "500",
}


KAFKA_SOURCE_KEYS = (
    "bootstrap_servers",
    "topic",
    "topics",
    "topic_pattern",
    "starting_offsets",
    "consumer",
    "read_timeout_seconds",
    "metadata_timeout_seconds",
    "probe_timeout_seconds",
)


def parse_starting_offsets(value: str, *, key: str = "starting_offsets") -> str | int:
    """`earliest`, `latest`, or the epoch milliseconds of an ISO-8601 timestamp / epoch-millis string.

    A timestamp without a zone is UTC. Raises ConfigError naming `key` for anything else.
    """
    text = str(value).strip()
    if text.lower() in (EARLIEST, LATEST):
        return text.lower()
    if re.fullmatch(r"\d+", text):
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(
            f"{key}: {value!r} is not 'earliest', 'latest', an ISO-8601 timestamp or epoch milliseconds"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


@dataclass(frozen=True)
class KafkaSourceConfig:
    """Where to read and how long to wait; validated on construction.

    `consumer` holds extra librdkafka settings passed through unchanged (security.protocol, sasl.*,
    ssl.*, client.id, fetch sizes...), except the few icetide owns (FORCED_CONSUMER_SETTINGS).
    `starting_offsets` applies only to a new pipeline (no position yet).
    """

    bootstrap_servers: str
    topic: str = ""  # one topic; or `topics`, or `topic_pattern` (exactly one of the three)
    starting_offsets: str = EARLIEST
    consumer: Mapping[str, str] = field(default_factory=dict)
    read_timeout_seconds: float = 60.0  # a range read making no progress this long fails
    metadata_timeout_seconds: float = 10.0  # each metadata / watermark request on the driver
    probe_timeout_seconds: float = 5.0  # fetching to the true end of the partitions a batch drains
    topics: tuple[str, ...] = ()  # several topics (icetide.sources.kafka_topics)
    topic_pattern: str | None = None  # every topic whose whole name matches; new ones are picked up

    __repr__ = redacted_repr  # sasl.password and the like show as ***

    def __post_init__(self) -> None:
        _check_fields(
            {name: getattr(self, name) for name in KAFKA_SOURCE_KEYS},
            "source.kafka",
        )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, prefix: str = "source.kafka") -> KafkaSourceConfig:
        """Build from a config block (e.g. YAML `source.kafka`); errors name the offending key.

        Unknown keys are errors. `consumer` values may be strings, numbers or booleans; they are
        passed to librdkafka as strings.
        """
        if not isinstance(d, Mapping):
            raise ConfigError(f"{prefix}: must be a mapping")
        reject_unknown_keys(d, KAFKA_SOURCE_KEYS, f"{prefix}.")
        consumer = d.get("consumer") or {}
        if not isinstance(consumer, Mapping):
            raise ConfigError(f"{prefix}.consumer: must be a mapping of librdkafka settings")
        settings: dict[str, str] = {}
        for name, value in consumer.items():
            if isinstance(value, bool):
                settings[str(name)] = "true" if value else "false"
            elif isinstance(value, str | int | float):
                settings[str(name)] = str(value)
            else:
                raise ConfigError(f"{prefix}.consumer.{name}: must be a string, number or boolean")
        topics = d.get("topics")
        if topics is not None and (
            isinstance(topics, str)
            or not isinstance(topics, list | tuple)
            or not all(isinstance(t, str) for t in topics)
        ):
            raise ConfigError(f"{prefix}.topics: expected a list of topic names")
        pattern = d.get("topic_pattern")
        if pattern is not None and not isinstance(pattern, str):
            raise ConfigError(f"{prefix}.topic_pattern: expected a regular expression (a string)")
        values: dict[str, Any] = {
            "bootstrap_servers": d.get("bootstrap_servers"),
            "topic": d.get("topic") if d.get("topic") is not None else "",
            "topics": tuple(topics) if topics is not None else (),
            "topic_pattern": pattern,
            "starting_offsets": str(d.get("starting_offsets", EARLIEST)),
            "consumer": settings,
        }
        for name in ("read_timeout_seconds", "metadata_timeout_seconds", "probe_timeout_seconds"):
            values[name] = d.get(name, getattr(cls, name))
        _check_fields(values, prefix)
        return cls(**values)

    def consumer_settings(self, **overrides: str) -> dict[str, str]:
        """librdkafka settings for an assign-only consumer: user settings, then icetide's own."""
        return self._settings({}, overrides)

    def reader_settings(self) -> dict[str, str]:
        """Settings for the executors' range readers: READER_DEFAULTS (bulk fetches) under the
        user's settings, then icetide's own."""
        return self._settings(READER_DEFAULTS, {})

    def _settings(self, defaults: Mapping[str, str], overrides: Mapping[str, str]) -> dict[str, str]:
        settings = {"bootstrap.servers": self.bootstrap_servers, "group.id": DEFAULT_GROUP_ID}
        settings.update(defaults)
        settings.update(self.consumer)
        settings.update(overrides)
        settings.update(FORCED_CONSUMER_SETTINGS)
        return settings


def _check_topics(values: Mapping[str, Any], prefix: str) -> None:
    """Exactly one of topic, topics and topic_pattern; each well formed."""
    topic, topics, pattern = values.get("topic"), values.get("topics") or (), values.get("topic_pattern")
    given = [
        n for n, v in (("topic", topic), ("topics", topics), ("topic_pattern", pattern)) if v not in (None, "", ())
    ]
    if not given:
        raise ConfigError(f"{prefix}.topic: required (or topics: [...], or topic_pattern: <regex>)")
    if len(given) > 1:
        raise ConfigError(f"{prefix}.{given[1]}: give exactly one of topic, topics and topic_pattern")
    if topic not in (None, "") and not isinstance(topic, str):
        raise ConfigError(f"{prefix}.topic: must be a string, got {topic!r}")
    if topic not in (None, "") and not str(topic).strip():
        raise ConfigError(f"{prefix}.topic: required")
    for t in topics:
        if not isinstance(t, str) or not re.fullmatch(r"[A-Za-z0-9._-]{1,249}", t):
            raise ConfigError(f"{prefix}.topics: {t!r} is not a Kafka topic name")
    if len(set(topics)) != len(topics):
        raise ConfigError(f"{prefix}.topics: a topic is listed twice")
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigError(f"{prefix}.topic_pattern: {pattern!r} is not a regular expression ({exc})") from None


def _check_fields(values: Mapping[str, Any], prefix: str) -> None:
    _check_topics(values, prefix)
    for name in ("bootstrap_servers",):
        value = values.get(name)
        if value is None or (isinstance(value, str) and not value.strip()):
            raise ConfigError(f"{prefix}.{name}: required")
        if not isinstance(value, str):
            raise ConfigError(f"{prefix}.{name}: must be a string, got {value!r}")
    parse_starting_offsets(values["starting_offsets"], key=f"{prefix}.starting_offsets")
    consumer = values["consumer"]
    if not isinstance(consumer, Mapping):
        raise ConfigError(f"{prefix}.consumer: must be a mapping of librdkafka settings")
    for name, value in consumer.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise ConfigError(f"{prefix}.consumer.{name}: settings must be strings, got {value!r}")
        if name in FORCED_CONSUMER_SETTINGS and value != FORCED_CONSUMER_SETTINGS[name]:
            raise ConfigError(f"{prefix}.consumer.{name}: icetide requires {FORCED_CONSUMER_SETTINGS[name]!r}")
    for name in ("read_timeout_seconds", "metadata_timeout_seconds", "probe_timeout_seconds"):
        value = values[name]
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ConfigError(f"{prefix}.{name}: must be a positive number of seconds, got {value!r}")
