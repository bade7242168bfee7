"""The node's TLS material as the hub connection reads it: hub CA, node certificate, key.

``edgeagent join`` (docs/pki.md) writes them under ``<state_dir>/pki`` (``ca.crt``,
``node.crt``, ``node.key``); ``hub.ca_file``, ``hub.cert_file`` and ``hub.key_file``
point elsewhere. :class:`FileCredentials` is the uplink's ``credentials`` callback: read at
every dial and re-read only when a file changed (a renewal or a re-join while the agent
runs is picked up at the next connection, with no restart). ``cryptography`` is imported
on the first call, not with this module.
"""

from __future__ import annotations

import datetime
import pathlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from edgeagent.errors import CredentialsError
from edgeagent.settings import AgentSettings

if TYPE_CHECKING:
    from protocol.transport import TLSCredentials

__all__ = ["FileCredentials", "credential_paths"]

JOIN_HINT = (
    "this node has not joined the fleet: run 'edgeagent join --hub HUB --token TOKEN "
    "--ca-cert-hash sha256:...' (or set hub.ca_file, hub.cert_file, hub.key_file)"
)
RENEW_HINT = (
    "ask the operator for a new token ('cloudhub token create') and run "
    "'edgeagent join --renew --token NEW_TOKEN' on this node"
)


def credential_paths(settings: AgentSettings) -> tuple[pathlib.Path, pathlib.Path, pathlib.Path]:
    """``(ca, cert, key)`` paths: the ``hub.*_file`` settings or ``<state_dir>/pki/*``."""
    pki = settings.state_dir / "pki"
    hub = settings.hub
    return (
        pathlib.Path(hub.ca_file) if hub.ca_file else pki / "ca.crt",
        pathlib.Path(hub.cert_file) if hub.cert_file else pki / "node.crt",
        pathlib.Path(hub.key_file) if hub.key_file else pki / "node.key",
    )


class FileCredentials:
    """Loads the node's TLS credentials from files, again whenever one changed.

    Args:
        settings: the agent settings (where the files are).
        wall_clock: seconds since the epoch (expiry check).
    """

    def __init__(
        self, settings: AgentSettings, *, wall_clock: Callable[[], float] = time.time
    ) -> None:
        self.paths = credential_paths(settings)
        self._wall = wall_clock
        self._stamp: tuple | None = None
        self._credentials: TLSCredentials | None = None

    def _file_stamp(self) -> tuple:
        stamp = []
        for path in self.paths:
            try:
                st = path.stat()
            except FileNotFoundError:
                stamp.append(None)
            except OSError as exc:
                raise CredentialsError(f"cannot read {path}: {exc}", path=str(path)) from exc
            else:
                stamp.append((st.st_ino, st.st_mtime_ns, st.st_size))
        return tuple(stamp)

    def __call__(self) -> TLSCredentials:
        """The credentials for the next connection.

        Raises:
            CredentialsError: a file is missing (not joined), unreadable, not PEM of the
                right kind, the key does not match the certificate, or the certificate
                expired; the message names the file and what to run.
        """
        stamp = self._file_stamp()
        if self._credentials is None or stamp != self._stamp:
            self._credentials = self._load()
            self._stamp = stamp
        not_after = self._credentials.chain[0].not_valid_after_utc.timestamp()
        now = self._wall()
        if now >= not_after:
            at = datetime.datetime.fromtimestamp(not_after, tz=datetime.timezone.utc)
            raise CredentialsError(
                f"the node certificate {self.paths[1]} expired at {at.isoformat()} "
                f"({(now - not_after) / 86400:.1f} days ago); the hub refuses it: {RENEW_HINT}",
                path=str(self.paths[1]),
            )
        return self._credentials

    def _load(self) -> TLSCredentials:
        from protocol.errors import ProtocolError
        from protocol.transport.tls import TLSCredentials

        data = []
        for path in self.paths:
            try:
                data.append(path.read_bytes())
            except FileNotFoundError as exc:
                raise CredentialsError(f"no {path}: {JOIN_HINT}", path=str(path)) from exc
            except OSError as exc:
                raise CredentialsError(f"cannot read {path}: {exc}", path=str(path)) from exc
        ca, cert, key = data
        try:
            credentials = TLSCredentials.from_pem(ca, cert, key)
        except (ProtocolError, ValueError) as exc:
            names = ", ".join(str(p) for p in self.paths)
            raise CredentialsError(f"unusable TLS material in {names}: {exc}") from exc
        if not credentials.chain or credentials.private_key is None:
            raise CredentialsError(f"no certificate in {self.paths[1]}", path=str(self.paths[1]))
        from cryptography.hazmat.primitives import serialization

        def spki(public_key) -> bytes:
            return public_key.public_bytes(
                serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
            )

        if spki(credentials.private_key.public_key()) != spki(credentials.chain[0].public_key()):
            raise CredentialsError(
                f"the key {self.paths[2]} does not belong to the certificate {self.paths[1]}",
                path=str(self.paths[2]),
            )
        return credentials
