"""Numbers, NaN and Infinity in Debezium rows as the Spark path reads them (decode/spark_compat/connect_text.py):
the Python decoder against the Spark decoder on values the frozen conversion cases lack
(tests/golden/debezium_conversions/)."""

from __future__ import annotations

import math
from typing import Any

from icetide.decode.spark_compat.connect_text import field_text, float32_of, time_of_day_text
from tests.test_debezium_arrow import _FULL_TYPES_TABLE, DEAD_LETTER, REFUSED, SAME, compare_each, full_types

# (column, the value's JSON text as sent, expected): see tests/test_debezium_arrow.py CONVERSIONS
NUMBERS_AS_SENT: list[tuple[str, str, str]] = [
    # a dead letter quotes the value's text as Spark's map of the row holds it (Java's for a number)
    ("tiny_c", "1.50", DEAD_LETTER),
    ("tiny_c", "1E3", DEAD_LETTER),
    ("tiny_c", "1e400", DEAD_LETTER),  # '"Infinity"'
    ("tiny_c", "-0.0", DEAD_LETTER),
    ("tiny_c", "NaN", DEAD_LETTER),  # '"NaN"'
    ("tiny_c", "-Infinity", DEAD_LETTER),
    ("tiny_c", "1e23", DEAD_LETTER),  # '1.0E23' (SHORTEST)
    ("tiny_c", '{"a":1.50,"b":"\\u0001x\\u001f","c":[1E3,null,true]}', DEAD_LETTER),  # \u001F
    ("big_c", "1e3", DEAD_LETTER),
    ("year_c", "Infinity", DEAD_LETTER),
    ("flag_c", "1.0", DEAD_LETTER),
    ("flag_c", "NaN", DEAD_LETTER),
    # into a STRING column: Jackson's text
    ("varchar_c", "1E3", DEAD_LETTER),  # declared otherwise (issue 49)
    ("varchar_c", "1e7", DEAD_LETTER),  # declared otherwise (issue 49)
    ("varchar_c", "0.1e1", DEAD_LETTER),  # declared otherwise (issue 49)
    ("varchar_c", "1e400", DEAD_LETTER),  # declared otherwise (issue 49)
    ("varchar_c", "NaN", DEAD_LETTER),  # declared otherwise (issue 49)
    ("varchar_c", "-Infinity", DEAD_LETTER),  # declared otherwise (issue 49)
    (
        "varchar_c",
        '{"a":1.50,"b":"\\u0001x\\u001f\\u007f/","c":[1E3,null,true]}',
        DEAD_LETTER,
    ),  # declared otherwise (issue 49)
    ("varchar_c", "4.9e-324", DEAD_LETTER),  # declared otherwise (issue 49), written 5.0E-324
    # FLOAT and DOUBLE: infinity read, NaN quoted (a dead letter); a finite number beyond a double
    # is refused (issue 49; Spark: infinity), its golden entry rewritten by hand
    ("real_c", "NaN", DEAD_LETTER),
    ("real_c", "Infinity", SAME),
    ("real_c", "-Infinity", SAME),
    ("real_c", "1e400", DEAD_LETTER),
    ("real_c", "-3.5e38", DEAD_LETTER),  # within a double, beyond FLOAT: refused (issue 49; Spark: -infinity)
    ("real_c", "3.4028235677973366e38", SAME),  # the halfway double: its shortest text is below it
    ("real_c", "1.000000059604644775390625", SAME),
    ("real_c", '"1.000000059604644775390625"', DEAD_LETTER),  # exactly halfway: to even
    ("double_c", "NaN", DEAD_LETTER),
    ("double_c", "Infinity", SAME),
    ("double_c", "-1e400", DEAD_LETTER),
    ("double_c", "-" + "9" * 400, DEAD_LETTER),
    # a Connect Decimal sent as a number or numeric text: read again, exactly; a digit beyond the
    # declared scale is refused (issue 49; Spark rounded it half up)
    ("decimal_c", "12.50001", DEAD_LETTER),
    ("decimal_c", "12.50005", DEAD_LETTER),
    ("decimal_c", "1e2", SAME),
    ("decimal_c", "1E-2", SAME),
    ("decimal_c", "1234.56789", DEAD_LETTER),
    ("decimal_c", "-0.0", SAME),
    ("decimal_c", "0.00001", DEAD_LETTER),
    ("decimal_c", "1234", SAME),  # four digits: base64 to Spark
    ("decimal_c", "12", SAME),
    ("decimal_c", "12345678901234567890.1234", DEAD_LETTER),  # the error quotes its double's 17 digits
    ("decimal_c", "1e40", DEAD_LETTER),  # beyond DECIMAL(38,4) on the second read
    ("decimal_c", "NaN", DEAD_LETTER),
    ("decimal_c", "1e400", DEAD_LETTER),
    ("decimal_c", '"1e2"', SAME),
    ("decimal_c", '"-12.5"', SAME),
    ("decimal_c", '"12.50"', SAME),
    ("decimal_c", "true", DEAD_LETTER),  # base64
    ("decimal_c", '{"a":1}', DEAD_LETTER),
    ("fine_c", "1.5", SAME),
    ("fine_c", "1.00005", DEAD_LETTER),  # scale 6, then a digit DECIMAL(8,4) would round
    ("coarse_c", "-1.005", DEAD_LETTER),
    ("decimal_s", "12.345678", DEAD_LETTER),
    ("whole_s", "-1.5", DEAD_LETTER),
    # times of day: up to 19 digits, Java's long arithmetic
    ("time_c", "1e3", DEAD_LETTER),
    ("time_c", "NaN", DEAD_LETTER),
    ("time_c", '"1.5"', DEAD_LETTER),
    ("time_c", "-9223372036854775809", DEAD_LETTER),  # declared otherwise (issue 49)
    ("time_c", '"-0012"', DEAD_LETTER),  # declared otherwise (issue 49)
    ("micro_time_i", "9223372036854775808", DEAD_LETTER),
    ("micro_time_i", "1.5", DEAD_LETTER),
    ("ms_time_c", "9223372036854775807", DEAD_LETTER),  # times 1000 wraps: '-00:00:00.001000'
    ("ms_time_c", str(2**60), DEAD_LETTER),  # wraps to -2**63
    ("nano_time_c", "-9223372036854775808", DEAD_LETTER),  # finer than a microsecond (issue 49)
    # epoch timestamps from text; numbers that are not integers never read as times
    ("datetime6_c", "1.5e15", DEAD_LETTER),
    ("datetime6_c", "1595008822123456.0", DEAD_LETTER),
    ("datetime6_c", "NaN", DEAD_LETTER),
    ("datetime6_c", "true", DEAD_LETTER),
    ("datetime6_c", '"-1"', DEAD_LETTER),  # declared otherwise (issue 49)
    ("datetime6_c", '"1e3"', DEAD_LETTER),  # text, not a time to Spark's cast (decode/spark_compat/datetime_casts.py)
    ("datetime6_c", '"2020-07-17T18:00:22.5Z"', DEAD_LETTER),  # declared otherwise (issue 49)
    ("nanos_c", '"1595008822123456789"', DEAD_LETTER),  # declared otherwise (issue 49)
    ("nanos_c", '"-1001"', DEAD_LETTER),  # declared otherwise (issue 49)
    ("nanos_c", '"9223372036854775808"', DEAD_LETTER),
    ("nanos_c", '"2020-07-17T18:00:22Z"', DEAD_LETTER),
    ("nanos_c", "1.5", DEAD_LETTER),
    ("datetime3_c", "1.5", DEAD_LETTER),
    ("datetime3_c", "1e3", DEAD_LETTER),
    ("datetime3_c", "NaN", DEAD_LETTER),
    ("date_c", "1.5", DEAD_LETTER),
    ("date_c", "NaN", DEAD_LETTER),
    # a second's fraction past microseconds: Spark ignores the digits; dropping them is a repair, so
    # a dead letter since issue 49 (the golden entries rewritten by hand)
    ("timestamp_c", '"2020-07-17T18:00:22.9999999999999999999Z"', DEAD_LETTER),
    ("timestamp_c", '"2020-07-17 18:00:22.123456789-0800"', DEAD_LETTER),
    ("timestamp_c", '"2020-07-17T18:00:22.000000001+05:30"', DEAD_LETTER),
    ("timestamp_c", '"9999-12-31T23:59:59.9999999Z"', DEAD_LETTER),
    ("timestamp_c", "NaN", DEAD_LETTER),
    ("timestamp_c", "1.5", DEAD_LETTER),
]


