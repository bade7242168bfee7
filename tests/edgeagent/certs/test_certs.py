"""The agent's certificate files, join address parsing, clock check and renewer, without a
hub: a CA made in the test signs what the hub would."""

from __future__ import annotations

import logging
import os
import pathlib
import stat
import time

import pytest

from edgeagent.certs import (
    RENEW_AT,
    CertificateExpired,
    CertificateFilesError,
    CertificateRenewer,
    CertPaths,
    NotJoined,
    RenewalFailed,
    check_clock_skew,
)
from edgeagent.certs.joinclient import HubAddress
from protocol import pki
from protocol.messages import CertRenewResponse

DAY = 86400.0


@pytest.fixture(scope="module")
def ca() -> pki.CertificateAuthority:
    return pki.generate_ca("test-ca", lifetime=30 * DAY, now=time.time())


def paths_in(tmp_path: pathlib.Path) -> CertPaths:
    directory = tmp_path / "pki"
    return CertPaths(
        directory, directory / "ca.crt", directory / "node.crt", directory / "node.key"
    )


def issue(ca, name: str = "pi-1", *, lifetime: float = DAY, now: float | None = None):
    key = pki.generate_private_key()
    cert = pki.sign_node_csr(
        ca, pki.build_node_csr(name, key), lifetime=lifetime, now=now or time.time()
    )
    return key, cert


def install(paths: CertPaths, ca, key, cert) -> None:
    paths.install(
        key_pem=pki.dump_private_key_pem(key),
        cert_pem=pki.dump_certificate_pem(cert),
        ca_pem=pki.dump_certificate_pem(ca.certificate),
    )


def test_install_writes_private_files_and_loads_back(tmp_path, ca) -> None:
    paths = paths_in(tmp_path)
    key, cert = issue(ca)
    install(paths, ca, key, cert)
    assert stat.S_IMODE(os.stat(paths.key).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(paths.directory).st_mode) == 0o700
    assert not list(paths.directory.glob("*.new")) and not list(paths.directory.glob("*.tmp"))
    loaded = paths.load()
    assert loaded.chain == (cert,) and loaded.cas == (ca.certificate,)


def test_not_joined_names_the_join_command(tmp_path) -> None:
    with pytest.raises(NotJoined, match="edgeagent join --hub"):
        paths_in(tmp_path).load()


def test_interrupted_install_rolls_forward(tmp_path, ca) -> None:
    # Crash after the certificate was renamed into place, before the key was.
    paths = paths_in(tmp_path)
    old_key, old_cert = issue(ca)
    install(paths, ca, old_key, old_cert)
    new_key, new_cert = issue(ca)
    paths.cert.write_bytes(pki.dump_certificate_pem(new_cert))
    (paths.directory / "node.key.new").write_bytes(pki.dump_private_key_pem(new_key))
    loaded = paths.load()
    assert loaded.chain == (new_cert,)
    assert paths.key.read_bytes() == pki.dump_private_key_pem(new_key)
    assert not (paths.directory / "node.key.new").exists()


def test_mixed_up_files_are_refused_with_the_recovery_command(tmp_path, ca) -> None:
    paths = paths_in(tmp_path)
    key, cert = issue(ca)
    install(paths, ca, key, cert)
    other_key, _ = issue(ca)
    paths.key.write_bytes(pki.dump_private_key_pem(other_key))
    with pytest.raises(CertificateFilesError, match="edgeagent join --renew"):
        paths.load()


def test_damaged_files_are_refused(tmp_path, ca) -> None:
    paths = paths_in(tmp_path)
    key, cert = issue(ca)
    install(paths, ca, key, cert)
    paths.cert.write_text("not a certificate")
    with pytest.raises(CertificateFilesError, match="damaged"):
        paths.load()


@pytest.mark.parametrize(
    ("text", "host", "port"),
    [
        ("hub.example.com", "hub.example.com", 7444),
        ("hub.example.com:9000", "hub.example.com", 9000),
        ("https://hub.example.com:9000/", "hub.example.com", 9000),
        ("10.0.0.1", "10.0.0.1", 7444),
        ("[fd00::1]:8443", "fd00::1", 8443),
        ("fd00::1", "fd00::1", 7444),
    ],
)
def test_hub_address(text: str, host: str, port: int) -> None:
    address = HubAddress.parse(text)
    assert (address.host, address.port) == (host, port)


@pytest.mark.parametrize(
    "text", ["", "hub:port", "hub:70000", "[fd00::1]x", "a b", "[fd00::1", "[fd00::1:8443"]
)  # break1: "[fd00::1" (no closing bracket) was taken as the host fd00::1
def test_bad_hub_address(text: str) -> None:
    with pytest.raises(ValueError):
        HubAddress.parse(text)


def test_clock_skew_is_logged_with_both_times(caplog) -> None:
    hub = 1_800_000_000.0
    with caplog.at_level(logging.WARNING, logger="edgeagent.certs.clock"):
        assert check_clock_skew(hub, hub + 30) == 30
        assert not caplog.records
        assert check_clock_skew(hub, hub - 125) == -125
    (record,) = caplog.records
    assert "2027-01-15T08:00:00+00:00" in record.getMessage()  # the hub's time
    assert "2027-01-15T07:57:55+00:00" in record.getMessage()  # ours
    assert "behind by 125 s" in record.getMessage()


