"""Debezium JSON-converter messages for tests: the real ones under tests/data/debezium (each file's
source is in tests/data/debezium/SOURCES.md), and a builder that reuses a real message's schema
and source block for streams the public test data does not have (key changes, truncates)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data" / "debezium"


def messages(name: str) -> list[dict[str, Any]]:
    """The messages of tests/data/debezium/<name>.jsonl, parsed."""
    return [json.loads(line) for line in (DATA / f"{name}.jsonl").read_text().splitlines() if line.strip()]


def lines(name: str) -> list[str]:
    """The messages of tests/data/debezium/<name>.jsonl, exactly as stored."""
    return [line for line in (DATA / f"{name}.jsonl").read_text().splitlines() if line.strip()]


class ProductsStream:
    """MySQL changes to Debezium's tutorial `products` table (id, name, description, weight),
    in the schema and source block of the real message in flink_mysql_products_schema.jsonl,
    with binlog positions that rise with every change, as a MySQL binlog's do. `compact`: written
    as Kafka's JsonConverter writes them (no whitespace), else with a space after `:` and `,`."""

    def __init__(self, *, compact: bool = True) -> None:
        self.separators = (",", ":") if compact else (", ", ": ")
        first = messages("flink_mysql_products_schema")[0]
        self.schema = first["schema"]
        self.source = first["payload"]["source"]
        self.key_schema = {
            "type": "struct",
            "name": "dbserver1.inventory.products.Key",
            "optional": False,
            "fields": [{"type": "int32", "optional": False, "field": "id"}],
        }
        self.pos = 1000

    def _source(self) -> dict[str, Any]:
        self.pos += 150
        source = copy.deepcopy(self.source)
        source.update({"file": "mysql-bin.000003", "pos": self.pos, "row": 0, "snapshot": "false"})
        source["ts_ms"] = 1589362330000  # one second for every change: MySQL's resolution
        return source

    def change(self, op: str, before: dict[str, Any] | None, after: dict[str, Any] | None) -> bytes:
        """One change event, encoded as the JSON converter does with schemas.enable=true."""
        payload = {"before": before, "after": after, "source": self._source(), "op": op, "ts_ms": 1589362330904}
        return json.dumps({"schema": self.schema, "payload": payload}, separators=self.separators).encode()

    def truncate(self) -> bytes:
        """A truncate event (op t: no before, no after); its key is null."""
        payload = {"before": None, "after": None, "source": self._source(), "op": "t", "ts_ms": 1589362330904}
        return json.dumps({"schema": self.schema, "payload": payload}, separators=self.separators).encode()

    def key(self, row_id: int) -> bytes:
        """The message key, with its schema, as the JSON converter writes it."""
        return json.dumps({"schema": self.key_schema, "payload": {"id": row_id}}, separators=self.separators).encode()


def apply_changes(model: dict[int, tuple[Any, ...]], event: dict[str, Any]) -> None:
    """The reference semantics of one products change on a dict id -> (name, description, weight)."""
    op = event["op"]
    if op == "t":
        model.clear()
        return
    before, after = event.get("before"), event.get("after")
    if op == "d":
        model.pop(before["id"], None)
        return
    if before is not None and before["id"] != after["id"]:
        model.pop(before["id"], None)
    model[after["id"]] = (after["name"], after["description"], after["weight"])
