"""The node's TLS material as the hub connection reads it: hub CA, node certificate, key.

``edgeagent join`` (docs/pki.md) writes them under ``<state_dir>/pki`` (``ca.crt``,
``node.crt``, ``node.key``); ``hub.ca_file``, ``hub.cert_file`` and ``hub.key_file``
point elsewhere. :class:`FileCredentials` is the uplink's ``credentials`` callback: read at
every dial and re-read only when a file changed (a renewal or a re-join while the agent
runs is picked up at the next connection, with no restart). ``cryptography`` is never
imported here (QUIC imports it when it dials).
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
    from protocol.transport.tls import PEMCredentials

__all__ = [
    "RENEW_HINT",
    "FileCredentials",
    "certificate_not_after",
    "certificate_validity",
    "credential_paths",
]

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

    Returns :class:`~protocol.transport.PEMCredentials`: checked with the standard
    library's ``ssl`` (the key matches the certificate, every PEM block loads) and the
    certificate's expiry read from its DER, so that an agent on WebSocket never imports
    ``cryptography`` (about 8 MiB of RSS); QUIC parses them when it dials.

    A certificate is refused here only when it expired by *both* this node's clock and the
    hub's as last measured (``hub_clock``): when the two disagree, one of them is wrong
    and the hub, which judges the certificate, is asked (a wrongly refused dial would tell
    the operator to get a new token for a certificate that still works).

    Args:
        settings: the agent settings (where the files are).
        wall_clock: seconds since the epoch, this node's clock (expiry check).
        hub_clock: seconds since the epoch by the hub's clock as last measured
            (:meth:`edgeagent.certs.HubClock.now`); default: ``wall_clock``.
    """

    def __init__(
        self,
        settings: AgentSettings,
        *,
        wall_clock: Callable[[], float] = time.time,
        hub_clock: Callable[[], float] | None = None,
    ) -> None:
        self.paths = credential_paths(settings)
        self._wall = wall_clock
        self._hub = hub_clock or wall_clock
        self._stamp: tuple | None = None
        self._seen: tuple | None = None  # the files' stamp at the last call, loaded or not
        self._credentials: PEMCredentials | None = None
        self._not_before = 0.0
        self._not_after = 0.0

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

    def changed(self) -> bool:
        """True when a file differs from the ones last loaded (a re-join or a renewal
        wrote new ones): cheap (three ``stat`` calls), for polling while waiting to redial.
        """
        try:
            return self._seen is not None and self._file_stamp() != self._seen
        except CredentialsError:
            return True  # unreadable now: the next dial says why

    @property
    def not_before(self) -> float:
        """When the current certificate starts, seconds since the epoch (the hub's clock
        when it issued it, minus 5 minutes; 0 before the first successful load)."""
        return self._not_before

    @property
    def not_after(self) -> float:
        """When the current certificate expires, seconds since the epoch (0 before the
        first successful load)."""
        return self._not_after

    def __call__(self) -> PEMCredentials:
        """The credentials for the next connection.

        Raises:
            CredentialsError: a file is missing (not joined), unreadable, not PEM of the
                right kind, the key does not match the certificate, or the certificate
                expired; the message names the file and what to run.
        """
        stamp = self._seen = self._file_stamp()
        if self._credentials is None or stamp != self._stamp:
            self._credentials, (self._not_before, self._not_after) = self._load()
            self._stamp = stamp
        now, hub_now = self._wall(), self._hub()
        if min(now, hub_now) >= self._not_after:
            at = datetime.datetime.fromtimestamp(self._not_after, tz=datetime.timezone.utc)
            raise CredentialsError(
                f"the node certificate {self.paths[1]} expired at {at.isoformat()} "
                f"({(now - self._not_after) / 86400:.1f} days ago); the hub refuses it: "
                f"{RENEW_HINT}",
                path=str(self.paths[1]),
            )
        return self._credentials

    def _load(self) -> tuple[PEMCredentials, tuple[float, float]]:
        from protocol.transport.errors import TransportError
        from protocol.transport.tls import PEMCredentials, client_ssl_context

        data = []
        for path in self.paths:
            try:
                data.append(path.read_bytes())
            except FileNotFoundError as exc:
                raise CredentialsError(f"no {path}: {JOIN_HINT}", path=str(path)) from exc
            except OSError as exc:
                raise CredentialsError(f"cannot read {path}: {exc}", path=str(path)) from exc
        ca, cert, key = data
        names = ", ".join(str(p) for p in self.paths)
        try:
            credentials = PEMCredentials(ca, cert, key)
            if not cert.strip():
                raise TransportError("no certificate")
            client_ssl_context(credentials)  # every block loads, the key fits
        except TransportError as exc:
            if "KEY_VALUES_MISMATCH" in str(exc) or "key values mismatch" in str(exc):
                raise CredentialsError(
                    f"the key {self.paths[2]} does not belong to the certificate {self.paths[1]}",
                    path=str(self.paths[2]),
                ) from exc
            raise CredentialsError(f"unusable TLS material in {names}: {exc}") from exc
        try:
            validity = certificate_validity(cert)
        except ValueError as exc:
            raise CredentialsError(
                f"unusable TLS material in {self.paths[1]}: {exc}", path=str(self.paths[1])
            ) from exc
        return credentials, validity


