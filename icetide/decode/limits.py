"""What a record must be to be written: payload limits and the value ranges every writer can hold.

The decoders (JSON: decode/json/records.py; Debezium: decode/debezium/message.py) check the same
things as the Spark SQL decoders they replaced did, so a record is bad where it was bad there:

- the payload: at most `max_record_bytes` bytes, valid UTF-8, no JSON string escape of a lone
  UTF-16 surrogate (such as the six characters backslash-u-d-8-0-0 alone, which no UTF-8 text can
  hold), arrays and objects nested at most `max_nesting_depth` deep;
- timestamps and dates: years 0001 to 9999 (in UTC for TIMESTAMP). Iceberg and Arrow hold wider
  ranges, but Python's datetime, which reads file statistics and partition values, does not.

Integers and decimals out of their type's range were already bad records (try_cast). The JSON
decoder also refuses a number within a double but beyond FLOAT (`FLOAT32_OUT`), which a FLOAT
column would hold as infinity (issue 49), and one beyond a double (1e400), in DOUBLE and FLOAT
alike; the literals and texts NaN and Infinity keep their meaning.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from icetide.config.pipeline import (
    DEFAULT_MAX_NESTING_DEPTH,
    DEFAULT_MAX_RECORD_BYTES,
    MAX_NESTING_DEPTH_LIMIT,
    MAX_RECORD_BYTES_LIMIT,
)

MIN_TIMESTAMP = datetime(1, 1, 1, tzinfo=UTC)
MAX_TIMESTAMP = datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)
MIN_DATE, MAX_DATE = date(1, 1, 1), date(9999, 12, 31)
MIN_EPOCH_MICROS = -62_135_596_800_000_000  # 0001-01-01T00:00:00Z
MAX_EPOCH_MICROS = 253_402_300_799_999_999  # 9999-12-31T23:59:59.999999Z
MIN_EPOCH_MS, MAX_EPOCH_MS = MIN_EPOCH_MICROS // 1000, MAX_EPOCH_MICROS // 1000
# The values of a signed integer column of each bit width.
INT_RANGES = {8: (-(2**7), 2**7 - 1), 16: (-(2**15), 2**15 - 1), 32: (-(2**31), 2**31 - 1), 64: (-(2**63), 2**63 - 1)}
MIN_EPOCH_DAYS, MAX_EPOCH_DAYS = -719_162, 2_932_896  # 0001-01-01, 9999-12-31
# Halfway from the largest FLOAT to 2**128: a double this large or larger rounds to infinity as a FLOAT.
FLOAT32_OUT = 2.0**128 - 2.0**103

# A JSON escape of a lone surrogate: a high one not followed by a low one, or a low one not
# preceded by a high one; the escape itself not escaped (an even run of backslashes before it).
# The same pattern serves Python's re and Java's regex (Spark's RLIKE).
LONE_SURROGATE = (
    r"(?:^|[^\\])(?:\\\\)*"
    r"(?:\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    r"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2})"
)
_LONE_SURROGATE = re.compile(LONE_SURROGATE)
# What nesting_depth ignores: escape pairs (so an escaped quote is no quote) and all but brackets
# and quotes.
_NOT_NESTING = re.compile(r'(?s)\\.|[^\[\]{}"]')


@dataclass(frozen=True)
class PayloadLimits:
    """The most a payload may be: bytes, and levels of nested JSON arrays and objects."""

    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    max_nesting_depth: int = DEFAULT_MAX_NESTING_DEPTH

    def __post_init__(self) -> None:
        if not 1 <= self.max_record_bytes <= MAX_RECORD_BYTES_LIMIT:
            raise ValueError(f"max_record_bytes must be between 1 and {MAX_RECORD_BYTES_LIMIT}")
        if not 1 <= self.max_nesting_depth <= MAX_NESTING_DEPTH_LIMIT:
            raise ValueError(f"max_nesting_depth must be between 1 and {MAX_NESTING_DEPTH_LIMIT}")


def size_error(size: int, limits: PayloadLimits) -> str:
    """The error of a payload of `size` bytes over the limit."""
    return f"payload is {size} bytes, over max_record_bytes ({limits.max_record_bytes})"


def invalid_utf8_error(raw: bytes, offset: int) -> str:
    """The error of a payload whose bytes are not UTF-8 from byte `offset` on: the offset, and
    the field whose value or name holds the bytes when the payload is JSON otherwise."""
    place = _utf8_place(raw)
    return f"payload is not valid UTF-8 at byte {offset}" + (f", in {place}" if place else "")


def depth_error(limits: PayloadLimits) -> str:
    return f"JSON nested deeper than max_nesting_depth ({limits.max_nesting_depth})"


def surrogate_error() -> str:
    return "payload escapes a lone UTF-16 surrogate (\\uD800-\\uDFFF), which UTF-8 cannot hold"


# The characters Python's 'surrogateescape' gives bytes that are not UTF-8.
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")


def _utf8_place(raw: bytes) -> str | None:
    """Where in JSON `raw` the first bytes that are not UTF-8 are: "field a.b" (a value, `[i]` for
    an array's item) or "the name of field a.b" (a key, shown with U+FFFD); None when `raw` is no
    JSON even with those bytes read as any characters."""
    try:
        doc = json.loads(raw.decode("utf-8", "surrogateescape"))
    except (ValueError, RecursionError):
        return None
    return escaped_place(doc)


def escaped_place(doc: Any) -> str | None:
    """Where in `doc` (JSON-like values, their text read with 'surrogateescape') the first
    bytes that were not UTF-8 are, in reading order: "field a.b" (a value, `[i]` for an array's
    item), "the name of field a.b" (a key, shown with U+FFFD) or "the payload's text"; None when
    no text holds such bytes."""
    stack: list[tuple[str, Any, bool]] = [("", doc, False)]  # (path, value, a name to look at)
    while stack:
        path, v, name = stack.pop()
        if name:
            if _ESCAPED_BYTE.search(v):
                return f"the name of field {_ESCAPED_BYTE.sub(chr(0xFFFD), path)}"
        elif isinstance(v, str):
            if _ESCAPED_BYTE.search(v):
                return f"field {path}" if path else "the payload's text"
        elif isinstance(v, dict):
            for k, x in reversed(list(v.items())):
                inner = f"{path}.{k}" if path else k
                stack += [(inner, x, False), (inner, k, True)]
        elif isinstance(v, list):
            stack += [(f"{path}[{i}]", x, False) for i, x in reversed(list(enumerate(v)))]
    return None


def nesting_depth(text: str) -> int:
    """How deep arrays and objects nest in JSON `text`, brackets inside strings not counted.

    Any text gives a number (malformed JSON too), the same number the former Spark SQL JSON decoder computes in SQL.
    """
    depth = deepest = 0
    in_string = False
    for c in _NOT_NESTING.sub("", text):
        if c == '"':
            in_string = not in_string
        elif in_string:
            continue
        elif c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def openers(text: str | bytes) -> int:
    """How many `[` and `{` the text has: a bound on its nesting depth that costs no parse."""
    if isinstance(text, bytes):
        return text.count(b"[") + text.count(b"{")
    return text.count("[") + text.count("{")


# The UTF-8 bytes of a surrogate (ED A0-BF, then a continuation byte or none): Java's UTF-8
# decoder, which Spark's casts and its JSON reader use, replaces them with one U+FFFD, where
# Python's 'replace' gives one per byte.
_ENCODED_SURROGATE = re.compile(rb"\xed[\xa0-\xbf][\x80-\xbf]?")


def spark_text(raw: bytes) -> str:
    """`raw` as the Spark path reads it, and as its dead letter holds it: UTF-8 with U+FFFD where
    the bytes are not, one per malformed sequence as Java's decoder counts them."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "\ufffd".join(part.decode("utf-8", "replace") for part in _ENCODED_SURROGATE.split(raw))


def payload_error(raw: bytes, limits: PayloadLimits) -> tuple[str, str | None]:
    """(the payload as text, the first limit it breaks or None): size, UTF-8, nesting, surrogates.

    The text of a payload that is not UTF-8 has U+FFFD where its bytes are invalid, so that the
    dead-letter table can hold it.
    """
    try:
        text, bad_byte = raw.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        text, bad_byte = raw.decode("utf-8", "replace"), exc.start
    if len(raw) > limits.max_record_bytes:
        return text, size_error(len(raw), limits)
    if bad_byte is not None:
        return text, invalid_utf8_error(raw, bad_byte)
    if openers(text) > limits.max_nesting_depth and nesting_depth(text) > limits.max_nesting_depth:
        return text, depth_error(limits)
    if "\\" in text and _LONE_SURROGATE.search(text):
        return text, surrogate_error()
    return text, None
