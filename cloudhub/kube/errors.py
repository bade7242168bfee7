"""Errors of the Kubernetes bridge, translated from kubernetes_asyncio and aiohttp."""

from __future__ import annotations

__all__ = ["AlreadyExists", "Conflict", "Gone", "KubeError", "NotFound", "TransportError"]


class KubeError(Exception):
    """An API request failed.

    Attributes:
        status: the HTTP status (0 when the request never got an answer).
        reason: the Status reason (``NotFound``, ``AlreadyExists``...) or a description.
        message: the Status message, if any.
    """

    def __init__(self, status: int, reason: str, message: str = "") -> None:
        self.status = status
        self.reason = reason
        self.message = message
        super().__init__(f"{status} {reason}: {message}" if message else f"{status} {reason}")

    @property
    def retryable(self) -> bool:
        """Whether trying again later may succeed (overload, timeouts, server errors)."""
        return self.status in (0, 408, 429) or self.status >= 500


class NotFound(KubeError):
    """404: the object does not exist."""


class AlreadyExists(KubeError):
    """409 AlreadyExists on create."""


class Conflict(KubeError):
    """409 Conflict: a resourceVersion or uid precondition failed."""


class Gone(KubeError):
    """410: the resourceVersion is too old to watch from; relist."""


class TransportError(KubeError):
    """The connection failed or timed out (status 0)."""