# (column, value as sent) -> (Java 17's text of the double in the Spark SQL decoder's output, the
# shortest digits the Python decoder writes instead, as Java 19 on does): a deliberate difference.
SHORTEST: dict[tuple[str, str], tuple[str, str]] = {
    ("tiny_c", "1e23"): ("9.999999999999999E22", "1.0E23"),
}  # ("varchar_c", "4.9e-324") is a declared dead letter since issue 49, its golden entry rewritten


def _message(row_id: int, column: str, raw: str, before: str | None = None) -> bytes:
    """The full_types message with `raw` (JSON text) as the value of `column`; with `before`, an
    update whose before is that JSON text ("{id}": the row id)."""
    text = full_types(row_id, "u" if before else "r", **{column: "__value__"}).decode()
    text = text.replace('"__value__"', raw)
    if before is not None:
        text = text.replace('"before":null', '"before":' + before.replace("{id}", str(row_id)), 1)
    return text.encode()


def _check(spark: Any, cases: list[tuple[str, str, str]], messages: list[bytes]) -> None:
    shortest = {i: SHORTEST[c, r] for i, (c, r, _) in enumerate(cases) if (c, r) in SHORTEST}
    refused, bad = compare_each(spark, messages, _FULL_TYPES_TABLE, ["int_c"], shortest=shortest)
    wrong = []
    for i, (column, raw, expected) in enumerate(cases):
        if (i in refused) != (expected == REFUSED):
            wrong.append(f"{column}={raw}: {refused.get(i, 'accepted')}")
        elif expected != REFUSED and (i in bad) != (expected == DEAD_LETTER):
            wrong.append(f"{column}={raw}: Spark: {bad.get(i)}")
    assert not wrong, "\n".join(wrong)


