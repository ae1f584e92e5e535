"""Spark's casts of text to TIMESTAMP, TIMESTAMP_NTZ and DATE (SparkDateTimeUtils `stringToTimestamp`,
`stringToTimestampWithoutTimeZone` and `stringToDate` of Spark 3.5), in Python: the Debezium
decoder reads every time and date text that is no epoch integer with them, as the Spark SQL
decoder's `try_cast` did. They take more than the arrow_json decoder's rules (one-digit fields, a
year of 5 or 6 digits, a zone as hours alone or by name, "UTC" or "Europe/Paris", after a space)
and less ("2020-07-17T18:00Z", a time without seconds but with a zone; an offset beyond 18 hours),
as measured in tests/golden/debezium_conversions/values_not_here.json.

Each function answers a value, None where Spark gives null, or raises `Unsure` where Spark's
answer depends on what Python cannot tell exactly (a year 0 or 10000 a zone's offset may bring
back into years 1-9999), so that the caller does not guess. A time without a date ("18:00:22",
"T18:00:22"), which Spark's TIMESTAMP cast dates today, deliberately gives None (a dead letter):
the day a batch happens to run is no value of the record. A zone name Python's time zone database does not know is taken
as one Java does not know either (null): deliberately, where Java's database is newer, the
record is a dead letter rather than a time in a zone guessed.

Where Spark's cast reads a text only by dropping part of it, these functions raise `Inexact`
instead (issue 49: a value that cannot be read exactly is a dead letter, never repaired): a zone
in a TIMESTAMP_NTZ's text (Spark keeps the wall time, the offset dropped), digits beyond the
microsecond that are not zeros (Spark truncates them), and anything after a DATE's date but a
midnight without a zone (Spark ignores what follows a space or a "T": "2020-07-17 junk" is
2020-07-17). What Spark's casts take without dropping anything stays read as they read it: ASCII
spaces and controls around the text, a year of 5 or 6 digits, one-digit months, days and time
fields, a date without its day ("2020-07": 2020-07-01) or month, a date without a time (midnight).
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from icetide.decode.spark_compat.json_values import JAVA_TRIM

_TRIM_ALL = "".join(map(chr, [*range(0x21), 0x7F]))  # UTF8String.trimAll: ASCII spaces and controls
_EPOCH = datetime(1970, 1, 1)
_MICRO = timedelta(microseconds=1)
_OFFSET = re.compile(r"([+-])(\d{1,2}|\d\d:\d\d|\d\d:\d\d:\d\d|\d{4}|\d{6})")
_PREFIXED = re.compile(r"(UTC|GMT|UT)(.*)")
# java.time.ZoneId.SHORT_IDS
_SHORT_IDS = {
    "EST": "-05:00",
    "MST": "-07:00",
    "HST": "-10:00",
    **dict.fromkeys(["ACT", "AET", "AGT", "ART", "AST", "BET", "BST", "CAT", "CNT", "CST", "CTT", "EAT"]),
    **dict.fromkeys(["ECT", "IET", "IST", "JST", "MIT", "NET", "NST", "PLT", "PNT", "PRT", "PST", "SST", "VST"]),
}
_SHORT_REGIONS = {
    "ACT": "Australia/Darwin",
    "AET": "Australia/Sydney",
    "AGT": "America/Argentina/Buenos_Aires",
    "ART": "Africa/Cairo",
    "AST": "America/Anchorage",
    "BET": "America/Sao_Paulo",
    "BST": "Asia/Dhaka",
    "CAT": "Africa/Harare",
    "CNT": "America/St_Johns",
    "CST": "America/Chicago",
    "CTT": "Asia/Shanghai",
    "EAT": "Africa/Addis_Ababa",
    "ECT": "Europe/Paris",
    "IET": "America/Indiana/Indianapolis",
    "IST": "Asia/Kolkata",
    "JST": "Asia/Tokyo",
    "MIT": "Pacific/Apia",
    "NET": "Asia/Yerevan",
    "NST": "Pacific/Auckland",
    "PLT": "Asia/Karachi",
    "PNT": "America/Phoenix",
    "PRT": "America/Puerto_Rico",
    "PST": "America/Los_Angeles",
    "SST": "Pacific/Guadalcanal",
    "VST": "Asia/Ho_Chi_Minh",
}


class Unsure(Exception):
    """Spark's answer depends on what this module cannot tell exactly."""


