"""Deletion vectors (Iceberg format v3) in plain Python: the blob codec and Puffin files.

A deletion vector (DV) marks deleted row positions of one data file. It is a `deletion-vector-v1`
blob in a Puffin file, laid out as the spec says:

    length (4 bytes, big-endian: magic + bitmap) | magic D1 D3 39 64 | bitmap | CRC-32 of magic + bitmap (big-endian)

where the bitmap is a 64-bit Roaring bitmap in the portable format: the number of 32-bit
bitmaps (8 bytes, little-endian), then for each its key (the high 32 bits, 4 bytes) and the
32-bit bitmap in Roaring's portable serialization. Writing uses array and bitmap containers;
reading also takes run containers (Iceberg's Java writer run-length encodes).

Nothing here touches Spark or the JVM, so executors can write DVs as they write data files.
The Iceberg metadata of a DV (a position-delete DeleteFile of format PUFFIN, with the referenced
data file and the blob's offset and size) is built by whoever commits it.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from icetide.errors import DeletionVectorError

DV_MAGIC = bytes([0xD1, 0xD3, 0x39, 0x64])
PUFFIN_MAGIC = b"PFA1"
BLOB_TYPE = "deletion-vector-v1"
ROW_POSITION_FIELD_ID = 2147483645  # Iceberg's `_pos` metadata column, the field a DV's blob names
CREATED_BY = "icetide"

_SERIAL_COOKIE_NO_RUN = 12346
_SERIAL_COOKIE = 12347
_NO_OFFSET_THRESHOLD = 4
_ARRAY_MAX = 4096  # Roaring's array containers hold up to this many values


# ---------------------------------------------------------------- Roaring, 32 bits


def _roaring32(values: np.ndarray) -> bytes:
    """Sorted distinct uint32 values in Roaring's portable format, without run containers."""
    high = (values >> 16).astype(np.uint16)
    low = (values & 0xFFFF).astype(np.uint16)
    keys, starts = np.unique(high, return_index=True)
    ends = [*starts[1:], len(values)] if len(starts) else []
    containers = []
    for start, end in zip(starts, ends, strict=True):
        part = low[start:end]
        if len(part) <= _ARRAY_MAX:
            containers.append(part.astype("<u2").tobytes())
        else:
            bits = np.zeros(1 << 16, dtype=bool)
            bits[part] = True
            containers.append(np.packbits(bits, bitorder="little").tobytes())
    n = len(keys)
    header = struct.pack("<II", _SERIAL_COOKIE_NO_RUN, n)
    descriptive = b"".join(
        struct.pack("<HH", int(k), int(e - s) - 1) for k, s, e in zip(keys, starts, ends, strict=True)
    )
    offset = len(header) + len(descriptive) + 4 * n
    offsets = []
    for c in containers:
        offsets.append(struct.pack("<I", offset))
        offset += len(c)
    return header + descriptive + b"".join(offsets) + b"".join(containers)


def _read_roaring32(data: bytes, at: int) -> tuple[np.ndarray, int]:
    """The uint32 values of a portable 32-bit Roaring bitmap starting at `at`, and where it ends."""
    (cookie,) = struct.unpack_from("<I", data, at)
    pos = at + 4
    runs = b""
    if cookie & 0xFFFF == _SERIAL_COOKIE:
        n = (cookie >> 16) + 1
        runs = data[pos : pos + (n + 7) // 8]
        pos += (n + 7) // 8
        has_offsets = n >= _NO_OFFSET_THRESHOLD
    elif cookie == _SERIAL_COOKIE_NO_RUN:
        (n,) = struct.unpack_from("<I", data, pos)
        pos += 4
        has_offsets = True
    else:
        raise DeletionVectorError(f"not a portable Roaring bitmap (cookie {cookie})")
    header = np.frombuffer(data, dtype="<u2", count=2 * n, offset=pos).reshape(n, 2) if n else np.zeros((0, 2))
    pos += 4 * n
    if has_offsets:
        pos += 4 * n
    parts = []
    for i in range(n):
        key, cardinality = int(header[i, 0]), int(header[i, 1]) + 1
        if runs and runs[i // 8] >> (i % 8) & 1:
            (count,) = struct.unpack_from("<H", data, pos)
            pairs = np.frombuffer(data, dtype="<u2", count=2 * count, offset=pos + 2).reshape(count, 2)
            pos += 2 + 4 * count
            low = np.concatenate([np.arange(s, s + length + 1, dtype=np.uint32) for s, length in pairs.astype(int)])
        elif cardinality <= _ARRAY_MAX:
            low = np.frombuffer(data, dtype="<u2", count=cardinality, offset=pos).astype(np.uint32)
            pos += 2 * cardinality
        else:
            bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8, count=8192, offset=pos), bitorder="little")
            low = np.flatnonzero(bits).astype(np.uint32)
            pos += 8192
        parts.append((np.uint32(key) << np.uint32(16)) | low)
    values = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint32)
    return values, pos


