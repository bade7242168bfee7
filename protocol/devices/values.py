"""Twin values checked against their model property: type, range, access mode, size.

A value has three forms:

- **text**, as KubeEdge stores it in ``spec.properties[].desired.value`` and in
  ``status.twins[]`` (``TwinProperty.value`` is a string): ``"22.5"``, ``"true"``,
  base64 for BYTES;
- **wire**, as it travels in ``twin_desired``/``twin_reported`` (msgpack): ``int``,
  ``float``, ``bool``, ``str`` or ``bytes``;
- **JSON**, as mappers see it on the local device API: the wire form, except BYTES
  which is a base64 string.

``coerce`` accepts a wire/JSON value, or its text spelling (KubeEdge mappers report
strings), and returns the wire form; ``to_text``/``to_json`` go the other way. Booleans
spelt as text accept Go's ``strconv.ParseBool`` words (``1``, ``t``, ``TRUE``, ``true``,
``True`` and their false counterparts), because KubeEdge parses them that way.
"""

from __future__ import annotations

import base64
import binascii
import enum
import math
import re
from typing import Any

from protocol.devices.errors import InvalidValue
from protocol.devices.model import AccessMode, ModelProperty, PropertyType

Value = int | float | bool | str | bytes
"""A twin value in wire form."""

MAX_TEXT_BYTES = 16 * 1024
"""Largest text form of a value (bytes of UTF-8). A Device object lives in etcd (1.5 MiB
per object) with one reported, one observed-desired and one desired value per property;
16 KiB keeps a device with dozens of properties far from that limit."""

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
"""INT properties are 64-bit signed, as in KubeEdge (Go int64) and msgpack."""

FLOAT32_MAX = 3.4028234663852886e38
"""Largest finite FLOAT (IEEE 754 single precision); DOUBLE is Python's float."""

_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_TRUE_WORDS = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE_WORDS = frozenset({"0", "f", "F", "FALSE", "false", "False"})


class Reason(str, enum.Enum):
    """Why a value was refused; the strings appear in API errors and Device status."""

    TYPE_MISMATCH = "TypeMismatch"
    OUT_OF_RANGE = "OutOfRange"
    READ_ONLY = "ReadOnly"
    UNKNOWN_PROPERTY = "UnknownProperty"
    NOT_A_TWIN_PROPERTY = "NotATwinProperty"
    TOO_LARGE = "TooLarge"
    MODEL_NOT_FOUND = "ModelNotFound"


def _fail(prop: ModelProperty, reason: Reason, message: str) -> InvalidValue:
    return InvalidValue(prop.name, reason.value, f"property {prop.name!r}: {message}")


def _show(value: Any) -> str:
    if isinstance(value, int) and value.bit_length() > 256:
        # repr() of an int past 4300 digits raises (Python's int/str limit).
        return f"<{'-' if value < 0 else ''}{value.bit_length()}-bit integer>"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def parse_text(prop: ModelProperty, text: str) -> Value:
    """Parse a value's text form (KubeEdge's string) for ``prop``; check type and range.

    Args:
        prop: the model property.
        text: e.g. ``"22.5"``, ``"true"``, base64 for BYTES.

    Returns:
        The wire value.

    Raises:
        InvalidValue: ``TypeMismatch`` when the text does not spell a value of the type,
            ``OutOfRange`` outside ``minimum``/``maximum`` (or int64, float32),
            ``TooLarge`` over ``MAX_TEXT_BYTES``, ``NotATwinProperty`` for STREAM.
    """
    if not isinstance(text, str):
        raise _fail(prop, Reason.TYPE_MISMATCH, f"expected text, got {type(text).__name__}")
    _check_size(prop, text)
    ptype = prop.type
    if ptype is PropertyType.STREAM:
        raise _fail(prop, Reason.NOT_A_TWIN_PROPERTY, "STREAM properties carry no twin value")
    if ptype is PropertyType.STRING:
        return text
    if ptype is PropertyType.INT:
        digits = text.strip()
        if not _INT_TEXT.fullmatch(digits):
            raise _fail(prop, Reason.TYPE_MISMATCH, f"{_show(text)} is not an integer")
        if len(digits.lstrip("+-").lstrip("0")) > 19:  # past int64, whatever the digits
            raise _fail(prop, Reason.OUT_OF_RANGE, f"{_show(text)} does not fit a 64-bit INT")
        return _check_range(prop, int(digits))
    if ptype in (PropertyType.FLOAT, PropertyType.DOUBLE):
        try:
            number = float(text)
        except ValueError:
            raise _fail(prop, Reason.TYPE_MISMATCH, f"{_show(text)} is not a number") from None
        return _check_range(prop, number)
    if ptype is PropertyType.BOOLEAN:
        word = text.strip()
        if word in _TRUE_WORDS:
            return True
        if word in _FALSE_WORDS:
            return False
        raise _fail(prop, Reason.TYPE_MISMATCH, f"{_show(text)} is not true or false")
    # BYTES
    try:
        return base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise _fail(prop, Reason.TYPE_MISMATCH, f"{_show(text)} is not base64") from None


