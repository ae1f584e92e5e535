"""Prometheus metrics of the runner, served over HTTP (`metrics: {prometheus_port: 9464}`).

One registry per process holds every pipeline's series, labelled by pipeline (and table, topic,
partition). The series outlive a Runner object, so a supervisor that builds a new runner after a
failure keeps counting, and it reports the restart itself through `record_restart(pipeline)`.

Series (all names start with `icetide_`):

- `rows_written_total`, `records_in_total`, `bad_records_total` {pipeline, table}
- `nested_as_text_total` {pipeline, table}: objects and arrays in STRING columns kept as their JSON
  text (`json: {nested_as_text: true}`) instead of dead letters
- `batches_total` {pipeline, table, outcome="committed"|"noop"} (noop: already committed before)
- `batch_paths_total` {pipeline, table, path, fallback}: how each batch ran, the metrics line's
  `path` and `fallback` ("none" on a fast path); both from fixed lists (pipeline/batch_path.py)
- `overlapped_commits_total` {pipeline, table}: batches committed while the next one was written
- `records_as_columns_total` {pipeline, table}: records decoded a run at a time, as columns
- `commit_seconds` histogram {pipeline, table}: the catalog commit of each batch
- `commit_retries_total` {pipeline, table}: commit attempts after a batch's first: a race lost to
  another writer of the table (maintenance, a second runner, another engine), or a call whose
  outcome was unknown and that had not landed
- `last_commit_timestamp_seconds`, `seconds_since_last_commit` {pipeline, table}
- `source_lag` {pipeline, source, partition}: records (Kafka) or files (landing folder) not yet read
- `restarts_total` {pipeline}, `maintenance_runs_total` {pipeline, table}

No label carries a setting's value, so no secret can reach a scrape.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from icetide.errors import ConfigError, NotInstalledError

if TYPE_CHECKING:
    from icetide.config.pipeline import MetricsConfig

log = logging.getLogger(__name__)

INSTALL_LINE = "pip install 'prometheus-client==0.26.0'"
COMMIT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class CommittedBatch(Protocol):
    """What a batch's metrics line says (icetide.pipeline.table_runner.BatchMetrics)."""

    @property
    def committed(self) -> bool: ...
    @property
    def records_in(self) -> int: ...
    @property
    def rows_written(self) -> int: ...
    @property
    def bad_records(self) -> int: ...
    @property
    def commit_seconds(self) -> float: ...
    @property
    def nested_as_text(self) -> int: ...
    @property
    def commit_attempts(self) -> int: ...


class RanBatch(Protocol):
    """How a batch ran, as its metrics line says (icetide.pipeline.batches.BatchMetrics)."""

    @property
    def path(self) -> str: ...
    @property
    def fallback(self) -> str | None: ...
    @property
    def overlapped(self) -> bool: ...
    @property
    def records_as_columns(self) -> int: ...


@dataclass(frozen=True)
class TableCounts:
    """One table's share of a batch, as the Prometheus series count it (prometheus.CommittedBatch)."""

    committed: bool
    records_in: int
    rows_written: int
    bad_records: int
    commit_seconds: float
    nested_as_text: int = 0  # (format: json only; a many-table pipeline reads Debezium)
    commit_attempts: int = 0


def _client() -> Any:
    try:
        import prometheus_client
    except ImportError as exc:
        raise NotInstalledError(f"Prometheus metrics need prometheus-client: {INSTALL_LINE}") from exc
    return prometheus_client


