"""JSON encoding and timestamps as kube-apiserver writes them."""

from __future__ import annotations

import time
from typing import Any

import orjson

__all__ = ["dumps", "loads", "now_rfc3339"]


def dumps(obj: Any) -> bytes:
    """Compact UTF-8 JSON, as kube-apiserver writes it (orjson: the hot path of every
    write and response)."""
    return orjson.dumps(obj)


def loads(data: bytes | str) -> Any:
    """Parse JSON (``ValueError`` when it is not)."""
    return orjson.loads(data)


def now_rfc3339(at: float | None = None) -> str:
    """``2006-01-02T15:04:05Z``: the second-precision UTC time Kubernetes uses."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if at is None else at))