# ---------------------------------------------------------------- the DV blob


def serialize_positions(positions: Sequence[int] | np.ndarray) -> bytes:
    """A `deletion-vector-v1` blob marking `positions` (any order, duplicates allowed)."""
    values = np.unique(np.asarray(positions, dtype=np.int64))
    if len(values) and values[0] < 0:
        raise DeletionVectorError(f"a row position cannot be negative: {int(values[0])}")
    high = (values >> 32).astype(np.uint32)
    keys, starts = np.unique(high, return_index=True)
    ends = [*starts[1:], len(values)] if len(starts) else []
    bitmap = [struct.pack("<Q", len(keys))]
    for key, start, end in zip(keys, starts, ends, strict=True):
        bitmap.append(struct.pack("<I", int(key)))
        bitmap.append(_roaring32((values[start:end] & 0xFFFFFFFF).astype(np.uint32)))
    body = DV_MAGIC + b"".join(bitmap)
    return struct.pack(">I", len(body)) + body + struct.pack(">I", zlib.crc32(body))


def deserialize_positions(blob: bytes) -> np.ndarray:
    """The sorted row positions (int64) a `deletion-vector-v1` blob marks; checks length, magic and CRC."""
    if len(blob) < 12:
        raise DeletionVectorError("a deletion vector has at least 12 bytes")
    (length,) = struct.unpack_from(">I", blob, 0)
    if length != len(blob) - 8:
        raise DeletionVectorError(f"deletion vector length {length} does not match its {len(blob)} bytes")
    body = blob[4 : 4 + length]
    if body[:4] != DV_MAGIC:
        raise DeletionVectorError("not a deletion vector (bad magic)")
    (crc,) = struct.unpack_from(">I", blob, 4 + length)
    if crc != zlib.crc32(body):
        raise DeletionVectorError("deletion vector CRC mismatch")
    (count,) = struct.unpack_from("<Q", body, 4)
    pos = 12
    parts = []
    for _ in range(count):
        (key,) = struct.unpack_from("<I", body, pos)
        low, pos = _read_roaring32(body, pos + 4)
        parts.append((np.int64(key) << np.int64(32)) | low.astype(np.int64))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


# ---------------------------------------------------------------- Puffin files


@dataclass(frozen=True)
class WrittenVector:
    """One DV as written into a Puffin file: what its DeleteFile metadata needs."""

    data_file: str  # the referenced data file
    offset: int  # content offset of the blob in the Puffin file
    size: int  # content size in bytes of the blob
    cardinality: int  # positions marked (the DeleteFile's record count)


def puffin_file(vectors: Sequence[tuple[str, np.ndarray]]) -> tuple[bytes, list[WrittenVector]]:
    """A Puffin file holding one DV per (data file path, positions); each path at most once."""
    seen: set[str] = set()
    out = [PUFFIN_MAGIC]
    offset = len(PUFFIN_MAGIC)
    written = []
    blobs = []
    for data_file, positions in vectors:
        if data_file in seen:
            raise DeletionVectorError(f"two deletion vectors for one data file: {data_file}")
        seen.add(data_file)
        blob = serialize_positions(positions)
        cardinality = len(np.unique(np.asarray(positions)))
        written.append(WrittenVector(data_file, offset, len(blob), cardinality))
        blobs.append(
            {
                "type": BLOB_TYPE,
                "fields": [ROW_POSITION_FIELD_ID],
                "snapshot-id": -1,
                "sequence-number": -1,
                "offset": offset,
                "length": len(blob),
                "properties": {"referenced-data-file": data_file, "cardinality": str(cardinality)},
            }
        )
        out.append(blob)
        offset += len(blob)
    payload = json.dumps({"blobs": blobs, "properties": {"created-by": CREATED_BY}}).encode()
    out += [PUFFIN_MAGIC, payload, struct.pack("<II", len(payload), 0), PUFFIN_MAGIC]
    return b"".join(out), written
