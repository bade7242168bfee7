"""protocol.pki: CA, node CSR and certificate, server certificate, CA pin, PEM helpers."""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import time

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from protocol import pki
from protocol.errors import ProtocolError

NOW = 1_800_000_000.0  # a fixed instant: nothing in pki reads the clock
HOUR = 3600.0


@pytest.fixture(scope="module")
def ca() -> pki.CertificateAuthority:
    return pki.generate_ca("test-ca", lifetime=24 * HOUR, now=NOW)


def _utc(t: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(t, tz=datetime.timezone.utc)


def test_ca_is_p256_self_signed_leaf_only_ca(ca: pki.CertificateAuthority) -> None:
    cert = ca.certificate
    assert isinstance(cert.public_key(), ec.EllipticCurvePublicKey)
    assert isinstance(cert.public_key().curve, ec.SECP256R1)
    assert cert.subject == cert.issuer
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "test-ca"
    bc = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert bc.critical and bc.value.ca and bc.value.path_length == 0
    assert cert.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    assert cert.not_valid_before_utc == _utc(NOW - pki.CLOCK_SKEW)
    assert cert.not_valid_after_utc == _utc(NOW + 24 * HOUR)
    cert.verify_directly_issued_by(cert)


def test_node_csr_has_kubelet_subject() -> None:
    key = pki.generate_private_key()
    csr = pki.build_node_csr("edge-7.site-a", key)
    assert csr.is_signature_valid
    assert csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == (
        "system:node:edge-7.site-a"
    )
    assert csr.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == (
        "system:nodes"
    )
    assert pki.load_csr_pem(pki.dump_csr_pem(csr)) == csr


@pytest.mark.parametrize("name", ["", "Edge_1", "-edge", "edge-", "a" * 254, "edge..1"])
def test_node_csr_rejects_invalid_node_names(name: str) -> None:
    with pytest.raises(pki.PKIError, match="invalid node name"):
        pki.build_node_csr(name, pki.generate_private_key())


def test_signed_node_certificate(ca: pki.CertificateAuthority) -> None:
    key = pki.generate_private_key()
    cert = pki.sign_node_csr(ca, pki.build_node_csr("edge-1", key), lifetime=HOUR, now=NOW)
    assert cert.public_key() == key.public_key()
    assert cert.issuer == ca.certificate.subject
    cert.verify_directly_issued_by(ca.certificate)
    assert cert.not_valid_before_utc == _utc(NOW - 300)
    assert cert.not_valid_after_utc == _utc(NOW + HOUR)
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert pki.node_name_from_cert(cert) == "edge-1"
    assert pki.verify_node_certificate(cert, cas=[ca.certificate], now=NOW) == "edge-1"
    # A board whose clock is 4 minutes behind still accepts it.
    assert pki.verify_node_certificate(cert, cas=[ca.certificate], now=NOW - 240) == "edge-1"


def test_sign_checks_the_requested_node_name(ca: pki.CertificateAuthority) -> None:
    csr = pki.build_node_csr("edge-1", pki.generate_private_key())
    with pytest.raises(pki.PKIError, match="CSR is for node 'edge-1', expected 'edge-2'"):
        pki.sign_node_csr(ca, csr, lifetime=HOUR, now=NOW, node_name="edge-2")


def test_sign_rejects_non_node_subjects(ca: pki.CertificateAuthority) -> None:
    key = pki.generate_private_key()
    for attrs, match in [
        ([x509.NameAttribute(NameOID.COMMON_NAME, "admin")], "is not CN=system:node"),
        (
            [x509.NameAttribute(NameOID.COMMON_NAME, "system:node:edge-1")],
            "lacks O=system:nodes",
        ),
    ]:
        csr = (
            x509.CertificateSigningRequestBuilder()
            .subject_name(x509.Name(attrs))
            .sign(key, hashes.SHA256())
        )
        with pytest.raises(pki.PKIError, match=match):
            pki.sign_node_csr(ca, csr, lifetime=HOUR, now=NOW)


def test_sign_rejects_other_key_types(ca: pki.CertificateAuthority) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    csr = pki.build_node_csr("edge-1", key)  # type: ignore[arg-type]
    with pytest.raises(pki.PKIError, match="ECDSA P-256"):
        pki.sign_node_csr(ca, csr, lifetime=HOUR, now=NOW)


def test_sign_rejects_bad_lifetime(ca: pki.CertificateAuthority) -> None:
    csr = pki.build_node_csr("edge-1", pki.generate_private_key())
    with pytest.raises(pki.PKIError, match="lifetime must be > 0"):
        pki.sign_node_csr(ca, csr, lifetime=0, now=NOW)


def test_verify_rejects_expired_foreign_and_server_certs(ca: pki.CertificateAuthority) -> None:
    csr = pki.build_node_csr("edge-1", pki.generate_private_key())
    cert = pki.sign_node_csr(ca, csr, lifetime=HOUR, now=NOW)
    with pytest.raises(pki.PKIError, match="not valid at validation time"):
        pki.verify_node_certificate(cert, cas=[ca.certificate], now=NOW + 2 * HOUR)
    other = pki.generate_ca("other", lifetime=HOUR, now=NOW)
    with pytest.raises(pki.PKIError, match="client certificate rejected"):
        pki.verify_node_certificate(cert, cas=[other.certificate], now=NOW)
    server, _ = pki.issue_server_certificate(ca, dns_names=["hub"], lifetime=HOUR, now=NOW)
    with pytest.raises(pki.PKIError, match="EKU"):
        pki.verify_node_certificate(server, cas=[ca.certificate], now=NOW)
    with pytest.raises(pki.PKIError, match="no trusted CA"):
        pki.verify_node_certificate(cert, cas=[], now=NOW)


def test_server_certificate_covers_names_and_addresses(ca: pki.CertificateAuthority) -> None:
    cert, key = pki.issue_server_certificate(
        ca,
        dns_names=["hub.example", "hub"],
        ip_addresses=["10.0.0.1", ipaddress.ip_address("::1")],
        lifetime=HOUR,
        now=NOW,
    )
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["hub.example", "hub"]
    assert san.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("10.0.0.1"),
        ipaddress.ip_address("::1"),
    ]
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert cert.public_key() == key.public_key()
    with pytest.raises(pki.PKIError, match="is not CN=system:node"):
        pki.node_name_from_cert(cert)


