"""FileSource: each landed file planned exactly once, half-written files left alone, typed reads."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from icetide.errors import ConfigError, SourceError
from icetide.sources.files import CHANGE_TIME_SLACK_MS, FileSource, FileSourceConfig, json_lines

NOW = 1_800_000_000.0  # the tests' clock, in epoch seconds


def land(root: Path, name: str, text: str | bytes, age_seconds: float) -> Path:
    """Write a file and set its modification time to `age_seconds` before NOW."""
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    os.utime(path, (NOW - age_seconds, NOW - age_seconds))
    return path


class Clock:
    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def names(root: Path, files: list[str]) -> list[str]:
    return [str(Path(f).relative_to(root)) for f in files]


def test_config_from_dict_names_the_bad_key() -> None:
    config = FileSourceConfig.from_dict({"path": "in", "format": "csv", "options": {"sep": ";", "header": False}})
    assert config.options == {"sep": ";", "header": "false"} and config.min_age_seconds == 10.0
    for block, message in [
        ({"format": "json"}, r"source\.files\.path: required"),
        ({"path": "in"}, r"source\.files\.format: required"),
        ({"path": "in", "format": "xml"}, r"source\.files\.format: 'xml' is not one of json, csv, parquet"),
        ({"path": "in", "format": "json", "min_age_seconds": -1}, r"source\.files\.min_age_seconds"),
        ({"path": "in", "format": "json", "recursive": "yes"}, r"source\.files\.recursive"),
        (
            {"path": "in", "format": "json", "pattern": "*"},
            r"source\.files\.pattern: unknown key \(allowed: format, glob, .*path, recursive\)",
        ),
        (
            {"path": "in", "format": "csv", "options": {"multiLine": True}},
            r"source\.files\.options\.multiLine: not supported for csv: .* one record per line",
        ),
        (
            {"path": "in", "format": "csv", "options": {"encoding": "latin1"}},
            r"source\.files\.options\.encoding: not supported for csv: .* read as UTF-8",
        ),
        (
            {"path": "in", "format": "csv", "options": {"mode": "DROPMALFORMED"}},
            r"source\.files\.options\.mode: not supported for csv: .* always a dead letter",
        ),
    ]:
        with pytest.raises(ConfigError, match=message):
            FileSourceConfig.from_dict(block)


def test_each_file_is_planned_once_and_half_written_files_wait(tmp_path: Path) -> None:
    for i, name in enumerate(["a.json", "b.json", "c.json", "sub/d.json"]):
        land(tmp_path, name, "{}\n", age_seconds=100 - 10 * i)
    for hidden in [".a.json", "_tmp/e.json", "sub/.part-0.json", "f.json.tmp", "_SUCCESS"]:
        land(tmp_path, hidden, "{}\n", age_seconds=200)
    land(tmp_path, "young.json", "{", age_seconds=3)  # still being written
    clock = Clock()
    source = FileSource(FileSourceConfig(path=str(tmp_path), format="json", min_age_seconds=10), clock=clock)

    files, position = source.plan(None, 2)
    assert names(tmp_path, files) == ["a.json", "b.json"]
    files, position = source.plan(position, 2)
    assert names(tmp_path, files) == ["c.json", "sub/d.json"]
    files, same = source.plan(position, 2)
    # Nothing new: the same position, but for the wall-clock time of its listing (may be 1 ms on).
    assert files == [] and {**same, "listed_at_ms": 0} == {**position, "listed_at_ms": 0}

    clock.now += 10  # young.json is now old enough; a new file lands meanwhile
    land(tmp_path, "late.json", "{}\n", age_seconds=-8)  # written 2 s before the new now
    files, position = source.plan(position, 5)
    assert names(tmp_path, files) == ["young.json"]
    clock.now += 10
    files, position = source.plan(position, 5)
    assert names(tmp_path, files) == ["late.json"]
    # a restart with a fresh object and the committed position plans nothing again
    restarted = FileSource(FileSourceConfig(path=str(tmp_path), format="json", min_age_seconds=10), clock=clock)
    assert restarted.plan(position, 5)[0] == []
    assert json.loads(json.dumps(position)) == position  # JSON-able, committed with every batch
    with pytest.raises(ConfigError, match="file position"):
        source.plan({"files": []}, 5)


def test_position_stays_bounded_and_late_files_inside_the_window_are_read(tmp_path: Path) -> None:
    for i in range(60):  # one file every 10 s over ten minutes
        land(tmp_path, f"f{i:02d}.json", "{}\n", age_seconds=700 - 10 * i)
    # Files that changed within the slack of a listing stay in the position until they are older
    # (else the next plan would take them for late arrivals); these landed a while ago.
    time.sleep(CHANGE_TIME_SLACK_MS / 1000 + 0.2)
    config = FileSourceConfig(path=str(tmp_path), format="json", min_age_seconds=0, late_window_seconds=60)
    source = FileSource(config, clock=Clock())
    position: dict[str, Any] | None = None
    planned: list[str] = []
    while True:
        files, position = source.plan(position, 7)
        if not files:
            break
        planned += names(tmp_path, files)
        assert position is not None and len(position["files"]) <= 7  # only the files within one window
    assert planned == [f"f{i:02d}.json" for i in range(60)]
    assert position is not None and position["max_mtime_ms"] == int((NOW - 110) * 1000)
    # renamed into place late, keeping an older modification time: inside the window it is read,
    # older than the window it is not read but reported as data loss (tests/test_late_files.py)
    land(tmp_path, "inside.json", "{}\n", age_seconds=150)
    land(tmp_path, "outside.json", "{}\n", age_seconds=200)
    late: list[Any] = []
    files, _ = source.plan(position, 10, late=late)
    assert names(tmp_path, files) == ["inside.json"]
    assert names(tmp_path, [f.path for f in late]) == ["outside.json"]


def test_missing_folder_is_a_source_error(tmp_path: Path) -> None:
    source = FileSource(FileSourceConfig(path=str(tmp_path / "nope"), format="json"))
    with pytest.raises(SourceError, match="does not exist"):
        source.plan(None, 1)


def test_json_lines_keep_their_text_and_line_numbers(tmp_path: Path, spark: Any) -> None:
    content = b'\xef\xbb\xbf{"a": 1}\n\n  \r\n{"a": 2}\r\n{"a": "\xc3\xa9"}\n{"a": "\xff"}\nnot json'
    path = land(tmp_path, "x.json", content, age_seconds=100)
    expected = [  # each line's bytes as they are: the decoder refuses one that is not UTF-8
        (b'{"a": 1}', 1),
        (b'{"a": 2}', 4),
        ('{"a": "é"}'.encode(), 5),
        (b'{"a": "\xff"}', 6),
        (b"not json", 7),
    ]
    for chunk_bytes in (3, 16, 1 << 20):  # lines split across reads are stitched back together
        got = [
            (v, n) for b in json_lines(str(path), chunk_bytes=chunk_bytes) for v, n in zip(*b.columns[::2], strict=True)
        ]
        assert [(v.as_py(), n.as_py()) for v, n in got] == expected
    land(tmp_path, "y.json", '{"b": 1}\n', age_seconds=90)
    source = FileSource(FileSourceConfig(path=str(tmp_path), format="json"), clock=Clock())
    files, _ = source.plan(None, 10)
    df = source.read(spark, files)
    assert df.columns == ["value", "source_file", "line"]
    rows = [(r.value, Path(r.source_file).name, r.line) for r in df.collect()]
    assert rows == [(v, "x.json", n) for v, n in expected] + [(b'{"b": 1}', "y.json", 1)]
    assert all(Path(r.source_file) in {tmp_path / "x.json", tmp_path / "y.json"} for r in df.collect())
    assert source.read(spark, []).count() == 0


def test_csv_lines_are_read_without_headers_and_parquet_is_typed_with_its_source_file(
    tmp_path: Path, spark: Any
) -> None:
    """csv: each file's lines as bytes, its header and comment lines left out, for decode/csv_lines.py
    to parse against the table's schema; parquet: Spark's reader, typed."""
    from pyspark.sql import types as T

    from icetide.decode.csv_lines import decode_csv

    odd = ["a b%20+c.csv", "x [1].csv"]  # spaces, escapes, '+' and glob characters survive
    land(tmp_path, odd[0], "id;name;score\n1;ann;1.5\n# a comment\n\n2;bob;2.5\n", age_seconds=100)
    land(tmp_path, odd[1], "\n# first a comment\nid;name;score\n3;cy;3.5\n", age_seconds=90)
    options = {"sep": ";", "comment": "#"}
    source = FileSource(FileSourceConfig(path=str(tmp_path), format="csv", options=options), clock=Clock())
    files, _ = source.plan(None, 10)
    df = source.read(spark, files)
    assert df.columns == ["value", "source_file", "line"]
    assert [(r.value, r.source_file, r.line) for r in df.collect()] == [
        (b"1;ann;1.5", files[0], 2),
        (b"2;bob;2.5", files[0], 5),
        (b"3;cy;3.5", files[1], 4),
    ]
    schema = T.StructType([T.StructField("id", T.LongType()), T.StructField("name", T.StringType())])
    schema.add("score", T.DoubleType())
    good, bad = decode_csv(df, "value", schema, ["id"], "append", ["source_file", "line"], options, keep=[])
    assert [(r.id, r.name, r.score) for r in good.collect()] == [(1, "ann", 1.5), (2, "bob", 2.5), (3, "cy", 3.5)]
    assert bad.count() == 0
    assert source.read(spark, []).count() == 0

    parquet_root = tmp_path / "pq"
    parquet_root.mkdir()
    pq.write_table(pa.table({"id": pa.array([7, 8], pa.int64()), "v": ["p", "q"]}), parquet_root / "part 1.parquet")
    os.utime(parquet_root / "part 1.parquet", (NOW - 100, NOW - 100))
    source = FileSource(FileSourceConfig(path=str(parquet_root), format="parquet"), clock=Clock())
    files, _ = source.plan(None, 10)
    rows = source.read(spark, files).collect()
    assert [(r.id, r.v, r.source_file) for r in rows] == [(7, "p", files[0]), (8, "q", files[0])]
