"""Placeholders for objects the hub could not send (issue 15 item 3, docs/hublink.md).

A ConfigMap or Secret over the message limit the session agreed is a dead letter on the
hub (``cloudhub.bridge.deadletters``). So that the pods that use it say why on the edge
(``configmap "big" exceeds the message limit (N > M bytes)``, not ``not found``), the hub
sends in its place a placeholder: the object's identity (name, namespace, uid,
resourceVersion, labels) with no data and the annotation :data:`ANNOTATION`, whose value
is the JSON ``{"size": N, "limit": M}`` (bytes). A later version that fits replaces it as
any upsert does. Sans-I/O: pure functions over the API JSON.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["ANNOTATION", "PLACEHELD_KINDS", "placeholder", "undelivered"]

ANNOTATION = "edgefleet.io/undelivered"
"""Set on a placeholder: why the object's content is not on the edge."""

PLACEHELD_KINDS = frozenset({"ConfigMap", "Secret"})
"""The kinds a placeholder stands in for: what a pod reads (a Pod or a Device without its
spec would be acted on as if it were whole)."""


def placeholder(obj: dict[str, Any], size: int, limit: int) -> dict[str, Any]:
    """The placeholder for ``obj`` (API JSON), which encodes to ``size`` bytes, over
    ``limit`` bytes: its kind and identity, no ``data``/``binaryData``/``stringData``."""
    meta = obj.get("metadata") or {}
    kept = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion") if k in meta}
    annotations = {ANNOTATION: json.dumps({"size": int(size), "limit": int(limit)})}
    out: dict[str, Any] = {
        "apiVersion": obj.get("apiVersion", "v1"),
        "kind": obj.get("kind", ""),
        "metadata": {**kept, "annotations": annotations},
    }
    if "type" in obj:  # a Secret's type
        out["type"] = obj["type"]
    return out


def undelivered(obj: dict[str, Any]) -> tuple[int, int] | None:
    """``(size, limit)`` in bytes if ``obj`` is a placeholder, else ``None`` (also for an
    annotation that does not parse: a user's own annotation of that name is not ours)."""
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION)
    if not isinstance(raw, str):
        return None
    try:
        value = json.loads(raw)
        size, limit = int(value["size"]), int(value["limit"])
    except (ValueError, TypeError, KeyError):
        return None
    return size, limit
