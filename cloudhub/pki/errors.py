"""Errors of the hub's PKI (CA, bootstrap tokens, join, renewal, revocation).

They extend the hub's tree (:mod:`cloudhub.errors`):

- :class:`CAConfigError` (a :class:`cloudhub.errors.ConfigError`): the operator gave us a
  CA we cannot use, or the stored CA Secret is damaged.
- :class:`JoinRefused` and its subclasses: a node's request (join or renewal) cannot be
  granted. Each carries ``reason`` (a stable CamelCase code sent to the agent, as a
  Kubernetes ``Status.reason``) and ``status`` (the HTTP status the join endpoint answers
  with), and a message that says what to do next.
- :class:`CertificateRevoked`: a presented certificate was revoked (Node deleted or
  ``cloudhub node revoke``).

API failures stay :class:`cloudhub.errors.KubeAPIError`; ``cryptography`` errors are
translated to these (``protocol.pki.PKIError`` from the shared helpers is caught at the
boundary and chained with ``from``).
"""

from __future__ import annotations

from cloudhub.errors import ConfigError, HubError

__all__ = [
    "CAConfigError",
    "CSRRefused",
    "CertificateRevoked",
    "HubPKIError",
    "JoinRefused",
    "NodeAlreadyJoined",
    "NodeNameRefused",
    "TokenDeleted",
    "TokenError",
    "TokenExpired",
    "TokenMalformed",
    "TokenNotFound",
    "TokenUsed",
    "TokenWrong",
]


class HubPKIError(HubError):
    """Root of the hub PKI's errors."""


class CAConfigError(HubPKIError, ConfigError):
    """The CA the operator supplied (files or Secret) or the stored CA Secret is unusable."""


class JoinRefused(HubPKIError):
    """A node's join or renewal request is refused.

    Attributes:
        reason: stable machine-readable code (``"TokenExpired"``), sent to the agent.
        status: HTTP status for the join endpoint (401 bad credentials, 403 not allowed,
            409 conflicts with the current state, 400 malformed request).
        message: what is wrong and what to do next.
    """

    reason = "JoinRefused"
    status = 403

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class TokenError(JoinRefused):
    """The bootstrap token cannot be used (the subclass says why)."""

    reason = "TokenInvalid"
    status = 401

    def __init__(self, message: str, *, token_id: str = "") -> None:
        super().__init__(message)
        self.token_id = token_id


class TokenMalformed(TokenError):
    """The token is not ``[a-z0-9]{6}.[a-z0-9]{16}`` (kubeadm's bootstrap token shape)."""

    reason = "TokenMalformed"


class TokenNotFound(TokenError):
    """No token with this id was ever created here (or it was purged long ago)."""

    reason = "TokenNotFound"


class TokenWrong(TokenError):
    """The token id exists but the secret part does not match."""

    reason = "TokenWrong"


class TokenExpired(TokenError):
    """The token's expiration has passed."""

    reason = "TokenExpired"


class TokenDeleted(TokenError):
    """The token was deleted (``cloudhub token delete``)."""

    reason = "TokenDeleted"


class TokenUsed(TokenError):
    """A single-use token was already used by another node (or another key)."""

    reason = "TokenUsed"


class CSRRefused(JoinRefused):
    """The certificate signing request is malformed or not a node CSR."""

    reason = "CSRRefused"
    status = 400


class NodeNameRefused(JoinRefused):
    """The token does not allow this node name, or the name is not a valid Node name."""

    reason = "NodeNameRefused"
    status = 403


class NodeAlreadyJoined(JoinRefused):
    """Another key already holds a valid certificate for this node name."""

    reason = "NodeAlreadyJoined"
    status = 409


class CertificateRevoked(HubPKIError):
    """A certificate presented by a node was revoked.

    Attributes:
        node_name: the node the certificate names.
        serial: the certificate's serial number.
        revoked_at: when it was revoked, seconds since the Unix epoch.
        why: the revocation reason (``"Node deleted"``, ``"revoked by operator"``).
    """

    def __init__(self, node_name: str, serial: int, revoked_at: float, why: str) -> None:
        super().__init__(
            f"the certificate of node {node_name!r} (serial {serial:x}) was revoked "
            f"({why}); the node must join again with a new token"
        )
        self.node_name = node_name
        self.serial = serial
        self.revoked_at = revoked_at
        self.why = why
