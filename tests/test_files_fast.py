"""Landing JSON-lines files on the fast path (pipeline/json_fast.py): each task reads whole files
line by line, as the Spark path does (sources/files.py `json_lines`), decodes, and writes.

Every table is checked against the reference model and against the same folder written by the
Spark path (`fast_path: off`): rows, dead letters (payload, error, "file:line" position) and
record counts must be equal. The files are JSON lines as tests/test_runner_files.py lands them,
plus the shapes real writers leave: a UTF-8 byte-order mark and CRLF line ends (Windows tools,
e.g. PowerShell's `Out-File -Encoding utf8` before 6.0), a last line without a newline, blank
lines, and bytes that are not UTF-8 (a Latin-1 export).
"""

from __future__ import annotations

import csv
import json
import os
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from icetide.config.pipeline import PipelineConfig
from icetide.errors import SourceError, is_transient
from icetide.executor.task_shares import split_files
from icetide.ops.prometheus import scrape_lines
from icetide.pipeline.table_runner import Runner, RunSummary
from icetide.table.iceberg import load_table
from tests.model import ReferenceModel, table_rows
from tests.test_runner_files import COLUMNS, KEY, expected, land_files, pipeline_doc

ODD_FILES = {
    # name -> bytes: what writers other than Python's json.dumps leave in a landing folder
    "odd-bom-crlf.json": (
        "\ufeff"
        + '{"ad_id": "bom", "event_time": "2026-01-01T01:00:00", "clicks": 1, "seq": 9001}\r\n'
        + "\r\n"
        + '{"ad_id": "crlf", "event_time": "2026-01-01T02:00:00", "clicks": 2, "seq": 9002}\r\n'
    ).encode(),
    "odd-no-final-newline.json": (
        b'\n\n{"ad_id": "last", "event_time": "2026-01-01T03:00:00", "clicks": 3, "seq": 9003}'
    ),
    "odd-latin1.json": (
        b'{"ad_id": "caf\xe9", "event_time": "2026-01-01T01:00:00", "clicks": 4, "seq": 9004}\n'
        b'{"ad_id": "ok", "event_time": "2026-01-01T01:00:00", "clicks": 5, "seq": 9005}\n'
        # the Latin-1 byte in a value (of a member the table lacks) and in a field name
        b'{"ad_id": "v", "event_time": "2026-01-01T01:00:00", "clicks": 6, "seq": 9006, "note": "na\xefve"}\n'
        b'{"ad_id": "n", "event_time": "2026-01-01T01:00:00", "cl\xe9cks": 7, "seq": 9007}\n'
    ),
}


def land_odd_files(landing: Path) -> list[str]:
    """The ODD_FILES, renamed into place with the newest modification times; their lines, bytes
    that are not UTF-8 kept as surrogate escapes (`utf8_lines` leaves those lines out)."""
    lines = []
    for n, (name, data) in enumerate(sorted(ODD_FILES.items())):
        tmp = landing / f".{name}"
        tmp.write_bytes(data)
        os.utime(tmp, (1_767_300_000 + n, 1_767_300_000 + n))
        os.replace(tmp, landing / name)
        text = data.decode("utf-8", errors="surrogateescape").removeprefix("\ufeff")
        lines += [line.rstrip("\r") for line in text.split("\n") if line.strip()]
    return lines


def utf8_lines(lines: list[str]) -> list[str]:
    """The lines the model reads: one whose bytes are not UTF-8 is a dead letter on both paths."""
    return [line for line in lines if not any("\udc80" <= c <= "\udcff" for c in line)]


def run(spark: Any, doc: dict[str, Any]) -> tuple[Runner, RunSummary]:
    runner = Runner(PipelineConfig.from_dict(doc), spark)
    return runner, runner.run(once=True, handle_signals=False)


def every_row(spark: Any, table: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in spark.table(table).select(*COLUMNS).collect())


def dead_letters(spark: Any, table: str) -> list[Any]:
    return spark.sql(f"SELECT source_position, payload, error FROM {table} ORDER BY source_position").collect()


