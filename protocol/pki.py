"""Certificates for EdgeFleet mutual TLS: hub CA, node client certificates, server certificates.

Both halves use these helpers: the hub to create its CA, sign node CSRs and issue its own
server certificate; the agent to generate its key on the device, build the CSR it sends at
join and at renewal, and pin the hub CA by hash.

Conventions borrowed from Kubernetes, so that standard tooling reads our certificates:

- A node's client certificate has subject ``CN=system:node:<nodeName>, O=system:nodes`` and
  the ``clientAuth`` extended key usage, as kubelet client certificates do.
- The CA pin is ``"sha256:<hex>"`` of the CA certificate's DER SubjectPublicKeyInfo, as
  kubeadm's ``--discovery-token-ca-cert-hash``.
- Keys are ECDSA P-256 (small, fast on a Raspberry Pi, accepted by every TLS stack we use).
- Certificates start five minutes in the past (``CLOCK_SKEW``) so that a board whose clock
  is a little behind still accepts them.

Nothing here reads the clock: ``now`` (seconds since the Unix epoch) is passed in. Key and
serial-number generation draw from the operating system's random source, as they must.
Errors raised are :class:`PKIError` subclasses; ``cryptography`` exceptions never escape.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from cryptography.x509.verification import (
    Criticality,
    ExtensionPolicy,
    PolicyBuilder,
    Store,
    VerificationError,
)

from protocol.errors import ProtocolError

__all__ = [
    "CLOCK_SKEW",
    "NODE_COMMON_NAME_PREFIX",
    "NODE_ORGANIZATION",
    "CertificateAuthority",
    "PKIError",
    "build_node_csr",
    "ca_cert_hash",
    "dump_certificate_pem",
    "dump_csr_pem",
    "dump_private_key_pem",
    "generate_ca",
    "generate_private_key",
    "issue_server_certificate",
    "leaf_certificate_builder",
    "load_certificate_pem",
    "load_certificates_pem",
    "load_csr_pem",
    "load_private_key_pem",
    "node_name_from_cert",
    "sign_node_csr",
    "verify_ca_cert_hash",
    "verify_node_certificate",
]

CLOCK_SKEW = 300.0
"""Seconds subtracted from ``now`` for every notBefore: tolerates a device clock 5 min behind."""

NODE_COMMON_NAME_PREFIX = "system:node:"
"""Subject CN prefix of a node client certificate (Kubernetes node authorizer convention)."""

NODE_ORGANIZATION = "system:nodes"
"""Subject O of a node client certificate (Kubernetes node authorizer convention)."""

# A node name is a DNS-1123 subdomain, as Kubernetes requires of Node names.
_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_HASH_PREFIX = "sha256:"


class PKIError(ProtocolError):
    """A certificate, key or CSR is invalid, or a request to make one is (the ``pki``
    branch of the ``protocol.errors`` tree).

    The message names what is wrong (subject, key type, validity, chain).
    """


@dataclass(frozen=True, slots=True)
class CertificateAuthority:
    """A CA certificate with its private key (held by the hub only)."""

    certificate: x509.Certificate
    """The self-signed CA certificate."""
    private_key: ec.EllipticCurvePrivateKey
    """The CA's signing key."""


def _utc(seconds: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.timezone.utc)


def _check_lifetime(lifetime: float) -> None:
    if not lifetime > 0:
        raise PKIError(f"certificate lifetime must be > 0 seconds, got {lifetime!r}")


def _check_node_name(node_name: str) -> None:
    if not isinstance(node_name, str) or len(node_name) > 253 or not _NODE_NAME.match(node_name):
        raise PKIError(f"invalid node name {node_name!r}: must be a DNS-1123 subdomain")


def _key_ids(
    builder: x509.CertificateBuilder,
    subject_key: ec.EllipticCurvePublicKey,
    issuer: x509.Certificate,
) -> x509.CertificateBuilder:
    ski = x509.SubjectKeyIdentifier.from_public_key(subject_key)
    issuer_ski = issuer.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    return builder.add_extension(ski, critical=False).add_extension(
        x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(issuer_ski), critical=False
    )


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    """Signatures only (ECDSA keys neither encipher nor agree keys here); a CA also signs
    certificates and CRLs (RFC 5280 4.2.1.3)."""
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


