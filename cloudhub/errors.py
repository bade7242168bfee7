"""The cloud hub's exception tree.

``HubError`` is the root. ``ConfigError`` means the operator gave us something we
cannot use (a misuse); ``KubeAPIError`` means the Kubernetes API answered with an
error or could not be reached (the peer misbehaved, or the network did).
Third-party exceptions (aiohttp, kubernetes_asyncio) are translated at the
boundary in :mod:`cloudhub.kube` and chained with ``from``.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "HubError",
    "KubeAPIError",
    "KubeConflict",
    "KubeGone",
    "KubeNotFound",
    "KubeUnavailable",
]


class HubError(Exception):
    """Root of every error the hub raises on purpose."""


class ConfigError(HubError):
    """The hub's settings or inputs are unusable (names the setting in the message)."""


class KubeAPIError(HubError):
    """The Kubernetes API answered with a non-2xx status.

    Attributes:
        status: HTTP status code (0 when no answer came at all, or when the request could
            not be made).
        reason: the Status object's ``reason`` (``"NotFound"``, ``"Conflict"``, …) or "".
        message: the Status object's ``message`` or the transport error text.
        body: the decoded Status object when the API sent one, else ``None``.
    """

    def __init__(self, status: int, reason: str, message: str, body: dict | None = None):
        super().__init__(f"{status} {reason}: {message}" if reason else f"{status}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body

    @property
    def retryable(self) -> bool:
        """True for errors a retry with back-off may cure: 429, 5xx and no answer
        (:class:`KubeUnavailable`); a request that could not even be made is not."""
        return isinstance(self, KubeUnavailable) or self.status == 429 or self.status >= 500


class KubeNotFound(KubeAPIError):
    """404: the object (or the resource type) does not exist."""


class KubeConflict(KubeAPIError):
    """409: a stale resourceVersion on update, or AlreadyExists on create."""


class KubeGone(KubeAPIError):
    """410: the watch resourceVersion is older than the API's kept history; relist."""


class KubeUnavailable(KubeAPIError):
    """No HTTP answer: connection refused, TLS failure or timeout (status 0)."""
