"""Errors of the agent's certificates: join, renewal, loading (part of the
:mod:`edgeagent.errors` tree).

Every message says what happened and what to do next; ``hint`` holds the "what next"
alone, and ``reason`` a stable code (the hub's ``Status.reason`` for refusals, such as
``TokenExpired``, or a local one such as ``CAHashMismatch``).
"""

from __future__ import annotations

from edgeagent.errors import EnvironmentFault, UsageError

__all__ = [
    "CertificateExpired",
    "CertificateFilesError",
    "JoinFailed",
    "NotJoined",
    "RenewalFailed",
]


class JoinFailed(EnvironmentFault):
    """``edgeagent join`` did not get a certificate.

    Attributes:
        reason: ``CAHashMismatch``, ``ServerNameMismatch``, ``HubUnreachable``,
            ``BadAnswer``, or the hub's refusal code (``TokenWrong``, ``TokenExpired``,
            ``TokenDeleted``, ``TokenUsed``, ``TokenNotFound``, ``TokenMalformed``,
            ``NodeNameRefused``, ``NodeAlreadyJoined``, ``CSRRefused``, …).
        hint: what to do next.
        retryable: True when trying again unchanged may work (hub unreachable, 503).
    """

    def __init__(self, reason: str, message: str, hint: str = "", *, retryable: bool = False):
        super().__init__(f"{message}. {hint}" if hint else message)
        self.reason = reason
        self.hint = hint
        self.retryable = retryable


class NotJoined(UsageError):
    """No usable certificate in the state directory: the node has not joined."""


class CertificateFilesError(EnvironmentFault):
    """The key, certificate or CA files are unreadable, malformed or do not match."""


class CertificateExpired(EnvironmentFault):
    """The node certificate expired (the node was offline longer than its lifetime).

    Attributes:
        node_name: the node.
        not_after: when it expired, seconds since the epoch.
    """

    def __init__(self, message: str, *, node_name: str, not_after: float) -> None:
        super().__init__(message)
        self.node_name = node_name
        self.not_after = not_after


class RenewalFailed(EnvironmentFault):
    """The hub refused a renewal, or its answer did not fit the request."""
