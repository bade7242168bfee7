"""TLS material and contexts for both transports (mutual TLS, TLS 1.3 only).

The hub presents a server certificate issued by the hub CA and requires every client to
present a node certificate chained to that CA; the agent verifies the hub against the same
CA, with hostname checking. :class:`TLSCredentials` holds the material once; the WebSocket
transport turns it into an :class:`ssl.SSLContext` (here) and the QUIC transport into an
aioquic configuration (``protocol.transport.quic``).

TLS 1.3 is the minimum: QUIC requires it, and using it on TCP too keeps one policy.

:class:`PEMCredentials` carries the same material as PEM bytes, never parsed here: an
agent on WebSocket builds its TLS context with the standard library alone and does not
import ``cryptography`` (about 8 MiB of RSS on a device). QUIC needs the parsed form
(aioquic works on ``cryptography`` objects): :func:`tls_credentials` converts.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from protocol.transport.errors import TransportError

if TYPE_CHECKING:
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec

__all__ = [
    "PEMCredentials",
    "TLSCredentials",
    "client_ssl_context",
    "load_chain_pem",
    "peer_node_name",
    "server_ssl_context",
    "tls_credentials",
]


@dataclass(frozen=True, slots=True)
class TLSCredentials:
    """What one end of a mutual-TLS connection trusts and presents.

    Hub: ``cas`` = the hub CA, ``chain`` = its server certificate, ``private_key`` = its key.
    Agent: ``cas`` = the pinned hub CA, ``chain`` = its node certificate, ``private_key`` =
    the key generated on the device. An agent that has not joined yet has an empty chain.
    """

    cas: tuple[x509.Certificate, ...]
    """Trust anchors the peer's certificate must chain to."""
    chain: tuple[x509.Certificate, ...] = ()
    """Our certificate first, then any intermediates; empty to present none."""
    private_key: ec.EllipticCurvePrivateKey | None = None
    """The key of ``chain[0]``."""

    def __post_init__(self) -> None:
        if not self.cas:
            raise TransportError("TLS credentials need at least one trusted CA certificate")
        if bool(self.chain) != (self.private_key is not None):
            raise TransportError("a certificate chain and its private key come together")

    @classmethod
    def from_pem(
        cls, ca_pem: bytes, cert_pem: bytes | None = None, key_pem: bytes | None = None
    ) -> TLSCredentials:
        """Build credentials from PEM bytes (CA bundle, our chain, our key).

        Raises:
            protocol.pki.PKIError: a PEM block does not parse.
            TransportError: a chain is given without its key or the reverse.
        """
        from protocol import pki

        chain = tuple(pki.load_certificates_pem(cert_pem)) if cert_pem else ()
        key = pki.load_private_key_pem(key_pem) if key_pem else None
        return cls(cas=tuple(pki.load_certificates_pem(ca_pem)), chain=chain, private_key=key)

    @property
    def ca_pem(self) -> bytes:
        """The trusted CA certificates as one PEM bundle."""
        from protocol import pki

        return pki.dump_certificate_pem(self.cas)


@dataclass(frozen=True, slots=True)
class PEMCredentials:
    """A client's mutual-TLS material as PEM bytes, not parsed (see the module docstring).

    Use it where :class:`TLSCredentials` goes on the client side (``connect_websocket``,
    ``connect_quic``, ``quic_handshake_succeeds``). Problems in the PEM show when a context
    is built: :func:`client_ssl_context` raises ``TransportError``.
    """

    ca_pem: bytes
    """The trusted CA certificates."""
    cert_pem: bytes = b""
    """Our certificate, then any intermediates; empty to present none."""
    key_pem: bytes = b""
    """The key of the first certificate of ``cert_pem``."""

    def __post_init__(self) -> None:
        if not self.ca_pem.strip():
            raise TransportError("TLS credentials need at least one trusted CA certificate")
        if bool(self.cert_pem.strip()) != bool(self.key_pem.strip()):
            raise TransportError("a certificate chain and its private key come together")


def tls_credentials(credentials: TLSCredentials | PEMCredentials) -> TLSCredentials:
    """The parsed form (imports ``cryptography``), for aioquic.

    Raises:
        protocol.pki.PKIError: a PEM block does not parse.
        TransportError: a chain without its key or the reverse.
    """
    if isinstance(credentials, PEMCredentials):
        return TLSCredentials.from_pem(
            credentials.ca_pem, credentials.cert_pem or None, credentials.key_pem or None
        )
    return credentials