class Inexact(Exception):
    """Spark's cast reads the text only by dropping part of it; the message says what."""


def _segments(text: str) -> tuple[list[int], str | None, bool, bool] | None:
    """Spark's `parseTimestampString`: (year, month, day, hour, minute, second, micros), the zone
    text, whether the text is a time alone, whether a digit beyond the microsecond that is not 0
    was dropped; None where Spark gives no timestamp."""
    s = text.strip(_TRIM_ALL)
    if not s:
        return None
    segments = [1, 1, 1, 0, 0, 0, 0, 0, 0]
    i = value = digits = micro_digits = 0
    zone: str | None = None
    just_time = dropped = False
    sign = 0
    j = 0
    if s[0] in "+-":
        sign = -1 if s[0] == "-" else 1
        j = 1

    def valid(segment: int, n: int) -> bool:
        return (
            segment == 6
            or (segment == 0 and 4 <= n <= 6)
            or (segment == 7 and n <= 2)
            or (segment not in (0, 6, 7) and 0 < n <= 2)
        )

    while j < len(s):
        c = s[j]
        if "0" <= c <= "9":
            if i == 6:
                micro_digits += 1
            if i != 6 or digits < 6:
                value = value * 10 + int(c)
            elif c != "0":
                dropped = True
            digits += 1
            j += 1
            continue
        if j == 0 and c == "T":
            just_time, i = True, i + 3
        elif i < 2:
            if c == "-":
                if not valid(i, digits):
                    return None
                segments[i], value, digits, i = value, 0, 0, i + 1
            elif i == 0 and c == ":" and not sign:
                if not valid(3, digits):
                    return None
                just_time, segments[3], value, digits, i = True, value, 0, 0, 4
            else:
                return None
        elif i == 2:
            if c not in " T" or not valid(i, digits):
                return None
            segments[i], value, digits, i = value, 0, 0, i + 1
        elif i in (3, 4):
            if c != ":" or not valid(i, digits):
                return None
            segments[i], value, digits, i = value, 0, 0, i + 1
        elif i in (5, 6):
            if not valid(i, digits):
                return None
            segments[i], value, digits, i = value, 0, 0, i + 1
            if not (c == "." and i == 6):
                zone, j = s[j:], len(s) - 1
            if i == 6 and c != ".":
                i += 1
        else:
            if not (i < len(segments) and c in ": ") or not valid(i, digits):
                return None
            segments[i], value, digits, i = value, 0, 0, i + 1
        j += 1
    if not valid(i, digits):
        return None
    segments[i] = value
    segments[6] *= 10 ** max(0, 6 - micro_digits)
    segments[0] *= sign or 1
    return segments[:7], None if zone is None else zone.strip(JAVA_TRIM), just_time, dropped


def _zone(name: str) -> timezone | ZoneInfo:
    """Spark's `getZoneId` (Java's ZoneId.of with SHORT_IDS); ValueError where Java throws."""
    name = re.sub(r"([+-])(\d):", r"\g<1>0\2:", name, count=1)  # replaceFirst: anywhere ("UTC+1:00")
    name = re.sub(r"([+-]\d\d):(\d)$", r"\1:0\2", name, count=1)
    if name == "Z":
        return UTC
    if name[:1] in "+-":
        return _offset(name)
    name = _SHORT_IDS.get(name) or _SHORT_REGIONS.get(name) or name
    if name[:1] in "+-":
        return _offset(name)
    prefixed = _PREFIXED.fullmatch(name)
    if prefixed and (not prefixed[2] or prefixed[2][0] in "+-"):  # else a region ("GMT0")
        return UTC if not prefixed[2] else _offset(prefixed[2])
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9~/._+-]+", name):
        raise ValueError(name)
    try:
        return ZoneInfo(name)
    except (OSError, KeyError) as exc:  # ZoneInfoNotFoundError: no such zone here (see the docstring)
        raise ValueError(name) from exc


