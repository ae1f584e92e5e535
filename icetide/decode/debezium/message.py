"""Read Debezium messages of Kafka Connect's JSON converter into change events, for the Python
decoder (decode/debezium/rows.py): the schema part parsed once per distinct text, the payload
parsed as the former Spark SQL decoder read it.

A message the Spark decoder makes a dead letter before reading its row (a payload over a limit of
decode/limits.py, text that is not a JSON object, a before, after or source that is not an
object, no op) is an `Envelope` with that dead letter's `error`; `NotHere` where the Spark decoder
does something else with it, or this module cannot tell what. A `final` reader (the Spark path's
tasks) reads as the Spark decoder did the messages laid out otherwise than the JSON converter
writes them, and makes text that is not JSON a dead letter that says what is wrong (docs/design.md,
"One Debezium decoder on the Spark path").
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from icetide.decode import limits as lim
from icetide.decode.debezium import connect_schema as C
from icetide.decode.debezium.conversions import NotHere
from icetide.decode.frames import EMPTY_PAYLOAD, MALFORMED, NOT_AN_OBJECT
from icetide.decode.limits import PayloadLimits
from icetide.decode.spark_compat.connect_text import field_text
from icetide.decode.spark_compat.json_values import MAX_NUMBER_LENGTH, checked_decimal, checked_int

__all__ = ["Envelope", "EnvelopeReader", "envelope_of", "has_long_number", "head_schema"]

_PAYLOAD_KEY = b'"payload":'
_HEAD_START = b'{"schema"'
_SCHEMA_START = re.compile(r'\{"schema"\s*:\s*')
_LONE_SURROGATE = re.compile(lim.LONE_SURROGATE.encode())
_JSON_SPACE = " \t\n\r"  # the whitespace JSON allows between tokens
_JSON_SPACE_BYTES = _JSON_SPACE.encode()
OP_MISSING = "not a Debezium change event: op is missing"
_SPACE_AFTER_QUOTE = re.compile(rb'"[ \t\n\r]')
_LONG_DIGITS = re.compile(rb"[0-9]{%d}" % (MAX_NUMBER_LENGTH + 1))

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

    def __init__(self, limits: PayloadLimits, *, final: bool = False) -> None:
        """`final`: no other decoder reads what this one refuses (the Spark path's tasks). A
        message the quick split below does not take is then read whole (`_whole`), as the Spark
        SQL decoder read it, or is a dead letter that says why (text that is not JSON); without
        `final` (the sync fast path) it is NotHere, and the Spark path reads the batch."""
        self.limits = limits
        self.final = final
        self.heads: dict[bytes, tuple[int, C.EnvelopeSchema | None]] = {}
        self._last: bytes | None = None

    def read(self, value: bytes, *, limited: bool = True) -> Envelope | None:
        """The message's event (one with an error: see `envelope_of` and `_poisoned`), None for a
        tombstone; NotHere for anything else the Spark path reads (unless `final`: then such a
        message is read whole, `_whole`). Not `limited`: the payload
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
            try:
                schema_id, schema, body = self._split(value)
            except NotHere:
                if not self.final:
                    raise
                return self._whole(value, limited)
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
        except NotJson as exc:
            if not self.final:
                raise NotHere("a message that is not JSON") from exc
            return self._whole(value, limited)  # its error's position in the whole message
        except RepeatedKey as exc:
            # Which value is meant is the producer's to say: a dead letter. (The Spark SQL decoder
            # loses such a record: neither a row nor a dead letter.)
            return _dead(str(exc))
        if payload is None:
            return None  # {"schema": ..., "payload": null}
        if not isinstance(payload, dict):  # {"schema": ..., "payload": [...]}: from_json reads no payload
            return _dead(MALFORMED)
        if schema_id == 0 and ("schema" in payload or "payload" in payload):
            if not self.final:
                raise NotHere("a message with a schema in another layout than the JSON converter's")
            return self._wrapped(payload)
        if self.final and not isinstance(payload.get("op"), str | None):
            payload["op"] = field_text(payload["op"])  # as from_json reads a JSON value into text
        return envelope_of(payload, schema, schema_id)

    def head(self, value: bytes) -> bytes:
        """The head of a message as the JSON converter writes it (`{"schema":<schema>,"payload":`),
        its schema parsed once (`heads`); NotHere for a message laid out otherwise."""
        head = self._last
        if head is None or not value.startswith(head):
            cut = value.find(_PAYLOAD_KEY) if value.startswith(_HEAD_START) else -1
            if cut < 0:
                raise NotHere("a message with a schema but no payload key")
            head = value[: cut + len(_PAYLOAD_KEY)]
            if head not in self.heads:
                depth = lim.nesting_depth(head[: -len(_PAYLOAD_KEY)].decode("utf-8", "replace") + "}")
                if depth > self.limits.max_nesting_depth:
                    raise NotHere("a message schema nested beyond the limit")
                self.heads[head] = (len(self.heads) + 1, _parse_head(head, self.limits))
            self._last = head
        return head

    def _split(self, value: bytes) -> tuple[int, C.EnvelopeSchema | None, bytes]:
        """(schema id, schema, payload text) of a message as the JSON converter writes it
        (`{"schema":<schema>,"payload":<payload>}`); NotHere for any other."""
        head = self.head(value)
        schema_id, schema = self.heads[head]
        body = value[len(head) :].rstrip()
        if not body.endswith(b"}"):
            raise NotHere("a message whose payload is not its last part")
        return schema_id, schema, body[:-1]

    def _whole(self, value: bytes, limited: bool) -> Envelope | None:
        """A message (a JSON object, spaces before it) the quick split does not take, read whole:
        a dead letter naming why for text that is not JSON, else as `_wrapped` reads it."""
        if limited and lim.nesting_depth(value.decode("utf-8", "replace")) > self.limits.max_nesting_depth:
            return self._poisoned(value)  # checked on the payload alone so far
        try:
            message = _payload(value, value.count(b"{"))
        except NotJson as exc:
            return _dead(f"{MALFORMED}: {exc}")
        except RepeatedKey as exc:
            return _dead(str(exc))
        if not isinstance(message, dict):
            return _dead(NOT_AN_OBJECT)
        return self._wrapped(message)

    def _wrapped(self, message: dict[str, Any]) -> Envelope | None:
        """A JSON object as the Spark SQL decoder read it: its `payload` with its `schema`
        (wherever the two are, and whatever is beside them); without a payload, the object itself as a
        schemaless event, but a tombstone when it has a null `payload` and no op."""
        payload = message.get("payload")
        if payload is None:
            if "payload" in message and message.get("op") is None:
                return None
            if not isinstance(message.get("op"), str | None):
                message["op"] = field_text(message["op"])
            return envelope_of(message, None, 0)
        if not isinstance(payload, dict):
            return _dead(MALFORMED)
        schema_id, schema = 0, None
        if message.get("schema") is not None:
            text = json.dumps(message["schema"], separators=(",", ":"), ensure_ascii=False, default=str)
            head = b'{"schema":' + text.encode() + b"," + _PAYLOAD_KEY
            if head not in self.heads:
                self.heads[head] = (len(self.heads) + 1, _parse_head(head, self.limits))
            schema_id, schema = self.heads[head]
        if not isinstance(payload.get("op"), str | None):
            payload["op"] = field_text(payload["op"])
        return envelope_of(payload, schema, schema_id)

    def _poisoned(self, value: bytes) -> Envelope | None:
        """A message over a payload limit: on the Spark path a dead letter with the first limit's
        error (decode/limits.py `payload_error`, the order of the former Spark SQL JSON decoder `limit_error`), read
        all the same (its text as `spark_text` gives it): a tombstone is skipped, the fields the
        table lacks count, and a truncate is applied (NotHere unless `final`: the Spark path's tasks
        take a truncate whatever its error, decode/debezium/task.py)."""
        error = lim.payload_error(value, self.limits)[1]
        if error is None:
            raise NotHere("a message the payload limits were thought to refuse")
        envelope = self.read(lim.spark_text(value).encode(), limited=False)
        if envelope is None:
            return None
        if envelope.op.strip(" ").lower() == "t" and not self.final:
            raise NotHere("a truncate over a payload limit (the Spark path applies it)")
        envelope.error = error
        return envelope


def _not_an_object(value: bytes) -> Envelope | None:
    """A value that does not start with an object (after JSON's whitespace), as the Spark path
    reads it: a tombstone (`null`, with spaces around it at most: Spark's trim), or a dead letter
    (the former Spark SQL JSON decoder `malformed_error`; from_json reads JSON whitespace alone as no field at all)."""
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
    as `Decimal` (decode/spark_compat/connect_text.py); NotJson for text that is not JSON, NotHere for a number longer
    than Spark reads, RepeatedKey for a key repeated in an object (`braces`: how many "{" bytes `body` has).

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
    if has_long_number(body):  # an integer longer than Spark's reader takes, maybe: checked one by one
        try:
            json.loads(body, parse_int=checked_int, parse_float=checked_decimal, parse_constant=Decimal)
        except (ValueError, RecursionError) as exc:
            raise NotJson.of(exc) from exc
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
        raise NotJson.of(exc) from exc
    except RepeatedKey:
        try:
            json.loads(body, parse_float=checked_decimal, parse_constant=Decimal)
        except (ValueError, RecursionError) as exc:  # not JSON after the repeated key either
            raise NotJson.of(exc) from exc
        raise


def has_long_number(body: bytes) -> bool:
    """Whether `body` has a run of digits longer than Spark's reader takes as a number. Such a run
    covers a byte at a multiple of MAX_NUMBER_LENGTH: those few bytes are looked at first."""
    step = MAX_NUMBER_LENGTH
    return any(48 <= body[i] <= 57 for i in range(step, len(body), step)) and bool(_LONG_DIGITS.search(body))


class NotJson(Exception):
    """Text that is not JSON: what Python's parser says of it, and where."""

    @classmethod
    def of(cls, exc: ValueError | RecursionError) -> NotJson:
        if isinstance(exc, json.JSONDecodeError):
            if exc.pos >= len(exc.doc.rstrip(_JSON_SPACE)):
                return cls(f"cut short: the text ends at character {exc.pos}, inside the JSON")
            if exc.msg == "Extra data":
                return cls(f"text after the JSON object, at character {exc.pos}")
            what = exc.msg.removesuffix(" at")
            return cls(f"{what[:1].lower()}{what[1:]} at character {exc.pos}")
        if isinstance(exc, RecursionError):
            return cls("nested too deep to read")
        if str(exc) == "number too long":
            return cls(f"a number longer than {MAX_NUMBER_LENGTH} characters")
        return cls(str(exc))


def _dead(error: str) -> Envelope:
    """A message the Spark path makes a dead letter before reading its row."""
    return Envelope("", None, None, {}, None, None, 0, error=error)


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
    """The schema of a message head (`{"schema":<schema>,"payload":`), as the former Spark SQL decoder
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
    if value is None:
        return None
    try:
        return C.parse_envelope_schema(json.dumps(value))
    except ValueError:
        return None  # its messages are read as schemaless, as the Spark SQL decoder read them


def envelope_of(payload: dict[str, Any], schema: Any, schema_id: int) -> Envelope:
    """The change event of a Debezium payload (the JSON converter's `payload`, or an Avro record
    shaped as one) with its envelope schema. One with the Spark path's `error` (a dead letter)
    when its before, after or source is not an object (Spark cannot parse it: malformed, no row,
    no source; the parts that are objects are kept, as Spark's from_json keeps them, for the
    fields the table lacks, and its op and time, for a truncate's place) or it has no op; NotHere
    for an op that is not text. Such a truncate is applied all the same on the Spark path
    (decode/debezium/task.py), and NotHere on the sync fast path (`TableRows.add`)."""
    before, after, source = payload.get("before"), payload.get("after"), payload.get("source")
    op = payload.get("op")
    for part in (before, after, source):
        if part is not None and not isinstance(part, dict):
            # Spark's from_json keeps the parts that are objects: their fields the table lacks count
            return Envelope(
                op if type(op) is str else "",
                before if isinstance(before, dict) else None,
                after if isinstance(after, dict) else None,
                {},
                payload.get("ts_ms"),
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