def test_numbers_decode_as_on_the_spark_path(spark: Any) -> None:
    """One message per case, all in one Spark decode; each decoded alone on the Python side."""
    messages = [_message(i, column, raw) for i, (column, raw, _) in enumerate(NUMBERS_AS_SENT)]
    _check(spark, NUMBERS_AS_SENT, messages)


# (column, after's value, expected, before): the Spark path reads a Decimal sent as a number
# again from the payload, both row parts, each on its own (Spark's partial results: a before that
# does not read as a decimal leaves after's value; tests/golden/debezium_conversions/values_not_here.json)
UPDATES: list[tuple[str, str, str, str]] = [
    ("decimal_c", "13.25", SAME, '{"int_c":{id},"decimal_c":12.5}'),
    ("decimal_c", '"13.25"', SAME, '{"int_c":{id},"decimal_c":"1,2.5"}'),  # Spark's parser drops commas
    ("decimal_c", "13.25", SAME, '{"int_c":{id},"decimal_c":"AeJA"}'),  # base64 fails the second read
    ("decimal_c", '"AeJA"', SAME, '{"int_c":{id},"decimal_c":12.5}'),  # base64 is read as such
    ("decimal_c", '"AeJA"', SAME, '{"int_c":999,"decimal_c":12.5}'),  # the key moves: before is read too
    ("decimal_c", "13.25", SAME, '{"int_c":998,"decimal_c":12.5}'),
    ("int_c", "1.0", DEAD_LETTER, '{"int_c":1.0}'),  # a key compared as Spark's text of it
]


def test_decimal_numbers_in_updates_decode_as_on_the_spark_path(spark: Any) -> None:
    messages = [_message(i, column, raw, before) for i, (column, raw, _, before) in enumerate(UPDATES)]
    _check(spark, [(c, r, e) for c, r, e, _ in UPDATES], messages)


def test_field_text_spells_numbers_as_jackson() -> None:
    from decimal import Decimal

    assert field_text(Decimal("1E3")) == "1000.0"
    assert field_text(Decimal("1e7")) == "1.0E7"
    assert field_text(Decimal("NaN")) == '"NaN"'
    assert field_text(Decimal("-Infinity")) == '"-Infinity"'
    assert field_text(Decimal("1e400")) == '"Infinity"'
    assert field_text([Decimal("1.50"), "\x1f", None]) == '[1.5,"\\u001F",null]'
    # the shortest digits, as Java 19 on writes them; Java 17 wrote 9.999999999999999E22, 4.9E-324
    # and 1.15292150460684698E18 (a deliberate difference, decode/spark_compat/connect_text.py)
    assert field_text(Decimal("1e23")) == "1.0E23"
    assert field_text(Decimal("4.9e-324")) == "5.0E-324"
    assert field_text(Decimal("1152921504606846976.0")) == "1.152921504606847E18"
    assert field_text([Decimal("1e23")]) == "[1.0E23]"


