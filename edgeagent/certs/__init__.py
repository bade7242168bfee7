"""The node's certificates: files on disk, the join client, renewal over the live session,
and the clock check. Importing this package does not import ``cryptography``: only the
functions that parse or make keys do."""

from edgeagent.certs.clock import MAX_CLOCK_SKEW, HubClock, check_clock_skew
from edgeagent.certs.errors import (
    CertificateExpired,
    CertificateFilesError,
    JoinFailed,
    NotJoined,
    RenewalFailed,
)
from edgeagent.certs.files import CertPaths
from edgeagent.certs.renewer import RENEW_AT, CertificateRenewer

__all__ = [
    "MAX_CLOCK_SKEW",
    "RENEW_AT",
    "CertPaths",
    "CertificateExpired",
    "CertificateFilesError",
    "CertificateRenewer",
    "HubClock",
    "JoinFailed",
    "NotJoined",
    "RenewalFailed",
    "check_clock_skew",
]
