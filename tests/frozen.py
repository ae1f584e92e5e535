"""Outputs of the Spark SQL decoders frozen as golden files (issue 23, item 3), for the tests that
compared the Python decoders with them batch by batch: what the Spark SQL decoder gave for each
case is kept under tests/golden/, and the Python decoder must give it, value for value and type
for type, once the Spark SQL decoder is gone.

A file holds the decoder that wrote it and its cases, one a line, by a stable name. Values are
spelled in JSON with their Python type where JSON has none (`spelled`), so that a Decimal, a
float (NaN, -0.0), bytes, a date or a datetime stays what it was. `ICETIDE_UPDATE_GOLDEN=1`
rewrites the cases a run meets with the decoder under test: do that only for a change of rule
that is meant, and say so in the commit.
"""

from __future__ import annotations

import base64
import json
import os
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("ICETIDE_UPDATE_GOLDEN") == "1"
# The decoders the files were written by, as their header names them.
SPARK_SQL_JSON = "icetide.decode.json (Spark SQL JSON decoder, tests/spark_sql_json.py decode_json)"
PYTHON_JSON = "icetide.decode.json.records.ArrowJsonDecoder and icetide.decode.json.tasks.decode_json"
SPARK_SQL_DEBEZIUM = "icetide.decode.debezium.decode_debezium (Spark SQL Debezium decoder)"
PYTHON_DEBEZIUM = "icetide.decode.debezium.tasks.decode_debezium (Python Debezium decoder in Spark's tasks)"


def spelled(v: Any) -> Any:
    """`v` as JSON, typed: a value JSON cannot tell apart is a one-key object naming its type."""
    if v is None or isinstance(v, bool | int | str):
        return v
    if isinstance(v, float):
        return {"$float": repr(v)}
    if isinstance(v, Decimal):
        return {"$decimal": str(v)}
    if isinstance(v, bytes | bytearray):
        return {"$bytes": base64.b64encode(bytes(v)).decode()}
    if isinstance(v, datetime):
        return {"$datetime": v.isoformat()}
    if isinstance(v, date):
        return {"$date": v.isoformat()}
    if isinstance(v, list | tuple):
        return [spelled(x) for x in v]
    if isinstance(v, dict):
        if all(isinstance(k, str) and not k.startswith("$") for k in v):
            return {k: spelled(x) for k, x in v.items()}
        try:  # in key order, whatever order the decoder met them in
            items = sorted(v.items(), key=lambda kv: kv[0])
        except TypeError:
            items = list(v.items())
        return {"$map": [[spelled(k), spelled(x)] for k, x in items]}
    raise TypeError(f"no golden spelling for {type(v).__name__}: {v!r}")


def _write(path: Path, decoder: str, cases: dict[str, Any]) -> None:
    lines = ",\n".join(f"{json.dumps(k)}: {json.dumps(cases[k], sort_keys=True, ensure_ascii=False)}" for k in cases)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'{{"decoder": {json.dumps(decoder)}, "cases": {{\n{lines}\n}}}}\n')


def frozen(name: str, case: str, got: Any, *, decoder: str) -> Any:
    """`got`, spelled, equals case `case` of golden file tests/golden/`name` (with
    ICETIDE_UPDATE_GOLDEN=1 it is written there first, the file then naming `decoder`).
    Returns the golden value, spelled."""
    path = GOLDEN / name
    stored = json.loads(path.read_text()) if path.exists() else {"decoder": decoder, "cases": {}}
    mine = spelled(got)
    if UPDATE:
        _write(path, decoder, {**stored["cases"], case: mine})
        stored = json.loads(path.read_text())
    assert case in stored["cases"], f"{name} has no case {case!r}: run with ICETIDE_UPDATE_GOLDEN=1 to write it"
    golden = stored["cases"][case]
    assert mine == golden, f"{name} {case}: {_differences(mine, golden)}"
    return golden


def _differences(mine: Any, golden: Any) -> str:
    """The first few places two spelled values differ, for a readable failure."""
    found: list[str] = []

    def walk(a: Any, b: Any, where: str) -> None:
        if len(found) >= 5 or a == b:
            return
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(a.keys() | b.keys()):
                walk(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{where}.{k}")
        elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                walk(x, y, f"{where}[{i}]")
        else:
            found.append(f"{where or 'value'}: got {json.dumps(a)[:300]}, golden {json.dumps(b)[:300]}")

    walk(mine, golden, "")
    return "; ".join(found)


def stored(name: str, case: str) -> Any:
    """Case `case` of golden file tests/golden/`name`, as spelled there."""
    cases = json.loads((GOLDEN / name).read_text())["cases"]
    assert case in cases, f"{name} has no case {case!r}: no golden output was frozen for it"
    return cases[case]


def unspelled(v: Any) -> Any:
    """The value `spelled` spelled (a list stays a list; a $map's list keys become tuples)."""
    if isinstance(v, list):
        return [unspelled(x) for x in v]
    if not isinstance(v, dict):
        return v
    if len(v) == 1:
        ((tag, x),) = v.items()
        if tag == "$float":
            return float(x)
        if tag == "$decimal":
            return Decimal(x)
        if tag == "$bytes":
            return base64.b64decode(x)
        if tag == "$datetime":
            return datetime.fromisoformat(x)
        if tag == "$date":
            return date.fromisoformat(x)
        if tag == "$map":
            return {_hashable(unspelled(k)): unspelled(y) for k, y in x}
    return {k: unspelled(x) for k, x in v.items()}


def _hashable(v: Any) -> Any:
    return tuple(_hashable(x) for x in v) if isinstance(v, list) else v
