"""Kubernetes protobuf request bodies, for the kinds kubectl's generators send.

kubectl's typed clients (``kubectl create namespace|configmap|secret``) send
``application/vnd.kubernetes.protobuf``: the 4 bytes ``k8s\\0`` and a
``runtime.Unknown`` message (type meta, raw object bytes). This server answers in
JSON (kubectl accepts it) and decodes protobuf bodies for Namespace, ConfigMap
and Secret only; any other kind gets a 415 that says to send JSON. The field
numbers are those of the ``generated.proto`` files of ``k8s.io/api`` and
``k8s.io/apimachinery``.
"""

from __future__ import annotations

import base64
import datetime
from collections.abc import Callable
from typing import Any

from cloudhub.standalone import errors

__all__ = ["CONTENT_TYPE", "decode_object"]

CONTENT_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"

Decoder = Callable[[bytes], Any]


class _Malformed(ValueError):
    pass


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise _Malformed("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise _Malformed("varint too long")


def _fields(data: bytes) -> list[tuple[int, int, Any]]:
    """(field number, wire type, value) of every field of a message, in order."""
    out = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            size, pos = _varint(data, pos)
            if pos + size > len(data):
                raise _Malformed("truncated field")
            value, pos = data[pos : pos + size], pos + size
        elif wire == 1:
            value, pos = data[pos : pos + 8], pos + 8
        elif wire == 5:
            value, pos = data[pos : pos + 4], pos + 4
        else:
            raise _Malformed(f"unsupported wire type {wire}")
        out.append((number, wire, value))
    return out


def _string(raw: bytes) -> str:
    return raw.decode()


def _bytes_b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _int(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _bool(value: int) -> bool:
    return bool(value)


def _time(raw: bytes) -> str | None:
    seconds = 0
    for number, _, value in _fields(raw):
        if number == 1:
            seconds = _int(value)
    if seconds == 0:
        return None  # the zero time: unset
    stamp = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)
    return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")


def _map(value_decoder: Decoder) -> Decoder:
    def decode(raw: bytes) -> tuple[str, Any]:
        key, value = "", value_decoder(b"")
        for number, _, item in _fields(raw):
            if number == 1:
                key = _string(item)
            elif number == 2:
                value = value_decoder(item)
        return key, value

    return decode


#: field number -> (JSON name, decoder, kind: "one" | "list" | "map")
Schema = dict[int, tuple[str, Decoder, str]]


def _message(schema: Schema) -> Decoder:
    def decode(raw: bytes) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for number, _, value in _fields(raw):
            spec = schema.get(number)
            if spec is None:
                continue
            name, decoder, form = spec
            if form == "map":
                key, item = decoder(value)
                out.setdefault(name, {})[key] = item
            elif form == "list":
                out.setdefault(name, []).append(decoder(value))
            else:
                decoded = decoder(value)
                # Go writes every field, zero or not; JSON omits empty ones.
                if decoded not in ("", 0, False, None) or isinstance(decoded, dict):
                    out[name] = decoded
        return out

    return decode


_OWNER = _message(
    {
        1: ("kind", _string, "one"),
        3: ("name", _string, "one"),
        4: ("uid", _string, "one"),
        5: ("apiVersion", _string, "one"),
        6: ("controller", _bool, "one"),
        7: ("blockOwnerDeletion", _bool, "one"),
    }
)
_META = _message(
    {
        1: ("name", _string, "one"),
        2: ("generateName", _string, "one"),
        3: ("namespace", _string, "one"),
        5: ("uid", _string, "one"),
        6: ("resourceVersion", _string, "one"),
        7: ("generation", _int, "one"),
        8: ("creationTimestamp", _time, "one"),
        11: ("labels", _map(_string), "map"),
        12: ("annotations", _map(_string), "map"),
        13: ("ownerReferences", _OWNER, "list"),
        14: ("finalizers", _string, "list"),
    }
)
_KINDS: dict[tuple[str, str], Decoder] = {
    ("v1", "Namespace"): _message(
        {
            1: ("metadata", _META, "one"),
            2: ("spec", _message({1: ("finalizers", _string, "list")}), "one"),
        }
    ),
    ("v1", "ConfigMap"): _message(
        {
            1: ("metadata", _META, "one"),
            2: ("data", _map(_string), "map"),
            3: ("binaryData", _map(_bytes_b64), "map"),
            4: ("immutable", _bool, "one"),
        }
    ),
    ("v1", "Secret"): _message(
        {
            1: ("metadata", _META, "one"),
            2: ("data", _map(_bytes_b64), "map"),
            3: ("type", _string, "one"),
            4: ("stringData", _map(_string), "map"),
            5: ("immutable", _bool, "one"),
        }
    ),
}


def decode_object(body: bytes) -> dict[str, Any]:
    """The JSON form of a protobuf-encoded object.

    Raises:
        StatusError: 400 for a malformed body; 415 for a kind this server does not
            decode from protobuf (the message says to send JSON).
    """
    if not body.startswith(MAGIC):
        raise errors.bad_request("protobuf body without the k8s\\0 prefix")
    try:
        api_version = kind = ""
        raw = b""
        for number, _, value in _fields(body[len(MAGIC) :]):
            if number == 1:
                for sub, _, item in _fields(value):
                    if sub == 1:
                        api_version = _string(item)
                    elif sub == 2:
                        kind = _string(item)
            elif number == 2:
                raw = value
        decoder = _KINDS.get((api_version, kind))
        if decoder is None:
            raise errors.StatusError(
                415,
                "UnsupportedMediaType",
                f"this server decodes protobuf only for Namespace, ConfigMap and Secret, not "
                f"{kind or 'this kind'}: send JSON (kubectl create -f or apply -f)",
            )
        obj = decoder(raw)
    except (_Malformed, UnicodeDecodeError, ValueError, OverflowError) as exc:
        if isinstance(exc, errors.StatusError):
            raise
        raise errors.bad_request(f"malformed protobuf body: {exc}") from None
    return {"apiVersion": api_version, "kind": kind, **obj}