@pytest.mark.parametrize("mode", ["upsert", "append"])
def test_landing_files_on_the_fast_path_equal_the_model_and_the_spark_path(
    spark: Any, tmp_path: Path, mode: str
) -> None:
    landing = tmp_path / "landing"
    files, _ = land_files(landing, 7, seed=23)
    if mode == "append":  # appends take INSERTs: a delete sends its batch to the Spark path (below)
        for n, path in enumerate(sorted(landing.glob("part-*.json"))[:-1]):
            files[n] = [line for line in files[n] if '"_op"' not in line]
            path.write_text("".join(line + "\n" for line in files[n]))
    files.append(land_odd_files(landing))

    def doc(name: str, **extra: Any) -> dict[str, Any]:
        d = pipeline_doc(f"{name}_{mode}", landing)
        d["table"]["name"] = f"lake.filesfast.{name}_{mode}"
        d["dead_letter"] = f"lake.filesfast.{name}_{mode}_dead_letter"
        d["mode"] = mode
        return {**d, **extra}

    fast, fast_run = run(spark, doc("fast"))
    _, slow_run = run(spark, doc("slow", fast_path="off"))
    assert len(fast_run.batches) >= 4
    fast_paths = [(b.path, b.fallback, b.fallback_detail) for b in fast_run.batches]
    if mode == "upsert":
        assert set(fast_paths) == {("json_fast", None, None)}
        assert fast.sink.last_plan is None  # no batch went through the sink
    else:  # the last part- file still carries deletes
        changes = ("spark", "change_ops", "records carry _op changes")
        assert fast_paths.count(changes) == 1
        assert set(fast_paths) == {("json_fast", None, None), changes}
    assert {(b.path, b.fallback) for b in slow_run.batches} == {("spark", "fast_path_off")}
    records = sum(len(lines) for lines in files)
    assert sum(b.records_in for b in fast_run.batches) == sum(b.records_in for b in slow_run.batches) == records

    if mode == "upsert":
        fast_rows = table_rows(spark, f"lake.filesfast.fast_{mode}", COLUMNS, KEY)
        model = expected([utf8_lines(lines) for lines in files])
        assert fast_rows == table_rows(spark, f"lake.filesfast.slow_{mode}", COLUMNS, KEY) == model
    else:  # every good record is a row
        fast_rows = {r: r for r in every_row(spark, f"lake.filesfast.fast_{mode}")}
        assert every_row(spark, f"lake.filesfast.fast_{mode}") == every_row(spark, f"lake.filesfast.slow_{mode}")
        # The odd files' good records are rows (a DELETE in the last part- file removes its key).
        assert sorted(r[3] for r in fast_rows.values() if r[3] > 9000) == [9001, 9002, 9003, 9005]
    fast_dead = dead_letters(spark, f"lake.filesfast.fast_{mode}_dead_letter")
    assert fast_dead == dead_letters(spark, f"lake.filesfast.slow_{mode}_dead_letter")
    # Each Latin-1 line (a byte in the key column, in a value, in a field name) is one dead letter
    # on both paths, its payload with U+FFFD, never a row (issue 49).
    assert not any(str(key[0]) in ("caf\ufffd", "v", "n") for key in fast_rows)
    latin1 = [
        (r.source_position.rpartition("/")[2], r.payload, r.error) for r in fast_dead if "latin1" in r.source_position
    ]
    odd = ODD_FILES["odd-latin1.json"].decode("utf-8", "replace").splitlines()
    assert latin1 == [
        ("odd-latin1.json:1", odd[0], "payload is not valid UTF-8 at byte 14, in field ad_id"),
        ("odd-latin1.json:3", odd[2], "payload is not valid UTF-8 at byte 89, in field note"),
        ("odd-latin1.json:4", odd[3], "payload is not valid UTF-8 at byte 55, in the name of field cl\ufffdcks"),
    ]
    assert {row.source_position.split(":")[0] for row in fast_dead} <= {str(p) for p in landing.iterdir()}