def leaf_certificate_builder(
    ca: CertificateAuthority,
    subject: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    lifetime: float,
    now: float,
    eku: x509.ObjectIdentifier,
) -> x509.CertificateBuilder:
    """The part every leaf certificate shares: ``subject``'s key signed by ``ca``, valid
    from ``now - CLOCK_SKEW`` to ``now + lifetime`` (seconds since the epoch), not a CA,
    signature key usage, the one extended key usage ``eku`` (client or server auth) and
    the subject and authority key identifiers.

    Args:
        ca: the issuing CA (its certificate names the issuer).
        subject: the leaf's subject name, any.
        public_key: the leaf's P-256 public key.
        lifetime: seconds of validity from ``now``.
        now: seconds since the Unix epoch.
        eku: ``ExtendedKeyUsageOID.CLIENT_AUTH`` or ``SERVER_AUTH``.

    Returns:
        An unsigned builder: the caller adds what is specific (SANs) and signs with
        ``ca.private_key``.
    """
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca.certificate.subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(_utc(now - CLOCK_SKEW))
        .not_valid_after(_utc(now + lifetime))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(ca=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([eku]), critical=False)
    )
    return _key_ids(builder, public_key, ca.certificate)


def generate_private_key() -> ec.EllipticCurvePrivateKey:
    """Generate a new ECDSA P-256 private key (on the device that will use it).

    Returns:
        The private key; it never leaves the machine that generated it.
    """
    return ec.generate_private_key(ec.SECP256R1())


def generate_ca(name: str, *, lifetime: float, now: float) -> CertificateAuthority:
    """Create a self-signed CA (ECDSA P-256) for signing node and server certificates.

    Args:
        name: the CA's subject common name, e.g. ``"edgefleet-hub-ca"``.
        lifetime: validity in seconds from ``now`` (kubeadm uses 10 years for its CA).
        now: the current time, seconds since the Unix epoch.

    Returns:
        The CA certificate and its key. The CA may sign leaf certificates only
        (path length 0).

    Raises:
        PKIError: ``lifetime`` is not positive or ``name`` is empty.
    """
    _check_lifetime(lifetime)
    if not name:
        raise PKIError("CA name must not be empty")
    key = generate_private_key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_utc(now - CLOCK_SKEW))
        .not_valid_after(_utc(now + lifetime))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(ca=True), critical=True)
        .add_extension(ski, critical=False)
        .sign(key, hashes.SHA256())
    )
    return CertificateAuthority(certificate=cert, private_key=key)


def build_node_csr(
    node_name: str, private_key: ec.EllipticCurvePrivateKey
) -> x509.CertificateSigningRequest:
    """Build the CSR a node sends at join and at renewal.

    Args:
        node_name: the Kubernetes Node name (a DNS-1123 subdomain).
        private_key: the node's key (see :func:`generate_private_key`).

    Returns:
        A CSR with subject ``CN=system:node:<node_name>, O=system:nodes``, as a kubelet
        client CSR.

    Raises:
        PKIError: the node name is not a DNS-1123 subdomain.
    """
    _check_node_name(node_name)
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, NODE_ORGANIZATION),
            x509.NameAttribute(NameOID.COMMON_NAME, NODE_COMMON_NAME_PREFIX + node_name),
        ]
    )
    return (
        x509.CertificateSigningRequestBuilder()
        .subject_name(subject)
        .sign(private_key, hashes.SHA256())
    )