class _Series:
    """The process's metric families, created once, on first use."""

    _instance: _Series | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        pc = _client()
        self.registry = pc.CollectorRegistry()
        r = self.registry
        table = ["pipeline", "table"]
        self.rows = pc.Counter("icetide_rows_written", "Rows committed to the table", table, registry=r)
        self.records = pc.Counter("icetide_records_in", "Source records read into batches", table, registry=r)
        self.bad = pc.Counter(
            "icetide_bad_records", "Records that did not decode, sent to the dead-letter table", table, registry=r
        )
        self.nested_as_text = pc.Counter(
            "icetide_nested_as_text",
            "Objects and arrays in STRING columns kept as their JSON text (json: nested_as_text), not dead letters",
            table,
            registry=r,
        )
        self.batches = pc.Counter("icetide_batches", "Batches run, by outcome", [*table, "outcome"], registry=r)
        self.paths = pc.Counter(
            "icetide_batch_paths",
            "Batches run, by the path that ran them and why no fast path took them (fallback: none on a fast path)",
            [*table, "path", "fallback"],
            registry=r,
        )
        self.overlapped = pc.Counter(
            "icetide_overlapped_commits",
            "Batches committed on the commit thread while the next batch was read and written",
            table,
            registry=r,
        )
        self.as_columns = pc.Counter(
            "icetide_records_as_columns", "Records decoded a run at a time, as columns", table, registry=r
        )
        self.commit_retries = pc.Counter(
            "icetide_commit_retries",
            "Commit attempts after a batch's first: races lost to another writer, calls that failed before landing",
            table,
            registry=r,
        )
        self.commit = pc.Histogram(
            "icetide_commit_seconds", "Catalog commit time of a batch", table, buckets=COMMIT_BUCKETS, registry=r
        )
        self.last_commit = pc.Gauge(
            "icetide_last_commit_timestamp_seconds", "When the pipeline last committed (Unix time)", table, registry=r
        )
        self.since_commit = pc.Gauge(
            "icetide_seconds_since_last_commit", "Seconds since the pipeline last committed", table, registry=r
        )
        self.lag = pc.Gauge(
            "icetide_source_lag",
            "Records (Kafka) or files (landing folder) not yet read, per source partition",
            ["pipeline", "source", "partition"],
            registry=r,
        )
        self.restarts = pc.Counter("icetide_restarts", "Runner restarts after a failure", ["pipeline"], registry=r)
        self.maintenance = pc.Counter(
            "icetide_maintenance_runs", "Maintenance runs beside the pipeline", table, registry=r
        )
        self.servers: dict[tuple[str, int], tuple[Any, int]] = {}

    @classmethod
    def get(cls) -> _Series:
        with cls._lock:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance


def record_restart(pipeline: str) -> None:
    """Count one restart of `pipeline`'s runner (for the supervisor that restarts it)."""
    _Series.get().restarts.labels(pipeline=pipeline).inc()