# --- reading notAfter without cryptography ------------------------------------------------


def _der_item(data: bytes, at: int) -> tuple[int, int, int]:
    """``(tag, start of content, end of content)`` of the DER item at ``at``."""
    if at + 2 > len(data):
        raise ValueError("truncated DER")
    tag, length = data[at], data[at + 1]
    at += 2
    if length & 0x80:
        count = length & 0x7F
        if count == 0 or count > 4 or at + count > len(data):
            raise ValueError("bad DER length")
        length = int.from_bytes(data[at : at + count], "big")
        at += count
    if at + length > len(data):
        raise ValueError("truncated DER")
    return tag, at, at + length


def _der_time(tag: int, text: bytes) -> float:
    value = text.decode("ascii")
    if tag == 0x17:  # UTCTime YYMMDDHHMMSSZ (RFC 5280: years 1950-2049)
        year = int(value[:2])
        value = ("19" if year >= 50 else "20") + value
    elif tag != 0x18:  # GeneralizedTime YYYYMMDDHHMMSSZ
        raise ValueError("notAfter is not a time")
    if not value.endswith("Z") or len(value) != 15:
        raise ValueError(f"unexpected time {value!r}")
    moment = datetime.datetime.strptime(value, "%Y%m%d%H%M%SZ")
    return moment.replace(tzinfo=datetime.timezone.utc).timestamp()


def certificate_not_after(cert_pem: bytes) -> float:
    """``notAfter`` of the first certificate in ``cert_pem``, seconds since the epoch.

    Raises:
        ValueError: no certificate, or not the structure RFC 5280 describes.
    """
    return certificate_validity(cert_pem)[1]


def certificate_validity(cert_pem: bytes) -> tuple[float, float]:
    """``(notBefore, notAfter)`` of the first certificate in ``cert_pem``, seconds since
    the epoch.

    A few lines of DER reading (RFC 5280 §4.1: Certificate → tbsCertificate → validity)
    instead of ``cryptography``, which costs an agent on WebSocket ~8 MiB of RSS for these
    two fields (the renewer reads them to know when to renew).

    Raises:
        ValueError: no certificate, or not the structure RFC 5280 describes.
    """
    import base64
    import binascii

    text = cert_pem.decode("ascii", errors="replace")
    begin, end = "-----BEGIN CERTIFICATE-----", "-----END CERTIFICATE-----"
    start = text.find(begin)
    stop = text.find(end, start)
    if start < 0 or stop < 0:
        raise ValueError("no PEM certificate")
    try:
        der = base64.b64decode("".join(text[start + len(begin) : stop].split()))
    except binascii.Error as exc:
        raise ValueError(f"the PEM certificate is not base64: {exc}") from exc
    _, cert, _ = _der_item(der, 0)  # Certificate ::= SEQUENCE
    _, tbs, tbs_end = _der_item(der, cert)  # tbsCertificate ::= SEQUENCE
    at = tbs
    tag, _, after = _der_item(der, at)
    if tag == 0xA0:  # [0] EXPLICIT version
        at = after
    for _ in range(3):  # serialNumber, signature, issuer
        _, _, at = _der_item(der, at)
    tag, validity, _ = _der_item(der, at)
    if tag != 0x30 or at >= tbs_end:
        raise ValueError("no validity in the certificate")
    tag, start_at, not_before_end = _der_item(der, validity)
    not_before = _der_time(tag, der[start_at:not_before_end])
    tag, start_at, end_at = _der_item(der, not_before_end)
    return not_before, _der_time(tag, der[start_at:end_at])