def _node_name_from_subject(subject: x509.Name, what: str) -> str:
    cns = subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    orgs = [a.value for a in subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    if len(cns) != 1 or not str(cns[0].value).startswith(NODE_COMMON_NAME_PREFIX):
        raise PKIError(f"{what} subject {subject.rfc4514_string()!r} is not CN=system:node:<name>")
    if NODE_ORGANIZATION not in orgs:
        raise PKIError(f"{what} subject {subject.rfc4514_string()!r} lacks O={NODE_ORGANIZATION}")
    name = str(cns[0].value)[len(NODE_COMMON_NAME_PREFIX) :]
    _check_node_name(name)
    return name


def sign_node_csr(
    ca: CertificateAuthority,
    csr: x509.CertificateSigningRequest,
    *,
    lifetime: float,
    now: float,
    node_name: str | None = None,
) -> x509.Certificate:
    """Sign a node's CSR into a client certificate.

    Args:
        ca: the hub CA.
        csr: the node's CSR (see :func:`build_node_csr`).
        lifetime: validity in seconds from ``now`` (the agent renews at 80% of it, as
            kubelet does).
        now: the current time, seconds since the Unix epoch; notBefore is
            ``now - CLOCK_SKEW``.
        node_name: if given, the CSR must be for exactly this node (the name a bootstrap
            token or a live session is allowed to use).

    Returns:
        A certificate with the CSR's subject and public key, ``clientAuth`` extended key
        usage, not a CA.

    Raises:
        PKIError: the CSR's signature is invalid, its key is not ECDSA P-256, its subject
            is not a node subject, it names another node than ``node_name``, or
            ``lifetime`` is not positive.
    """
    _check_lifetime(lifetime)
    if not csr.is_signature_valid:
        raise PKIError("CSR signature is invalid")
    try:
        public_key = csr.public_key()
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise PKIError(f"CSR public key cannot be read: {exc}") from exc
    if not isinstance(public_key, ec.EllipticCurvePublicKey) or not isinstance(
        public_key.curve, ec.SECP256R1
    ):
        raise PKIError("CSR key must be ECDSA P-256")
    name = _node_name_from_subject(csr.subject, "CSR")
    if node_name is not None and name != node_name:
        raise PKIError(f"CSR is for node {name!r}, expected {node_name!r}")
    builder = leaf_certificate_builder(
        ca, csr.subject, public_key, lifetime, now, ExtendedKeyUsageOID.CLIENT_AUTH
    )
    return builder.sign(ca.private_key, hashes.SHA256())


def issue_server_certificate(
    ca: CertificateAuthority,
    *,
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[str | ipaddress.IPv4Address | ipaddress.IPv6Address] = (),
    lifetime: float,
    now: float,
    private_key: ec.EllipticCurvePrivateKey | None = None,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """Issue the hub's server certificate.

    Args:
        ca: the hub CA.
        dns_names: DNS names clients dial (e.g. the Service name and its external name).
        ip_addresses: IP addresses clients dial, as strings or ``ipaddress`` objects.
        lifetime: validity in seconds from ``now``.
        now: the current time, seconds since the Unix epoch.
        private_key: the server key to certify; a new P-256 key if omitted.

    Returns:
        ``(certificate, private_key)``: a ``serverAuth`` certificate whose subject
        alternative names are exactly the given names and addresses.

    Raises:
        PKIError: no name and no address given, an address does not parse, or
            ``lifetime`` is not positive.
    """
    _check_lifetime(lifetime)
    if not dns_names and not ip_addresses:
        raise PKIError("a server certificate needs at least one DNS name or IP address")
    sans: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
    for address in ip_addresses:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(address)))
        except ValueError as exc:
            raise PKIError(f"invalid IP address {address!r}") from exc
    key = private_key if private_key is not None else generate_private_key()
    common_name = dns_names[0] if dns_names else str(ip_addresses[0])
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    builder = leaf_certificate_builder(
        ca, subject, key.public_key(), lifetime, now, ExtendedKeyUsageOID.SERVER_AUTH
    ).add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca.private_key, hashes.SHA256()), key


def ca_cert_hash(cert: x509.Certificate) -> str:
    """The CA pin: ``"sha256:<hex>"`` of the certificate's DER SubjectPublicKeyInfo.

    Same value as kubeadm's ``--discovery-token-ca-cert-hash``.
    """
    spki = cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return _HASH_PREFIX + hashlib.sha256(spki).hexdigest()


def verify_ca_cert_hash(cert: x509.Certificate, expected: str) -> None:
    """Check a CA certificate against a pin from :func:`ca_cert_hash`.

    Raises:
        PKIError: the pin is malformed or does not match.
    """
    if not expected.startswith(_HASH_PREFIX) or len(expected) != len(_HASH_PREFIX) + 64:
        raise PKIError(f"CA pin {expected!r} is not 'sha256:' followed by 64 hex digits")
    actual = ca_cert_hash(cert)
    if actual != expected.lower():
        raise PKIError(f"CA public key hash {actual} does not match the pinned {expected}")


