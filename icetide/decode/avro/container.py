"""Runs of Avro bodies of one schema id read together: one block of an Avro object container
file, read by DuckDB's Avro extension into Arrow (decode/debezium/event_runs.py applies Debezium's rules).

The bodies of Confluent's wire format are exactly the records of such a block, so the block is
the bodies joined, behind a header carrying the writer schema. DuckDB reads a block as one
stream, so a body cut short or with bytes left over would shift the records after it: each
body's length must equal the bytes its decoded record takes in Avro's binary encoding
(`encoded_sizes`, computed from the columns), which proves every record was read from its own
body, as fastavro's reader reads one body (and refuses one with bytes left over).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["NotColumnar", "RunReader", "container", "encoded_sizes", "present", "run_reader"]

log = logging.getLogger(__name__)

_SYNC = b"icetide-avro-run"  # the container's 16-byte sync marker


class NotColumnar(Exception):
    """This run is read record by record; the message says why (for the debug log)."""


# -- decoding a run --------------------------------------------------------------------------------


def _varint(n: int) -> bytes:
    """Avro's long: zig-zag, then 7 bits a byte."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _avro_bytes(data: bytes) -> bytes:
    return _varint(len(data)) + data


def container(writer_schema: str, bodies: Sequence[bytes | memoryview]) -> bytes:
    """An Avro object container file of one block holding `bodies` as its records."""
    meta = _avro_bytes(b"avro.schema") + _avro_bytes(writer_schema.encode()) + _avro_bytes(b"avro.codec")
    head = b"Obj\x01" + _varint(2) + meta + _avro_bytes(b"null") + _varint(0) + _SYNC
    data = b"".join(bodies)
    return head + _varint(len(bodies)) + _varint(len(data)) + data + _SYNC


class RunReader:
    """Reads runs of Avro bodies with DuckDB's Avro reader; one per Python worker (`run_reader`)."""

    def __init__(self) -> None:
        try:
            import duckdb
        except ImportError as exc:
            raise NotColumnar("duckdb is not installed (pip install 'icetide[kafka]')") from exc
        # One thread: a Spark task has one core. No file cache: a cached older run of the same
        # name, size and time would be read instead of the new one (temporary names are reused).
        self._con = duckdb.connect(config={"threads": 1, "enable_external_file_cache": False})
        try:
            self._con.execute(f"LOAD '{_extension_path(duckdb.__version__)}'")
        except duckdb.Error as exc:
            raise NotColumnar(f"DuckDB's Avro extension does not load: {exc}"[:300]) from None
        self._folder = "/dev/shm" if os.path.isdir("/dev/shm") else None  # memory, not disk, where there is one
        self._lock = threading.Lock()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._con.close()

    def decode(self, writer_schema: Any, bodies: Sequence[bytes | memoryview]) -> pa.StructArray:
        """The records of `bodies` (one writer schema, logical types removed) as one struct array;
        NotColumnar when DuckDB cannot read them, or any body is not exactly one record."""
        fd, path = tempfile.mkstemp(prefix="icetide-avro-run-", suffix=".avro", dir=self._folder)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(container(json.dumps(writer_schema), bodies))
            with self._lock:
                table = self._con.execute("SELECT * FROM read_avro(?)", [path]).to_arrow_table()
        except Exception as exc:  # duckdb's errors have no common root worth naming
            raise NotColumnar(f"DuckDB's Avro reader: {type(exc).__name__}: {exc}"[:300]) from None
        finally:
            with contextlib.suppress(OSError):
                os.unlink(path)
        if table.num_rows != len(bodies):
            raise NotColumnar(f"DuckDB read {table.num_rows} records of {len(bodies)}")
        columns = [c.combine_chunks() if c.num_chunks != 1 else c.chunk(0) for c in table.columns]
        records = pa.StructArray.from_arrays(columns, names=table.column_names) if columns else None
        if records is None:
            raise NotColumnar("a record of no fields")
        lengths = np.fromiter((len(b) for b in bodies), np.int64, len(bodies))
        if not np.array_equal(encoded_sizes(writer_schema, records), lengths):
            raise NotColumnar("a body that is not exactly one record of its schema")
        return records


def _extension_path(version: str) -> str:
    try:
        import duckdb_extension_avro
    except ImportError as exc:
        raise NotColumnar("duckdb-extension-avro is not installed (pip install 'icetide[kafka]')") from exc
    folder = os.path.dirname(duckdb_extension_avro.__file__)
    return os.path.join(folder, "extensions", f"v{version}", "avro.duckdb_extension")


_READER: RunReader | NotColumnar | None = None