def test_a_landing_folder_resumes_on_the_fast_path_after_the_spark_path(spark: Any, tmp_path: Path) -> None:
    """A pipeline that ran with `fast_path: off` and is started again with it on reads only the
    files landed since, and the table equals the model of every file. The pipeline's state on the
    table (what `icetide status TABLE --json` lists) says how its last batch ran."""
    from icetide.maintenance.health import table_health

    def last_ran() -> tuple[str | None, str | None]:
        [state] = json.loads(table_health(spark, "lake.filesfast.resume").to_json())["pipelines"]
        return state["batch_path"], state["fallback"]

    landing = tmp_path / "landing"
    first, _ = land_files(landing, 3, seed=5)
    doc = pipeline_doc("files_resume", landing)
    doc["table"]["name"] = "lake.filesfast.resume"
    doc["dead_letter"] = "lake.filesfast.resume_dead_letter"
    _, before = run(spark, {**doc, "fast_path": "off"})
    assert last_ran() == ("spark", "fast_path_off")
    more, _ = land_files(landing, 3, seed=6, first=3)
    _, after = run(spark, doc)
    assert last_ran() == ("json_fast", None)
    assert {(b.path, b.fallback) for b in before.batches} == {("spark", "fast_path_off")}
    assert {(b.path, b.fallback) for b in after.batches} == {("json_fast", None)}
    assert sum(b.records_in for b in after.batches) == sum(len(lines) for lines in more)
    assert table_rows(spark, "lake.filesfast.resume", COLUMNS, KEY) == expected(first + more)


# Issue 49: an object or array in a STRING column (a key column too); the lines are written here.
NESTED_LINES = [
    {"ad_id": "a", "event_time": "2026-01-01T01:00:00", "clicks": 1, "seq": 1, "note": "plain"},
    {"ad_id": "b", "event_time": "2026-01-01T01:00:00", "clicks": 2, "seq": 2, "note": {"nested": True}},
    {"ad_id": "c", "event_time": "2026-01-01T02:00:00", "clicks": 3, "seq": 3, "note": ["x", 2]},
    {"ad_id": {"k": 1}, "event_time": "2026-01-01T02:00:00", "clicks": 4, "seq": 4},
    {"ad_id": "d", "event_time": "2026-01-01T03:00:00", "clicks": 5, "seq": 5, "note": '{"looks": "like JSON"}'},
]
NESTED_ERRORS = {  # line -> the dead letter's error, without json: {nested_as_text: true}
    2: "column note: object '{\"nested\":true}' is not a STRING",
    3: "column note: array '[\"x\",2]' is not a STRING",
    4: "column ad_id: object '{\"k\":1}' is not a STRING",
}


def _as_text(value: Any) -> Any:
    """An object or array as the JSON text Spark's reader keeps (compact), anything else as it is."""
    return json.dumps(value, separators=(",", ":")) if isinstance(value, dict | list) else value


