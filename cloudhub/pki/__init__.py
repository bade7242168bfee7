"""The hub's PKI: CA, bootstrap tokens, node certificates (join and renewal), revocation,
and the join endpoint. :class:`HubPKI` bundles them for the hub; the CLI commands are in
:mod:`cloudhub.pki.cli` (imported on demand: it needs click)."""

from cloudhub.pki.ca import CAManager, read_hub_info
from cloudhub.pki.errors import (
    CAConfigError,
    CertificateRevoked,
    CSRRefused,
    HubPKIError,
    JoinRefused,
    NodeAlreadyJoined,
    NodeNameRefused,
    TokenDeleted,
    TokenError,
    TokenExpired,
    TokenMalformed,
    TokenNotFound,
    TokenUsed,
    TokenWrong,
)
from cloudhub.pki.hub import HubPKI
from cloudhub.pki.join import JoinServer
from cloudhub.pki.records import CertificateRegistry, IssuedCertificate, key_pin
from cloudhub.pki.settings import PKISettings
from cloudhub.pki.signer import JoinResult, NodeSigner
from cloudhub.pki.tokens import BootstrapToken, TokenStore

__all__ = [
    "BootstrapToken",
    "CAConfigError",
    "CAManager",
    "CSRRefused",
    "CertificateRegistry",
    "CertificateRevoked",
    "HubPKI",
    "HubPKIError",
    "IssuedCertificate",
    "JoinRefused",
    "JoinResult",
    "JoinServer",
    "NodeAlreadyJoined",
    "NodeNameRefused",
    "NodeSigner",
    "PKISettings",
    "TokenDeleted",
    "TokenError",
    "TokenExpired",
    "TokenMalformed",
    "TokenNotFound",
    "TokenStore",
    "TokenUsed",
    "TokenWrong",
    "key_pin",
    "read_hub_info",
]
