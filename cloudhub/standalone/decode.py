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
_GO_TYPES = {
    "str": "string",
    "int": "int64",
    "float": "float64",
    "bool": "bool",
    "datetime": "Time",
    "date": "Time",
}


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

    def walk(self, type_name: str, value: Any, path: str) -> None:
        if value is None:
            return
        form, inner = _parse(type_name)
        if form == "any":
            return
        if form == "str":
            if not isinstance(value, str):
                raise self.fail(value, path, _GO_TYPES[type_name])
        elif form == "quantity":
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                raise self.fail(value, path, "Quantity")
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
                    self.walk(inner, item, f"{path}[{i}]")
        elif form == "dict":
            if not isinstance(value, dict):
                raise self.fail(value, path, "map[string]" + inner)
            inner_form = _parse(inner)[0]
            if inner_form != "any":
                for key, item in value.items():
                    self.walk(inner, item, f"{path}[{key}]")
                    if inner_form == "quantity" and isinstance(item, (int, float)):
                        value[key] = _quantity(item)
        else:
            fields = self.types.get(type_name)
            if fields is None:
                return
            if not isinstance(value, dict):
                raise self.fail(value, path, type_name)
            for key in list(value):
                field_type = fields.get(key)
                sub = f"{path}.{key}" if path else key
                if field_type is None:
                    self.unknown.append(sub)
                    del value[key]
                else:
                    item = value[key]
                    self.walk(field_type, item, sub)
                    if field_type == "quantity" and isinstance(item, (int, float)):
                        value[key] = _quantity(item)


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
    if type_name in ("str", "datetime", "date"):
        return ("str", "")
    if type_name in ("int", "float", "bool", "quantity"):
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