def test_an_object_in_a_string_column_is_a_dead_letter_on_both_paths_or_its_text_when_asked(
    spark: Any, tmp_path: Path
) -> None:
    """A landing file with objects and arrays in STRING columns: each is one dead letter naming
    the column on the fast path and on the Spark path alike, never a row; with `json:
    {nested_as_text: true}` each lands as its JSON text, counted in the metrics line and in
    Prometheus. The tables are compared with the model, the dead letters one by one."""
    landing = tmp_path / "landing"
    landing.mkdir()
    path = landing / "nested.json"
    path.write_text("".join(json.dumps(line) + "\n" for line in NESTED_LINES))
    columns = [*COLUMNS, "note"]

    def model(lines: list[dict[str, Any]]) -> dict[Any, Any]:
        m = ReferenceModel(KEY, columns, "seq")
        rows = [{k: _as_text(v) for k, v in line.items()} for line in lines]
        m.apply(1, [{**r, "event_time": datetime.fromisoformat(r["event_time"])} for r in rows])
        return m.rows

    def doc(name: str, **extra: Any) -> dict[str, Any]:
        d = pipeline_doc(f"nested_{name}", landing)
        d["table"]["name"] = f"lake.filesfast.nested_{name}"
        d["table"]["schema"] += ", note STRING"
        d["dead_letter"] = f"lake.filesfast.nested_{name}_dead_letter"
        return {**d, **extra}

    good = [line for n, line in enumerate(NESTED_LINES, 1) if n not in NESTED_ERRORS]
    expected_dead = [(f"{path}:{n}", json.dumps(NESTED_LINES[n - 1]), e) for n, e in NESTED_ERRORS.items()]
    for name, extra in (("fast", {}), ("spark", {"fast_path": "off"})):
        _, summary = run(spark, doc(name, **extra))
        expected = ("json_fast", None) if name == "fast" else ("spark", "fast_path_off")
        assert [(b.path, b.fallback) for b in summary.batches] == [expected]
        assert [b.nested_as_text for b in summary.batches] == [0]
        assert table_rows(spark, f"lake.filesfast.nested_{name}", columns, KEY) == model(good)
        dead = dead_letters(spark, f"lake.filesfast.nested_{name}_dead_letter")
        assert [(r.source_position, r.payload, r.error) for r in dead] == expected_dead

    for name, extra in (("fast_text", {}), ("spark_text", {"fast_path": "off"})):
        as_text = {"json": {"nested_as_text": True}, "metrics": {"prometheus_port": 0}}
        runner, summary = run(spark, doc(name, **extra, **as_text))
        assert [b.nested_as_text for b in summary.batches] == [len(NESTED_ERRORS)]
        assert [b.bad_records for b in summary.batches] == [0]
        assert table_rows(spark, f"lake.filesfast.nested_{name}", columns, KEY) == model(NESTED_LINES)
        assert spark.table(f"lake.filesfast.nested_{name}_dead_letter").count() == 0
        assert runner.prometheus is not None and runner.prometheus.port
        scraped = urllib.request.urlopen(f"http://127.0.0.1:{runner.prometheus.port}/metrics", timeout=10)
        series = {(n, tuple(sorted(labels.items()))): v for n, labels, v in scrape_lines(scraped.read().decode())}
        labels = (("pipeline", f"nested_{name}"), ("table", f"lake.filesfast.nested_{name}"))
        assert series[("icetide_nested_as_text_total", labels)] == len(NESTED_ERRORS)


PRICE_LINES = [  # (the price's JSON text, its value or None for a dead letter)
    ("1.5", 1.5),
    ("1e400", None),
    ("-1e400", None),
    ('"1e400"', None),
    ("1" + "0" * 400, None),
    ("Infinity", float("inf")),
    ('"-Infinity"', float("-inf")),
    ("1.7976931348623157e308", 1.7976931348623157e308),
]


def test_a_number_beyond_a_double_is_a_dead_letter_on_both_paths_and_infinity_a_value(
    spark: Any, tmp_path: Path
) -> None:
    """A finite number beyond a double into a DOUBLE column is one dead letter naming the column
    (issue 49), never infinity, on the fast path and the Spark path alike; the literal and the
    text Infinity are values. The tables are compared with the model, the dead letters one by one."""
    landing = tmp_path / "landing"
    landing.mkdir()
    path = landing / "prices.json"
    lines = [
        f'{{"ad_id": "p{n}", "event_time": "2026-01-01T01:00:00", "clicks": 1, "seq": {n}, "price": {text}}}'
        for n, (text, _) in enumerate(PRICE_LINES, 1)
    ]
    path.write_text("".join(line + "\n" for line in lines))
    columns = [*COLUMNS, "price"]
    model = ReferenceModel(KEY, columns, "seq")
    at = datetime.fromisoformat("2026-01-01T01:00:00")
    rows = [
        {"ad_id": f"p{n}", "event_time": at, "clicks": 1, "seq": n, "price": value}
        for n, (_, value) in enumerate(PRICE_LINES, 1)
        if value is not None
    ]
    model.apply(1, rows)
    shown = {"1" + "0" * 400: "1" + "0" * 59 + "...", '"1e400"': "1e400"}
    expected_dead = [
        (f"{path}:{n}", line, f"column price: '{shown.get(text, text)}' is out of DOUBLE range")
        for n, ((text, value), line) in enumerate(zip(PRICE_LINES, lines, strict=True), 1)
        if value is None
    ]
    for name, extra in (("fast", {}), ("spark", {"fast_path": "off"})):
        doc = pipeline_doc(f"prices_{name}", landing)
        doc["table"]["name"] = f"lake.filesfast.prices_{name}"
        doc["table"]["schema"] += ", price DOUBLE"
        doc["dead_letter"] = f"lake.filesfast.prices_{name}_dead_letter"
        _, summary = run(spark, {**doc, **extra})
        expected = ("json_fast", None) if name == "fast" else ("spark", "fast_path_off")
        assert [(b.path, b.fallback) for b in summary.batches] == [expected]
        assert [b.bad_records for b in summary.batches] == [len(expected_dead)]
        assert table_rows(spark, f"lake.filesfast.prices_{name}", columns, KEY) == model.rows
        dead = dead_letters(spark, f"lake.filesfast.prices_{name}_dead_letter")
        assert [(r.source_position, r.payload, r.error) for r in dead] == expected_dead