def test_server_certificate_input_errors(ca: pki.CertificateAuthority) -> None:
    with pytest.raises(pki.PKIError, match="at least one"):
        pki.issue_server_certificate(ca, lifetime=HOUR, now=NOW)
    with pytest.raises(pki.PKIError, match="invalid IP address 'nope'"):
        pki.issue_server_certificate(ca, ip_addresses=["nope"], lifetime=HOUR, now=NOW)


def test_ca_cert_hash_is_kubeadm_style(ca: pki.CertificateAuthority) -> None:
    spki = ca.certificate.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    pin = pki.ca_cert_hash(ca.certificate)
    assert pin == "sha256:" + hashlib.sha256(spki).hexdigest()
    pki.verify_ca_cert_hash(ca.certificate, pin)
    pki.verify_ca_cert_hash(ca.certificate, pin.upper().replace("SHA256:", "sha256:"))
    other = pki.generate_ca("other", lifetime=HOUR, now=NOW)
    with pytest.raises(pki.PKIError, match="does not match"):
        pki.verify_ca_cert_hash(other.certificate, pin)
    with pytest.raises(pki.PKIError, match="64 hex digits"):
        pki.verify_ca_cert_hash(ca.certificate, "md5:abcd")


def test_pem_round_trips(ca: pki.CertificateAuthority) -> None:
    key = pki.generate_private_key()
    assert pki.load_private_key_pem(pki.dump_private_key_pem(key)).private_numbers() == (
        key.private_numbers()
    )
    chain_pem = pki.dump_certificate_pem([ca.certificate, ca.certificate])
    assert pki.load_certificates_pem(chain_pem) == [ca.certificate, ca.certificate]
    assert pki.load_certificate_pem(pki.dump_certificate_pem(ca.certificate)) == ca.certificate


@pytest.mark.parametrize(
    ("loader", "match"),
    [
        (pki.load_certificate_pem, "invalid certificate PEM"),
        (pki.load_private_key_pem, "invalid private key PEM"),
        (pki.load_csr_pem, "invalid CSR PEM"),
    ],
)
def test_garbage_pem_gives_pki_error(loader, match: str) -> None:
    with pytest.raises(pki.PKIError, match=match) as info:
        loader(b"-----BEGIN NONSENSE-----\nAAAA\n-----END NONSENSE-----\n")
    assert isinstance(info.value, ProtocolError)
    assert info.value.__cause__ is not None


def test_rsa_private_key_is_refused() -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    with pytest.raises(pki.PKIError, match="must be ECDSA"):
        pki.load_private_key_pem(pem)


def test_nothing_reads_the_clock(ca: pki.CertificateAuthority) -> None:
    # A CA made "in the past" is valid then, and only then.
    past = float(int(time.time()) - 10 * 365 * 86400)  # whole seconds, as X.509 stores
    old = pki.generate_ca("old", lifetime=HOUR, now=past)
    assert old.certificate.not_valid_after_utc == _utc(past + HOUR)


def test_the_leaf_builder_gives_any_subject_the_shared_leaf_profile(
    ca: pki.CertificateAuthority,
) -> None:
    """leaf_certificate_builder (public: the reference kube-apiserver fixture makes its
    front-proxy client with it): validity with the clock skew, not a CA, one EKU, key ids."""
    key = pki.generate_private_key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "front-proxy-client")])
    now = 1_700_000_000.0
    builder = pki.leaf_certificate_builder(
        ca, subject, key.public_key(), 3600.0, now, ExtendedKeyUsageOID.CLIENT_AUTH
    )
    cert = builder.sign(ca.private_key, hashes.SHA256())
    assert cert.subject == subject and cert.issuer == ca.certificate.subject
    assert cert.not_valid_before_utc.timestamp() == now - pki.CLOCK_SKEW
    assert cert.not_valid_after_utc.timestamp() == now + 3600.0
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    aki = cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    ski = ca.certificate.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    assert aki.key_identifier == ski.digest
