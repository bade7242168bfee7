"""Decoding of built-in objects as kube-apiserver's JSON decoder does it.

kube-apiserver decodes a request body into the Go type of its kind: a value of
the wrong JSON type is a 400 (``cannot unmarshal string into Go struct field
... of type int32``), and a field the type does not have is unknown. Unknown
fields are dropped, or, with ``fieldValidation=Strict`` (what kubectl sends),
refused with a 400 ``strict decoding error: unknown field "spec.foo"``; with
``fieldValidation=Warn`` they are dropped and reported in ``Warning`` headers.

The field tables come from ``builtin_schema.json`` (generated from the
official client's models by ``scripts/gen_builtin_schema.py``). They describe
current Kubernetes: fields added after 1.20 are accepted, never refused.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import functools
import json
import pathlib
import re
from collections.abc import Mapping
from typing import Any

from cloudhub.standalone import errors

__all__ = [
    "FIELD_VALIDATION",
    "check_secret_data",
    "decode_builtin",
    "decode_metadata",
    "strict_error",
]

FIELD_VALIDATION = ("", "Ignore", "Warn", "Strict")
_SCHEMA_PATH = pathlib.Path(__file__).with_name("builtin_schema.json")
_LIST = re.compile(r"^list\[(.+)\]$")
_DICT = re.compile(r"^dict\(str, (.+)\)$")


@functools.cache
def _schema() -> dict[str, Any]:
    return json.loads(_SCHEMA_PATH.read_text())


def has_schema(kind: str) -> bool:
    return kind in _schema()["kinds"]


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


class _Decoder:
    def __init__(self, kind: str, version: str) -> None:
        self.kind = kind
        self.version = version
        self.types: dict[str, dict[str, str]] = _schema()["types"]
        self.unknown: list[str] = []

    def fail(self, value: Any, path: str, go_type: str) -> errors.StatusError:
        return errors.bad_request(
            f'{self.kind} in version "{self.version}" cannot be handled as a {self.kind}: '
            f"json: cannot unmarshal {_json_type(value)} into Go struct field {path or self.kind} "
            f"of type {go_type}"
        )

    def walk(self, type_name: str, value: Any, path: str) -> Any:
        """Check ``value`` against ``type_name``; return it, normalised where the API
        normalises (times to UTC, numeric quantities to text)."""
        if value is None:
            return value
        form, inner = _parse(type_name)
        if form == "any":
            return value
        if form == "str":
            if not isinstance(value, str):
                raise self.fail(value, path, "string")
        elif form in ("time", "microtime"):
            if not isinstance(value, str):
                raise self.fail(value, path, "Time")
            normalised = normalize_time(value, micro=form == "microtime")
            if normalised is None:
                layout = _MICRO_LAYOUT if form == "microtime" else _TIME_LAYOUT
                raise errors.bad_request(
                    f'{self.kind} in version "{self.version}" cannot be handled as a '
                    f'{self.kind}: {path}: parsing time "{value}" as "{layout}": the value '
                    "is not in that format"
                )
            return normalised
        elif form == "quantity":
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                raise self.fail(value, path, "Quantity")
            if not isinstance(value, str):
                return _quantity(value)
            why = quantity_error(value)
            if why:
                raise errors.bad_request(
                    f'{self.kind} in version "{self.version}" cannot be handled as a '
                    f"{self.kind}: {path}: {why}"
                )
        elif form == "int":
            if isinstance(value, bool) or not isinstance(value, int):
                raise self.fail(value, path, "int64")
        elif form == "float":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise self.fail(value, path, "float64")
        elif form == "bool":
            if not isinstance(value, bool):
                raise self.fail(value, path, "bool")
        elif form == "list":
            if not isinstance(value, list):
                raise self.fail(value, path, "[]" + inner)
            if _parse(inner)[0] != "any":
                for i, item in enumerate(value):
                    value[i] = self.walk(inner, item, f"{path}[{i}]")
        elif form == "dict":
            if not isinstance(value, dict):
                raise self.fail(value, path, "map[string]" + inner)
            if _parse(inner)[0] != "any":
                for key, item in value.items():
                    value[key] = self.walk(inner, item, f"{path}[{key}]")
        else:
            fields = self.types.get(type_name)
            if fields is None:
                return value
            if not isinstance(value, dict):
                raise self.fail(value, path, type_name)
            for key in list(value):
                field_type = fields.get(key)
                sub = f"{path}.{key}" if path else key
                if field_type is None:
                    self.unknown.append(sub)
                    del value[key]
                    continue
                marker = field_type[0]
                bare = field_type.lstrip("!?")
                item = self.walk(bare, value[key], sub)
                if _omitted(marker, bare, item):
                    del value[key]
                else:
                    value[key] = item
        return value


def _omitted(marker: str, type_name: str, item: Any) -> bool:
    """Whether Go's JSON encoding (``omitempty``) leaves this value out: null, an
    empty optional list or map ("!" marks the required ones, kept), or the zero value
    of a plain scalar field marked "?"."""
    if item is None:
        return True  # null decodes to Go's zero value, which JSON then omits
    if marker == "?":
        return item in ("", 0, False) and not isinstance(item, float)
    if marker == "!":
        return False
    return (item == [] or item == {}) and type_name[:5] in ("list[", "dict(")


_TIME_LAYOUT = "2006-01-02T15:04:05Z07:00"
_MICRO_LAYOUT = "2006-01-02T15:04:05.000000Z07:00"
_TIME_RE = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|[+-]\d{2}:\d{2})$"
)


def normalize_time(value: str, *, micro: bool) -> str | None:
    """A ``metav1.Time`` (RFC 3339, seconds) or ``metav1.MicroTime`` (RFC 3339 with
    exactly 6 fractional digits) as kube-apiserver stores it: in UTC, ``Z``, with
    seconds (Time drops any fraction) or microseconds. None when it does not parse
    with the layout Go uses for the type."""
    match = _TIME_RE.match(value)
    if match is None:
        return None
    fraction = match.group(7) or ""
    if micro and len(fraction) != 7:
        return None
    zone = match.group(8)
    try:
        offset = datetime.timedelta(0)
        if zone != "Z":
            sign = 1 if zone[0] == "+" else -1
            offset = sign * datetime.timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6]))
        stamp = datetime.datetime(
            *(int(match.group(i)) for i in range(1, 7)),
            int(fraction[1:7].ljust(6, "0")) if fraction else 0,
            tzinfo=datetime.timezone(offset),
        ).astimezone(datetime.timezone.utc)
    except ValueError:
        return None
    text = stamp.strftime("%Y-%m-%dT%H:%M:%S")
    return f"{text}.{stamp.microsecond:06d}Z" if micro else f"{text}Z"


_QUANTITY_SHAPE = re.compile(r"[+-]?[0-9]*(?:\.[0-9]*)?(?P<suffix>[eEinumkKMGTP]*[+-]?[0-9]*)")
_QUANTITY_SUFFIXES = frozenset(
    ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "k", "M", "G", "T", "P", "E")
)
_QUANTITY_EXPONENT = re.compile(r"[eE][+-]?[0-9]+")


def quantity_error(text: str) -> str | None:
    """Why ``text`` is not a ``resource.Quantity``, in the words of its parser, or None.

    The grammar is ``ParseQuantity``'s: a signed decimal number, then nothing, a
    binary suffix (``Ki`` ... ``Ei``), a decimal one (``n u m k M G T P E``) or an
    exponent (``e3``, ``E-2``). The value is not computed (and not canonicalised):
    kube-apiserver stores ``1.5Gi`` as ``1536Mi``, this server as given.
    """
    text = text.strip()  # as the parser, which trims spaces first
    match = _QUANTITY_SHAPE.fullmatch(text) if text else None
    if match is None:
        return (
            "quantities must match the regular expression "
            "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
        )
    suffix = match["suffix"]
    if suffix not in _QUANTITY_SUFFIXES and not _QUANTITY_EXPONENT.fullmatch(suffix):
        return "unable to parse quantity's suffix"
    return None


def _quantity(number: float) -> str:
    """A quantity given as a JSON number, in its string form (``1`` -> ``"1"``)."""
    if isinstance(number, float) and number.is_integer():
        number = int(number)
    return str(number)


@functools.cache
def _parse(type_name: str) -> tuple[str, str]:
    """(form, inner type) of a model type string: ``list[V1Container]`` -> (list, V1Container)."""
    if type_name == "object":
        return ("any", "")
    if type_name == "str":
        return ("str", "")
    if type_name in ("datetime", "date"):
        return ("time", "")
    if type_name in ("int", "float", "bool", "quantity", "microtime"):
        return (type_name, "")
    match = _LIST.match(type_name)
    if match:
        return ("list", match.group(1))
    match = _DICT.match(type_name)
    if match:
        return ("dict", match.group(1))
    return ("model", type_name)


def decode_builtin(kind: str, version: str, obj: dict[str, Any]) -> list[str]:
    """Check value types and drop unknown fields of a built-in object, in place.

    Returns:
        The paths of the unknown fields dropped (``spec.containers[0].imagee``).

    Raises:
        StatusError: 400 when a value has the wrong JSON type.
    """
    type_name = _schema()["kinds"].get(kind)
    if type_name is None:
        return []
    decoder = _Decoder(kind, version)
    decoder.walk(type_name, obj, "")
    return decoder.unknown


def decode_metadata(kind: str, version: str, meta: dict[str, Any]) -> list[str]:
    """Like :func:`decode_builtin` for the ``metadata`` of a custom resource."""
    decoder = _Decoder(kind, version)
    decoder.walk("V1ObjectMeta", meta, "metadata")
    return decoder.unknown


def strict_error(kind: str, version: str, unknown: list[str]) -> errors.StatusError:
    """400 for unknown fields under ``fieldValidation=Strict``."""
    listed = ", ".join(f'unknown field "{u}"' for u in unknown)
    return errors.bad_request(
        f'{kind} in version "{version}" cannot be handled as a {kind}: strict decoding error: '
        f"{listed}"
    )


def check_secret_data(obj: Mapping[str, Any]) -> None:
    data = obj.get("data")
    if not isinstance(data, dict):
        return
    for key, value in data.items():
        if not isinstance(value, str):
            continue
        try:
            base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise errors.bad_request(
                f'Secret in version "v1" cannot be handled as a Secret: illegal base64 data at '
                f"input byte {_base64_error_at(value)} (data[{key}])"
            ) from None


def _base64_error_at(value: str) -> int:
    """Offset of the first byte that makes ``value`` invalid base64 (as Go reports it)."""
    alphabet = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
    for index, char in enumerate(value):
        if char == "=":
            return index if len(value) % 4 or index < len(value) - 2 else len(value)
        if char not in alphabet:
            return index
    return len(value) - len(value) % 4