def test_files_are_cut_into_tasks_by_size_in_order() -> None:
    files = [f"f{i}" for i in range(6)]
    assert split_files(files, [10, 10, 10, 10, 10, 10], 3) == [["f0", "f1"], ["f2", "f3"], ["f4", "f5"]]
    assert split_files(files, [50, 1, 1, 1, 1, 1], 2) == [["f0"], ["f1", "f2", "f3", "f4", "f5"]]
    assert split_files(files, [1] * 6, 1) == [files]
    assert split_files(files[:2], [0, 0], 4) == [["f0", "f1"]]  # no size known: one task
    groups = split_files(files, [3, 9, 2, 7, 1, 8], 4)
    assert [f for g in groups for f in g] == files and len(groups) <= 4


CSV_FILES = {
    # name -> bytes, and per line number: None for a row, else its dead letter's error
    "a.csv": (
        b"ad_id,event_time,clicks,seq,price\n"
        b"ad1,2026-01-01T01:00:00,3,1,1.5\n"
        b"ad2,2026-01-01T01:00:00,many,2,1.5\n"
        b"ad3,2026-01-01T01:00:00,4,3\n"
        b"caf\xe9,2026-01-01T01:00:00,5,4,1.5\n"
        b"\n"
        b"ad1,2026-01-01T01:00:00,7,5,2.5\n"
        b"ad4,2026-01-01T02:00:00,,6,\n"
        b"ad5,2026-01-01T02:00:00,1,7,1.5,extra\n"
        b'"ad6,quoted",2026-01-01T02:00:00,2,8,1.5\n'
        b"ad7,yesterday,1,9,1.5\n"
        b"ad8,2026-01-01T03:00:00,1,99999999999999999999,1.5\n"
        b",2026-01-01T03:00:00,1,13,1.5\n"
        b"ad11,2026-01-01T03:00:00,1,14,1e400\n"
        b"ad12,2026-01-01T03:00:00,1,15,-Infinity\n"
        b"ad13,2026-01-01T03:00:00,1,16,Inf",
        {
            3: "column clicks: 'many' is not an INT",
            4: "csv: the line has 4 fields, the table has 5 columns",
            5: "payload is not valid UTF-8 at byte 3, in column ad_id",
            9: "csv: the line has 6 fields, the table has 5 columns",
            11: "column event_time: 'yesterday' is not a TIMESTAMP",
            12: "column seq: '99999999999999999999' is not a BIGINT",
            13: "key column ad_id is missing or null",
            14: "column price: '1e400' is out of DOUBLE range",
        },
    ),
    "b.csv": (  # its own header; CRLF line ends
        b"ad_id,event_time,clicks,seq,price\r\n"
        b"ad9,2026-01-01T03:00:00,2,10,0.5\r\n"
        b"ad9,2026-01-01T03:00:00,2\xff,11,0.5\r\n",
        {3: "payload is not valid UTF-8 at byte 25, in column clicks"},
    ),
}


