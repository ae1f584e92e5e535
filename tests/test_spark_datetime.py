"""decode/spark_compat/datetime_casts.py against Spark 3.5.7's own `DateTimeUtils.stringToTimestamp` (session
zone UTC unless named): the expected values were printed by a Java program calling that class from
the jars in this project's virtualenv (a review, 2026-11-26), for the spellings where the Python
port first differed."""

from __future__ import annotations

import pytest

from icetide.decode.spark_compat import datetime_casts as spark_datetime

# (text, session zone, Spark's epoch microseconds; None: Spark gives null)
SPARK_3_5_7 = [
    ("2020-01-01 00:00:00 UTC+1:00", "UTC", 1577833200000000),  # getZoneId's replaceFirst is not anchored
    ("2020-01-01 00:00:00 GMT-5:00", "UTC", 1577854800000000),
    ("2020-01-01 00:00:00 GMT0", "UTC", 1577836800000000),  # a tz database region, not GMT plus an offset
    ("2020-01-01T00:00:00\u00a0+01:00", "UTC", None),  # String.trim keeps a no-break space: no zone
    ("2020-01-01 00:00:00 UTC", "UTC", 1577836800000000),
    ("2020-01-01T00:00:00Z", "UTC", 1577836800000000),
]


@pytest.mark.parametrize(("text", "zone", "expected"), SPARK_3_5_7)
def test_timestamps_as_spark_reads_them(text: str, zone: str, expected: int | None) -> None:
    assert spark_datetime.timestamp_micros(text, zone, with_zone=True) == expected


@pytest.mark.parametrize(
    ("text", "zone"), [("0001-01-01T00:00:00+01:00", "UTC"), ("0001-01-01 00:00:00", "Asia/Kolkata")]
)
def test_the_first_day_less_an_offset_is_before_year_one(text: str, zone: str) -> None:
    """Spark gives an instant before 0001-01-01T00:00Z, which no column holds (a dead letter);
    the port once raised OverflowError computing it."""
    micros = spark_datetime.timestamp_micros(text, zone, with_zone=True)
    assert micros is not None and micros < -62135596800000000


# issue 49: what Spark's cast reads only by dropping part of the text (TIMESTAMP_NTZ: with_zone False)
DROPPED = [
    ("2020-07-17T18:00:22+05:30", False, "its zone would be dropped"),
    ("2020-07-17T18:00:22Z", False, "its zone would be dropped"),
    ("2020-07-17T18:00:22.1234567Z", True, "its digits beyond the microsecond would be dropped"),
    ("2020-07-17 18:00:22.000000001", False, "its digits beyond the microsecond would be dropped"),
]


@pytest.mark.parametrize(("text", "with_zone", "why"), DROPPED)
def test_a_timestamp_read_only_by_dropping_text_is_inexact(text: str, with_zone: bool, why: str) -> None:
    with pytest.raises(spark_datetime.Inexact, match=why):
        spark_datetime.timestamp_micros(text, "UTC", with_zone=with_zone)


@pytest.mark.parametrize(
    "text", ["2020-07-17 junk", "2020-07-17T18:00:22", "2020-07-17T00:00:00Z", "2020-07-17 00:00:01"]
)
def test_a_date_read_only_by_dropping_text_is_inexact(text: str) -> None:
    with pytest.raises(spark_datetime.Inexact, match="the text after its date would be dropped"):
        spark_datetime.date_days(text)


@pytest.mark.parametrize(
    ("text", "days"),
    [(" 2020-07-17\n", 18460), ("2020-07-17T00:00:00", 18460), ("2020-07-17 00:00:00.000", 18460), ("2020-7", 18444)],
)
def test_a_date_that_drops_nothing_reads_as_spark_reads_it(text: str, days: int) -> None:
    """Spark's spellings (spaces trimmed, one-digit fields, no day) and a midnight without a zone."""
    assert spark_datetime.date_days(text) == days


def test_zeros_beyond_the_microsecond_and_a_zoned_timestamp_read() -> None:
    assert spark_datetime.timestamp_micros("2020-07-17T18:00:22.1234560", "UTC", with_zone=False) == 1595008822123456
    assert spark_datetime.timestamp_micros("2020-07-17T18:00:22+05:30", "UTC", with_zone=True) == 1594989022000000
