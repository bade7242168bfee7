"""TLS material of the embedded API server: a CA, a serving certificate signed by
it, a bearer token, and the kubeconfig that ties them together.

Keys are ECDSA P-256 (small, fast, accepted by Go's crypto/tls as kubectl uses
it); the CA and the certificate are made by :mod:`protocol.pki`, the hub's one
certificate builder. The CA lives ten years, the serving certificate one year and is renewed at
start when it has less than 30 days left or lacks a needed host name. With a
data directory the files persist, so a kubeconfig stays valid across restarts.
Private keys and the token are written 0600.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import ipaddress
import os
import pathlib
import secrets

import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from cloudhub.standalone.errors import StorageError
from protocol.pki import (
    CertificateAuthority,
    PKIError,
    dump_certificate_pem,
    dump_private_key_pem,
    generate_ca,
    issue_server_certificate,
    load_certificate_pem,
    load_private_key_pem,
)

__all__ = ["ServerPKI", "ensure_pki", "write_kubeconfig"]

CA_LIFETIME = datetime.timedelta(days=3650)
SERVING_LIFETIME = datetime.timedelta(days=365)
RENEW_BEFORE = datetime.timedelta(days=30)


@dataclasses.dataclass(frozen=True, slots=True)
class ServerPKI:
    """Paths of the TLS files and the bearer token."""

    ca_cert_path: pathlib.Path
    cert_path: pathlib.Path
    key_path: pathlib.Path
    token: str


def _write_private(path: pathlib.Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def _write_public(path: pathlib.Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _new_serving(
    ca: CertificateAuthority, hosts: list[str], now: datetime.datetime
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A serving certificate for ``hosts`` (names and addresses), from the one leaf
    builder of :mod:`protocol.pki`."""
    return issue_server_certificate(
        ca,
        dns_names=[h for h in hosts if not _is_ip(h)],
        ip_addresses=[h for h in hosts if _is_ip(h)],
        lifetime=SERVING_LIFETIME.total_seconds(),
        now=now.timestamp(),
    )


def _serving_ok(path: pathlib.Path, hosts: list[str], now: datetime.datetime) -> bool:
    try:
        cert = x509.load_pem_x509_certificate(path.read_bytes())
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (OSError, ValueError, x509.ExtensionNotFound):
        return False
    have = {str(v) for v in names.get_values_for_type(x509.DNSName)} | {
        str(v) for v in names.get_values_for_type(x509.IPAddress)
    }
    wanted = {str(ipaddress.ip_address(h)) if _is_ip(h) else h for h in hosts}
    return wanted <= have and cert.not_valid_after_utc - now > RENEW_BEFORE


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def ensure_pki(directory: pathlib.Path, hosts: list[str], token: str | None) -> ServerPKI:
    """Load or create the CA, serving certificate and token in ``directory``.

    Args:
        directory: Where ``ca.crt``, ``ca.key``, ``apiserver.crt``, ``apiserver.key``
            and ``token`` live (created 0700 if missing).
        hosts: Host names and addresses the serving certificate must cover.
        token: The bearer token to use; None reads ``token`` or creates one.

    Raises:
        StorageError: A file cannot be read or written, or holds garbage.
    """
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_crt, ca_key_path = directory / "ca.crt", directory / "ca.key"
    crt, key_path = directory / "apiserver.crt", directory / "apiserver.key"
    token_path = directory / "token"
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        if ca_crt.exists() and ca_key_path.exists():
            ca = CertificateAuthority(
                load_certificate_pem(ca_crt.read_bytes()),
                load_private_key_pem(ca_key_path.read_bytes()),
            )
        else:
            ca = generate_ca(
                "edgefleet-apiserver-ca", lifetime=CA_LIFETIME.total_seconds(), now=now.timestamp()
            )
            _write_private(ca_key_path, dump_private_key_pem(ca.private_key))
            _write_public(ca_crt, dump_certificate_pem(ca.certificate))
        if not (key_path.exists() and _serving_ok(crt, hosts, now)):
            cert, key = _new_serving(ca, hosts, now)
            _write_private(key_path, dump_private_key_pem(key))
            _write_public(crt, dump_certificate_pem(cert))
        if token is None:
            if token_path.exists():
                token = token_path.read_text().strip()
            if not token:
                token = secrets.token_urlsafe(32)
                _write_private(token_path, token.encode() + b"\n")
    except (OSError, ValueError, PKIError) as exc:
        raise StorageError(f"cannot prepare TLS files in {directory}: {exc}") from exc
    return ServerPKI(ca_crt, crt, key_path, token)


def write_kubeconfig(path: pathlib.Path, server_url: str, pki: ServerPKI) -> None:
    """Write a kubeconfig (0600) that kubectl and kubernetes_asyncio use as is.

    Raises:
        StorageError: The file cannot be written.
    """
    try:
        ca = base64.b64encode(pki.ca_cert_path.read_bytes()).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "edgefleet",
                    "cluster": {"server": server_url, "certificate-authority-data": ca},
                }
            ],
            "users": [{"name": "edgefleet-admin", "user": {"token": pki.token}}],
            "contexts": [
                {
                    "name": "edgefleet",
                    "context": {"cluster": "edgefleet", "user": "edgefleet-admin"},
                }
            ],
            "current-context": "edgefleet",
            "preferences": {},
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_private(path, yaml.safe_dump(config, sort_keys=False).encode())
    except OSError as exc:
        raise StorageError(f"cannot write kubeconfig {path}: {exc}") from exc