def test_csv_files_are_read_exactly_each_bad_line_one_dead_letter(spark: Any, tmp_path: Path) -> None:
    """CSV landing files stay on the Spark path, parsed exactly (decode/csv_lines.py): a line
    whose bytes are not UTF-8, with a field its column's type does not hold, or with more or fewer
    fields than the table's columns is one dead letter naming the column (the byte offset for
    bad bytes) and counted in bad_records; never a row with U+FFFD or a null in its place; so is
    a null key and a number beyond a double (infinity where Spark's parser wrote it). The
    table is compared with the model, the dead letters one by one."""
    landing = tmp_path / "landing"
    landing.mkdir()
    columns = [*COLUMNS, "price"]
    model = ReferenceModel(KEY, columns, "seq")
    rows, expected_dead = [], []
    for n, (name, (data, errors)) in enumerate(CSV_FILES.items()):
        (landing / name).write_bytes(data)
        os.utime(landing / name, (1_767_300_000 + n, 1_767_300_000 + n))
        for number, raw in enumerate(data.split(b"\n")[1:], 2):
            line = raw.rstrip(b"\r")
            if number in errors:
                text = line.decode("utf-8", "replace")
                expected_dead.append((f"{landing / name}:{number}", text, errors[number]))
            elif line:
                ad, at, clicks, seq, price = next(csv.reader([line.decode()]))
                rows.append(
                    {
                        "ad_id": ad,
                        "event_time": datetime.fromisoformat(at),
                        "clicks": int(clicks) if clicks else None,
                        "seq": int(seq),
                        "price": float(price) if price else None,
                    }
                )
    model.apply(1, rows)
    doc = pipeline_doc("files_csv", landing)
    doc["source"]["files"]["format"] = "csv"
    doc["table"]["name"] = "lake.filesfast.csv"
    doc["table"]["schema"] += ", price DOUBLE"
    doc["dead_letter"] = "lake.filesfast.csv_dead_letter"
    _, summary = run(spark, doc)
    assert [(b.path, b.fallback, b.fallback_detail) for b in summary.batches] == [
        ("spark", "files_format", "source.files.format: csv")
    ]
    assert [b.bad_records for b in summary.batches] == [len(expected_dead)]
    assert table_rows(spark, "lake.filesfast.csv", columns, KEY) == model.rows
    dead = dead_letters(spark, "lake.filesfast.csv_dead_letter")
    assert [(r.source_position, r.payload, r.error) for r in dead] == sorted(expected_dead)


def test_a_file_gone_before_its_task_reads_it_fails_the_batch_naming_it(spark: Any, tmp_path: Path) -> None:
    """Nothing is committed and the error names the file: the run restarts and plans again."""
    landing = tmp_path / "landing"
    land_files(landing, 2, seed=8)
    doc = pipeline_doc("files_gone", landing)
    doc["table"]["name"] = "lake.filesfast.gone"
    doc["dead_letter"] = "lake.filesfast.gone_dead_letter"
    runner = Runner(PipelineConfig.from_dict(doc), spark)
    plan = runner.source.plan(None)
    gone = str(plan.items[0])
    os.remove(gone)
    assert runner.fast is not None
    with pytest.raises(SourceError) as failed:
        runner.fast.write(1, list(plan.items))
    message = str(failed.value)
    assert gone in message and "\n" not in message and "Traceback" not in message
    assert is_transient(failed.value)  # supervision restarts the run, which plans again
    assert runner.sink.last_committed() is None
    location = str(load_table(spark, "lake.filesfast.gone").location()).removeprefix("file:")
    assert not list(Path(location).rglob("*.parquet")), "the failed batch's files are deleted"


@pytest.mark.parametrize("mode", ["append", "upsert"])
def test_a_batch_of_files_is_shared_by_size_and_upserts_keep_one_task(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """Appends: the plan's files, whole and in order, shared among tasks by the sizes the plan's
    listing found. Upserts: one task (files seldom keep a key's changes in one file). The
    threshold for a second task is lowered so that small files get one."""
    from icetide.pipeline import json_fast

    monkeypatch.setattr(json_fast, "MIN_TASK_RECORDS", 1)
    landing = tmp_path / "landing"
    land_files(landing, 4, seed=3)
    doc = pipeline_doc(f"files_tasks_{mode}", landing)
    doc["table"]["name"] = f"lake.filesfast.tasks_{mode}"
    doc["dead_letter"] = f"lake.filesfast.tasks_{mode}_dead_letter"
    doc["mode"] = mode
    doc["trigger"]["max_files"] = 4
    runner = Runner(PipelineConfig.from_dict(doc), spark)
    assert runner.fast is not None
    plan = runner.source.plan(None)
    groups = runner.fast.groups(list(plan.items))
    assert [f for g in groups for f in g] == plan.items
    assert len(groups) == (1 if mode == "upsert" else spark.sparkContext.defaultParallelism)
