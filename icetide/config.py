"""Typed pipeline configuration, loaded from YAML and validated once, at load.

Every error names the offending key (`trigger.interval: ...`). Source blocks are validated by
their source modules, which know their own settings.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args
from urllib.parse import urlsplit, urlunsplit

from icetide.errors import ConfigError
from icetide.secrets import expand_env, redact, redacted_repr, remember_secret
from icetide.stateful.settings import StatefulSettings
from icetide.table.format_version import FORMAT_VERSION_PROPERTY, parse_format_version

Mode = Literal["upsert", "append"]
DecimalHandling = Literal["precise", "string", "double"]
TimePrecision = Literal["adaptive_time_microseconds", "adaptive", "connect"]
OnTruncate = Literal["apply", "dead_letter"]
DEBEZIUM_KEYS = ("decimal.handling.mode", "time.precision.mode")
Format = Literal["json", "debezium", "debezium-avro", "avro"]
FORMATS = get_args(Format)
DEBEZIUM_FORMATS = ("debezium", "debezium-avro", "avro")  # read by the Debezium decoders
AVRO_FORMATS = ("debezium-avro", "avro")  # Confluent's wire format, schemas from `schema_registry`
DISTRIBUTIONS = ("none", "key", "partition", "dynamic")

TOP_LEVEL_KEYS = {
    "maintenance",
    "pipeline",
    "warehouse",
    "catalog",
    "source",
    "format",
    "table",
    "mode",
    "order_by",
    "trigger",
    "dead_letter",
    "max_bad_fraction",
    "distribution",
    "write_parallelism",
    "changelog",
    "schema_evolution",
    "spark",
    "merge",
    "enrich",
    "state",
    "raw",
    "fast_path",
    "debezium",
    "on_truncate",
    "metrics",
    "max_record_bytes",
    "max_nesting_depth",
    "restart",
    "on_data_loss",
    "tables",
    "schema_registry",
}
# The placeholders a table-name template may hold (Debezium's source block, and the Kafka topic).
TABLE_NAME_PLACEHOLDERS = ("db", "schema", "table", "topic")
TABLE_OVERRIDE_KEYS = {"partition_by", "properties", "target_file_size", "format_version", "deletes"}
# How the stream removes the rows a batch replaces: equality deletes, or deletion vectors (v3 only).
DELETE_MODES = ("equality", "vectors")
# Iceberg format versions icetide writes: v2, and v3 (deletion vectors, row lineage). v1 has no
# equality deletes, so no upserts.
TABLE_KEYS = {"name", "schema", "key", *TABLE_OVERRIDE_KEYS}
FAST_PATH_MODES = ("auto", "off")
DEFAULT_MAX_RECORD_BYTES = 16 * 1024 * 1024  # a bigger payload is a bad record (README: bad records)
MAX_RECORD_BYTES_LIMIT = 16 * 1024 * 1024  # Spark's JSON reader (Jackson) refuses strings over 20M chars
DEFAULT_MAX_NESTING_DEPTH = 64  # JSON arrays/objects nested deeper make a bad record
MAX_NESTING_DEPTH_LIMIT = 500  # Python's json and Spark's Jackson (1000) recurse per level
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(value: Any, key: str) -> float:
    """'5s', '500ms', '2m', '1h', '30d' or a number of seconds -> seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        match = _DURATION.match(str(value))
        if not match:
            raise ConfigError(f"{key}: {value!r} is not a duration like 5s, 500ms, 2m")
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
    if seconds < 0:
        raise ConfigError(f"{key}: must not be negative")
    return seconds


