"""Replica-to-replica identity: the peer certificate a hub replica presents to another.

A replica that must reach a node served by another replica (a ``kubectl exec`` that landed
on it, :mod:`cloudhub.kubelet.relay`) connects to that replica over mutual TLS. Both ends
present a *peer certificate* issued by the one hub CA (every replica holds it: "one CA under
races"), with subject ``O=edgefleet:hub-replicas, CN=<replica identity>`` and both the
``serverAuth`` and ``clientAuth`` extended key usages. Node certificates from the same CA
cannot pass for one: the hub signs node CSRs with ``clientAuth`` only
(``protocol.pki.sign_node_csr``), and :func:`is_peer_certificate` requires ``serverAuth``
and refuses ``O=system:nodes``.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from protocol import pki
from protocol.transport import TLSCredentials

__all__ = ["PEER_ORGANIZATION", "PeerCredentials", "is_peer_certificate", "issue_peer_credentials"]

PEER_ORGANIZATION = "edgefleet:hub-replicas"
"""Organization of every replica's peer certificate."""

_USAGES = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
_CLOCK_SKEW = 300.0  # seconds of backdating, as the hub's other certificates


def issue_peer_credentials(
    ca: pki.CertificateAuthority, identity: str, *, lifetime: float, now: float
) -> TLSCredentials:
    """A fresh key and a peer certificate for replica ``identity``, signed by ``ca``,
    valid ``lifetime`` seconds from ``now`` (seconds since the epoch).

    Raises:
        ValueError: an empty identity or a lifetime that is not positive.
    """
    if not identity:
        raise ValueError("a peer certificate needs the replica's identity")
    if not lifetime > 0:
        raise ValueError("a peer certificate's lifetime must be > 0 seconds")
    key = pki.generate_private_key()
    start = datetime.datetime.fromtimestamp(now - _CLOCK_SKEW, datetime.timezone.utc)
    end = datetime.datetime.fromtimestamp(now + lifetime, datetime.timezone.utc)
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, PEER_ORGANIZATION),
            x509.NameAttribute(NameOID.COMMON_NAME, identity[:64]),
        ]
    )
    usage = x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=False,
        crl_sign=False,
        encipher_only=False,
        decipher_only=False,
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca.certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(usage, critical=True)
        .add_extension(x509.ExtendedKeyUsage(_USAGES), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.certificate.public_key()),
            critical=False,
        )
        .sign(ca.private_key, hashes.SHA256())
    )
    return TLSCredentials(cas=(ca.certificate,), chain=(cert,), private_key=key)


def is_peer_certificate(der: bytes | None) -> str:
    """The replica identity a verified TLS peer's certificate names, ``""`` when it is not
    a peer certificate (no certificate, a node's, or the wrong subject)."""
    if not der:
        return ""
    cert = x509.load_der_x509_certificate(der)
    orgs = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    if orgs != [PEER_ORGANIZATION]:
        return ""
    try:
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return ""
    if ExtendedKeyUsageOID.SERVER_AUTH not in eku:
        return ""
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else ""


class PeerCredentials:
    """This replica's peer credentials, issued from the hub CA on first use and again once
    two thirds of their lifetime have passed (as the hub's serving certificate).

    Args:
        ca: returns the hub CA (its private key signs).
        identity: this replica's identity (the certificate's common name).
        lifetime: seconds each certificate is valid (default a day).
        clock: seconds since the epoch.
    """

    def __init__(
        self,
        ca: Callable[[], pki.CertificateAuthority],
        identity: str,
        *,
        lifetime: float = 86400.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._ca = ca
        self.identity = identity
        self.lifetime = lifetime
        self._clock = clock
        self._current: TLSCredentials | None = None
        self._renew_at = 0.0

    def __call__(self) -> TLSCredentials:
        now = self._clock()
        if self._current is None or now >= self._renew_at:
            self._current = issue_peer_credentials(
                self._ca(), self.identity, lifetime=self.lifetime, now=now
            )
            self._renew_at = now + self.lifetime * 2 / 3
        return self._current
