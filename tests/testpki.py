"""Test certificates, made fresh in each test session with protocol.pki (no keys checked in).

One hub CA; a server certificate for every address the tests dial (loopback and the
network-namespace addresses of tests/netns.py); node client certificates, one of them
expired; and a second, untrusted CA with a node certificate of its own.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from protocol import pki
from protocol.transport.tls import TLSCredentials

DAY = 86400.0
NODE = "edge-1"
SERVER_IPS = ("127.0.0.1", "::1", "10.203.0.1", "10.203.0.2", "10.203.1.1", "10.203.1.2")


@dataclass(frozen=True)
class TestPKI:
    """Everything a transport test needs, as TLS credentials."""

    __test__ = False  # not a test class, whatever pytest thinks of the name

    ca: pki.CertificateAuthority
    server: TLSCredentials
    """The hub: server certificate for localhost and SERVER_IPS, trusting the hub CA."""
    client: TLSCredentials
    """Node ``edge-1``: a valid client certificate from the hub CA."""
    no_cert: TLSCredentials
    """Trusts the hub CA but presents no certificate."""
    other_ca: TLSCredentials
    """Node ``edge-1`` with a certificate from another CA."""
    expired: TLSCredentials
    """Node ``edge-1`` with a hub-CA certificate that expired yesterday."""

    def node(self, name: str, *, lifetime: float = DAY, now: float | None = None) -> TLSCredentials:
        """Credentials for another node, signed by the hub CA."""
        return _node(self.ca, name, lifetime=lifetime, now=time.time() if now is None else now)


def _node(
    ca: pki.CertificateAuthority, name: str, *, lifetime: float, now: float
) -> TLSCredentials:
    key = pki.generate_private_key()
    cert = pki.sign_node_csr(ca, pki.build_node_csr(name, key), lifetime=lifetime, now=now)
    return TLSCredentials(cas=(ca.certificate,), chain=(cert,), private_key=key)


def make_test_pki() -> TestPKI:
    """Generate a fresh hub CA and every credential the tests use."""
    now = time.time()
    ca = pki.generate_ca("edgefleet-test-ca", lifetime=30 * DAY, now=now)
    server_cert, server_key = pki.issue_server_certificate(
        ca, dns_names=["localhost"], ip_addresses=SERVER_IPS, lifetime=DAY, now=now
    )
    other = pki.generate_ca("some-other-ca", lifetime=30 * DAY, now=now)
    other_node = _node(other, NODE, lifetime=DAY, now=now)
    return TestPKI(
        ca=ca,
        server=TLSCredentials(cas=(ca.certificate,), chain=(server_cert,), private_key=server_key),
        client=_node(ca, NODE, lifetime=DAY, now=now),
        no_cert=TLSCredentials(cas=(ca.certificate,)),
        other_ca=TLSCredentials(
            cas=(ca.certificate,), chain=other_node.chain, private_key=other_node.private_key
        ),
        expired=_node(ca, NODE, lifetime=DAY, now=now - 2 * DAY),
    )
