"""load_chain_pem (public: the kubelet API server loads its chain with it): a chain and
its key load into a context; garbage, a lone certificate or a key of another pair is a
TransportError, not an ssl.SSLError. On Linux the chain goes through a memory file, never a
file on disk; without memfd it goes through a private temporary directory."""

from __future__ import annotations

import os
import ssl
import sys
import tempfile

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


@pytest.mark.skipif(sys.platform != "linux", reason="memfd is Linux's")
def test_on_linux_the_key_is_not_written_to_a_file(ca, monkeypatch) -> None:
    def no_directory(*args, **kwargs):
        raise AssertionError("a temporary directory was made for the key")

    monkeypatch.setattr(tempfile, "TemporaryDirectory", no_directory)
    cert, key = _server(ca)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    load_chain_pem(context, pki.dump_certificate_pem(cert) + pki.dump_private_key_pem(key))
    assert context.cert_store_stats()["x509"] == 0  # loaded as ours, not as a trust anchor


@pytest.mark.parametrize("what", ["good", "another key"])
def test_without_memfd_a_temporary_directory_serves(ca, monkeypatch, what) -> None:
    monkeypatch.delattr(os, "memfd_create", raising=False)
    made: list[str] = []
    real = tempfile.TemporaryDirectory

    def recorded(*args, **kwargs):
        made.append(kwargs.get("prefix", ""))
        return real(*args, **kwargs)

    monkeypatch.setattr(tempfile, "TemporaryDirectory", recorded)
    cert, key = _server(ca)
    if what == "another key":
        key = pki.generate_private_key()
    pem = pki.dump_certificate_pem(cert) + pki.dump_private_key_pem(key)
    if what == "good":
        load_chain_pem(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), pem)
    else:
        with pytest.raises(TransportError, match="certificate and key do not load"):
            load_chain_pem(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), pem)
    assert made == ["edgefleet-tls-"]