def _require(d: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in d or d[key] in (None, ""):
        raise ConfigError(f"{where}{key}: required")
    return d[key]


def _unknown(d: Mapping[str, Any], allowed: set[str], where: str) -> None:
    extra = sorted(set(d) - allowed)
    if extra:
        raise ConfigError(f"{where}{extra[0]}: unknown key (allowed: {', '.join(sorted(allowed))})")


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
    """How to read messages that carry no schema, mirroring the connector's own settings.

    With a schema in the message these are not needed: the schema says what each value is.
    """

    decimal_handling_mode: DecimalHandling = "precise"
    time_precision_mode: TimePrecision = "adaptive_time_microseconds"

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
        return cls(decimal_handling_mode=decimal, time_precision_mode=time)


@dataclass(frozen=True)
class TableConfig:
    """The target table's definition."""

    name: str
    schema: str | None  # None: created from the stream's own schema (Debezium with schemas)
    key: tuple[str, ...]
    partition_by: tuple[str, ...] = ()
    properties: dict[str, str] = field(default_factory=dict)
    target_file_size: int | None = None
    deletes: str = "equality"  # or "vectors": the stream writes deletion vectors (format v3)

    @classmethod
    def from_dict(cls, d: Any, *, from_stream: bool = False) -> TableConfig:
        """With `from_stream` (Debezium), schema and key may be omitted: the stream's schemas give them."""
        if not isinstance(d, Mapping):
            raise ConfigError("table: expected a mapping with name, schema, key")
        _unknown(d, TABLE_KEYS, "table.")
        if from_stream and not d.get("schema"):
            if d.get("key"):
                raise ConfigError(
                    "table.key: given without table.schema; give both, or neither to take them from the stream"
                )
            key: Any = []
        else:
            key = _require(d, "key", "table.")
        if isinstance(key, str) or not all(isinstance(k, str) for k in key):
            raise ConfigError("table.key: expected a list of column names")
        partition_by = d.get("partition_by") or []
        if isinstance(partition_by, str):
            raise ConfigError("table.partition_by: expected a list, e.g. ['hours(event_time)']")
        name = str(_require(d, "name", "table."))
        if len(name.split(".")) < 3:
            raise ConfigError(f"table.name: {name!r} must be <catalog>.<namespace>.<table>")
        size = d.get("target_file_size")
        return cls(
            name=name,
            schema=str(_require(d, "schema", "table.")) if not from_stream or d.get("schema") else None,
            key=tuple(key),
            partition_by=tuple(str(p) for p in partition_by),
            properties=_with_format_version(d, "table"),
            target_file_size=parse_size(size, "table.target_file_size") if size is not None else None,
            deletes=_deletes(d, "table", _with_format_version(d, "table")) or "equality",
        )

    @property
    def format_version(self) -> int | None:
        """The Iceberg format version asked for (`format_version`, or the `format-version` property)."""
        value = self.properties.get(FORMAT_VERSION_PROPERTY)
        return int(value) if value is not None else None


def table_name_placeholders(name: str, key: str = "table.name") -> tuple[str, ...]:
    """The placeholders of a table-name template (`lake.inventory.{table}` -> ("table",)), in order.

    A name without any is a plain table name. Raises ConfigError naming `key` for a placeholder
    other than {db}, {schema}, {table} and {topic}, a malformed brace, or one in the catalog part
    (a pipeline writes to one catalog).
    """
    import string

    try:
        parts = list(string.Formatter().parse(name))
    except ValueError as exc:
        raise ConfigError(f"{key}: {name!r} is not a valid template ({exc})") from None
    fields: list[str] = []
    for _, field_name, spec, conversion in parts:
        if field_name is None:
            continue
        if field_name not in TABLE_NAME_PLACEHOLDERS or spec or conversion:
            raise ConfigError(
                f"{key}: unknown placeholder {{{field_name}}} in {name!r} "
                f"(allowed: {', '.join('{' + p + '}' for p in TABLE_NAME_PLACEHOLDERS)})"
            )
        fields.append(field_name)
    if fields and "{" in name.split(".")[0]:
        raise ConfigError(f"{key}: the catalog part of {name!r} must be fixed (a pipeline writes to one catalog)")
    return tuple(fields)


@dataclass(frozen=True)
class TableOverride:
    """Settings for one table of a pipeline that routes to many (`tables: {<name>: {...}}`)."""

    partition_by: tuple[str, ...] | None = None
    properties: dict[str, str] = field(default_factory=dict)
    target_file_size: int | None = None
    deletes: str | None = None

    @classmethod
    def from_dict(cls, d: Any, where: str) -> TableOverride:
        if not isinstance(d, Mapping):
            raise ConfigError(f"{where}: expected a mapping, e.g. {{partition_by: ['bucket(16, id)']}}")
        _unknown(d, TABLE_OVERRIDE_KEYS, f"{where}.")
        partition_by = d.get("partition_by")
        if partition_by is not None and (
            isinstance(partition_by, str) or not all(isinstance(p, str) for p in partition_by)
        ):
            raise ConfigError(f"{where}.partition_by: expected a list, e.g. ['bucket(16, id)']")
        if not isinstance(d.get("properties") or {}, Mapping):
            raise ConfigError(f"{where}.properties: expected a mapping of table properties")
        size = d.get("target_file_size")
        return cls(
            partition_by=tuple(partition_by) if partition_by is not None else None,
            properties=_with_format_version(d, where),
            target_file_size=parse_size(size, f"{where}.target_file_size") if size is not None else None,
            deletes=_deletes(d, where, None),
        )


def _deletes(d: Mapping[str, Any], where: str, properties: Mapping[str, str] | None) -> str | None:
    """A table block's `deletes` mode, checked; with the block's `properties`, `vectors` must come
    with format version 3 (a per-table override is checked against the table block it overrides)."""
    mode = d.get("deletes")
    if mode is None:
        return None
    if mode not in DELETE_MODES:
        raise ConfigError(f"{where}.deletes: must be one of {', '.join(DELETE_MODES)}, got {mode!r}")
    if properties is not None:
        check_vectors_version(str(mode), properties, where)
    return str(mode)


def check_vectors_version(mode: str, properties: Mapping[str, str], where: str) -> None:
    """`deletes: vectors` needs a format v3 table (deletion vectors are a v3 feature)."""
    if mode == "vectors" and properties.get(FORMAT_VERSION_PROPERTY) != "3":
        raise ConfigError(f"{where}.deletes: vectors needs format_version: 3 (deletion vectors are a v3 feature)")


def _with_format_version(d: Mapping[str, Any], where: str) -> dict[str, str]:
    """A table block's `properties`, with its `format_version` as Iceberg's `format-version`
    property (the one way a table's version travels to `create_table`); both given must agree."""
    properties = {str(k): str(v) for k, v in (d.get("properties") or {}).items()}
    if FORMAT_VERSION_PROPERTY in properties:
        properties[FORMAT_VERSION_PROPERTY] = str(
            parse_format_version(properties[FORMAT_VERSION_PROPERTY], f"{where}.properties.{FORMAT_VERSION_PROPERTY}")
        )
    if d.get("format_version") is not None:
        version = str(parse_format_version(d["format_version"], f"{where}.format_version"))
        if properties.get(FORMAT_VERSION_PROPERTY, version) != version:
            raise ConfigError(
                f"{where}.format_version: {version} disagrees with properties.{FORMAT_VERSION_PROPERTY}="
                f"{properties[FORMAT_VERSION_PROPERTY]}; give one of them"
            )
        properties[FORMAT_VERSION_PROPERTY] = version
    return properties


def parse_size(value: Any, key: str) -> int:
    """'128MB', '1GB', '64kb' or a number of bytes -> bytes."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = re.match(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", str(value), flags=re.IGNORECASE)
    if not match:
        raise ConfigError(f"{key}: {value!r} is not a size like 128MB")
    unit = (match.group(2) or "b").lower().rstrip("b").rstrip("i")
    factor = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}[unit]
    return int(float(match.group(1)) * factor)


@dataclass(frozen=True)
class TriggerConfig:
    """How often batches run and how big they get."""

    interval: float = 5.0
    max_records: int = 100_000
    max_files: int = 100
    # While a backlog drains, the next append fast-path batch is read and written while this one
    # commits (docs/runner.md, "Overlapped commits"); false: each batch commits before the next plans.
    overlap_commit: bool = True

    @classmethod
    def from_dict(cls, d: Any) -> TriggerConfig:
        if d is None:
            return cls()
        if not isinstance(d, Mapping):
            raise ConfigError("trigger: expected a mapping, e.g. {interval: 5s, max_records: 100000}")
        _unknown(d, {"interval", "max_records", "max_files", "overlap_commit"}, "trigger.")
        overlap = d.get("overlap_commit", True)
        if not isinstance(overlap, bool):
            raise ConfigError(f"trigger.overlap_commit: expected true or false, got {overlap!r}")
        out = cls(
            interval=parse_duration(d.get("interval", 5.0), "trigger.interval"),
            max_records=int(d.get("max_records", 100_000)),
            max_files=int(d.get("max_files", 100)),
            overlap_commit=overlap,
        )
        if out.max_records < 1:
            raise ConfigError("trigger.max_records: must be at least 1")
        if out.max_files < 1:
            raise ConfigError("trigger.max_files: must be at least 1")
        return out


# Object stores have no atomic rename, which the Hadoop catalog's commit relies on.
OBJECT_STORE_SCHEMES = (
    "s3",
    "s3a",
    "s3n",
    "gs",
    "gcs",
    "abfs",
    "abfss",
    "wasb",
    "wasbs",
    "adl",
    "oss",
    "cos",
    "cosn",
    "obs",
    "r2",
)
HADOOP_CATALOG_IMPL = "org.apache.iceberg.hadoop.HadoopCatalog"


def check_catalog_for_warehouse(warehouse: str | None, catalog_options: Mapping[str, str] | None) -> None:
    """Refuse a Hadoop catalog (the embedded default) on an object-store warehouse.

    Its commit is a rename guarded by a lock in one JVM; an object store has no atomic rename,
    so two writers can both "win" and one commit is lost. Raises ConfigError naming the key.
    """
    options = catalog_options or {}
    hadoop = not options or str(options.get("type", "")).lower() == "hadoop"
    hadoop = hadoop or str(options.get("catalog-impl", "")) == HADOOP_CATALOG_IMPL
    location = str(options.get("warehouse") or warehouse or "")
    scheme = location.split("://", 1)[0].lower() if "://" in location else ""
    if hadoop and scheme in OBJECT_STORE_SCHEMES:
        key = "catalog.warehouse" if options.get("warehouse") else "warehouse"
        raise ConfigError(
            f"{key}: a Hadoop catalog is not safe on {scheme}:// (an object store has no atomic rename, "
            "so concurrent commits can be lost); use a REST, JDBC, Glue or Hive catalog in a `catalog:` block"
        )


@dataclass(frozen=True)
class MetricsConfig:
    """Where the runner serves Prometheus metrics (`metrics: {prometheus_port: 9464}`)."""

    prometheus_port: int
    prometheus_host: str = "127.0.0.1"  # loopback by default: metrics are not published beyond the machine

    @classmethod
    def from_dict(cls, d: Any) -> MetricsConfig | None:
        """None for an absent or empty block; ConfigError naming the key otherwise."""
        if not d:
            return None
        if not isinstance(d, Mapping):
            raise ConfigError("metrics: expected a mapping, e.g. {prometheus_port: 9464}")
        _unknown(d, {"prometheus_port", "prometheus_host"}, "metrics.")
        port = _require(d, "prometheus_port", "metrics.")
        if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
            raise ConfigError(f"metrics.prometheus_port: {port!r} is not a port number (0-65535; 0 picks a free one)")
        host = d.get("prometheus_host", "127.0.0.1")
        if not isinstance(host, str) or not host:
            raise ConfigError("metrics.prometheus_host: expected an address to listen on, e.g. 127.0.0.1")
        return cls(prometheus_port=port, prometheus_host=host)


@dataclass(frozen=True)
class RestartConfig:
    """How `icetide run` rides out transient failures (docs/runner.md, "Supervision").

    After a transient failure (a commit conflict past the retry budget, a broker or source that
    cannot be read, a commit whose state was unknown) the runner waits `backoff`, doubling each
    time up to `max_backoff`, and starts again from the table's last commit. `max_attempts`
    restarts in a row without a committed batch in between end the run with the last error;
    0 turns restarts off. Terminal failures (bad config, schema, too many bad records) never
    restart.
    """

    max_attempts: int = 5
    backoff: float = 1.0
    max_backoff: float = 60.0

    @classmethod
    def from_dict(cls, d: Any) -> RestartConfig:
        if d is None:
            return cls()
        if not isinstance(d, Mapping):
            raise ConfigError("restart: expected a mapping, e.g. {max_attempts: 5, backoff: 1s}")
        _unknown(d, {"max_attempts", "backoff", "max_backoff"}, "restart.")
        attempts = d.get("max_attempts", cls.max_attempts)
        if not isinstance(attempts, int) or isinstance(attempts, bool) or attempts < 0:
            raise ConfigError("restart.max_attempts: expected a whole number, 0 or more")
        out = cls(
            max_attempts=attempts,
            backoff=parse_duration(d.get("backoff", cls.backoff), "restart.backoff"),
            max_backoff=parse_duration(d.get("max_backoff", cls.max_backoff), "restart.max_backoff"),
        )
        if out.max_backoff < out.backoff:
            raise ConfigError("restart.max_backoff: must not be less than restart.backoff")
        return out

    def delay(self, attempt: int) -> float:
        """Seconds to wait before restart number `attempt` (1-based)."""
        return float(min(self.max_backoff, self.backoff * 2 ** (attempt - 1)))


ON_DATA_LOSS = ("fail", "skip")

FOLD_DELETES = ("rewrite", "position")
MAINTENANCE_KEYS = {"every_batches", "every", "time_budget", "fold_deletes"}


@dataclass(frozen=True)
class MaintenanceConfig:
    """When maintenance runs beside a pipeline, in its Spark application, and how.

    Exactly one schedule: `every_batches` runs it between batches, on the runner's thread (the
    stream waits); `every` runs it on a background thread every so often while batches keep
    committing. `time_budget` bounds each run's compaction; `fold_deletes` picks how equality
    deletes are folded away (rewrite the files, or convert them to position deletes).
    """

    every_batches: int | None = None
    every_seconds: float | None = None
    time_budget_seconds: float | None = None
    fold_deletes: Literal["rewrite", "position"] = "rewrite"

    @property
    def on_thread(self) -> bool:
        """Does maintenance run on its own thread (rather than between batches)?"""
        return self.every_seconds is not None

    @classmethod
    def from_dict(cls, d: Any) -> MaintenanceConfig | None:
        """None for an absent or empty block; ConfigError naming the key otherwise."""
        if not d:
            return None
        if not isinstance(d, Mapping):
            raise ConfigError("maintenance: expected a mapping, e.g. {every_batches: 20} or {every: 5m}")
        _unknown(d, MAINTENANCE_KEYS, "maintenance.")
        every_batches = d.get("every_batches")
        if every_batches is not None and (
            not isinstance(every_batches, int) or isinstance(every_batches, bool) or every_batches < 1
        ):
            raise ConfigError("maintenance.every_batches: expected a positive integer")
        every = parse_duration(d["every"], "maintenance.every") if d.get("every") is not None else None
        if every is not None and every <= 0:
            raise ConfigError("maintenance.every: must be more than 0, e.g. 5m")
        if every is not None and every_batches is not None:
            raise ConfigError(
                "maintenance.every: give either every_batches (between batches) or every (on a thread), not both"
            )
        if every is None and every_batches is None:
            raise ConfigError(
                "maintenance: give every_batches (between batches) or every (on a background thread), e.g. {every: 5m}"
            )
        budget = d.get("time_budget")
        fold = d.get("fold_deletes", "rewrite")
        if fold not in FOLD_DELETES:
            raise ConfigError(f"maintenance.fold_deletes: {fold!r} is not one of {', '.join(FOLD_DELETES)}")
        return cls(
            every_batches=every_batches,
            every_seconds=every,
            time_budget_seconds=parse_duration(budget, "maintenance.time_budget") if budget is not None else None,
            fold_deletes=fold,
        )


@dataclass(frozen=True)
class PipelineConfig:
    """A whole pipeline: source -> decode -> sink, with its table and dead-letter table."""

    pipeline: str
    source: dict[str, Any]
    table: TableConfig
    warehouse: str | None = "warehouse"
    catalog_options: dict[str, str] | None = None
    format: Format = "json"
    mode: Mode = "upsert"
    order_by: str | None = None
    trigger: TriggerConfig = field(default_factory=TriggerConfig)
    dead_letter: str | None = None
    max_bad_fraction: float = 1.0
    distribution: str = "dynamic"
    write_parallelism: int | None = None
    changelog: bool = False
    schema_evolution: bool = False  # new batch columns add table columns, widenings apply (UpsertSink)
    maintenance: MaintenanceConfig | None = None  # icetide.maintain beside the pipeline; None: never
    spark: dict[str, str] = field(default_factory=dict)
    stateful: StatefulSettings | None = None  # merge engine / enrichment: a two-stage pipeline
    capture_source: bool = False  # stage 1 of two: keep each record's position and op as columns
    maintain_table: str | None = None  # the table maintenance looks after, when not `table` (stage 1 of two)

    @property
    def maintained_table(self) -> str:
        """The table the `maintenance` block looks after."""
        return self.maintain_table or self.table.name

    @property
    def maintain_every_batches(self) -> int | None:
        """Run maintenance between batches every N batches (None: not between batches)."""
        return self.maintenance.every_batches if self.maintenance is not None else None

    fast_path: str = "auto"  # auto: appends of Kafka JSON take the one-pass pyarrow path (docs/runner.md)
    debezium: DebeziumSettings = field(default_factory=DebeziumSettings)  # reading schemaless messages
    on_truncate: OnTruncate = "apply"
    metrics: MetricsConfig | None = None  # Prometheus endpoint of the runner; None: none

    __repr__ = redacted_repr  # catalog options, Spark settings and Kafka consumer secrets show as ***
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    max_nesting_depth: int = DEFAULT_MAX_NESTING_DEPTH
    restart: RestartConfig = field(default_factory=RestartConfig)
    on_data_loss: Literal["fail", "skip"] = "fail"  # source records lost before being read (docs/runner.md)
    tables: dict[str, TableOverride] = field(default_factory=dict)  # per-table settings of a routing pipeline
    schema_registry: RegistrySettings | None = None  # format: debezium-avro | avro

    @property
    def reads_debezium(self) -> bool:
        """Are records read by the Debezium decoders (`debezium`, and the Avro formats, whose
        records are read as the JSON converter's messages: icetide.decode.avro)?"""
        return self.format in DEBEZIUM_FORMATS

    @property
    def routes_tables(self) -> bool:
        """Does this pipeline route records to many tables (a template name, or several topics)?

        Such a pipeline runs on icetide.pipeline.sync.SyncRunner: one table per source table.
        """
        if self.source_kind != "kafka":
            return False
        kafka = self.source["kafka"]
        return bool(table_name_placeholders(self.table.name)) or "topics" in kafka or "topic_pattern" in kafka

    def table_config(self, name: str) -> TableConfig:
        """The definition of routed table `name`: the `table` block with `tables.<name>` over it."""
        t = self.table
        o = self.tables.get(name, TableOverride())
        return TableConfig(
            name=name,
            schema=t.schema,
            key=t.key,
            partition_by=o.partition_by if o.partition_by is not None else t.partition_by,
            properties={**t.properties, **o.properties},
            target_file_size=o.target_file_size if o.target_file_size is not None else t.target_file_size,
            deletes=o.deletes or t.deletes,
        )

    @property
    def source_kind(self) -> str:
        """'kafka' or 'files'."""
        return next(iter(self.source))

    @property
    def catalog(self) -> str:
        """The Spark catalog the table lives in."""
        return self.table.name.split(".")[0]

    @classmethod
    def from_dict(cls, d: Any) -> PipelineConfig:
        """Validate a parsed YAML document; raises ConfigError naming the first bad key."""
        if not isinstance(d, Mapping):
            raise ConfigError("pipeline file: expected a mapping at the top level")
        _unknown(d, TOP_LEVEL_KEYS, "")
        pipeline = str(_require(d, "pipeline", ""))
        if not re.match(r"^[A-Za-z0-9_.-]+$", pipeline):
            raise ConfigError(f"pipeline: {pipeline!r} may hold only letters, digits, '_', '.' and '-'")
        source = _require(d, "source", "")
        if not isinstance(source, Mapping) or len(source) != 1 or next(iter(source)) not in ("kafka", "files"):
            raise ConfigError("source: expected exactly one of 'kafka' or 'files'")
        kind = next(iter(source))
        if not isinstance(source[kind], Mapping):
            raise ConfigError(f"source.{kind}: expected a mapping of settings")
        table_block = d.get("table")
        template = (
            table_name_placeholders(str(table_block["name"]))
            if isinstance(table_block, Mapping) and table_block.get("name")
            else ()
        )
        many_topics = kind == "kafka" and ("topics" in source[kind] or "topic_pattern" in source[kind])
        routing = bool(template) or many_topics
        fmt = d.get("format", "debezium" if routing else "json")
        if fmt not in FORMATS:
            raise ConfigError(f"format: {fmt!r} is not one of {', '.join(FORMATS)}")
        if routing and fmt not in DEBEZIUM_FORMATS:
            raise ConfigError(
                "format: a pipeline with a table-name template or several topics reads Debezium change events; "
                "use format: debezium (or debezium-avro)"
            )
        if template and kind != "kafka":
            raise ConfigError("table.name: a template routes Kafka records; source.files writes one table")
        registry = _schema_registry(d, fmt, kind, template)
        mode = d.get("mode", "upsert")
        if mode not in ("upsert", "append"):
            raise ConfigError(f"mode: {mode!r} is not one of upsert, append")
        distribution = d.get("distribution", "dynamic")
        if distribution not in DISTRIBUTIONS:
            raise ConfigError(f"distribution: {distribution!r} is not one of {', '.join(DISTRIBUTIONS)}")
        fraction = d.get("max_bad_fraction", 1.0)
        if not isinstance(fraction, int | float) or not 0 <= float(fraction) <= 1:
            raise ConfigError("max_bad_fraction: expected a number between 0 and 1")
        catalog = d.get("catalog")
        if catalog is not None and not isinstance(catalog, Mapping):
            raise ConfigError("catalog: expected a mapping of Spark catalog options, e.g. {type: rest, uri: ...}")
        parallelism = d.get("write_parallelism")
        if parallelism is not None and (not isinstance(parallelism, int) or parallelism < 1):
            raise ConfigError("write_parallelism: expected a positive integer")
        table = TableConfig.from_dict(_require(d, "table", ""), from_stream=fmt in DEBEZIUM_FORMATS)
        on_truncate = d.get("on_truncate", "apply")
        if on_truncate not in ("apply", "dead_letter"):
            raise ConfigError(f"on_truncate: {on_truncate!r} is not one of apply, dead_letter")
        maintenance = MaintenanceConfig.from_dict(d.get("maintenance"))
        fast_path = d.get("fast_path", "auto")
        if fast_path is False:  # YAML reads a bare `off` as false
            fast_path = "off"
        if fast_path not in FAST_PATH_MODES:
            raise ConfigError(f"fast_path: {fast_path!r} is not one of {', '.join(FAST_PATH_MODES)}")
        max_record_bytes = d.get("max_record_bytes", DEFAULT_MAX_RECORD_BYTES)
        if (
            not isinstance(max_record_bytes, int)
            or isinstance(max_record_bytes, bool)
            or not 1 <= max_record_bytes <= MAX_RECORD_BYTES_LIMIT
        ):
            raise ConfigError(f"max_record_bytes: expected an integer from 1 to {MAX_RECORD_BYTES_LIMIT} (bytes)")
        max_nesting_depth = d.get("max_nesting_depth", DEFAULT_MAX_NESTING_DEPTH)
        if (
            not isinstance(max_nesting_depth, int)
            or isinstance(max_nesting_depth, bool)
            or not 1 <= max_nesting_depth <= MAX_NESTING_DEPTH_LIMIT
        ):
            raise ConfigError(f"max_nesting_depth: expected an integer from 1 to {MAX_NESTING_DEPTH_LIMIT}")
        order_by = d.get("order_by")
        warehouse = d.get("warehouse", None if catalog else "warehouse")
        catalog_options = {str(k): str(v) for k, v in catalog.items()} if catalog else None
        check_catalog_for_warehouse(warehouse, catalog_options)
        redact({"catalog": catalog or {}, "spark": d.get("spark") or {}, "source": source})  # remembers secrets
        on_data_loss = d.get("on_data_loss", "fail")
        if on_data_loss not in ON_DATA_LOSS:
            raise ConfigError(f"on_data_loss: {on_data_loss!r} is not one of {', '.join(ON_DATA_LOSS)}")
        schema_evolution = d.get("schema_evolution", False)
        if not isinstance(schema_evolution, bool):
            raise ConfigError(f"schema_evolution: expected true or false, not {schema_evolution!r}")
        config = cls(
            pipeline=pipeline,
            source={kind: dict(source[kind])},
            table=table,
            warehouse=warehouse,
            catalog_options=catalog_options,
            format=fmt,
            mode=mode,
            order_by=str(order_by) if order_by else None,
            trigger=TriggerConfig.from_dict(d.get("trigger")),
            dead_letter=str(d["dead_letter"]) if d.get("dead_letter") else None,
            max_bad_fraction=float(fraction),
            distribution=distribution,
            write_parallelism=parallelism,
            changelog=bool(d.get("changelog", False)),
            schema_evolution=schema_evolution,
            spark={str(k): str(v) for k, v in (d.get("spark") or {}).items()},
            maintenance=maintenance,
            stateful=StatefulSettings.from_dict(
                d,
                table=table.name,
                pipeline=pipeline,
                warehouse=d.get("warehouse", None if catalog else "warehouse"),
                order_by=str(order_by) if order_by else None,
                duration=parse_duration,
            ),
            fast_path=str(fast_path),
            debezium=DebeziumSettings.from_dict(d.get("debezium")),
            on_truncate=on_truncate,
            metrics=MetricsConfig.from_dict(d.get("metrics")),
            max_record_bytes=max_record_bytes,
            max_nesting_depth=max_nesting_depth,
            restart=RestartConfig.from_dict(d.get("restart")),
            on_data_loss=on_data_loss,
            tables=_table_overrides(d.get("tables")),
            schema_registry=registry,
        )
        if routing:
            _check_routing(config)
            for name in config.tables:
                routed = config.table_config(name)
                check_vectors_version(routed.deletes, routed.properties, f"tables.{name}")
        elif config.tables:
            raise ConfigError("tables: per-table settings need a table-name template or several topics")
        if table.schema is None and config.stateful is not None:
            raise ConfigError("table.schema: a stateful pipeline needs its table's schema and key in the file")
        if config.stateful is not None and mode != "upsert":
            raise ConfigError("mode: a stateful pipeline (merge or enrich) merges changes; use mode: upsert")
        if config.on_data_loss == "skip" and not config.dead_letter:
            raise ConfigError("on_data_loss: skip records each lost range in the dead-letter table; set dead_letter")
        if config.dead_letter and len(config.dead_letter.split(".")) < 3:
            raise ConfigError(f"dead_letter: {config.dead_letter!r} must be <catalog>.<namespace>.<table>")
        return config


def _schema_registry(d: Mapping[str, Any], fmt: str, kind: str, template: tuple[str, ...]) -> RegistrySettings | None:
    """The `schema_registry` block: required by the Avro formats, and only read by them."""
    block = d.get("schema_registry")
    if fmt not in AVRO_FORMATS:
        if block is not None:
            raise ConfigError(f"schema_registry: only read with format: debezium-avro or avro, not {fmt}")
        return None
    if kind != "kafka":
        raise ConfigError(f"format: {fmt} reads Kafka records (Confluent's wire format); source.files has none")
    if fmt == "avro" and set(template) - {"topic"}:
        raise ConfigError("table.name: format avro records carry no Debezium source block; route them by {topic}")
    if block is None:
        raise ConfigError(f"schema_registry: required with format: {fmt} (e.g. {{url: http://127.0.0.1:8081}})")
    return RegistrySettings.from_dict(block)


def _table_overrides(d: Any) -> dict[str, TableOverride]:
    if d is None:
        return {}
    if not isinstance(d, Mapping):
        raise ConfigError("tables: expected a mapping of table name to settings, e.g. {lake.db.orders: {...}}")
    out = {}
    for name, settings in d.items():
        if len(str(name).split(".")) < 3 or "{" in str(name):
            raise ConfigError(f"tables.{name}: must be a table's full name <catalog>.<namespace>.<table>")
        out[str(name)] = TableOverride.from_dict(settings, f"tables.{name}")
    return out


def _check_routing(config: PipelineConfig) -> None:
    """A pipeline that routes to many tables: validated at load, each error naming its key."""
    from icetide.sources.kafka import KafkaSourceConfig

    KafkaSourceConfig.from_dict(config.source["kafka"])
    if config.dead_letter is None:
        raise ConfigError(
            "dead_letter: required for a pipeline that routes to many tables (its one dead-letter table "
            "also records which tables the pipeline feeds)"
        )
    if config.stateful is not None:
        raise ConfigError("merge: a stateful pipeline writes one table; it cannot route to many")
    catalog = config.catalog
    for name in config.tables:
        if name.split(".")[0] != catalog:
            raise ConfigError(f"tables.{name}: not in the pipeline's catalog {catalog!r}")
    if "{" in config.dead_letter:
        raise ConfigError(f"dead_letter: {config.dead_letter!r} must be one fixed table (the pipeline keeps one)")
    if config.dead_letter.split(".")[0] != catalog:
        raise ConfigError(f"dead_letter: {config.dead_letter!r} is not in the pipeline's catalog {catalog!r}")


def load_config(path: str | Path) -> PipelineConfig:
    """Read and validate a pipeline YAML file.

    `${VAR}` and `${VAR:-default}` in its string values are replaced from the environment first
    (`$$` is a literal `$`); an unset variable without a default is a ConfigError naming the key.
    """
    import yaml

    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read pipeline file {p}: {exc.strerror}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML ({str(exc).splitlines()[0]})") from exc
    try:
        return PipelineConfig.from_dict(expand_env(data))
    except ConfigError as exc:
        raise ConfigError(f"{p}: {exc}") from exc