def test_renewal_point_is_a_jittered_fraction_of_the_lifetime(tmp_path, ca) -> None:
    paths = paths_in(tmp_path)
    key, cert = issue(ca, lifetime=100 * DAY)
    install(paths, ca, key, cert)
    issued = cert.not_valid_before_utc.timestamp() + pki.CLOCK_SKEW
    draws = []

    def uniform(a: float, b: float) -> float:
        draws.append((a, b))
        return b

    renewer = CertificateRenewer(paths, uniform=uniform)
    assert renewer.renew_at == pytest.approx(issued + 0.9 * 100 * DAY)
    assert draws == [RENEW_AT]
    assert RENEW_AT == (0.7, 0.9)


async def test_apply_installs_only_a_matching_certificate(tmp_path, ca) -> None:
    paths = paths_in(tmp_path)
    key, cert = issue(ca)
    install(paths, ca, key, cert)
    renewer = CertificateRenewer(paths, uniform=lambda a, b: a)

    refused = renewer.make_request()
    with pytest.raises(RenewalFailed, match=r"refused.*too early"):
        renewer.apply(CertRenewResponse(refused.request_id, error="too early"))

    request = renewer.make_request()
    csr = pki.load_csr_pem(request.csr_pem)
    _, foreign = issue(ca)  # a certificate for another key
    with pytest.raises(RenewalFailed, match="another key"):
        renewer.apply(
            CertRenewResponse(
                request.request_id,
                certificate_pem=pki.dump_certificate_pem(foreign),
                ca_pem=pki.dump_certificate_pem(ca.certificate),
            )
        )
    assert paths.load().chain == (cert,)  # nothing replaced

    request = renewer.make_request()
    csr = pki.load_csr_pem(request.csr_pem)
    fresh = pki.sign_node_csr(ca, csr, lifetime=DAY, now=time.time())
    assert renewer.handle(
        CertRenewResponse(
            request.request_id,
            certificate_pem=pki.dump_certificate_pem(fresh),
            ca_pem=pki.dump_certificate_pem(ca.certificate),
        )
    )
    credentials = renewer.apply(
        CertRenewResponse(
            request.request_id,
            certificate_pem=pki.dump_certificate_pem(fresh),
            ca_pem=pki.dump_certificate_pem(ca.certificate),
        )
    )
    assert credentials.chain == (fresh,)
    assert renewer.credentials().chain == (fresh,)
    assert renewer.renewals == 1
    assert not renewer.handle(CertRenewResponse("unknown", error="x"))


def test_expired_certificate_names_the_recovery_command(tmp_path, ca) -> None:
    paths = paths_in(tmp_path)
    key, cert = issue(ca, lifetime=DAY, now=time.time() - 3 * DAY)
    install(paths, ca, key, cert)
    with pytest.raises(CertificateExpired) as caught:
        CertificateRenewer(paths, uniform=lambda a, b: a).credentials()
    assert "edgeagent join --renew --token NEW_TOKEN" in str(caught.value)
    assert "2.0 days ago" in str(caught.value)
    assert caught.value.node_name == "pi-1"


def test_importing_the_join_command_does_not_load_cryptography() -> None:
    import subprocess
    import sys

    code = "import edgeagent.join, edgeagent.certs, sys; print('cryptography' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_backdating_matches_the_hub() -> None:
    from edgeagent.certs.renewer import BACKDATED

    assert BACKDATED == pki.CLOCK_SKEW


def test_waiting_for_the_renewal_point_does_not_load_cryptography(tmp_path, ca) -> None:
    """An agent on WebSocket (~8 MiB less without ``cryptography``) keeps it out of memory
    until a renewal is due: the schedule comes from the certificate's DER."""
    import subprocess
    import sys

    paths = paths_in(tmp_path)
    key, cert = issue(ca, lifetime=100 * DAY)
    install(paths, ca, key, cert)
    code = (
        "import pathlib, sys\n"
        "from edgeagent.certs import CertificateRenewer, CertPaths\n"
        "d = pathlib.Path(sys.argv[1])\n"
        "r = CertificateRenewer(CertPaths(d, d / 'ca.crt', d / 'node.crt', d / 'node.key'),\n"
        "                       uniform=lambda a, b: b)\n"
        "print(r.renew_at, r.not_after, 'cryptography' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(paths.directory)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    renew_at, not_after, loaded = out.stdout.split()
    issued = cert.not_valid_before_utc.timestamp() + pki.CLOCK_SKEW
    assert float(renew_at) == pytest.approx(issued + 0.9 * 100 * DAY)
    assert float(not_after) == cert.not_valid_after_utc.timestamp()
    assert loaded == "False"


def test_a_damaged_certificate_is_a_files_error_for_the_schedule(tmp_path, ca) -> None:
    paths = paths_in(tmp_path)
    key, cert = issue(ca)
    install(paths, ca, key, cert)
    paths.cert.write_text("-----BEGIN CERTIFICATE-----\nnot*base64\n-----END CERTIFICATE-----\n")
    with pytest.raises(CertificateFilesError, match="cannot read the node certificate"):
        _ = CertificateRenewer(paths, uniform=lambda a, b: a).renew_at
    paths.cert.unlink()
    with pytest.raises(NotJoined):
        _ = CertificateRenewer(paths, uniform=lambda a, b: a).renew_at
