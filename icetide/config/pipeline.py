"""Typed pipeline configuration, loaded from YAML and validated once, at load.

Every error names the offending key (`trigger.interval: ...`). Source blocks are validated by
their source modules, which know their own settings. The blocks have their own modules:
icetide.config.table (the table and per-table overrides), icetide.config.decode (Schema Registry,
Debezium), icetide.config.runner (trigger, restart, metrics, maintenance) and
icetide.config.values (durations, sizes, keys); their names are importable from here too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from icetide.config.decode import (
    DEBEZIUM_KEYS,
    JSON_KEYS,
    DebeziumSettings,
    DecimalHandling,
    JsonSettings,
    OnTruncate,
    RegistrySettings,
    TimePrecision,
    public_url,
)
from icetide.config.runner import (
    FOLD_DELETES,
    MAINTENANCE_KEYS,
    MaintenanceConfig,
    MetricsConfig,
    RestartConfig,
    TriggerConfig,
)
from icetide.config.secrets import expand_env, redact, redacted_repr
from icetide.config.table import (
    DELETE_MODES,
    TABLE_KEYS,
    TABLE_NAME_PLACEHOLDERS,
    TABLE_OVERRIDE_KEYS,
    TableConfig,
    TableOverride,
    check_vectors_version,
    table_name_placeholders,
    table_overrides,
)
from icetide.config.values import parse_duration, parse_size, reject_unknown_keys, require_key
from icetide.errors import ConfigError
from icetide.stateful.settings import StatefulSettings

__all__ = [
    "AVRO_FORMATS",
    "DEBEZIUM_FORMATS",
    "DEBEZIUM_KEYS",
    "DEFAULT_MAX_NESTING_DEPTH",
    "DEFAULT_MAX_RECORD_BYTES",
    "DELETE_MODES",
    "DISTRIBUTIONS",
    "FAST_PATH_MODES",
    "FOLD_DELETES",
    "FORMATS",
    "HADOOP_CATALOG_IMPL",
    "JSON_KEYS",
    "MAINTENANCE_KEYS",
    "MAX_NESTING_DEPTH_LIMIT",
    "MAX_RECORD_BYTES_LIMIT",
    "OBJECT_STORE_SCHEMES",
    "ON_DATA_LOSS",
    "TABLE_KEYS",
    "TABLE_NAME_PLACEHOLDERS",
    "TABLE_OVERRIDE_KEYS",
    "TOP_LEVEL_KEYS",
    "DebeziumSettings",
    "DecimalHandling",
    "Format",
    "JsonSettings",
    "MaintenanceConfig",
    "MetricsConfig",
    "Mode",
    "OnTruncate",
    "PipelineConfig",
    "RegistrySettings",
    "RestartConfig",
    "TableConfig",
    "TableOverride",
    "TimePrecision",
    "TriggerConfig",
    "check_catalog_for_warehouse",
    "check_vectors_version",
    "load_config",
    "parse_duration",
    "parse_size",
    "public_url",
    "table_name_placeholders",
]

Mode = Literal["upsert", "append"]
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
    "json",
    "on_truncate",
    "metrics",
    "max_record_bytes",
    "max_nesting_depth",
    "restart",
    "on_data_loss",
    "tables",
    "schema_registry",
}
FAST_PATH_MODES = ("auto", "off")
DEFAULT_MAX_RECORD_BYTES = 16 * 1024 * 1024  # a bigger payload is a bad record (docs/how-to/kafka-upserts.md)
MAX_RECORD_BYTES_LIMIT = 16 * 1024 * 1024  # Spark's JSON reader (Jackson) refuses strings over 20M chars
DEFAULT_MAX_NESTING_DEPTH = 64  # JSON arrays/objects nested deeper make a bad record
MAX_NESTING_DEPTH_LIMIT = 500  # Python's json and Spark's Jackson (1000) recurse per level


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


ON_DATA_LOSS = ("fail", "skip")


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
    # icetide.maintain beside the pipeline (a thread every 10s unless the block says otherwise); None: `off`
    maintenance: MaintenanceConfig | None = field(default_factory=MaintenanceConfig.default)
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

    def maintenance_due(self, batch_id: int) -> bool:
        """Whether maintenance runs between batches after batch `batch_id`."""
        every = self.maintain_every_batches
        return every is not None and every > 0 and batch_id % every == 0

    fast_path: str = "auto"  # auto: appends of Kafka JSON take the one-pass pyarrow path (docs/runner.md)
    debezium: DebeziumSettings = field(default_factory=DebeziumSettings)  # reading schemaless messages
    json: JsonSettings = field(default_factory=JsonSettings)  # format: json's leniencies (off by default)
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
        records are read as the JSON converter's messages: icetide.decode.avro.decoder)?"""
        return self.format in DEBEZIUM_FORMATS

    @property
    def routes_tables(self) -> bool:
        """Does this pipeline route records to many tables (a template name, or several topics)?

        Such a pipeline runs on icetide.pipeline.sync.runner.SyncRunner: one table per source table.
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
        reject_unknown_keys(d, TOP_LEVEL_KEYS, "")
        pipeline = str(require_key(d, "pipeline", ""))
        if not re.match(r"^[A-Za-z0-9_.-]+$", pipeline):
            raise ConfigError(f"pipeline: {pipeline!r} may hold only letters, digits, '_', '.' and '-'")
        source = require_key(d, "source", "")
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
        table = TableConfig.from_dict(require_key(d, "table", ""), from_stream=fmt in DEBEZIUM_FORMATS)
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
            json=JsonSettings.from_dict(d.get("json"), fmt),
            on_truncate=on_truncate,
            metrics=MetricsConfig.from_dict(d.get("metrics")),
            max_record_bytes=max_record_bytes,
            max_nesting_depth=max_nesting_depth,
            restart=RestartConfig.from_dict(d.get("restart")),
            on_data_loss=on_data_loss,
            tables=table_overrides(d.get("tables")),
            schema_registry=registry,
        )
        if routing:
            _check_routing(config)
            for name in config.tables:
                routed = config.table_config(name)
                check_vectors_version(routed.deletes, routed.properties, f"tables.{name}")
        elif config.tables:
            raise ConfigError("tables: per-table settings need a table-name template or several topics")
        if config.debezium.provide_transaction_metadata:
            _check_whole_transactions(config)
        if table.schema is None and config.stateful is not None:
            raise ConfigError("table.schema: a stateful pipeline needs its table's schema and key in the file")
        if config.stateful is not None and mode != "upsert":
            raise ConfigError("mode: a stateful pipeline (merge or enrich) merges changes; use mode: upsert")
        if config.on_data_loss == "skip" and not config.dead_letter:
            raise ConfigError("on_data_loss: skip records each lost range in the dead-letter table; set dead_letter")
        if config.dead_letter and len(config.dead_letter.split(".")) < 3:
            raise ConfigError(f"dead_letter: {config.dead_letter!r} must be <catalog>.<namespace>.<table>")
        return config


def _check_whole_transactions(config: PipelineConfig) -> None:
    """`debezium.provide.transaction.metadata` is for a sync (many tables) reading the JSON
    converter's messages from Kafka: icetide.pipeline.sync.transactions reads them on the driver."""
    where = "debezium.provide.transaction.metadata"
    if not config.routes_tables:
        raise ConfigError(f"{where}: whole transactions are for a database sync (a table-name template)")
    if config.source_kind != "kafka":
        raise ConfigError(f"{where}: whole transactions read the connector's Kafka topics, not {config.source_kind}")
    if config.format != "debezium":
        raise ConfigError(f"{where}: whole transactions read the JSON converter's messages (format: debezium)")
    if config.capture_source:
        raise ConfigError(f"{where}: not with a two-stage pipeline")


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
