"""Landing files as a batch source: each file under a folder is ingested exactly once.

Which files are read (the half-written-file rule):
- a file is a candidate when no component of its path below `path` starts with '.' or '_'
  (hidden files, `_temporary/`, `_SUCCESS`) and its name does not end with '.tmp'; with `glob`,
  its name must also match it (fnmatch, e.g. "*.json");
- a candidate waits until it is at least `min_age_seconds` old (modification time), so a writer
  still appending to it in place is not read half-way. Writers that write elsewhere (or under a
  hidden name) and rename into place need no waiting, but the rename must keep the name final;
- files are immutable once visible: a file rewritten after it was ingested is not read again.

Position (committed with every batch, bounded in size)::

    {"max_mtime_ms": 1714550400000, "files": {"2024/05/01/a.json": 1714550399000, ...}}

`max_mtime_ms` is the newest modification time ingested so far; `files` lists the ingested files
(relative to `path`) whose modification time is within `late_window_seconds` of it, so the
position holds only the files landing within one window. A file older than that horizon counts
as done whether it was ingested or not: one that shows up more than `late_window_seconds` after
newer files were ingested, keeping its older modification time (a slow rename into place), is not
read (raise the window if renames can be that slow), but never silently: a local file whose inode
change time is after the previous plan's listing (`listed_at_ms` in the position) is reported as
data loss (the pipeline's `on_data_loss`: stop, or a dead-letter row naming the file).

Example::

    source = FileSource(FileSourceConfig(path="landing/ads", format="json"))
    files, position = source.plan(last_position, max_files=100)
    df = source.read(spark, files)   # value, source_file, line
"""

from __future__ import annotations

import fnmatch
import logging
import os
import posixpath
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, get_args

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from icetide.config.values import reject_unknown_keys
from icetide.errors import ConfigError, DataLossError, ExecutorSourceError, SourceError
from icetide.filesystems import filesystem_for
from icetide.spark.worker_imports import keep_zip_directories

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

FileFormat = Literal["json", "csv", "parquet"]
FORMATS: tuple[str, ...] = get_args(FileFormat)
# A line's bytes as they are: one that is not UTF-8 is the decoder's to refuse, never repaired here.
JSON_LINES_DDL = "value BINARY, source_file STRING, line BIGINT"
JSON_LINES_ARROW_SCHEMA = pa.schema(
    [pa.field("value", pa.binary()), pa.field("source_file", pa.string()), pa.field("line", pa.int64())]
)
_BOM = b"\xef\xbb\xbf"  # UTF-8's byte-order mark
LISTED_AT = "listed_at_ms"  # position key: when the plan that made it started listing
# File systems stamp change times from a coarse clock that can lag the wall clock by a tick.
CHANGE_TIME_SLACK_MS = 50
POSITION_COLUMNS = ["source_file", "line"]  # for decode's source_position: "landing/a.json:17"
# The order in which a batch's lines arrived, across its files: the file's place in the plan times
# this, plus the line. Line numbers start again in every file, so a line's number alone would put
# a change in a later file before one further down an earlier file (Debezium's `_source_order` ends
# with the arrival: what orders one key's changes whose source blocks tie).
LINES_PER_FILE = 10**12
ARRIVAL_COLUMN = "_file_arrival"
SOURCE_FILE_COLUMN = "source_file"
CHUNK_BYTES = 16 * 1024 * 1024
CSV_DEFAULT_OPTIONS = {"header": "true"}
# CSV is read a line per record, as UTF-8 bytes, and parsed exactly (decode/csv.py): the reader
# options that would read it otherwise, or repair what does not parse, cannot be honoured.
CSV_REFUSED_OPTIONS = {
    "multiline": "csv landing files are read one record per line",
    "linesep": "csv landing files are read one record per line ('\\n' or '\\r\\n')",
    "encoding": "csv landing files are read as UTF-8 (bytes that are not UTF-8 are dead letters)",
    "charset": "csv landing files are read as UTF-8 (bytes that are not UTF-8 are dead letters)",
    "mode": "a line that does not parse into the table's columns is always a dead letter",
    "columnnameofcorruptrecord": "a line that does not parse into the table's columns is always a dead letter",
}

FILE_SOURCE_KEYS = ("path", "format", "min_age_seconds", "late_window_seconds", "recursive", "glob", "options")


