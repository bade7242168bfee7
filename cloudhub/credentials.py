"""Serving credentials that change while the hub runs, and the listeners that follow them.

The hub's certificate does not live as long as the hub: its own CA reissues it once two
thirds of ``pki.server_cert_lifetime`` have passed (``CAManager.serving_credentials``),
and an operator's certificate files (``tls.*``) are replaced on disk by whatever rotates
them (cert-manager renews a third before expiry and swaps the Secret volume's files
atomically through its ``..data`` symlink). A listener that kept the credentials built at
start would refuse every agent once they expire: after a year with the defaults.

:class:`FileCredentials` re-reads the ``tls.*`` files when one changes (inode, size or
mtime); a half-written rotation (a certificate without its key yet) keeps the previous
credentials and is tried again at the next check. :class:`CredentialsReloader` asks its
source every ``interval_s`` and hands credentials it has not seen (compared by identity)
to every listener (``set_credentials``); open sessions keep theirs, new handshakes use the
new ones. The join endpoint follows the CA's reissue on its own (its SNI callback).
"""

from __future__ import annotations

import asyncio
import logging
import os
import pathlib
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from cloudhub.errors import ConfigError
from protocol.pki import PKIError
from protocol.transport import TLSCredentials, TransportError

__all__ = ["CredentialsReloader", "FileCredentials", "Listener"]

log = logging.getLogger(__name__)


class Listener(Protocol):
    """A server whose new connections can be given new credentials."""

    def set_credentials(self, credentials: TLSCredentials) -> None: ...


def _stamp(path: pathlib.Path) -> tuple[int, int, int, int]:
    st = os.stat(path)  # follows symlinks: a swapped ..data is a new inode
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class FileCredentials:
    """The ``tls.*`` files as credentials, re-read when they change on disk.

    Args:
        ca_file, cert_file, key_file: PEM files (CA bundle, server chain, its key).

    Call it for the current credentials (a new object only when the files changed and
    load).
    """

    def __init__(
        self, ca_file: pathlib.Path, cert_file: pathlib.Path, key_file: pathlib.Path
    ) -> None:
        self.paths = (ca_file, cert_file, key_file)
        self._stamps: tuple[tuple[int, int, int, int], ...] | None = None
        self._current: TLSCredentials | None = None
        self._failed: tuple[tuple[int, int, int, int], ...] | None = None

    def __call__(self) -> TLSCredentials:
        """The credentials of the files as they are now.

        Raises:
            ConfigError: the files cannot be read or do not load, and no earlier
                version of them did (at start).
        """
        try:
            stamps = tuple(_stamp(p) for p in self.paths)
        except OSError as exc:
            return self._keep(f"cannot read TLS material: {exc}")
        if stamps == self._stamps and self._current is not None:
            return self._current
        try:
            ca, cert, key = (p.read_bytes() for p in self.paths)
            credentials = TLSCredentials.from_pem(ca, cert, key)
            from protocol.transport import server_ssl_context

            server_ssl_context(credentials)  # the key must belong to the certificate
        except OSError as exc:
            return self._keep(f"cannot read TLS material: {exc}", stamps)
        except (PKIError, TransportError) as exc:
            return self._keep(f"unusable TLS material: {exc}", stamps)
        if self._current is not None:
            log.info("TLS files changed: serving %s", _describe(credentials))
        self._stamps, self._current, self._failed = stamps, credentials, None
        return credentials

    def _keep(self, problem: str, stamps: Any = None) -> TLSCredentials:
        if self._current is None:
            raise ConfigError(problem)
        if stamps is None or stamps != self._failed:  # once per version of the files
            log.warning("%s; still serving the previous certificate", problem)
            self._failed = stamps
        return self._current


def _describe(credentials: TLSCredentials) -> str:
    cert = credentials.chain[0]
    return f"certificate {cert.serial_number:x} valid until {cert.not_valid_after_utc.isoformat()}"


class CredentialsReloader:
    """Gives listeners the source's credentials whenever they change.

    Args:
        source: returns the current credentials (a new object when they changed).
        listeners: the servers to update.
        interval_s: seconds between looks at the source.
        on_change: called with the new credentials after the listeners got them.
    """

    def __init__(
        self,
        source: Callable[[], TLSCredentials],
        listeners: Sequence[Listener],
        *,
        interval_s: float,
        on_change: Callable[[TLSCredentials], None] | None = None,
    ) -> None:
        self.source = source
        self.listeners = list(listeners)
        self.interval_s = interval_s
        self.on_change = on_change
        self.current: TLSCredentials | None = None
        self.reloads = 0
        """Times new credentials were handed to the listeners."""

    def check(self) -> bool:
        """Look at the source once; returns whether the listeners got new credentials."""
        try:
            credentials = self.source()
        except ConfigError as exc:  # nothing usable: keep serving what we have
            log.warning("cannot reload the serving credentials: %s", exc)
            return False
        if credentials is self.current:
            return False
        first = self.current is None
        try:
            for listener in self.listeners:
                listener.set_credentials(credentials)
        except TransportError as exc:
            log.warning("cannot serve the new credentials: %s; keeping the previous", exc)
            return False
        self.current = credentials
        if not first:
            self.reloads += 1
            log.info("listeners now serve %s", _describe(credentials))
        if self.on_change is not None:
            self.on_change(credentials)
        return True

    async def run(self) -> None:
        """Check every ``interval_s`` until cancelled."""
        while True:
            await asyncio.sleep(self.interval_s)
            self.check()