def _load_chain(context: ssl.SSLContext, chain: Sequence[x509.Certificate], key) -> None:
    from protocol import pki

    load_chain_pem(context, pki.dump_certificate_pem(chain) + pki.dump_private_key_pem(key))


def load_chain_pem(context: ssl.SSLContext, pem: bytes) -> None:
    """Load a certificate chain and its private key, both PEM in ``pem`` (the leaf first,
    then its intermediates, then the key), into ``context``.

    Raises:
        TransportError: the certificates or the key do not parse, or do not match.
    """
    # ssl only loads a certificate chain from a file. On Linux that file is an anonymous
    # memory file (memfd, read through /proc/self/fd): the key never reaches a disk (an SD
    # card's wear; a dial costs no file-system writes). Elsewhere, or without /proc, a
    # private temporary directory (mode 0700, removed at once).
    memfd = getattr(os, "memfd_create", None)
    if memfd is not None:
        fd = memfd("edgefleet-tls")  # close-on-exec by default
        try:
            os.write(fd, pem)
            _load_chain_file(context, f"/proc/self/fd/{fd}")
            return
        except FileNotFoundError:  # no /proc mounted: the temporary directory below
            pass
        finally:
            os.close(fd)
    with tempfile.TemporaryDirectory(prefix="edgefleet-tls-") as tmp:
        path = os.path.join(tmp, "chain.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
        _load_chain_file(context, path)


def _load_chain_file(context: ssl.SSLContext, path: str) -> None:
    try:
        context.load_cert_chain(path)
    except ssl.SSLError as exc:
        raise TransportError(f"certificate and key do not load: {exc}") from exc


def _base_context(protocol: int, credentials: TLSCredentials | PEMCredentials) -> ssl.SSLContext:
    context = ssl.SSLContext(protocol)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.verify_mode = ssl.CERT_REQUIRED
    context.verify_flags |= ssl.VERIFY_X509_STRICT
    try:
        context.load_verify_locations(cadata=credentials.ca_pem.decode("ascii"))
    except (ssl.SSLError, UnicodeDecodeError) as exc:
        raise TransportError(f"CA certificates do not load: {exc}") from exc
    if isinstance(credentials, PEMCredentials):
        if credentials.cert_pem:
            pem = credentials.cert_pem.rstrip(b"\n") + b"\n" + credentials.key_pem
            load_chain_pem(context, pem)
    elif credentials.chain:
        _load_chain(context, credentials.chain, credentials.private_key)
    return context


def server_ssl_context(credentials: TLSCredentials) -> ssl.SSLContext:
    """The hub's TLS context: present our certificate, require a client certificate.

    A client without a certificate, with one from another CA, or with an expired one
    fails the handshake.

    Raises:
        TransportError: the credentials carry no server certificate or do not load.
    """
    if not credentials.chain:
        raise TransportError("a TLS server needs a certificate chain and key")
    return _base_context(ssl.PROTOCOL_TLS_SERVER, credentials)


def client_ssl_context(credentials: TLSCredentials | PEMCredentials) -> ssl.SSLContext:
    """The agent's TLS context: verify the hub against the CA with hostname checking.

    Presents the node certificate when the credentials carry one.

    Raises:
        TransportError: the credentials do not load.
    """
    context = _base_context(ssl.PROTOCOL_TLS_CLIENT, credentials)
    context.check_hostname = True
    return context


def parse_certificate(der: bytes) -> x509.Certificate:
    """A peer certificate from DER bytes.

    Raises:
        TransportError: the bytes are not a DER X.509 certificate.
    """
    from cryptography import x509  # the hub side only: an agent on WebSocket never parses

    try:
        return x509.load_der_x509_certificate(der)
    except ValueError as exc:
        raise TransportError(f"peer certificate does not parse: {exc}") from exc


def peer_node_name(certificate: x509.Certificate | bytes | None) -> str:
    """The node name in a peer's (already verified) client certificate.

    Args:
        certificate: the peer certificate, as a ``cryptography`` object or DER bytes
            (``SSLObject.getpeercert(binary_form=True)``).

    Returns:
        ``<name>`` from ``CN=system:node:<name>``.

    Raises:
        TransportError: no certificate, or not a node certificate.
    """
    if certificate is None:
        raise TransportError("the peer presented no certificate")
    from cryptography import x509

    from protocol import pki

    try:
        if isinstance(certificate, bytes):
            certificate = x509.load_der_x509_certificate(certificate)
        return pki.node_name_from_cert(certificate)
    except ValueError as exc:
        raise TransportError(f"peer certificate does not parse: {exc}") from exc
    except pki.PKIError as exc:
        raise TransportError(str(exc)) from exc