def coerce(prop: ModelProperty, value: Any) -> Value:
    """Check a wire or JSON value for ``prop`` and return its wire form.

    A ``str`` for a non-STRING property is read as the value's text form (see
    ``parse_text``). Otherwise the JSON type must match: an integer for INT (not a
    boolean, not 3.0), a number for FLOAT/DOUBLE, a boolean for BOOLEAN, ``bytes`` (wire)
    or a base64 string (JSON) for BYTES.

    Raises:
        InvalidValue: as ``parse_text``.
    """
    ptype = prop.type
    if ptype is PropertyType.STREAM:
        raise _fail(prop, Reason.NOT_A_TWIN_PROPERTY, "STREAM properties carry no twin value")
    if isinstance(value, str):
        return parse_text(prop, value)
    if ptype is PropertyType.INT:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _fail(prop, Reason.TYPE_MISMATCH, f"{_show(value)} is not an integer")
        return _check_range(prop, value)
    if ptype in (PropertyType.FLOAT, PropertyType.DOUBLE):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _fail(prop, Reason.TYPE_MISMATCH, f"{_show(value)} is not a number")
        try:
            number = float(value)
        except OverflowError:
            why = f"{_show(value)} is not a finite number"
            raise _fail(prop, Reason.OUT_OF_RANGE, why) from None
        return _check_range(prop, number)
    if ptype is PropertyType.BOOLEAN:
        if not isinstance(value, bool):
            raise _fail(prop, Reason.TYPE_MISMATCH, f"{_show(value)} is not true or false")
        return value
    if ptype is PropertyType.BYTES:
        if not isinstance(value, (bytes, bytearray)):
            raise _fail(prop, Reason.TYPE_MISMATCH, f"{_show(value)} is not bytes or base64")
        raw = bytes(value)
        if len(raw) * 4 // 3 > MAX_TEXT_BYTES:
            raise _fail(prop, Reason.TOO_LARGE, f"{len(raw)} bytes is over the size limit")
        return raw
    raise _fail(prop, Reason.TYPE_MISMATCH, f"{_show(value)} is not a string")


def check_desired(prop: ModelProperty, text: str) -> Value:
    """Check a desired value set in the cloud (``spec.properties[].desired.value``).

    Raises:
        InvalidValue: ``ReadOnly`` when the property is ``ReadOnly`` (the cloud may not
            set it), else as ``parse_text``.
    """
    if prop.access_mode is AccessMode.READ_ONLY:
        raise _fail(
            prop, Reason.READ_ONLY, f"is ReadOnly in its model; desired value {_show(text)} refused"
        )
    return parse_text(prop, text)


def check_reported(prop: ModelProperty, value: Any) -> Value:
    """Check a value reported by a mapper (any access mode may be reported).

    Raises:
        InvalidValue: as ``coerce``.
    """
    return coerce(prop, value)


def to_text(prop: ModelProperty, value: Value) -> str:
    """The text form of a wire value (for Device status), e.g. ``22.5`` -> ``"22.5"``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, float):
        return repr(value)
    return str(value)


def to_json(value: Value) -> Any:
    """The JSON form of a wire value: BYTES become base64 strings, the rest is unchanged."""
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    return value


def _check_size(prop: ModelProperty, text: str) -> None:
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_TEXT_BYTES:
        raise _fail(
            prop, Reason.TOO_LARGE, f"value is {size} bytes, over the {MAX_TEXT_BYTES}-byte limit"
        )


def _check_range(prop: ModelProperty, number: int | float) -> int | float:
    if isinstance(number, float):
        if not math.isfinite(number):
            raise _fail(prop, Reason.OUT_OF_RANGE, f"{_show(number)} is not a finite number")
        if prop.type is PropertyType.FLOAT and abs(number) > FLOAT32_MAX:
            raise _fail(prop, Reason.OUT_OF_RANGE, f"{number!r} does not fit a 32-bit FLOAT")
    elif not INT64_MIN <= number <= INT64_MAX:
        raise _fail(prop, Reason.OUT_OF_RANGE, f"{_show(number)} does not fit a 64-bit INT")
    if prop.minimum is not None and number < prop.minimum:
        raise _fail(prop, Reason.OUT_OF_RANGE, f"{number!r} is below the minimum {prop.minimum!r}")
    if prop.maximum is not None and number > prop.maximum:
        raise _fail(prop, Reason.OUT_OF_RANGE, f"{number!r} is above the maximum {prop.maximum!r}")
    return number
