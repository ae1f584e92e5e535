"""Typed pipeline configuration, loaded from YAML and validated once, at load.

Every error names the offending key (`trigger.interval: ...`). Source blocks are validated by
their source modules, which know their own settings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from icetide.errors import ConfigError
from icetide.stateful.settings import StatefulSettings

Mode = Literal["upsert", "append"]
Format = Literal["json", "debezium"]
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
}
FAST_PATH_MODES = ("auto", "off")
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


@dataclass(frozen=True)
class TableConfig:
    """The target table's definition."""

    name: str
    schema: str
    key: tuple[str, ...]
    partition_by: tuple[str, ...] = ()
    properties: dict[str, str] = field(default_factory=dict)
    target_file_size: int | None = None

    @classmethod
    def from_dict(cls, d: Any) -> TableConfig:
        if not isinstance(d, Mapping):
            raise ConfigError("table: expected a mapping with name, schema, key")
        _unknown(d, {"name", "schema", "key", "partition_by", "properties", "target_file_size"}, "table.")
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
            schema=str(_require(d, "schema", "table.")),
            key=tuple(key),
            partition_by=tuple(str(p) for p in partition_by),
            properties={str(k): str(v) for k, v in (d.get("properties") or {}).items()},
            target_file_size=parse_size(size, "table.target_file_size") if size is not None else None,
        )


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

    @classmethod
    def from_dict(cls, d: Any) -> TriggerConfig:
        if d is None:
            return cls()
        if not isinstance(d, Mapping):
            raise ConfigError("trigger: expected a mapping, e.g. {interval: 5s, max_records: 100000}")
        _unknown(d, {"interval", "max_records", "max_files"}, "trigger.")
        out = cls(
            interval=parse_duration(d.get("interval", 5.0), "trigger.interval"),
            max_records=int(d.get("max_records", 100_000)),
            max_files=int(d.get("max_files", 100)),
        )
        if out.max_records < 1:
            raise ConfigError("trigger.max_records: must be at least 1")
        if out.max_files < 1:
            raise ConfigError("trigger.max_files: must be at least 1")
        return out


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
        fmt = d.get("format", "json")
        if fmt not in ("json", "debezium"):
            raise ConfigError(f"format: {fmt!r} is not one of json, debezium")
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
        table = TableConfig.from_dict(_require(d, "table", ""))
        maintenance = MaintenanceConfig.from_dict(d.get("maintenance"))
        fast_path = d.get("fast_path", "auto")
        if fast_path is False:  # YAML reads a bare `off` as false
            fast_path = "off"
        if fast_path not in FAST_PATH_MODES:
            raise ConfigError(f"fast_path: {fast_path!r} is not one of {', '.join(FAST_PATH_MODES)}")
        order_by = d.get("order_by")
        schema_evolution = d.get("schema_evolution", False)
        if not isinstance(schema_evolution, bool):
            raise ConfigError(f"schema_evolution: expected true or false, not {schema_evolution!r}")
        config = cls(
            pipeline=pipeline,
            source={kind: dict(source[kind])},
            table=table,
            warehouse=d.get("warehouse", None if catalog else "warehouse"),
            catalog_options={str(k): str(v) for k, v in catalog.items()} if catalog else None,
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
        )
        if config.stateful is not None and mode != "upsert":
            raise ConfigError("mode: a stateful pipeline (merge or enrich) merges changes; use mode: upsert")
        if config.dead_letter and len(config.dead_letter.split(".")) < 3:
            raise ConfigError(f"dead_letter: {config.dead_letter!r} must be <catalog>.<namespace>.<table>")
        return config


def load_config(path: str | Path) -> PipelineConfig:
    """Read and validate a pipeline YAML file."""
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
        return PipelineConfig.from_dict(data)
    except ConfigError as exc:
        raise ConfigError(f"{p}: {exc}") from exc
