"""Split a repeated head off JSON values where they are read, so it crosses into the JVM once.

Some producers repeat a large first member in every JSON object: Kafka Connect's JSON converter
writes `{"schema":<the whole Connect schema>,"payload":{...}}`, where the schema is most of the
bytes. A reader handed a `JsonHeadSplit` cuts such a value in two:

- the head, `{"<first>":<value>,`, named by a 64-bit id (a hash of its bytes) and shipped as text
  once per distinct head per Arrow batch;
- the rest, `{"<next>":...`, a JSON object of its own, which replaces the value.

Joining head and rest without the rest's `{` gives the value back byte for byte (`rejoin`).
Values of any other shape (another first member, whitespace between the members, a null value,
invalid JSON) are left whole, with a null id. A head is split off only when it is valid UTF-8,
its first member's value parses as JSON, and it holds no backslash (no escape a decoder's checks
would then not see): what is split off never hides a malformed record.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

HEAD_ID_SUFFIX = "_head_id"  # the value column's head id: <value>_head_id BIGINT
HEAD_SUFFIX = "_head"  # the head's text, on its first row of each Arrow batch: <value>_head STRING
_VALID_HEADS_MAX = 1000  # per Python worker; a stream of distinct heads is only re-validated


def _not_json(constant: str) -> None:
    raise ValueError(f"{constant} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_not_json)  # NaN and Infinity are Python's, not JSON's


@dataclass(frozen=True)
class JsonHeadSplit:
    """Which head to split off: a JSON object's member `first`, when `next` is the member after it."""

    first: str
    next: str

    @property
    def prefix(self) -> bytes:
        return b'{"' + self.first.encode() + b'":'

    @property
    def marker(self) -> bytes:
        return b',"' + self.next.encode() + b'":'


def head_id(head: bytes) -> int:
    """A head's id: a signed 64-bit hash of its bytes."""
    return int.from_bytes(hashlib.blake2b(head, digest_size=8).digest(), "big", signed=True)


def rejoin(head: str, rest: str) -> str:
    """The value a head and its rest were split from."""
    return head + rest[1:]


class HeadSplitter:
    """Splits values as `JsonHeadSplit` says, remembering the heads it has validated."""

    def __init__(self, split: JsonHeadSplit) -> None:
        self.split = split
        self._prefix = split.prefix
        self._marker = split.marker
        self._heads: dict[bytes, int | None] = {}  # head -> id, None: not a head to split off

    def _head_id(self, head: bytes) -> int | None:
        if len(self._heads) >= _VALID_HEADS_MAX:
            self._heads.clear()
        found: int | None = None
        if b"\\" not in head:
            try:
                text = head.decode("utf-8")
                _, end = _DECODER.raw_decode(text, len(self._prefix))
                if text[end:] == ",":
                    found = head_id(head)
            except (UnicodeDecodeError, ValueError):
                pass
        self._heads[head] = found
        return found

    def arrays(self, values: Sequence[bytes | None]) -> tuple[pa.Array, pa.Array, pa.Array]:
        """(values, head ids, heads): each value or its rest, its head's id or null, and the head's
        text on the first row of each head in `values` (else null)."""
        prefix, marker, heads = self._prefix, self._marker, self._heads
        out: list[bytes | None] = []
        ids: list[int | None] = []
        texts: list[str | None] = []
        shipped: set[int] = set()
        for v in values:
            cut = v.find(marker) if v is not None and v.startswith(prefix) else -1
            if cut < 0:
                out.append(v)
                ids.append(None)
                texts.append(None)
                continue
            assert v is not None
            head = v[: cut + 1]
            sid = heads[head] if head in heads else self._head_id(head)
            if sid is None:
                out.append(v)
                ids.append(None)
                texts.append(None)
                continue
            out.append(b"{" + v[cut + 1 :])
            ids.append(sid)
            if sid in shipped:
                texts.append(None)
            else:
                shipped.add(sid)
                texts.append(head.decode("utf-8"))
        return pa.array(out, pa.binary()), pa.array(ids, pa.int64()), pa.array(texts, pa.string())
