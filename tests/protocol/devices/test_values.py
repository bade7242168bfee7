"""Twin values against their model property: both directions, every type, every reason."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.devices import (
    MAX_TEXT_BYTES,
    AccessMode,
    InvalidValue,
    ModelProperty,
    PropertyType,
    check_desired,
    check_reported,
    coerce,
    parse_text,
    to_json,
    to_text,
)


def prop(
    ptype: PropertyType, mode: AccessMode = AccessMode.READ_WRITE, **kw: object
) -> ModelProperty:
    return ModelProperty(name="p", type=ptype, access_mode=mode, **kw)  # type: ignore[arg-type]


INT = prop(PropertyType.INT, minimum=-5, maximum=100)
DOUBLE = prop(PropertyType.DOUBLE, minimum=5.0, maximum=35.0)
FLOAT = prop(PropertyType.FLOAT)
BOOL = prop(PropertyType.BOOLEAN)
STRING = prop(PropertyType.STRING)
BYTES = prop(PropertyType.BYTES)
STREAM = prop(PropertyType.STREAM)


@pytest.mark.parametrize(
    ("p", "text", "expected"),
    [
        (INT, "42", 42),
        (INT, "-5", -5),
        (INT, "+7", 7),
        (DOUBLE, "21.5", 21.5),
        (DOUBLE, "5", 5.0),
        (FLOAT, "1e10", 1e10),
        (BOOL, "true", True),
        (BOOL, "False", False),
        (BOOL, "1", True),
        (BOOL, "F", False),
        (STRING, "OFF", "OFF"),
        (STRING, "", ""),
        (BYTES, "AAEC", b"\x00\x01\x02"),
    ],
)
def test_text_values_parse(p: ModelProperty, text: str, expected: object) -> None:
    value = parse_text(p, text)
    assert value == expected and type(value) is type(expected)


@pytest.mark.parametrize(
    ("p", "text", "reason"),
    [
        (INT, "4.2", "TypeMismatch"),
        (INT, "abc", "TypeMismatch"),
        (INT, "101", "OutOfRange"),
        (INT, "-6", "OutOfRange"),
        (INT, str(2**63), "OutOfRange"),
        (DOUBLE, "4.99", "OutOfRange"),
        (DOUBLE, "nan", "OutOfRange"),
        (DOUBLE, "inf", "OutOfRange"),
        (DOUBLE, "warm", "TypeMismatch"),
        (FLOAT, "1e39", "OutOfRange"),
        (BOOL, "yes", "TypeMismatch"),
        (BYTES, "not base64!", "TypeMismatch"),
        (STREAM, "x", "NotATwinProperty"),
        (STRING, "x" * (MAX_TEXT_BYTES + 1), "TooLarge"),
    ],
)
def test_bad_text_values_are_refused_with_a_reason(
    p: ModelProperty, text: str, reason: str
) -> None:
    with pytest.raises(InvalidValue) as exc:
        parse_text(p, text)
    assert exc.value.reason == reason
    assert exc.value.property == "p" and "'p'" in exc.value.message


@pytest.mark.parametrize(
    ("p", "value", "expected"),
    [
        (INT, 7, 7),
        (INT, "7", 7),
        (DOUBLE, 21, 21.0),
        (DOUBLE, "21.5", 21.5),
        (BOOL, True, True),
        (BOOL, "true", True),
        (STRING, "on", "on"),
        (BYTES, b"\x01", b"\x01"),
        (BYTES, "AQ==", b"\x01"),
    ],
)
def test_json_and_wire_values_coerce(p: ModelProperty, value: object, expected: object) -> None:
    result = coerce(p, value)
    assert result == expected and type(result) is type(expected)


@pytest.mark.parametrize(
    ("p", "value"),
    [
        (INT, True),  # a bool is not an integer, though Python says so
        (INT, 3.0),
        (DOUBLE, False),
        (DOUBLE, None),
        (BOOL, 1),
        (STRING, 5),
        (BYTES, 5),
        (DOUBLE, [21.0]),
    ],
)
def test_json_type_mismatches_are_refused(p: ModelProperty, value: object) -> None:
    with pytest.raises(InvalidValue) as exc:
        coerce(p, value)
    assert exc.value.reason == "TypeMismatch"


@pytest.mark.parametrize("p", [INT, DOUBLE, FLOAT, BOOL, STRING, BYTES])
@pytest.mark.parametrize(
    "value", [10**5000, -(10**5000), 2**1100], ids=["1e5000", "-1e5000", "2**1100"]
)
def test_huge_integers_are_refused_not_raised(p: ModelProperty, value: int) -> None:
    """JSON and YAML integers have no size limit: one past Python's int/str limit (4300
    digits) must still be an InvalidValue, whose message can be printed."""
    with pytest.raises(InvalidValue) as exc:
        coerce(p, value)
    assert exc.value.reason in ("OutOfRange", "TypeMismatch")
    assert str(exc.value)


@pytest.mark.parametrize(
    "text", ["1" * 5000, "-" + "9" * 5000, "+000" + "1" * 20], ids=["5000", "-5000", "20"]
)
def test_integer_text_too_long_for_int64_is_out_of_range(text: str) -> None:
    for check in (parse_text, check_desired):
        with pytest.raises(InvalidValue) as exc:
            check(INT, text)
        assert exc.value.reason == "OutOfRange"
    assert parse_text(INT, "+000" + "42") == 42  # leading zeros are not digits of the value


def test_desired_value_for_a_read_only_property_is_refused() -> None:
    ro = prop(PropertyType.DOUBLE, AccessMode.READ_ONLY)
    with pytest.raises(InvalidValue) as exc:
        check_desired(ro, "20")
    assert exc.value.reason == "ReadOnly" and "ReadOnly" in exc.value.message
    # the device may report it
    assert check_reported(ro, 20.5) == 20.5


def test_desired_and_reported_apply_range_both_ways() -> None:
    with pytest.raises(InvalidValue):
        check_desired(DOUBLE, "40")
    with pytest.raises(InvalidValue):
        check_reported(DOUBLE, 40)
    assert check_desired(DOUBLE, "35") == 35.0 and check_reported(DOUBLE, 5) == 5.0


def test_text_and_json_forms() -> None:
    assert to_text(BOOL, True) == "true"
    assert to_text(BYTES, b"\x00\x01\x02") == "AAEC"
    assert to_text(DOUBLE, 21.5) == "21.5"
    assert to_text(INT, 42) == "42"
    assert to_json(b"\x01") == "AQ==" and to_json(3) == 3


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_double_text_round_trips_exactly(x: float) -> None:
    p = prop(PropertyType.DOUBLE)
    assert parse_text(p, to_text(p, x)) == x


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_int_text_round_trips(n: int) -> None:
    p = prop(PropertyType.INT)
    assert parse_text(p, to_text(p, n)) == n


@given(st.binary(max_size=256))
def test_bytes_round_trip_through_text_and_json(raw: bytes) -> None:
    assert parse_text(BYTES, to_text(BYTES, raw)) == raw
    assert coerce(BYTES, to_json(raw)) == raw


def test_float32_limit_applies_to_float_only() -> None:
    assert math.isclose(coerce(FLOAT, 3.4e38), 3.4e38)
    assert coerce(prop(PropertyType.DOUBLE), 1e300) == 1e300
    with pytest.raises(InvalidValue):
        coerce(FLOAT, 1e300)
