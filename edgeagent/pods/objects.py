"""Reading ConfigMaps and Secrets as the pod needs them, with kubelet's error messages."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Any

from edgeagent.errors import PodConfigError
from protocol.undelivered import undelivered

__all__ = ["Lookup", "config_data", "configmap_data", "secret_data"]

Lookup = Callable[[str, str, str], "dict[str, Any] | None"]
"""``lookup(kind, namespace, name)`` → the object JSON from the store, or ``None``."""


def configmap_data(obj: dict[str, Any]) -> dict[str, bytes]:
    """A ConfigMap's keys → bytes (``data`` as UTF-8, ``binaryData`` base64-decoded).

    Raises:
        PodConfigError: a ``binaryData`` value is not base64.
    """
    out = {k: str(v).encode() for k, v in (obj.get("data") or {}).items()}
    for key, value in (obj.get("binaryData") or {}).items():
        out[key] = _b64(value, "configmap", obj, key)
    return out


def secret_data(obj: dict[str, Any]) -> dict[str, bytes]:
    """A Secret's keys → bytes (``data`` base64-decoded, ``stringData`` as UTF-8).

    Raises:
        PodConfigError: a ``data`` value is not base64 (e.g. an unfilled placeholder).
    """
    out = {k: _b64(v, "secret", obj, k) for k, v in (obj.get("data") or {}).items()}
    for key, value in (obj.get("stringData") or {}).items():
        out[key] = str(value).encode()
    return out


def _b64(value: Any, kind: str, obj: dict[str, Any], key: str) -> bytes:
    try:
        return base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError) as exc:
        meta = obj.get("metadata") or {}
        raise PodConfigError(
            f'{kind} "{meta.get("namespace", "")}/{meta.get("name", "")}" key "{key}": '
            "value is not valid base64"
        ) from exc


def config_data(
    lookup: Lookup, kind: str, namespace: str, name: str, *, optional: bool = False
) -> dict[str, bytes] | None:
    """The keys of a ConfigMap (``kind="ConfigMap"``) or Secret in the pod's namespace.

    Returns:
        The data, or ``None`` when absent and ``optional``.

    Raises:
        PodConfigError: absent and not optional (kubelet's message: ``configmap "x" not
            found``), too large for the hub to send (its placeholder,
            :mod:`protocol.undelivered`: ``configmap "x" exceeds the message limit (N > M
            bytes)``, optional or not), or undecodable.
    """
    obj = lookup(kind, namespace, name)
    if obj is None:
        if optional:
            return None
        raise PodConfigError(f'{kind.lower()} "{name}" not found')
    too_large = undelivered(obj)
    if too_large is not None:  # the hub sent a placeholder: it is there, but not here
        size, limit = too_large
        raise PodConfigError(
            f'{kind.lower()} "{name}" exceeds the message limit ({size} > {limit} bytes)'
        )
    return configmap_data(obj) if kind == "ConfigMap" else secret_data(obj)
