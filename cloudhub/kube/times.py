"""Kubernetes time formats: ``Time`` (RFC 3339, whole seconds) and ``MicroTime``."""

from __future__ import annotations

import datetime

__all__ = ["micro_time", "parse_time", "rfc3339"]


def rfc3339(seconds: float) -> str:
    """Seconds since the epoch as Kubernetes ``Time``: RFC 3339, UTC, whole seconds."""
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )


def micro_time(seconds: float) -> str:
    """Seconds since the epoch as Kubernetes ``MicroTime`` (a Lease's ``renewTime``)."""
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ"
    )


def parse_time(text: object) -> float | None:
    """Seconds since the epoch of a ``Time`` or ``MicroTime`` string; ``None`` if absent or
    malformed."""
    if not isinstance(text, str) or not text:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.timezone.utc)
    return parsed.timestamp()
