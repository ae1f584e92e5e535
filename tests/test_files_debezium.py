"""Debezium change events landed as JSON-lines files (`source: files`, `format: debezium`), as a
file sink of the JSON converter's messages leaves them: one message value per line, no key.

The first file is the real MySQL connector output in tests/data/debezium/flink_mysql_products_schema.jsonl
(Debezium 1.1.1's tutorial `products`: snapshot rows, updates, inserts, a delete; its source is in
tests/data/debezium/SOURCES.md), saved with a byte-order mark and CRLF line ends as Windows tools
write them. The later files are `ProductsStream` changes in that message's schema and source block
(updates, a key-moving update, deletes), with a line that is not JSON, two updates whose schema a
producer changed so that their values contradict it (a struct field holding text where int32 is
declared, a Decimal of scale 2 sent with three decimals), one whose key column holds text where
int32 is declared, one with a double beyond FLOAT's range for the FLOAT column `score`, and three
whose bytes are not UTF-8, in a value, in a field name and in the key column (issue 49: dead
letters naming the field, and the byte).

The same folder runs through two pipelines: the fast path (the sync fast path's task reading the
files, executor/sync_task.py) and the Spark path (`fast_path: off`). Both tables must equal the
reference model of the whole stream, and each other's dead letters (position "file:line", payload,
error) and record and dead-letter counts (`bad_records`, the metric), batch by batch, also after
more files land and the pipelines run again.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from icetide.config.pipeline import PipelineConfig
from icetide.pipeline.table_runner import Runner, RunSummary
from tests.debezium_messages import ProductsStream, apply_changes, lines

COLUMNS = ["id", "name", "description", "weight"]
NOT_JSON = "{this line is not json"


def land(landing: Path, name: str, text: str, *, n: int, bom: bool = False, crlf: bool = False) -> None:
    """One landing file, renamed into place with a modification time that orders it after the others."""
    landing.mkdir(parents=True, exist_ok=True)
    body = text.replace("\n", "\r\n") if crlf else text
    data = (b"\xef\xbb\xbf" if bom else b"") + body.encode("utf-8", "surrogateescape")  # \udcff: byte FF
    tmp = landing / f".{name}"
    tmp.write_bytes(data)
    os.utime(tmp, (1_767_300_000 + n, 1_767_300_000 + n))
    os.replace(tmp, landing / name)


def stream_files(stream: ProductsStream, rows: dict[int, dict[str, Any]], first: int) -> list[list[str]]:
    """Three files of changes to the rows the stream has made so far (`rows`, kept up to date)."""
    files: list[list[str]] = []
    for f in range(3):
        out = []
        # The first file's inserts are a run of one schema head long enough to be read as
        # columns (decode/debezium/event_runs.py MIN_RUN); the others' are read message by message.
        for i in range(first + 1000 * f, first + 1000 * f + (300 if f == 0 else 10)):
            after = {"id": i, "name": f"part {i}", "description": "made here", "weight": i / 4}
            out.append(stream.change("c", None, after).decode())
            rows[i] = after
        for i in sorted(rows)[f::4]:
            after = dict(rows[i], weight=rows[i]["weight"] + 1.5)
            out.append(stream.change("u", rows[i], after).decode())
            rows[i] = after
        if f > 0:  # (a run with a key-moving update is read message by message)
            moved = sorted(rows)[-1]
            after = dict(rows[moved], id=moved + 100_000)  # an update that changes the key
            out.append(stream.change("u", rows.pop(moved), after).decode())
            rows[after["id"]] = after
        gone = sorted(rows)[len(rows) // 2]
        out.append(stream.change("d", rows.pop(gone), None).decode())
        if f == 1:
            out.insert(3, NOT_JSON)
            out += declared_contradictions(stream, rows[sorted(rows)[0]])
        files.append(out)
    return files


# Errors of the updates `declared_contradictions` writes, by the field their schema changes.
DECLARED_ERRORS = {
    "description": "column description.x: text 'a' where the message's schema declares int32",
    "weight": "column weight: '1.234' has digits beyond the scale 2 its schema declares",
    "id": "column id: text '{id}' where the message's schema declares int32",  # the key column
    "score": "column score: '1.0E39' is out of FLOAT range",  # a finite double beyond FLOAT
}


def declared_contradictions(stream: ProductsStream, row: dict[str, Any]) -> list[str]:
    """Updates of `row` that are dead letters (issue 49), their schema changed as a producer
    might: `description` declared a struct whose int32 part holds text, `weight` a Decimal of scale
    2 sent as a number with three decimals (Spark's reading made a row of each: the struct's JSON
    text, the number rounded); the key as text, a double beyond FLOAT for `score` (Spark's reading:
    infinity), and bytes that are not UTF-8 in a value, in a field name and in the key column."""
    out = []
    for name, value, declared in (
        ("description", {"x": "a"}, {"type": "struct", "fields": [{"type": "int32", "optional": True, "field": "x"}]}),
        (
            "weight",
            1.234,
            {
                "type": "bytes",
                "name": "org.apache.kafka.connect.data.Decimal",
                "version": 1,
                "parameters": {"scale": "2"},
            },
        ),
    ):
        message = json.loads(stream.change("u", row, dict(row, **{name: value})))
        for part in message["schema"]["fields"]:
            if part["field"] in ("before", "after"):
                for f in part["fields"]:
                    if f["field"] == name:
                        f.update(declared, optional=True)
        message["payload"]["before"][name] = None
        out.append(json.dumps(message, separators=(",", ":")))
    # the key column's value as text where int32 is declared
    out.append(stream.change("u", row, dict(row, id=str(row["id"]))).decode())
    # a double beyond FLOAT's range into the FLOAT column `score`, a field its schema declares
    message = json.loads(stream.change("u", row, row))
    for part in message["schema"]["fields"]:
        if part["field"] in ("before", "after"):
            part["fields"].append({"type": "double", "optional": True, "field": "score"})
    message["payload"]["after"]["score"] = 1e39
    out.append(json.dumps(message, separators=(",", ":")))
    # and bytes that are not UTF-8 in a value and in a field name (written by `land` from the
    # escapes \udcff, \udcfe, \udcc3)
    text = stream.change("u", row, dict(row, name="badXY")).decode()
    out.append(text.replace('"badXY"', '"bad\udcff\udcfe"'))
    text = stream.change("u", row, row).decode()
    head, _, tail = text.rpartition('"weight":')  # after's
    out.append(head + '"wei\udcc3ght":' + tail)
    # and in the key column's value (\udcfd: byte FD)
    text = stream.change("u", row, dict(row, id="badID")).decode()
    out.append(text.replace('"badID"', '"1\udcfd"'))
    return out


def pipeline(name: str, landing: Path, fast_path: str) -> dict[str, Any]:
    return {
        "pipeline": name,
        "source": {"files": {"path": str(landing), "format": "json", "min_age_seconds": 0.001}},
        "format": "debezium",
        "table": {
            "name": f"lake.dbzfiles.{name}",
            # score: a FLOAT column only `declared_contradictions` sends a value for
            "schema": "id INT NOT NULL, name STRING, description STRING, weight DOUBLE, score FLOAT",
            "key": ["id"],
        },
        "mode": "upsert",
        "trigger": {"interval": "1s", "max_files": 2},
        "dead_letter": f"lake.dbzfiles.{name}_dead_letter",
        "fast_path": fast_path,
    }


def run(spark: Any, doc: dict[str, Any]) -> RunSummary:
    return Runner(PipelineConfig.from_dict(doc), spark).run(once=True, handle_signals=False)


def model_of(all_lines: list[str]) -> dict[int, tuple[Any, ...]]:
    model: dict[int, tuple[Any, ...]] = {}
    for line in all_lines:
        if line != NOT_JSON and _declared_error(line) is None:
            apply_changes(model, json.loads(line)["payload"])
    return model


def _declared_error(line: str) -> str | None:
    """The dead letter's error of a line `declared_contradictions` wrote, else None."""
    if line == NOT_JSON:
        return None
    if "\udcfd" in line:
        at = line.encode("utf-8", "surrogateescape").index(b"\xfd")
        return f"payload is not valid UTF-8 at byte {at}, in field payload.after.id"
    if "\udcff" in line:
        at = line.encode("utf-8", "surrogateescape").index(b"\xff")
        return f"payload is not valid UTF-8 at byte {at}, in field payload.after.name"
    if "\udcc3" in line:
        at = line.encode("utf-8", "surrogateescape").index(b"\xc3")
        return f"payload is not valid UTF-8 at byte {at}, in the name of field payload.after.wei\ufffdght"
    after = json.loads(line)["payload"]["after"] or {}
    if isinstance(after.get("id"), str):
        return DECLARED_ERRORS["id"].format(id=after["id"])
    if after.get("score") == 1e39:
        return DECLARED_ERRORS["score"]
    if isinstance(after.get("description"), dict):
        return DECLARED_ERRORS["description"]
    if after.get("weight") == 1.234:  # the stream's own weights are quarters
        return DECLARED_ERRORS["weight"]
    return None


