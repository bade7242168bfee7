"""Kubernetes resource quantities ("250m", "1.5Gi", "2e3") as integers.

The grammar is the API's ``resource.Quantity``: an optional sign, a decimal
number, then either a binary suffix (Ki Mi Gi Ti Pi Ei), a decimal suffix
(n u m "" k M G T P E) or a decimal exponent (``e3``, ``E-2``).

Placement compares requests with allocatable in fixed integer units so that
sums never drift: CPU in millicores, every other resource (memory and
ephemeral-storage in bytes, extended resources such as ``nvidia.com/gpu`` in
units) rounded up to a whole number, as the scheduler does.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from fractions import Fraction
from functools import lru_cache

from cloudhub.placement.errors import InvalidSpec

__all__ = ["CPU", "MEMORY", "PODS", "parse_quantity", "resource_units", "to_units"]

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
#: Most digits a quantity's number may have, and the largest decimal exponent: far
#: beyond any real request or capacity (int64 has 19 digits; ``E`` is 10**18), and
#: small enough that arithmetic on hostile input stays instant.
MAX_DIGITS = 64
MAX_EXPONENT = 40
_MAX_BITS = 213  # about MAX_DIGITS decimal digits

_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:\d+\.?\d*|\.\d+))"
    r"(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exp>[eE][+-]?\d+)|(?P<dec>[numkMGTPE]?))$"
)


@lru_cache(maxsize=4096)
def parse_quantity(text: str | int | float) -> Fraction:
    """Parse a quantity into an exact fraction of its base unit.

    Args:
        text: the quantity as the API writes it (``"100m"``, ``"64Mi"``), or a
            JSON number (YAML turns ``cpu: 2`` into an int).

    Returns:
        The exact value (cores for CPU, bytes for memory).

    Raises:
        InvalidSpec: the text is not a quantity, or is outside what it may hold:
            more than :data:`MAX_DIGITS` digits or an exponent beyond
            ±:data:`MAX_EXPONENT` (path left empty for the caller to fill in
            through :func:`to_units`).
    """
    if isinstance(text, bool):
        raise InvalidSpec("", f"not a quantity: {text!r}")
    if isinstance(text, int):
        if text.bit_length() > _MAX_BITS:
            raise InvalidSpec("", f"a number of {text.bit_length()} bits is not a quantity")
        return Fraction(text)
    if isinstance(text, float):
        if not math.isfinite(text):
            raise InvalidSpec("", f"not a quantity: {text!r}")
        return Fraction(str(text))
    if not isinstance(text, str):
        raise InvalidSpec("", f"not a quantity: {text!r}")
    match = _QUANTITY.match(text.strip())
    if match is None:
        raise InvalidSpec("", f"not a quantity: {_show(text)}")
    if sum(ch.isdigit() for ch in match["num"]) > MAX_DIGITS:
        raise InvalidSpec("", f"{_show(text)} has more than {MAX_DIGITS} digits")
    value = Fraction(match["num"])
    if match["bin"]:
        value *= _BINARY[match["bin"]]
    elif match["exp"]:
        exponent = match["exp"][1:]
        # Bounded before computing: 10 ** 999999999 takes minutes and gigabytes.
        if len(exponent.lstrip("+-")) > 3 or abs(int(exponent)) > MAX_EXPONENT:
            raise InvalidSpec(
                "", f"{_show(text)}: the exponent must be within -{MAX_EXPONENT}..{MAX_EXPONENT}"
            )
        value *= Fraction(10) ** int(exponent)
    else:
        value *= _DECIMAL[match["dec"] or ""]
    return value


def _show(text: str) -> str:
    shown = repr(text)
    return shown if len(shown) <= 40 else shown[:37] + "..."


def to_units(resource: str, text: str | int | float, path: str = "") -> int:
    """Convert a quantity of ``resource`` to placement's integer unit.

    Args:
        resource: the resource name (``"cpu"``, ``"memory"``, ``"nvidia.com/gpu"``).
        text: the quantity.
        path: the JSON path of the value, used in the error.

    Returns:
        Millicores for ``cpu``; for everything else the value rounded up to a
        whole unit (bytes for memory and storage).

    Raises:
        InvalidSpec: the quantity is malformed or negative.
    """
    try:
        value = parse_quantity(text)
    except InvalidSpec as exc:
        raise InvalidSpec(path, exc.reason) from None
    if value < 0:
        raise InvalidSpec(path, f"quantity must not be negative: {text!r}")
    if resource == CPU:
        value *= 1000
    whole = value.numerator // value.denominator
    return whole if whole == value else whole + 1


def resource_units(raw: object, path: str) -> dict[str, int]:
    """A map of resource name to quantity (requests, limits, overhead) in placement's
    units (see :func:`to_units`); ``{}`` for None.

    Raises:
        InvalidSpec: not a map, or a malformed quantity (``path`` names it).
    """
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise InvalidSpec(path, "must be a map of resource name to quantity")
    return {str(name): to_units(str(name), q, f"{path}.{name}") for name, q in raw.items()}