def test_float32_of_rounds_text_to_nearest_even() -> None:
    from fractions import Fraction

    assert float32_of(Fraction(1) + Fraction(1, 2**24)) == 1.0
    assert float32_of(Fraction(1) + Fraction(1, 2**24) + Fraction(1, 10**30)) == 1.0000001192092896
    assert float32_of(Fraction(2**128 - 2**103)) == math.inf
    assert float32_of(-Fraction(2**128 - 2**103 - 1)) == -3.4028234663852886e38


def test_time_of_day_text() -> None:
    assert time_of_day_text(-1500) == "-00:00:00.001500"
    mysql_time_max = 838 * 3_600_000_000 + 59 * 60_000_000 + 59_000_000
    assert time_of_day_text(mysql_time_max) == "838:59:59.000000"


def test_a_decimal_of_38_digits_keeps_them_all() -> None:
    """Python's default decimal context keeps 28 digits; a DECIMAL(38) column needs all 38."""
    import base64
    from decimal import Decimal

    import pyarrow as pa
    import pytest

    from icetide.decode.debezium import connect_schema as C
    from icetide.decode.debezium.conversions import Conversions
    from icetide.decode.spark_compat.connect_text import DeadLetter

    f = C.ConnectField("d", "bytes", C.DECIMAL, parameters={"scale": "2"})
    convert = Conversions().converter(f, pa.decimal128(38, 4), "d")
    unscaled = 10**35 + 12345
    sent = base64.b64encode(unscaled.to_bytes(16, "big", signed=True)).decode()
    assert convert(sent) == Decimal(f"{unscaled}E-2")
    assert convert(Decimal("123456789876543212345678987654321.120")) == Decimal(
        "123456789876543212345678987654321.1200"
    )
    # a digit beyond the declared scale 2 is refused, not rounded (issue 49), however many digits
    with pytest.raises(DeadLetter) as refused:
        convert(Decimal("123456789876543212345678987654321.115"))
    assert refused.value.error == (
        "column d: '123456789876543212345678987654321.115' has digits beyond the scale 2 its schema declares"
    )


def test_values_of_the_declared_form_pass_in_one_call_and_the_rest_are_checked() -> None:
    """Conversions.converter returns a value of the declared form that the column stores as it is
    at once (decode/debezium/conversions.py `_read_as_is`); every other value is read by the column
    and checked against the declared type, as before the shortcut."""
    import pyarrow as pa
    import pytest

    from icetide.decode.debezium import connect_schema as C
    from icetide.decode.debezium.conversions import Conversions
    from icetide.decode.spark_compat.connect_text import DeadLetter

    read = Conversions().converter
    int32_into_bigint = read(C.ConnectField("n", "int32"), pa.int64(), "n")
    assert int32_into_bigint(2**31 - 1) == 2**31 - 1
    for bad in (2**31, "7"):  # beyond int32 (a BIGINT column would take it), text the column would read
        with pytest.raises(DeadLetter, match=r"column n: .* where the message's schema declares int32"):
            int32_into_bigint(bad)
    for bad in (7.5, True):  # refused by the column's reading first, with its own error
        with pytest.raises(DeadLetter):
            int32_into_bigint(bad)
    int64_into_int = read(C.ConnectField("n", "int64"), pa.int32(), "n")
    assert int64_into_int(-(2**31)) == -(2**31)
    with pytest.raises(DeadLetter):
        int64_into_int(2**31)  # declared int64, beyond the INT column
    text = read(C.ConnectField("s", "string"), pa.string(), "s")
    assert text("a") == "a"
    with pytest.raises(DeadLetter, match="declares string"):
        text({"nested": True})
    double = read(C.ConnectField("d", "double"), pa.float64(), "d")
    assert double(1.5) == 1.5 and double(2) == 2.0 and math.isnan(double("NaN"))  # Jackson's non-finite text
    flag = read(C.ConnectField("b", "boolean"), pa.bool_(), "b")
    assert flag(False) is False
    with pytest.raises(DeadLetter, match="declares boolean"):
        flag(0)
