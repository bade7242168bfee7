"""load_chain_pem (public: the kubelet API server loads its chain with it): a chain and
its key load into a context; garbage, a lone certificate or a key of another pair is a
TransportError, not an ssl.SSLError."""

from __future__ import annotations

import ssl

import pytest

from protocol import pki
from protocol.transport.errors import TransportError
from protocol.transport.tls import load_chain_pem

NOW = 1_700_000_000.0


@pytest.fixture(scope="module")
def ca() -> pki.CertificateAuthority:
    return pki.generate_ca("tls-chain-test-ca", lifetime=86400.0, now=NOW)


def _server(ca: pki.CertificateAuthority):
    return pki.issue_server_certificate(ca, dns_names=["localhost"], lifetime=3600.0, now=NOW)


def test_a_chain_and_its_key_load(ca: pki.CertificateAuthority) -> None:
    cert, key = _server(ca)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    load_chain_pem(context, pki.dump_certificate_pem(cert) + pki.dump_private_key_pem(key))
    assert context.get_ca_certs() == []  # the chain is ours to present, not a trust anchor


@pytest.mark.parametrize("what", ["garbage", "no key", "another key"])
def test_what_does_not_load_is_a_transport_error(ca: pki.CertificateAuthority, what) -> None:
    cert, _ = _server(ca)
    pem = {
        "garbage": b"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n",
        "no key": pki.dump_certificate_pem(cert),
        "another key": pki.dump_certificate_pem(cert)
        + pki.dump_private_key_pem(pki.generate_private_key()),
    }[what]
    with pytest.raises(TransportError, match="certificate and key do not load") as info:
        load_chain_pem(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), pem)
    assert isinstance(info.value.__cause__, ssl.SSLError)