def expected_dead_letters(landing: Path, landed_files: dict[str, list[str]]) -> list[tuple[str, str, str | None]]:
    """(position, payload, error) of every dead letter the landed files hold, in position order:
    the line that is not JSON (its error not given here), the updates that contradict their
    declared schema and the one whose bytes are not UTF-8 (its payload with U+FFFD)."""
    out = []
    for name, file_lines in landed_files.items():
        for n, line in enumerate(file_lines, start=1):
            error = _declared_error(line)
            if line == NOT_JSON or error is not None:
                payload = line.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
                out.append((f"{landing / name}:{n}", payload, error))
    return sorted(out)


def check_letters(dead: list[tuple[Any, ...]], expected: list[tuple[str, str, str | None]]) -> None:
    """The dead-letter table's (position, payload, error) rows are the expected ones, one by one
    (an expected error of None: the line that is not JSON, whose error is not checked here)."""
    assert [(d[0], d[1]) for d in dead] == [(p, payload) for p, payload, _ in expected]
    assert [d[2] for d, (_, _, e) in zip(dead, expected, strict=True) if e is not None] == [
        e for _, _, e in expected if e is not None
    ]


def table(spark: Any, name: str) -> dict[int, tuple[Any, ...]]:
    spark.catalog.refreshTable(name)
    return {r["id"]: (r["name"], r["description"], r["weight"]) for r in spark.table(name).select(*COLUMNS).collect()}