def run_reader() -> RunReader:
    """The process's one run reader (made on first use). NotColumnar when DuckDB or its Avro
    extension is missing: said once per process as a warning, and every run is then read record
    by record (the same rows, more slowly)."""
    global _READER
    if _READER is None:
        try:
            _READER = RunReader()
        except NotColumnar as exc:
            log.warning("Avro records are read one by one, about 3x slower: %s", exc)
            _READER = exc
    if isinstance(_READER, NotColumnar):
        raise NotColumnar(str(_READER))
    return _READER


# -- what each record's encoding takes ---------------------------------------------------------


_VARINT_STEPS = np.array([1 << (7 * k) for k in range(1, 10)], np.uint64)  # the least zig-zag value of each longer size


def _varint_sizes(values: np.ndarray) -> np.ndarray:
    """Bytes of each int64 as Avro's zig-zag varint."""
    v = values.astype(np.int64, copy=False)
    z = ((v << 1) ^ (v >> 63)).view(np.uint64)
    return 1 + np.searchsorted(_VARINT_STEPS, z, side="right").astype(np.int64)


def present(array: pa.Array) -> np.ndarray:
    """Which values are not null, as a numpy mask."""
    if array.null_count == 0:
        return np.ones(len(array), bool)
    return np.asarray(array.is_valid())


def _ints(array: pa.Array) -> np.ndarray:
    return np.asarray(array.fill_null(0) if array.null_count else array, np.int64)


class _Sizer:
    """Walks a writer schema with Avro's name resolution, beside the struct array DuckDB made of it."""

    def __init__(self) -> None:
        self.names: dict[str, Any] = {}

    def sizes(self, schema: Any, array: pa.Array, namespace: str) -> np.ndarray:
        if isinstance(schema, list):
            real = [b for b in schema if b != "null" and not (isinstance(b, Mapping) and b.get("type") == "null")]
            if len(real) > 1:
                raise NotColumnar("a union of several types")
            if len(schema) > 64:
                raise NotColumnar("a union of over 64 branches")
            if not real:
                return np.ones(len(array), np.int64)
            inner = self.sizes(real[0], array, namespace)
            return 1 + np.where(present(array), inner, 0) if len(schema) > 1 else 1 + inner
        if isinstance(schema, str):
            if schema in ("null", "boolean", "int", "long", "float", "double", "bytes", "string"):
                return self.sizes({"type": schema}, array, namespace)
            fullname = schema if "." in schema else (f"{namespace}.{schema}" if namespace else schema)
            found = self.names.get(fullname, self.names.get(schema))
            if found is None:
                raise NotColumnar(f"an unknown type name {schema!r}")
            return self.sizes(found[0], array, found[1])
        kind = schema.get("type")
        if isinstance(kind, list | Mapping):
            return self.sizes(kind, array, namespace)
        if kind in ("record", "error", "enum", "fixed"):
            name = str(schema["name"])
            ns = name.rsplit(".", 1)[0] if "." in name else str(schema.get("namespace", namespace) or "")
            self.names[name if "." in name else (f"{ns}.{name}" if ns else name)] = (schema, ns)
            return self._named(schema, array, ns)
        return self._primitive(str(kind), array)

    def _named(self, schema: Mapping[str, Any], array: pa.Array, ns: str) -> np.ndarray:
        kind = schema["type"]
        if kind == "fixed":
            return np.full(len(array), int(schema["size"]), np.int64)
        if kind == "enum":
            if len(schema.get("symbols", [])) > 64:
                raise NotColumnar("an enum of over 64 symbols")
            return np.ones(len(array), np.int64)
        if not isinstance(array, pa.StructArray):
            raise NotColumnar(f"a record read as {array.type}")
        total = np.zeros(len(array), np.int64)
        for f in schema.get("fields", []):
            index = array.type.get_field_index(str(f["name"]))
            if index < 0:
                raise NotColumnar(f"field {f['name']} missing from DuckDB's record")
            total += self.sizes(f["type"], array.field(index), ns)
        return total

    def _primitive(self, kind: str, array: pa.Array) -> np.ndarray:
        fixed = {"null": 0, "boolean": 1, "float": 4, "double": 8}
        if kind in fixed:
            return np.full(len(array), fixed[kind], np.int64)
        if kind in ("int", "long"):
            if not pa.types.is_integer(array.type):
                raise NotColumnar(f"an Avro {kind} read as {array.type}")
            return _varint_sizes(_ints(array))
        if kind in ("string", "bytes"):
            lengths = _ints(pc.binary_length(array))
            return _varint_sizes(lengths) + lengths
        raise NotColumnar(f"an Avro {kind}")


def encoded_sizes(writer_schema: Any, records: pa.StructArray) -> np.ndarray:
    """The bytes each record takes in Avro's binary encoding (with its varints at their shortest).
    NotColumnar for a schema with arrays or maps, or a union of several types."""
    return _Sizer().sizes(writer_schema, records, "")