class PipelineMetrics:
    """One pipeline's Prometheus series; `serve` publishes the process's registry over HTTP."""

    def __init__(self, pipeline: str, table: str, *, source: str) -> None:
        self.pipeline, self.table, self.source = pipeline, table, source
        self._series = _Series.get()
        self._last_commit: float | None = None
        self._lag_labels: set[str] = set()
        self.port: int | None = None
        labels = {"pipeline": pipeline, "table": table}
        self._series.since_commit.labels(**labels).set_function(self._seconds_since_commit)
        self._series.restarts.labels(pipeline=pipeline)  # present from the start, at 0
        self._series.maintenance.labels(**labels)
        self._series.overlapped.labels(**labels)
        self._series.as_columns.labels(**labels)
        self._series.commit_retries.labels(**labels)
        for outcome in ("committed", "noop"):
            self._series.batches.labels(**labels, outcome=outcome)

    def _seconds_since_commit(self) -> float:
        return time.time() - self._last_commit if self._last_commit is not None else float("nan")

    def serve(self, host: str, port: int) -> int:
        """Serve the registry on host:port (port 0: a free one) for the rest of the process;
        returns the port. Serving the same address twice is one server."""
        servers = self._series.servers
        with _Series._lock:
            if (host, port) not in servers:
                try:
                    server, _thread = _client().start_http_server(port, addr=host, registry=self._series.registry)
                except OSError as exc:
                    raise ConfigError(
                        f"metrics.prometheus_port: cannot listen on {host}:{port}: {exc.strerror}"
                    ) from exc
                bound = int(server.server_address[1])
                servers[(host, port)] = (server, bound)
                log.info("Prometheus metrics on http://%s:%d/metrics", host, bound)
            self.port = servers[(host, port)][1]
        return self.port

    def committed_before(self, committed_at: str | None) -> None:
        """Start `seconds_since_last_commit` from the pipeline's last commit (ISO time), if any."""
        if not committed_at:
            return
        try:
            moment = datetime.fromisoformat(committed_at).timestamp()
        except ValueError:
            return
        self._set_last_commit(moment)

    def _set_last_commit(self, moment: float) -> None:
        self._last_commit = moment
        self._series.last_commit.labels(pipeline=self.pipeline, table=self.table).set(moment)

    def record_batch(self, batch: CommittedBatch, partition_lag: Mapping[str, int] | None = None) -> None:
        """Count one batch: rows, records, bad records, values kept as JSON text, commit latency
        and retries, and the source lag after it."""
        s, labels = self._series, {"pipeline": self.pipeline, "table": self.table}
        s.records.labels(**labels).inc(batch.records_in)
        s.bad.labels(**labels).inc(batch.bad_records)
        s.nested_as_text.labels(**labels).inc(batch.nested_as_text)
        s.batches.labels(**labels, outcome="committed" if batch.committed else "noop").inc()
        s.commit_retries.labels(**labels).inc(max(batch.commit_attempts - 1, 0))
        if batch.committed:
            s.rows.labels(**labels).inc(batch.rows_written)
            s.commit.labels(**labels).observe(batch.commit_seconds)
            self._set_last_commit(time.time())
        if partition_lag is not None:
            self.record_lag(partition_lag)

    def record_path(self, batch: RanBatch) -> None:
        """Count how one batch ran: its path and fallback, an overlapped commit, records read as columns."""
        s, labels = self._series, {"pipeline": self.pipeline, "table": self.table}
        s.paths.labels(**labels, path=str(batch.path), fallback=str(batch.fallback or "none")).inc()
        if batch.overlapped:
            s.overlapped.labels(**labels).inc()
        s.as_columns.labels(**labels).inc(batch.records_as_columns)

    def record_bad(self, count: int) -> None:
        """Count bad records that reached no table of the pipeline (a sync's unroutable ones)."""
        self._series.bad.labels(pipeline=self.pipeline, table=self.table).inc(count)

    def record_lag(self, partition_lag: Mapping[str, int]) -> None:
        """The source lag per partition (a partition no longer reported is dropped)."""
        gauge = self._series.lag
        for gone in self._lag_labels - set(partition_lag):
            gauge.remove(self.pipeline, self.source, gone)
        for partition, lag in partition_lag.items():
            gauge.labels(pipeline=self.pipeline, source=self.source, partition=partition).set(lag)
        self._lag_labels = set(partition_lag)

    def record_restart(self) -> None:
        """Count one restart of this pipeline's runner."""
        record_restart(self.pipeline)

    def record_maintenance(self, table: str | None = None) -> None:
        """Count one maintenance run (of `table`, the pipeline's own by default)."""
        self._series.maintenance.labels(pipeline=self.pipeline, table=table or self.table).inc()

    def count_maintenance(self, reports: list[Any]) -> Callable[[], None]:
        """Count what lands in `reports` (a runner's maintenance_runs list, which only grows):
        returns the function to call after a batch, which adds the new reports."""
        seen = len(reports)

        def update() -> None:
            nonlocal seen
            for report in reports[seen:]:
                self.record_maintenance(getattr(report, "table", None))
            seen = len(reports)

        return update


def pipeline_metrics(
    settings: MetricsConfig | None, *, pipeline: str, table: str, source: str
) -> PipelineMetrics | None:
    """The pipeline's metrics, served as `settings` say; None without a `metrics` block."""
    if settings is None:
        return None
    metrics = PipelineMetrics(pipeline, table, source=source)
    metrics.serve(settings.prometheus_host, settings.prometheus_port)
    return metrics


def scrape_lines(text: str) -> Iterator[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of each sample in a Prometheus text exposition (for tests and checks)."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            yield sample.name, dict(sample.labels), float(sample.value)