def _offset(text: str) -> timezone:
    """Java's ZoneOffset.of: +h, +hh, +hh:mm, +hhmm, +hh:mm:ss, +hhmmss, at most 18 hours."""
    match = _OFFSET.fullmatch(text)
    if match is None:
        raise ValueError(text)
    digits = match[2].replace(":", "")
    hours = int(digits[:2] if len(digits) > 2 else digits)
    minutes, seconds = int(digits[2:4] or 0), int(digits[4:6] or 0)
    if minutes > 59 or seconds > 59 or hours * 3600 + minutes * 60 + seconds > 18 * 3600:
        raise ValueError(text)
    delta = timedelta(hours=hours, minutes=minutes, seconds=seconds)
    return timezone(-delta if match[1] == "-" else delta)


def timestamp_micros(text: str, time_zone: str, *, with_zone: bool) -> int | None:
    """`try_cast(text AS TIMESTAMP)` (`with_zone`; a text without a zone is in `time_zone`) or
    `AS TIMESTAMP_NTZ`, as epoch microseconds (of the wall time, for TIMESTAMP_NTZ); None where
    Spark gives null, and for a time without a date. Raises `Inexact` where Spark drops a zone
    (TIMESTAMP_NTZ) or digits beyond the microsecond."""
    parsed = _segments(text)
    if parsed is None:
        return None
    (year, month, day, hour, minute, second, micros), zone_name, just_time, dropped = parsed
    try:
        zone = _zone(zone_name) if zone_name is not None else None
        if just_time:  # TIMESTAMP: Spark takes today's date (see the docstring); TIMESTAMP_NTZ: null
            return None
        if not 1 <= year <= 9999:  # beyond what the columns hold, but for a zone's hours
            raise Unsure(text) if with_zone and year in (0, 10000) else ValueError(text)
        local = datetime(year, month, day, hour, minute, second, micros)
    except ValueError:
        return None
    if dropped:
        raise Inexact("its digits beyond the microsecond would be dropped")
    if not with_zone and zone_name is not None:
        raise Inexact("its zone would be dropped")
    if not with_zone:
        return (local - _EPOCH) // _MICRO
    offset = (zone or ZoneInfo(time_zone)).utcoffset(local)
    assert offset is not None
    return (local - _EPOCH) // _MICRO - offset // _MICRO  # in integers: 0001-01-01 less an offset is no datetime


def date_days(text: str) -> int | None:
    """`try_cast(text AS DATE)` (Spark's `stringToDate`) as epoch days; None where Spark gives
    null. Raises `Inexact` where Spark ignores text after the date (after a space or a "T") that
    is not a midnight without a zone."""
    s = text.strip(_TRIM_ALL)
    if not s:
        return None
    sign, j = 1, 0
    if s[0] in "+-":
        sign, j = (-1 if s[0] == "-" else 1), 1
    segments, i, value, digits = [1, 1, 1], 0, 0, 0
    while j < len(s) and i < 3 and s[j] not in " T":
        c = s[j]
        if i < 2 and c == "-":
            if not (4 <= digits <= 7 if i == 0 else 0 < digits <= 2):
                return None
            segments[i], value, digits, i = value, 0, 0, i + 1
        elif "0" <= c <= "9":
            value, digits = value * 10 + int(c), digits + 1
        else:
            return None
        j += 1
    if not (4 <= digits <= 7 if i == 0 else 0 < digits <= 2) or (i < 2 and j < len(s)):
        return None
    segments[i] = value
    try:
        days = (date(sign * segments[0], segments[1], segments[2]) - _EPOCH.date()).days
    except ValueError:  # no such day, or a year outside 1-9999 (beyond what the columns hold)
        return None
    if j < len(s):
        moment = _segments(s)
        if moment is None or moment[1] is not None or any(moment[0][3:]) or moment[3]:
            raise Inexact("the text after its date would be dropped")
    return days