def dead_letters(spark: Any, name: str) -> list[tuple[Any, ...]]:
    spark.catalog.refreshTable(name)
    rows = spark.sql(f"SELECT source_position, payload, error FROM {name} ORDER BY source_position").collect()
    return [tuple(r) for r in rows]


@pytest.mark.guarantee
def test_debezium_files_on_the_fast_path_equal_the_model_and_the_spark_path(spark: Any, tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    real = lines("flink_mysql_products_schema")  # the connector's own messages, as stored
    land(landing, "part-000.json", "\n".join(real) + "\n", n=0, bom=True, crlf=True)
    stream = ProductsStream()
    rows: dict[int, dict[str, Any]] = {}  # what the real stream leaves, for the later changes' `before`
    for event in (json.loads(line)["payload"] for line in real):
        if event["op"] == "d":
            rows.pop(event["before"]["id"])
        else:
            rows[event["after"]["id"]] = event["after"]
    landed = list(real)
    landed_files: dict[str, list[str]] = {}
    for n, out in enumerate(stream_files(stream, rows, first=10_000), start=1):
        land(landing, f"part-{n:03d}.json", "\n".join(out) + "\n", n=n)
        landed += out
        landed_files[f"part-{n:03d}.json"] = out

    fast, spark_path = pipeline("fast", landing, "auto"), pipeline("spark", landing, "off")
    ran = {name: run(spark, doc) for name, doc in (("fast", fast), ("spark", spark_path))}
    model = model_of(landed)
    for name in ("fast", "spark"):
        assert table(spark, f"lake.dbzfiles.{name}") == model, name
    # A line that is not JSON is read as the Spark path's tasks read it (decode/debezium/message.py
    # `final`): the same dead letter, and its batch stays on the fast path; so are the two updates
    # that contradict their declared schema (the key column's too), the FLOAT overflow and the three
    # whose bytes are not UTF-8 (issue 49), each
    # counted in the batch's bad_records.
    paths = [(b.path, b.bad_records) for b in ran["fast"].batches]
    assert paths == [("debezium_fast", 0), ("debezium_fast", 8)], paths
    assert {(b.path, b.fallback) for b in ran["spark"].batches} == {("spark", "fast_path_off")}
    assert [b.records_in for b in ran["fast"].batches] == [b.records_in for b in ran["spark"].batches]
    assert [b.bad_records for b in ran["fast"].batches] == [b.bad_records for b in ran["spark"].batches]
    dead = dead_letters(spark, "lake.dbzfiles.fast_dead_letter")
    assert dead == dead_letters(spark, "lake.dbzfiles.spark_dead_letter")
    check_letters(dead, expected_dead_letters(landing, landed_files))
    assert rows_seen(ran["fast"]) == len(landed)

    # More files land; each pipeline goes on from its position, exactly once.
    more = stream_files(stream, rows, first=20_000)
    for n, out in enumerate(more, start=4):
        land(landing, f"part-{n:03d}.json", "\n".join(out) + "\n", n=n)
        landed += out
        landed_files[f"part-{n:03d}.json"] = out
    again = {name: run(spark, doc) for name, doc in (("fast", fast), ("spark", spark_path))}
    model = model_of(landed)
    for name in ("fast", "spark"):
        assert table(spark, f"lake.dbzfiles.{name}") == model, name
        assert again[name].batches[0].batch_id == ran[name].batches[-1].batch_id + 1
    paths = [(b.path, b.bad_records) for b in again["fast"].batches]
    assert paths == [("debezium_fast", 8), ("debezium_fast", 0)], paths
    assert [b.bad_records for b in again["fast"].batches] == [b.bad_records for b in again["spark"].batches]
    dead = dead_letters(spark, "lake.dbzfiles.fast_dead_letter")
    assert dead == dead_letters(spark, "lake.dbzfiles.spark_dead_letter")
    check_letters(dead, expected_dead_letters(landing, landed_files))
    assert sum(b.records_as_columns for b in ran["fast"].batches + again["fast"].batches) > 0  # runs read as columns


def rows_seen(summary: RunSummary) -> int:
    return sum(b.records_in for b in summary.batches)


def test_a_debezium_file_gone_before_its_task_reads_it_fails_the_batch_naming_it(spark: Any, tmp_path: Path) -> None:
    """Nothing is committed and the error is one line naming the file, a transient one: the run
    restarts and plans again (as for JSON files: tests/test_files_fast.py)."""
    import pytest

    from icetide.errors import SourceError, is_transient
    from icetide.table.iceberg import load_table

    landing = tmp_path / "landing"
    real = lines("flink_mysql_products_schema")
    land(landing, "part-000.json", "\n".join(real[:8]) + "\n", n=0)
    land(landing, "part-001.json", "\n".join(real[8:]) + "\n", n=1)
    runner = Runner(PipelineConfig.from_dict(pipeline("gone", landing, "auto")), spark)
    plan = runner.source.plan(None)
    gone = str(plan.items[1])
    os.remove(gone)
    with pytest.raises(SourceError) as failed:
        runner.stage(1, plan)
    message = str(failed.value)
    assert gone in message and "\n" not in message and "Traceback" not in message
    assert is_transient(failed.value)
    assert runner.sink.last_committed() is None
    location = str(load_table(spark, "lake.dbzfiles.gone").location()).removeprefix("file:")
    assert not list(Path(location).rglob("*.parquet")), "the failed batch's files are deleted"


def test_a_later_file_wins_when_the_source_blocks_tie(spark: Any, tmp_path: Path) -> None:
    """Two updates of one key in two files of one batch, whose source blocks tie (as connectors
    that order by ts_ms alone do, SQL Server's and Oracle's, for changes within one millisecond):
    the one in the file planned later is the newer, though its line number is lower. Both paths
    order a batch's lines by the file's place in the plan, then the line (sources/files.py
    LINES_PER_FILE); by the line alone, the earlier file's change won."""
    stream = ProductsStream()
    first = json.loads(stream.change("c", None, {"id": 1, "name": "a", "description": None, "weight": 1.0}))
    source = first["payload"]["source"]

    def update(weight: float) -> str:
        payload = {
            "before": {"id": 1, "name": "a", "description": None, "weight": 1.0},
            "after": {"id": 1, "name": "a", "description": None, "weight": weight},
            "source": source,  # the same block: the changes tie on it
            "op": "u",
            "ts_ms": 1589362330904,
        }
        return json.dumps({"schema": stream.schema, "payload": payload}, separators=(",", ":"))

    landing = tmp_path / "landing"
    filler = [json.dumps(first, separators=(",", ":"))] * 4
    land(landing, "part-000.json", "\n".join([*filler, update(2.0)]) + "\n", n=0)  # line 5
    land(landing, "part-001.json", update(3.0) + "\n", n=1)  # line 1 of the later file
    for name, fast_path in (("tie_fast", "auto"), ("tie_spark", "off")):
        summary = run(spark, pipeline(name, landing, fast_path))
        assert [b.records_in for b in summary.batches] == [6], name
        assert table(spark, f"lake.dbzfiles.{name}") == {1: ("a", None, 3.0)}, name
