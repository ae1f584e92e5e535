"""Read Debezium messages of Kafka Connect's JSON converter into change events, for the Python
decoder (decode/debezium_arrow.py): the schema part parsed once per distinct text, the payload
parsed as the Spark decoder (decode/debezium.py) reads it.

A message the Spark decoder makes a dead letter before reading its row (a payload over a limit of
decode/limits.py, text that is not a JSON object, a before, after or source that is not an
object, no op) is an `Envelope` with that dead letter's `error`; `NotHere` where the Spark decoder
does something else with it, or this module cannot tell what.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from icetide.decode import connect as C
from icetide.decode import limits as lim
from icetide.decode.arrow_json_values import checked_decimal
from icetide.decode.connect_conversions import NotHere
from icetide.decode.frames import EMPTY_PAYLOAD, MALFORMED, NOT_AN_OBJECT
from icetide.decode.limits import PayloadLimits

__all__ = ["Envelope", "EnvelopeReader", "envelope_of", "head_schema"]

_PAYLOAD_KEY = b'"payload":'
_HEAD_START = b'{"schema"'
_SCHEMA_START = re.compile(r'\{"schema"\s*:\s*')
_LONE_SURROGATE = re.compile(lim.LONE_SURROGATE.encode())
_JSON_SPACE = " \t\n\r"  # the whitespace JSON allows between tokens
_JSON_SPACE_BYTES = _JSON_SPACE.encode()
OP_MISSING = "not a Debezium change event: op is missing"
_SPACE_AFTER_QUOTE = re.compile(rb'"[ \t\n\r]')

# -- messages -----------------------------------------------------------------------------------


@dataclass(slots=True)
class Envelope:
    """One change event: its op, row parts, source block, time, and its schema (None: schemaless);
    or, with `error`, a message the Spark path makes a dead letter before reading its row."""

    op: str
    before: Mapping[str, Any] | None
    after: Mapping[str, Any] | None
    source: Mapping[str, Any]
    ts_ms: Any
    schema: C.EnvelopeSchema | None
    schema_id: int
    error: str | None = None


class EnvelopeReader:
    """Splits JSON-converter messages into schema and payload, parsing each distinct schema once."""

    def __init__(self, limits: PayloadLimits) -> None:
        self.limits = limits
        self.heads: dict[bytes, tuple[int, C.EnvelopeSchema | None]] = {}
        self._last: bytes | None = None

    def read(self, value: bytes, *, limited: bool = True) -> Envelope | None:
        """The message's event (one with an error: see `envelope_of` and `_poisoned`), None for a
        tombstone; NotHere for anything else the Spark path reads. Not `limited`: the payload
        limits go unchecked (`_poisoned` reads a message that breaks one)."""
        if len(value) > self.limits.max_record_bytes and limited:
            return self._poisoned(value)
        if b"\\" in value and limited and _LONE_SURROGATE.search(value):
            return self._poisoned(value)
        if not value.isascii():  # json.loads would take the UTF-8 bytes of a surrogate (surrogatepass)
            try:
                value.decode("utf-8")
            except UnicodeDecodeError:
                return self._poisoned(value)
        schema: C.EnvelopeSchema | None = None
        schema_id = 0
        if value.startswith(_HEAD_START):
            head = self._last
            if head is None or not value.startswith(head):
                cut = value.find(_PAYLOAD_KEY)
                if cut < 0:
                    raise NotHere("a message with a schema but no payload key")
                head = value[: cut + len(_PAYLOAD_KEY)]
                if head not in self.heads:
                    self.heads[head] = (len(self.heads) + 1, _parse_head(head, self.limits))
                self._last = head
            schema_id, schema = self.heads[head]
            body = value[len(head) :].rstrip()
            if not body.endswith(b"}"):
                raise NotHere("a message whose payload is not its last part")
            body = body[:-1]
        else:
            body = value
            if value[:1] != b"{" and value.lstrip(_JSON_SPACE_BYTES)[:1] != b"{":
                if limited and lim.payload_error(value, self.limits)[1] is not None:
                    return self._poisoned(value)  # nested too deep: the one limit not checked yet
                return _not_an_object(value)
        room = self.limits.max_nesting_depth - (1 if schema_id else 0)  # a payload is inside the message
        braces = body.count(b"{")
        if braces + body.count(b"[") > room and limited and lim.nesting_depth(body.decode("utf-8", "replace")) > room:
            return self._poisoned(value)
        try:
            payload = _payload(body, braces)
        except RepeatedKey as exc:
            # Which value is meant is the producer's to say: a dead letter. (The Spark SQL decoder
            # loses such a record: neither a row nor a dead letter.)
            return Envelope("", None, None, {}, None, None, 0, error=str(exc))
        if payload is None:
            return None  # {"schema": ..., "payload": null}
        if not isinstance(payload, dict):  # {"schema": ..., "payload": [...]}: from_json reads no payload
            return Envelope("", None, None, {}, None, None, 0, error=MALFORMED)
        if schema_id == 0 and ("schema" in payload or "payload" in payload):
            raise NotHere("a message with a schema in another layout than the JSON converter's")
        return envelope_of(payload, schema, schema_id)

    def _poisoned(self, value: bytes) -> Envelope | None:
        """A message over a payload limit: on the Spark path a dead letter with the first limit's
        error (decode/limits.py `payload_error`, the order of decode/json.py `limit_error`), read
        all the same (its text as `spark_text` gives it): a tombstone is skipped, the fields the
        table lacks count, and a truncate is applied (NotHere)."""
        error = lim.payload_error(value, self.limits)[1]
        if error is None:
            raise NotHere("a message the payload limits were thought to refuse")
        envelope = self.read(lim.spark_text(value).encode(), limited=False)
        if envelope is None:
            return None
        if envelope.op.strip(" ").lower() == "t":
            raise NotHere("a truncate over a payload limit (the Spark path applies it)")
        envelope.error = error
        return envelope


def _not_an_object(value: bytes) -> Envelope | None:
    """A value that does not start with an object (after JSON's whitespace), as the Spark path
    reads it: a tombstone (`null`, with spaces around it at most: Spark's trim), or a dead letter
    (decode/json.py `malformed_error`; from_json reads JSON whitespace alone as no field at all)."""
    text = value.strip(b" ")
    if text == b"null":
        return None
    if not text:
        error = EMPTY_PAYLOAD
    elif not text.strip(_JSON_SPACE_BYTES):
        error = OP_MISSING
    else:
        error = NOT_AN_OBJECT
    return Envelope("", None, None, {}, None, None, 0, error=error)


def _payload(body: bytes, braces: int) -> Any:
    """`json.loads(body)`, but numbers that are not integers, and the NaN and Infinity literals,
    as `Decimal` (connect_values.py); NotHere for text that is not JSON (or a number longer than
    Spark reads), or a key repeated in an object (`braces`: how many "{" bytes `body` has).

    Checking each object's keys as the parser makes it costs a Python call per object, so a UTF-8
    JSON object is first parsed without that check, and counting then proves that no object lost
    a key. Each key has its own colon after it, so `body` has at least as many colons as its
    objects have keys, and the parsed objects hold at most that many: when `_objects` found every
    object (one per "{") and their sizes add up to the colons, no key was repeated. Where values
    hold colons too, the colons right after a quote count as well, provided no quote is followed
    by whitespace (then every key's closing quote has its colon right after it). Whenever the
    counts cannot tell, or the quick parse fails, the checking parse decides: the result and the
    first error are always its own.
    """
    if body[:1] == b"{" and body[1:2] != b"\x00":  # json.detect_encoding: UTF-8 (so counting bytes counts characters)
        try:
            text = body.decode("utf-8")
            payload, end = _QUICK.raw_decode(text)
        except (ValueError, NotHere, RecursionError):
            pass  # the checking parse gives the error (a repeated key may come before it)
        else:
            objects = _objects(payload)
            if len(objects) == braces and not text[end:].strip(_JSON_SPACE):
                keys = sum(map(len, objects))
                if body.count(b":") == keys:
                    return payload
                if body.count(b'":') == keys and not _SPACE_AFTER_QUOTE.search(body):
                    return payload
    try:
        return json.loads(body, parse_float=checked_decimal, parse_constant=Decimal, object_pairs_hook=_object)
    except (ValueError, RecursionError) as exc:  # Spark reads some such text (single quotes, text after it)
        raise NotHere("a message that is not JSON") from exc
    except RepeatedKey:
        try:
            json.loads(body, parse_float=checked_decimal, parse_constant=Decimal)
        except (ValueError, RecursionError) as exc:  # not JSON after the repeated key either
            raise NotHere("a message that is not JSON") from exc
        raise


def _objects(payload: Any) -> list[dict[str, Any]]:
    """The payload's object and the objects among its values (the envelope's before, after, source...)."""
    if type(payload) is not dict:
        return []
    objects = [v for v in payload.values() if type(v) is dict]
    objects.append(payload)
    return objects


class RepeatedKey(Exception):
    """A key repeated in one JSON object of a message that is JSON otherwise."""


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object; RepeatedKey when a key repeats."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        repeated = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise RepeatedKey(f"{MALFORMED}: key {repeated!r} repeated in an object")
    return obj


# Objects made in C; `_payload` proves their keys distinct. NaN and Infinity literals: Spark reads
# them, and its map of the row holds them as quoted text ('"NaN"'), as a number beyond a double.
_QUICK = json.JSONDecoder(parse_float=checked_decimal, parse_constant=Decimal)


def _parse_head(head: bytes, limits: PayloadLimits) -> C.EnvelopeSchema | None:
    """The schema of a message head (`{"schema":<schema>,"payload":`), as decode/debezium.py
    `_schema_of` reads it; NotHere for a head that one reads otherwise or that breaks a limit."""
    try:
        text = head[: -len(_PAYLOAD_KEY)].decode("utf-8")
        start = _SCHEMA_START.match(text)
        if start is None:
            raise NotHere("a message head that is not a schema")
        value, end = json.JSONDecoder().raw_decode(text, start.end())
    except (ValueError, UnicodeDecodeError) as exc:
        raise NotHere("a message head that is not JSON") from exc
    if text[end:].strip() != ",":
        raise NotHere("a message whose schema is not followed by its payload")
    if lim.nesting_depth(text + "}") > limits.max_nesting_depth:
        raise NotHere("a message schema nested beyond the limit")
    if value is None:
        return None
    try:
        return C.parse_envelope_schema(json.dumps(value))
    except ValueError as exc:
        raise NotHere(f"a schema that describes no row ({exc})") from exc


def envelope_of(payload: dict[str, Any], schema: Any, schema_id: int) -> Envelope:
    """The change event of a Debezium payload (the JSON converter's `payload`, or an Avro record
    shaped as one) with its envelope schema. One with the Spark path's `error` (a dead letter)
    when its before, after or source is not an object (Spark cannot parse it: malformed, no row,
    no source; the parts that are objects are kept, as Spark's from_json keeps them, for the
    fields the table lacks) or it has no op; NotHere for an op that is not text, and for a
    malformed truncate (the Spark path applies it)."""
    before, after, source = payload.get("before"), payload.get("after"), payload.get("source")
    op = payload.get("op")
    for part in (before, after, source):
        if part is not None and not isinstance(part, dict):
            if type(op) is str and op.strip(" ").lower() == "t":  # the Spark path applies it all the same
                raise NotHere("a truncate whose before, after or source is not an object")
            # Spark's from_json keeps the parts that are objects: their fields the table lacks count
            return Envelope(
                op if type(op) is str else "",
                before if isinstance(before, dict) else None,
                after if isinstance(after, dict) else None,
                {},
                None,
                schema,
                schema_id,
                error=MALFORMED,
            )
    if op is None:
        op, error = "", OP_MISSING
    elif type(op) is str:
        error = None
    else:
        raise NotHere("a message whose op is not text")
    return Envelope(
        op=op,
        before=before,
        after=after,
        source=source or {},
        ts_ms=payload.get("ts_ms"),
        schema=schema,
        schema_id=schema_id,
        error=error,
    )


def head_schema(head: bytes, limits: PayloadLimits) -> C.EnvelopeSchema | None:
    """The schema of a message head (`{"schema":<schema>,"payload":`) as `EnvelopeReader` reads it."""
    return _parse_head(head, limits)
