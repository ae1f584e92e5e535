"""How a pipeline runs: its trigger (batch interval and size), restarts after transient
failures, the Prometheus endpoint, and maintenance beside the stream."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from icetide.config.values import parse_duration, reject_unknown_keys, require_key
from icetide.errors import ConfigError

# The keys of each block (the docs' reference of pipeline keys is generated from these tables).
TRIGGER_KEYS = {"interval", "max_records", "max_files", "overlap_commit", "read_ahead"}
METRICS_KEYS = {"prometheus_port", "prometheus_host"}
RESTART_KEYS = {"max_attempts", "backoff", "max_backoff"}


@dataclass(frozen=True)
class TriggerConfig:
    """How often batches run and how big they get."""

    interval: float = 5.0
    max_records: int = 100_000
    max_files: int = 100
    # While a backlog drains, the next append fast-path batch is read and written while this one
    # commits (docs/runner.md, "Overlapped commits"); false: each batch commits before the next plans.
    overlap_commit: bool = True
    # A fast-path batch from Kafka (JSON, a database sync) reads and writes the records as they arrive until the
    # trigger time, so only the commit follows it (docs/runner.md, "Reading ahead"); false: a
    # batch reads what was there at the trigger, after it.
    read_ahead: bool = True

    @classmethod
    def from_dict(cls, d: Any) -> TriggerConfig:
        if d is None:
            return cls()
        if not isinstance(d, Mapping):
            raise ConfigError("trigger: expected a mapping, e.g. {interval: 5s, max_records: 100000}")
        reject_unknown_keys(d, TRIGGER_KEYS, "trigger.")
        overlap, ahead = d.get("overlap_commit", True), d.get("read_ahead", True)
        for key, value in (("overlap_commit", overlap), ("read_ahead", ahead)):
            if not isinstance(value, bool):
                raise ConfigError(f"trigger.{key}: expected true or false, got {value!r}")
        out = cls(
            interval=parse_duration(d.get("interval", 5.0), "trigger.interval"),
            max_records=int(d.get("max_records", 100_000)),
            max_files=int(d.get("max_files", 100)),
            overlap_commit=overlap,
            read_ahead=ahead,
        )
        if out.max_records < 1:
            raise ConfigError("trigger.max_records: must be at least 1")
        if out.max_files < 1:
            raise ConfigError("trigger.max_files: must be at least 1")
        return out


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
        reject_unknown_keys(d, METRICS_KEYS, "metrics.")
        port = require_key(d, "prometheus_port", "metrics.")
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
        reject_unknown_keys(d, RESTART_KEYS, "restart.")
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


FOLD_DELETES = ("rewrite", "position")
MAINTENANCE_KEYS = {"every_batches", "every", "time_budget", "fold_deletes", "vector_deleted_share", "vector_file_rows"}
VECTOR_DELETED_SHARE_DEFAULT = 0.1
VECTOR_FILE_ROWS_DEFAULT = 1_000_000
# A pipeline without a `maintenance:` block keeps its tables on a thread at this interval. A pass
# over a table with no commit since a pass that found nothing due is skipped (maintain_tables), so
# an idle table costs one metadata refresh. Measured on the ad-event peer run (docs/design.md,
# "Maintenance on by default"): every 10s left one data file per partition (0.10x Flink's files)
# at 1.18x Flink's rows/s per core; every 30s left 0.24-0.28x.
DEFAULT_MAINTENANCE_EVERY_SECONDS = 10.0


def _off(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip().lower() == "off")


def vector_deleted_share(value: Any, key: str) -> float | None:
    """The deletion-vector policy's share (above 0, at most 1), or None for `off`; ConfigError naming `key`."""
    if _off(value):
        return None
    try:
        share = float(value) if isinstance(value, str) else value
    except ValueError:
        share = None
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1:
        raise ConfigError(f"{key}: expected a share above 0 and at most 1 (e.g. 0.1), or off; got {value!r}")
    return float(share)


def vector_file_rows(value: Any, key: str) -> int | None:
    """The deletion-vector policy's rows (a whole number, at least 1), or None for `off`; ConfigError naming `key`."""
    if _off(value):
        return None
    try:
        rows = int(value.replace("_", "")) if isinstance(value, str) else value
    except ValueError:
        rows = None
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
        raise ConfigError(f"{key}: expected a whole number of rows, at least 1, or off; got {value!r}")
    return rows


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
    vector_deleted_share: float | None = VECTOR_DELETED_SHARE_DEFAULT
    vector_file_rows: int | None = VECTOR_FILE_ROWS_DEFAULT

    @property
    def on_thread(self) -> bool:
        """Does maintenance run on its own thread (rather than between batches)?"""
        return self.every_seconds is not None

    @classmethod
    def default(cls) -> MaintenanceConfig:
        """What a pipeline without a `maintenance:` block gets: a thread every 10s, default policy."""
        return cls(every_seconds=DEFAULT_MAINTENANCE_EVERY_SECONDS)

    @classmethod
    def from_dict(cls, d: Any) -> MaintenanceConfig | None:
        """The default for an absent or empty block, None for `off` (no maintenance beside the
        pipeline); ConfigError naming the key otherwise."""
        if d is False or (isinstance(d, str) and d.strip().lower() == "off"):  # YAML reads a bare off as false
            return None
        if d is None or (isinstance(d, Mapping) and not d):
            return cls.default()
        if not isinstance(d, Mapping):
            raise ConfigError("maintenance: expected a mapping, e.g. {every_batches: 20} or {every: 5m}, or off")
        reject_unknown_keys(d, MAINTENANCE_KEYS, "maintenance.")
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
        if every is None and every_batches is None:  # a block of policy keys only: the default schedule
            every = DEFAULT_MAINTENANCE_EVERY_SECONDS
        budget = d.get("time_budget")
        fold = d.get("fold_deletes", "rewrite")
        if fold not in FOLD_DELETES:
            raise ConfigError(f"maintenance.fold_deletes: {fold!r} is not one of {', '.join(FOLD_DELETES)}")
        return cls(
            every_batches=every_batches,
            every_seconds=every,
            time_budget_seconds=parse_duration(budget, "maintenance.time_budget") if budget is not None else None,
            fold_deletes=fold,
            vector_deleted_share=vector_deleted_share(
                d.get("vector_deleted_share", VECTOR_DELETED_SHARE_DEFAULT), "maintenance.vector_deleted_share"
            ),
            vector_file_rows=vector_file_rows(
                d.get("vector_file_rows", VECTOR_FILE_ROWS_DEFAULT), "maintenance.vector_file_rows"
            ),
        )
