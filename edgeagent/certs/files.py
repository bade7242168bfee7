"""The node's key, certificate and CA bundle on disk, replaced atomically.

Layout (defaults; ``hub.ca_file``, ``hub.cert_file`` and ``hub.key_file`` override)::

    <state_dir>/pki/            0700
        ca.crt                  0644  the pinned hub CA bundle
        node.crt                0644  this node's client certificate
        node.key                0600  its private key (generated here, never sent)
        node.key.pending        0600  the key of a join not finished yet (reused by a retry)
        join.json               0644  hub address, node name, labels, CA pin of the last join

A new certificate is installed by writing ``*.new`` files (fsynced), then renaming the CA
bundle, the certificate and the key into place, then fsyncing the directory. A crash
between the two last renames leaves a new certificate beside the old key; loading notices
that they do not match and finishes the job with ``node.key.new`` (roll forward), so the
node never ends with a pair that cannot connect.

``cryptography`` is imported only by the functions that parse or make keys.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from edgeagent.certs.errors import CertificateFilesError, NotJoined

if TYPE_CHECKING:
    from edgeagent.settings import AgentSettings
    from protocol.transport import TLSCredentials

__all__ = ["CertPaths", "atomic_write", "keys_match"]


def atomic_write(path: pathlib.Path, data: bytes, mode: int) -> None:
    """Write ``data`` to ``path`` via a fsynced temporary file and a rename.

    Raises:
        OSError: the write failed (``path`` is unchanged).
    """
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: pathlib.Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class CertPaths:
    """Where the node's TLS material lives."""

    directory: pathlib.Path
    ca: pathlib.Path
    cert: pathlib.Path
    key: pathlib.Path

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> CertPaths:
        """Paths from the agent settings (``hub.*_file`` or ``<state_dir>/pki/*``)."""
        directory = settings.state_dir / "pki"
        hub = settings.hub
        return cls(
            directory=directory,
            ca=pathlib.Path(hub.ca_file) if hub.ca_file else directory / "ca.crt",
            cert=pathlib.Path(hub.cert_file) if hub.cert_file else directory / "node.crt",
            key=pathlib.Path(hub.key_file) if hub.key_file else directory / "node.key",
        )

    @property
    def pending_key(self) -> pathlib.Path:
        """The key of an unfinished join."""
        return self.key.with_name(self.key.name + ".pending")

    @property
    def join_record(self) -> pathlib.Path:
        return self.directory / "join.json"

    def _new(self, path: pathlib.Path) -> pathlib.Path:
        return path.with_name(path.name + ".new")

    def ensure_directory(self) -> None:
        """Create the directories (``pki/`` itself 0700)."""
        for path in {self.directory, self.ca.parent, self.cert.parent, self.key.parent}:
            path.mkdir(parents=True, exist_ok=True)
        os.chmod(self.directory, 0o700)

    def joined(self) -> bool:
        """True when a certificate and a key are present (valid or not)."""
        return self.cert.exists() and self.key.exists()

    # -- install -------------------------------------------------------------------------

    def install(self, *, key_pem: bytes, cert_pem: bytes, ca_pem: bytes) -> None:
        """Atomically replace key, certificate and CA bundle (see the module docstring).

        Raises:
            CertificateFilesError: the files could not be written (the old ones are kept).
        """
        try:
            self.ensure_directory()
            staged = [
                (self.ca, ca_pem, 0o644),
                (self.cert, cert_pem, 0o644),
                (self.key, key_pem, 0o600),
            ]
            for path, data, mode in staged:
                atomic_write(self._new(path), data, mode)
            for path, _, _ in staged:
                os.replace(self._new(path), path)
            for directory in {self.ca.parent, self.cert.parent, self.key.parent}:
                _fsync_dir(directory)
        except OSError as exc:
            raise CertificateFilesError(f"cannot write the node certificate files: {exc}") from exc

    # -- load ----------------------------------------------------------------------------

    def load(self) -> TLSCredentials:
        """The credentials on disk, finishing an interrupted install first.

        Raises:
            NotJoined: no certificate or key.
            CertificateFilesError: unreadable, malformed, or key and certificate do not
                match.
        """
        from protocol import pki
        from protocol.transport import TLSCredentials

        if not self.joined():
            raise NotJoined(
                f"no node certificate in {self.directory}: this node has not joined a hub. "
                "Run 'edgeagent join --hub ADDRESS --token TOKEN --ca-cert-hash sha256:...' "
                "with the command printed by 'cloudhub token create'"
            )
        try:
            cert = pki.load_certificate_pem(self.cert.read_bytes())
            key = pki.load_private_key_pem(self.key.read_bytes())
            if not keys_match(cert, key):
                key = self._roll_forward(cert)
            cas = tuple(pki.load_certificates_pem(self.ca.read_bytes()))
        except OSError as exc:
            raise CertificateFilesError(f"cannot read the node certificate files: {exc}") from exc
        except pki.PKIError as exc:
            raise CertificateFilesError(f"the node certificate files are damaged: {exc}") from exc
        return TLSCredentials(cas=cas, chain=(cert,), private_key=key)

    def _roll_forward(self, cert):
        from protocol import pki

        new_key = self._new(self.key)
        if new_key.exists():
            key = pki.load_private_key_pem(new_key.read_bytes())
            if keys_match(cert, key):
                os.replace(new_key, self.key)
                _fsync_dir(self.key.parent)
                return key
        raise CertificateFilesError(
            f"{self.key} does not belong to {self.cert}: the files were mixed up. Re-join "
            "with 'edgeagent join --renew --token NEW_TOKEN' (keeps the node's name, labels "
            "and store)"
        )

    # -- join record ---------------------------------------------------------------------

    def read_join_record(self) -> dict[str, Any]:
        """The last join's record, or ``{}``."""
        try:
            data = json.loads(self.join_record.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def write_join_record(self, record: Mapping[str, Any]) -> None:
        """Write the join record (atomic)."""
        self.ensure_directory()
        body = json.dumps(dict(record), indent=2, sort_keys=True) + "\n"
        atomic_write(self.join_record, body.encode(), 0o644)


def keys_match(cert, key) -> bool:
    """True when ``key`` is the private key of ``cert``."""
    from cryptography.hazmat.primitives import serialization

    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    return cert.public_key().public_bytes(der, spki) == key.public_key().public_bytes(der, spki)
