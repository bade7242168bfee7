"""Protobuf request bodies (kubectl's typed generators) decode to the JSON form."""

from __future__ import annotations

import base64

import pytest

from cloudhub.standalone.errors import StatusError
from cloudhub.standalone.protobuf import MAGIC, decode_object


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number: int, payload: bytes | int) -> bytes:
    if isinstance(payload, int):
        return varint(number << 3) + varint(payload)
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def entry(key: str, value: bytes) -> bytes:
    return field(1, key.encode()) + field(2, value)


def envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    type_meta = field(1, api_version.encode()) + field(2, kind.encode())
    return MAGIC + field(1, type_meta) + field(2, raw) + field(3, b"") + field(4, b"")


def test_secret_with_metadata_and_binary_data() -> None:
    meta = (
        field(1, b"creds")
        + field(2, b"")  # Go writes empty strings: they must not appear in the JSON
        + field(7, 0)
        + field(8, b"")  # the zero time
        + field(11, entry("app", b"edge"))
        + field(14, b"example.com/keep")
    )
    raw = (
        field(1, meta)
        + field(2, entry("password", b"\x00\xffsecret"))
        + field(3, b"Opaque")
        + field(5, 1)
    )
    obj = decode_object(envelope("v1", "Secret", raw))
    assert obj == {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "creds",
            "labels": {"app": "edge"},
            "finalizers": ["example.com/keep"],
        },
        "data": {"password": base64.b64encode(b"\x00\xffsecret").decode()},
        "type": "Opaque",
        "immutable": True,
    }


def test_namespace_and_configmap() -> None:
    ns = decode_object(
        envelope("v1", "Namespace", field(1, field(1, b"edge")) + field(2, field(1, b"kubernetes")))
    )
    assert ns["metadata"] == {"name": "edge"}
    assert ns["spec"] == {"finalizers": ["kubernetes"]}
    cm = decode_object(
        envelope("v1", "ConfigMap", field(1, field(1, b"c")) + field(2, entry("a", b"1")))
    )
    assert cm["data"] == {"a": "1"}


def test_other_kinds_are_415_with_advice() -> None:
    with pytest.raises(StatusError) as err:
        decode_object(envelope("apps/v1", "Deployment", b""))
    assert err.value.code == 415
    assert "send JSON" in err.value.message


@pytest.mark.parametrize(
    "body",
    [b"not protobuf", MAGIC + b"\x0a\xff", MAGIC + b"\x0f", MAGIC + field(1, b"\xff\xff")],
)
def test_malformed_bodies_are_400(body: bytes) -> None:
    with pytest.raises(StatusError) as err:
        decode_object(body)
    assert err.value.code == 400