@dataclass(frozen=True)
class FileSourceConfig:
    """A landing folder and the format of its files; validated on construction.

    `format` "json" means JSON lines (one record per line). `options` are Spark reader options for
    csv and parquet (csv defaults to header=true; its lines are parsed with Spark's `from_csv`, so
    options that change how lines are read, or repair bad ones, are refused: CSV_REFUSED_OPTIONS).
    """

    path: str
    format: FileFormat
    min_age_seconds: float = 10.0
    late_window_seconds: float = 600.0
    recursive: bool = True
    glob: str | None = None
    options: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_fields({name: getattr(self, name) for name in FILE_SOURCE_KEYS}, "source.files")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, prefix: str = "source.files") -> FileSourceConfig:
        """Build from a config block (e.g. YAML `source.files`); errors name the offending key."""
        if not isinstance(d, Mapping):
            raise ConfigError(f"{prefix}: must be a mapping")
        reject_unknown_keys(d, FILE_SOURCE_KEYS, f"{prefix}.")
        options = d.get("options") or {}
        if not isinstance(options, Mapping):
            raise ConfigError(f"{prefix}.options: must be a mapping of reader options")
        values: dict[str, Any] = {
            "path": d.get("path"),
            "format": d.get("format"),
            "options": {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in options.items()},
        }
        for name in ("min_age_seconds", "late_window_seconds", "recursive", "glob"):
            values[name] = d.get(name, getattr(cls, name))
        _check_fields(values, prefix)
        return cls(**values)


def _check_fields(values: Mapping[str, Any], prefix: str) -> None:
    path = values.get("path")
    if path is None or (isinstance(path, str) and not path.strip()):
        raise ConfigError(f"{prefix}.path: required")
    if not isinstance(path, str):
        raise ConfigError(f"{prefix}.path: must be a string")
    if values.get("format") is None:
        raise ConfigError(f"{prefix}.format: required; one of {', '.join(FORMATS)}")
    if values["format"] not in FORMATS:
        raise ConfigError(f"{prefix}.format: {values['format']!r} is not one of {', '.join(FORMATS)}")
    for name in ("min_age_seconds", "late_window_seconds"):
        value = values[name]
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ConfigError(f"{prefix}.{name}: must be a number of seconds >= 0, got {value!r}")
    if not isinstance(values["recursive"], bool):
        raise ConfigError(f"{prefix}.recursive: must be true or false")
    if values["glob"] is not None and not isinstance(values["glob"], str):
        raise ConfigError(f"{prefix}.glob: must be a string")
    options = values["options"]
    if not isinstance(options, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in options.items()
    ):
        raise ConfigError(f"{prefix}.options: must map option names to strings")
    if values["format"] == "csv":
        for name in options:
            why = CSV_REFUSED_OPTIONS.get(name.lower())
            if why is not None:
                raise ConfigError(f"{prefix}.options.{name}: not supported for csv: {why}")


@dataclass(frozen=True)
class LandedFile:
    """One file under the source folder."""

    name: str  # relative to the source path, '/'-separated; what the position records
    path: str  # what readers open: an absolute local path or a URI
    mtime_ms: int
    size: int


def is_hidden(name: str) -> bool:
    """True for names the source never reads: a '.' or '_' path component, or a '.tmp' suffix."""
    return name.endswith(".tmp") or any(part.startswith((".", "_")) for part in name.split("/"))


def parse_position(position: Mapping[str, Any] | None) -> tuple[int, dict[str, int]]:
    """(max_mtime_ms, {name: mtime_ms}) of a committed position; ConfigError if malformed."""
    if position is None:
        return -1, {}
    try:
        newest = int(position["max_mtime_ms"])
        files = {str(name): int(mtime) for name, mtime in dict(position["files"]).items()}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(
            f"file position: expected {{'max_mtime_ms': int, 'files': {{name: mtime_ms}}}}, got {position!r}"
        ) from exc
    return newest, files