def node_name_from_cert(cert: x509.Certificate) -> str:
    """The node name a client certificate was issued to.

    Returns:
        ``<name>`` from ``CN=system:node:<name>``.

    Raises:
        PKIError: the subject is not ``CN=system:node:<name>, O=system:nodes``.
    """
    return _node_name_from_subject(cert.subject, "certificate")


def verify_node_certificate(
    cert: x509.Certificate,
    *,
    cas: Sequence[x509.Certificate],
    now: float,
    intermediates: Sequence[x509.Certificate] = (),
) -> str:
    """Verify a node client certificate against the hub CA(s) and return the node name.

    Checks the chain, the validity period at ``now``, the ``clientAuth`` usage and the
    subject, as a TLS server requiring client certificates does (used where the TLS stack
    does not do it itself, e.g. aioquic on the server side).

    Args:
        cert: the peer's leaf certificate.
        cas: trusted CA certificates.
        now: the current time, seconds since the Unix epoch.
        intermediates: other certificates the peer sent.

    Returns:
        The node name from the certificate.

    Raises:
        PKIError: the certificate does not chain to a CA, is expired or not yet valid, is
            not for client authentication, or is not a node certificate.
    """
    if not cas:
        raise PKIError("no trusted CA to verify the node certificate against")
    # Web PKI defaults, except that the subject alternative name may be absent: node
    # certificates name the node in the subject, as kubelet client certificates do.
    ee_policy = ExtensionPolicy.webpki_defaults_ee().may_be_present(
        x509.SubjectAlternativeName, Criticality.AGNOSTIC, None
    )
    verifier = (
        PolicyBuilder()
        .store(Store(list(cas)))
        .time(_utc(now))
        .extension_policies(ca_policy=ExtensionPolicy.webpki_defaults_ca(), ee_policy=ee_policy)
        .build_client_verifier()
    )
    try:
        verifier.verify(cert, list(intermediates))
    except VerificationError as exc:
        raise PKIError(f"client certificate rejected: {exc}") from exc
    return node_name_from_cert(cert)


# -- PEM -------------------------------------------------------------------------------------


def load_certificate_pem(data: bytes) -> x509.Certificate:
    """Load the first certificate from PEM bytes.

    Raises:
        PKIError: no certificate could be parsed.
    """
    return load_certificates_pem(data)[0]


def load_certificates_pem(data: bytes) -> list[x509.Certificate]:
    """Load every certificate from PEM bytes (a chain or a CA bundle), in order.

    Raises:
        PKIError: the data holds no parseable certificate.
    """
    try:
        certs = x509.load_pem_x509_certificates(data)
    except (ValueError, TypeError) as exc:
        raise PKIError(f"invalid certificate PEM: {exc}") from exc
    return certs


def load_private_key_pem(data: bytes) -> ec.EllipticCurvePrivateKey:
    """Load an unencrypted ECDSA private key from PEM (PKCS#8 or SEC1).

    Raises:
        PKIError: the data is not a PEM private key, is encrypted, or is not an EC key.
    """
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise PKIError(f"invalid private key PEM: {exc}") from exc
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise PKIError(f"private key must be ECDSA, got {type(key).__name__}")
    return key


def load_csr_pem(data: bytes) -> x509.CertificateSigningRequest:
    """Load a CSR from PEM bytes.

    Raises:
        PKIError: the data is not a PEM CSR.
    """
    try:
        return x509.load_pem_x509_csr(data)
    except (ValueError, TypeError) as exc:
        raise PKIError(f"invalid CSR PEM: {exc}") from exc


def dump_certificate_pem(certs: x509.Certificate | Iterable[x509.Certificate]) -> bytes:
    """PEM bytes of one certificate or of a chain (concatenated in order)."""
    if isinstance(certs, x509.Certificate):
        certs = [certs]
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)


def dump_private_key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    """Unencrypted PKCS#8 PEM of a private key (store it with mode 0600)."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def dump_csr_pem(csr: x509.CertificateSigningRequest) -> bytes:
    """PEM bytes of a CSR (what ``cert_renew_request.csr_pem`` carries)."""
    return csr.public_bytes(serialization.Encoding.PEM)
