"""A 64-bit hash of key columns in the key index's form (int64 and string columns), in numpy.

The key index sorts hashed keys by this hash (`key_runs.py`); equal hashes are checked against
the keys themselves, so the hash needs to be deterministic within a process and well spread in
its top bits (the runs' directory buckets by them), not stable across versions: the persisted
copy of the index (`key_index_copy.py`) stores keys, not hashes.

Strings are hashed a word at a time from their Arrow buffers: each pass gathers the next eight
bytes of every string that still has some (an unaligned 8-byte view of the data, zero-padded at
the end), so the cost follows the strings' total bytes. pandas' `hash_pandas_object`, which this
replaces, converted every string to a Python object first: 0.3-0.6 us per (string, timestamp)
key against about 0.05 us here (docs/design.md, "The key index's hash").
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

_SEED = np.uint64(0x243F6A8885A308D3)
_STEP = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
_ONE, _EIGHT = np.uint64(1), np.uint64(8)


def _mix(h: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, in place: every input bit reaches every output bit."""
    h ^= h >> _S30
    h *= _M1
    h ^= h >> _S27
    h *= _M2
    h ^= h >> _S31
    return h


def _string_hashes(array: pa.Array) -> np.ndarray:
    """One uint64 per string of `array` (a StringArray), from its length and bytes."""
    n = len(array)
    offsets = np.frombuffer(array.buffers()[1], np.int32, n + 1, array.offset * 4).astype(np.int64)
    lengths = offsets[1:] - offsets[:-1]
    first, last = int(offsets[0]), int(offsets[-1])
    padded = np.zeros(last - first + 8, np.uint8)
    if last > first:
        padded[: last - first] = np.frombuffer(array.buffers()[2], np.uint8, last - first, first)
    # Every byte offset read as a little-endian uint64 (a view: nothing is copied).
    words = np.ndarray((len(padded) - 7,), np.uint64, padded, 0, (1,))
    starts = offsets[:-1] - first
    h = _mix(lengths.astype(np.uint64) ^ _SEED)  # the length first: "a" and "a\0" differ
    rows = np.flatnonzero(lengths > 0)  # the strings with a k-th word
    k = 0
    while len(rows):
        word = words[starts[rows] + 8 * k]
        left = lengths[rows] - 8 * k
        short = left < 8
        if short.any():  # the last, partial word: keep only the string's own bytes
            word[short] &= (_ONE << (left[short].astype(np.uint64) * _EIGHT)) - _ONE
        h[rows] = _mix(h[rows] ^ word)
        rows = rows[left > 8]
        k += 1
    return h


def _column_hashes(column: pa.ChunkedArray) -> np.ndarray:
    if pa.types.is_int64(column.type):
        return column.to_numpy().view(np.uint64)
    if pa.types.is_string(column.type):
        parts = [_string_hashes(chunk) for chunk in column.chunks]
        return np.concatenate(parts) if parts else np.zeros(0, np.uint64)
    raise TypeError(f"the key index hashes int64 and string columns, not {column.type}")


def key_hashes(keys: pa.Table) -> np.ndarray:
    """One uint64 per row of `keys`, over all its columns in order."""
    h = np.full(keys.num_rows, _SEED, np.uint64)
    for column in keys.columns:
        h *= _STEP
        h ^= _column_hashes(column)
        _mix(h)
    return h
