"""The embedded API server's TLS files: made by protocol.pki, kept across restarts."""

from __future__ import annotations

import pathlib
import stat

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from cloudhub.standalone.errors import StorageError
from cloudhub.standalone.pki import ensure_pki
from protocol.pki import load_certificate_pem


def _ext(cert: x509.Certificate, kind):
    return cert.extensions.get_extension_for_class(kind)


def test_the_serving_certificate_is_a_protocol_pki_leaf_of_its_ca(tmp_path: pathlib.Path):
    pki = ensure_pki(tmp_path / "tls", ["127.0.0.1", "localhost"], None)
    ca = load_certificate_pem(pki.ca_cert_path.read_bytes())
    cert = load_certificate_pem(pki.cert_path.read_bytes())
    cert.verify_directly_issued_by(ca)
    assert _ext(ca, x509.BasicConstraints).value.ca
    assert _ext(ca, x509.KeyUsage).value.key_cert_sign
    # The chain every protocol.pki leaf has (the embedded API's own builder had no
    # KeyUsage and no subject key identifier).
    usage = _ext(cert, x509.KeyUsage)
    assert usage.critical and usage.value.digital_signature and not usage.value.key_cert_sign
    assert not _ext(cert, x509.BasicConstraints).value.ca
    assert list(_ext(cert, x509.ExtendedKeyUsage).value) == [ExtendedKeyUsageOID.SERVER_AUTH]
    ski = _ext(ca, x509.SubjectKeyIdentifier).value.digest
    assert _ext(cert, x509.AuthorityKeyIdentifier).value.key_identifier == ski
    assert _ext(cert, x509.SubjectKeyIdentifier)
    sans = _ext(cert, x509.SubjectAlternativeName).value
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert sans.get_values_for_type(x509.DNSName) == ["localhost"]
    for private in (pki.key_path, tmp_path / "tls" / "ca.key", tmp_path / "tls" / "token"):
        assert stat.S_IMODE(private.stat().st_mode) == 0o600


def test_a_restart_keeps_the_ca_and_reissues_for_a_new_host(tmp_path: pathlib.Path):
    first = ensure_pki(tmp_path, ["127.0.0.1"], None)
    ca_pem, cert_pem = first.ca_cert_path.read_bytes(), first.cert_path.read_bytes()
    again = ensure_pki(tmp_path, ["127.0.0.1"], None)
    assert again.cert_path.read_bytes() == cert_pem and again.token == first.token
    wider = ensure_pki(tmp_path, ["127.0.0.1", "hub.example"], None)
    assert wider.ca_cert_path.read_bytes() == ca_pem
    cert = load_certificate_pem(wider.cert_path.read_bytes())
    assert "hub.example" in _ext(cert, x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName
    )
    cert.verify_directly_issued_by(load_certificate_pem(ca_pem))


def test_a_garbage_ca_key_is_a_storage_error_naming_the_directory(tmp_path: pathlib.Path):
    ensure_pki(tmp_path, ["127.0.0.1"], None)
    (tmp_path / "ca.key").write_text("not a key\n")
    (tmp_path / "apiserver.crt").unlink()
    with pytest.raises(StorageError, match=f"cannot prepare TLS files in {tmp_path}"):
        ensure_pki(tmp_path, ["127.0.0.1"], None)