class FileSource:
    """Plans which landed files the next batch reads and reads them; each file exactly once."""

    def __init__(self, config: FileSourceConfig, *, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self._clock = clock
        self._fs, self._root = filesystem_for(config.path)
        self._scheme = config.path.split("://", 1)[0] if "://" in config.path else ""
        self._planned_sizes: dict[str, int] = {}  # the last plan's files, as listed: path -> bytes

    # -- driver side -------------------------------------------------------------------------

    def list_files(self) -> list[LandedFile]:
        """Every candidate file under the path (hidden and glob rules applied, age not), by (mtime, name)."""
        selector = pafs.FileSelector(self._root, recursive=self.config.recursive)
        try:
            infos = self._fs.get_file_info(selector)
        except FileNotFoundError as exc:
            raise SourceError(f"source.files.path: {self.config.path} does not exist") from exc
        except OSError as exc:
            raise SourceError(f"cannot list {self.config.path}: {exc}") from exc
        root = self._root.rstrip("/")
        found = []
        for info in infos:
            if info.type != pafs.FileType.File:
                continue
            name = posixpath.relpath(info.path, root) if root else info.path
            if is_hidden(name):
                continue
            if self.config.glob and not fnmatch.fnmatchcase(posixpath.basename(name), self.config.glob):
                continue
            mtime_ms = int(info.mtime_ns // 1_000_000) if info.mtime_ns is not None else 0
            remote = self._scheme and self._scheme != "file"
            path = self.config.path.rstrip("/") + "/" + name if remote else info.path
            found.append(LandedFile(name, path, mtime_ms, int(info.size or 0)))
        found.sort(key=lambda f: (f.mtime_ms, f.name))
        return found

    def plan(
        self, position: Mapping[str, Any] | None, max_files: int, *, late: list[LandedFile] | None = None
    ) -> tuple[list[str], dict[str, Any]]:
        """The next batch's files (paths for `read`) and the position after them.

        Takes up to `max_files` files not ingested yet, old enough (min_age_seconds) and not
        hidden, oldest modification time first (ties by name). Files planned here are never
        planned again from the returned position; files not planned stay eligible, except those
        older than the late window (see the module docstring). None starts a new pipeline that
        reads everything already there.

        A local file that arrived since the previous plan's listing (its inode change time says
        so) with a modification time older than the late window is never read: it raises
        DataLossError, or, when the caller passes a `late` list, is appended to it.
        """
        if max_files < 1:
            raise ConfigError(f"max_files: must be at least 1, got {max_files}")
        newest, done = parse_position(position)
        window_ms = int(self.config.late_window_seconds * 1000)
        ripe_before_ms = int((self._clock() - self.config.min_age_seconds) * 1000)
        # Wall-clock time, not self._clock: it is compared with the file system's change times.
        listed_at_ms = int(time.time() * 1000)
        previous_listing = position.get(LISTED_AT) if position is not None else None
        chosen: list[LandedFile] = []
        found_late: list[LandedFile] = []
        listed: dict[str, LandedFile] = {}
        for landed in self.list_files():
            listed[landed.name] = landed
            if landed.name in done:
                continue
            if position is not None and landed.mtime_ms < newest - window_ms:
                # Ingested long ago (and dropped from the position), or landed too late: a file
                # that arrived since the previous listing is the latter.
                arrived_ms = self._arrived_ms(landed)
                if previous_listing is not None and arrived_ms >= int(previous_listing) - CHANGE_TIME_SLACK_MS:
                    found_late.append(landed)
                else:
                    log.debug("%s: older than the late window; counted as done", landed.path)
                continue
            if landed.mtime_ms > ripe_before_ms:
                continue  # too young: possibly still being written; a later plan takes it
            chosen.append(landed)
            if len(chosen) == max_files:
                break
        if chosen:
            newest = max(newest, max(f.mtime_ms for f in chosen))
            done.update({f.name: f.mtime_ms for f in chosen})
        horizon = newest - window_ms
        # This plan's files stay in the position even when already below the horizon, so the next
        # plan cannot mistake one that arrived just before this listing for a late arrival.
        this_plan = {f.name for f in chosen} | {f.name for f in found_late}
        done.update({f.name: f.mtime_ms for f in found_late})

        # A file that changed within the slack of this listing would look newly arrived to the next
        # plan: it stays until its change time is safely older than a listing.
        def recent(name: str) -> bool:
            return name in listed and self._arrived_ms(listed[name]) >= listed_at_ms - CHANGE_TIME_SLACK_MS

        kept = {
            name: mtime for name, mtime in sorted(done.items()) if mtime >= horizon or name in this_plan or recent(name)
        }
        if found_late:
            if late is None:
                raise DataLossError(
                    f"file {found_late[0].path} landed after the late window (modified "
                    f"{(newest - found_late[0].mtime_ms) / 1000:.0f}s before the newest file ingested, "
                    f"late_window_seconds {self.config.late_window_seconds:g})"
                    + (f" and {len(found_late) - 1} more" if len(found_late) > 1 else "")
                    + "; it is not read; set on_data_loss: skip to record such files in the dead-letter table"
                )
            for landed in found_late:
                log.warning("%s: landed after the late window; recorded, not read", landed.path)
            late.extend(found_late)
        self._planned_sizes = {f.path: f.size for f in chosen}
        return [f.path for f in chosen], {"max_mtime_ms": newest, "files": kept, LISTED_AT: listed_at_ms}

    def planned_sizes(self, paths: list[str]) -> list[int]:
        """The sizes in bytes of the last plan's files, as its listing found them (0 if unknown)."""
        return [self._planned_sizes.get(path, 0) for path in paths]

    def held(self, position: Mapping[str, Any], paths: list[str]) -> list[str]:
        """The `paths` (as planned) of files that `position` records as ingested by name."""
        _, done = parse_position(position)
        return [path for path in paths if self._name_of(path) in done]

    def merge_positions(self, earlier: Mapping[str, Any], later: Mapping[str, Any]) -> dict[str, Any]:
        """`later`, still naming the files `earlier` named that are not below its late window's
        horizon (a dead-letter position read again after a crash: it never forgets a file whose
        bad lines it holds while a plan could still take that file)."""
        newest, files = parse_position(later)
        before_newest, before = parse_position(earlier)
        # `later`'s own horizon: files below it are never planned again from `later` (the table's
        # position once the batch commits); the newest of both is recorded.
        horizon = newest - int(self.config.late_window_seconds * 1000)
        newest = max(newest, before_newest)
        kept = {name: mtime for name, mtime in before.items() if mtime >= horizon}
        out = dict(later)
        out.update({"max_mtime_ms": newest, "files": dict(sorted({**kept, **files}.items()))})
        return out

    def _name_of(self, path: str) -> str:
        """A planned path's name relative to the source path, as positions record it."""
        if not (self._scheme and self._scheme != "file"):
            return posixpath.relpath(path, self._root) if self._root else path
        prefix = self.config.path.rstrip("/") + "/"
        return path[len(prefix) :] if path.startswith(prefix) else path

    def _arrived_ms(self, landed: LandedFile) -> int:
        """When the file appeared here: its inode change time (a rename into place sets it), for
        local files; 0 where the file system has none (object stores: an object's mtime is its
        upload time, so it cannot arrive with an old one)."""
        if self._scheme and self._scheme != "file":
            return 0
        try:
            return int(os.stat(landed.path).st_ctime_ns // 1_000_000)
        except OSError:
            return 0

    # -- executor side -----------------------------------------------------------------------

    def read(self, spark: SparkSession, files: list[str], *, schema: StructType | None = None) -> DataFrame:
        """A lazy DataFrame of the records in `files` (paths as returned by `plan`).

        json and csv: one row per non-blank line: `value` (the line's bytes, kept as they are: a
        line that is not UTF-8 is a dead letter, issue 49), `source_file` (the path) and `line`
        (1-based line number in the file), one Spark partition per file, in line order; csv
        without its header line (option `header`, true unless set) and its comment lines (option
        `comment`), for decode/csv.py to parse against the table's schema. parquet: Spark's reader
        with `options` and `schema` (if given), typed columns plus `source_file`. Every action
        reads the files again.
        """
        if self.config.format in ("json", "csv"):
            if not files:
                return spark.createDataFrame([], JSON_LINES_DDL)
            frame = spark.createDataFrame(
                spark.sparkContext.parallelize([(f,) for f in files], len(files)), "path STRING"
            )
            if self.config.format == "json":
                return frame.mapInArrow(read_json_lines_task, JSON_LINES_DDL)
            return frame.mapInArrow(partial(read_csv_lines_task, **self._csv_skips()), JSON_LINES_DDL)
        return self._read_with_spark(spark, files, schema)

    def _csv_skips(self) -> dict[str, Any]:
        """The lines csv's reader options say are no records: a header line, comment lines."""
        options = {k.lower(): v for k, v in {**CSV_DEFAULT_OPTIONS, **self.config.options}.items()}
        return {"header": options["header"].lower() == "true", "comment": options.get("comment") or None}

    def _read_with_spark(self, spark: SparkSession, files: list[str], schema: StructType | None) -> DataFrame:
        from pyspark.sql import functions as F
        from pyspark.sql import types as T

        if not files:
            fields = list(schema.fields) if schema is not None else []
            empty = T.StructType([*fields, T.StructField(SOURCE_FILE_COLUMN, T.StringType())])
            return spark.createDataFrame([], empty)
        reader = spark.read.format(self.config.format).options(**self.config.options)
        if schema is not None:
            reader = reader.schema(schema)
        paths = [f if "://" in f else "file://" + f for f in files]
        # Spark expands glob characters in paths; escaped, Hadoop's glob matches the name literally.
        frame = reader.load([re.sub(r"([\\*?\[\]{}])", r"\\\1", p) for p in paths])
        # Spark reports the file as a URI ("file:/a%20b.csv"); give back the path `plan` returned.
        # '+' is legal (unescaped) in those URIs but url_decode would read it as a space.
        uri = F.col("_metadata.file_path")
        if not self._scheme or self._scheme == "file":
            uri = F.regexp_replace(uri, "^file:(//)?", "")
        decoded = F.expr("url_decode(replace(_icetide_uri, '+', '%2B'))")
        return frame.withColumn("_icetide_uri", uri).withColumn(SOURCE_FILE_COLUMN, decoded).drop("_icetide_uri")


def read_json_lines_task(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: the lines of every file (rows of "path STRING") in this Spark partition."""
    keep_zip_directories()
    for batch in batches:
        for path in batch.column("path").to_pylist():
            try:
                yield from json_lines(path)
            except OSError as exc:
                raise ExecutorSourceError(f"{path}: cannot read: {exc}") from exc


def read_csv_lines_task(
    batches: Iterable[pa.RecordBatch], *, header: bool, comment: str | None
) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: the record lines of every csv file in this Spark partition: as
    `read_json_lines_task`, without each file's first line when `header` (the first non-blank
    line that is no comment, as Spark's reader finds it) and lines starting with `comment`."""
    keep_zip_directories()
    marker = comment.encode() if comment else None
    for batch in batches:
        for path in batch.column("path").to_pylist():
            skip_header = header
            try:
                for lines in json_lines(path):
                    if marker is not None:
                        lines = lines.filter(pc.invert(pc.starts_with(lines.column("value").cast(pa.binary()), marker)))
                    if skip_header and lines.num_rows:
                        lines, skip_header = lines.slice(1), False
                    if lines.num_rows:
                        yield lines
            except OSError as exc:
                raise ExecutorSourceError(f"{path}: cannot read: {exc}") from exc


def json_lines(path: str, *, chunk_bytes: int = CHUNK_BYTES) -> Iterator[pa.RecordBatch]:
    """The non-blank lines of one file as (value, source_file, line) batches, in order.

    Lines end at '\\n' ('\\r\\n' too); a last line without a newline counts; a UTF-8 byte-order mark
    is dropped; line numbers are 1-based and count blank lines.
    """
    fs, inner = filesystem_for(path)
    first_line = 1
    carry = b""
    with fs.open_input_stream(inner) as stream:
        while True:
            chunk = stream.read(chunk_bytes)
            if not chunk:
                break
            data = carry + chunk if carry else chunk
            cut = data.rfind(b"\n")
            if cut < 0:
                carry = data
                continue
            carry = data[cut + 1 :]
            batch = _lines_batch(path, data[:cut], first_line)
            first_line += data.count(b"\n", 0, cut) + 1
            if batch.num_rows:
                yield batch
    if carry:
        batch = _lines_batch(path, carry, first_line)
        if batch.num_rows:
            yield batch


def _lines_batch(path: str, data: bytes, first_line: int) -> pa.RecordBatch:
    """The non-blank lines of `data`, as bytes: those that are not UTF-8 kept as they are."""
    if first_line == 1 and data.startswith(_BOM):
        data = data[len(_BOM) :]
    try:
        text, exact = data.decode("utf-8"), True
    except UnicodeDecodeError:
        # This text only finds the blank lines: U+FFFD is no space, and no invalid byte hides a
        # line end ("\r" and "\n" are never part of a multibyte sequence).
        text, exact = data.decode("utf-8", errors="replace"), False
    texts = pc.utf8_rtrim(pa.array(text.split("\n"), pa.string()), characters="\r")
    if exact:
        values = texts.cast(pa.binary())
    else:
        values = pa.array([line.rstrip(b"\r") for line in data.split(b"\n")], pa.binary())
    keep = pc.not_equal(pc.utf8_length(pc.utf8_trim_whitespace(texts)), 0)
    lines = pa.array(np.arange(first_line, first_line + len(values), dtype=np.int64))
    values, lines = pc.filter(values, keep), pc.filter(lines, keep)
    return pa.RecordBatch.from_arrays(
        [values, pa.array([path] * len(values), pa.string()), lines],
        schema=JSON_LINES_ARROW_SCHEMA,
    )
