"""Certificate renewal over the live session, as kubelet rotates its client certificate.

The policy: renew when a jittered 70-90 % of the certificate's lifetime has passed (kubelet
renews at 70-90 % too; the jitter spreads a fleet that joined together), over the session
the current certificate authenticates: the agent sends ``cert_renew_request`` with a CSR
for a *new* key made on the device, the hub answers ``cert_renew_response`` with the
certificate. The new files replace the old atomically (:meth:`CertPaths.install`); the live
session goes on, pods are untouched, and the next connection uses the new certificate
(the uplink reads the files again when they change: ``edgeagent.credentials``).

Time is the hub's: the renewer takes a clock corrected by the skew measured at the last
welcome (``HubLink.hub_clock``), since the hub judges the certificate (when it may be
renewed, when it expires) by its own clock, and a board without a real-time clock may
run minutes or years off. Waiting for the renewal point reads the certificate's validity
with a few lines of DER (``edgeagent.credentials.certificate_validity``); ``cryptography``
is imported only when a renewal is made.

A certificate that expired (the node was offline longer than its lifetime) cannot be
renewed over a session, since the hub refuses it: :meth:`credentials` raises
:class:`CertificateExpired` naming the recovery command, ``edgeagent join --renew --token
NEW_TOKEN``, which keeps the node's name, labels and store. The running agent picks up
the files that command writes without a restart.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from edgeagent.certs.errors import (
    CertificateExpired,
    CertificateFilesError,
    NotJoined,
    RenewalFailed,
)
from edgeagent.certs.files import CertPaths, keys_match
from edgeagent.errors import EnvironmentFault
from protocol.messages import CertRenewRequest, CertRenewResponse

if TYPE_CHECKING:
    from protocol.transport import TLSCredentials

__all__ = ["RENEW_AT", "CertificateRenewer"]

log = logging.getLogger(__name__)

RENEW_AT = (0.7, 0.9)
"""Fractions of the lifetime between which renewal starts (drawn once per certificate)."""

BACKDATED = 300.0
"""Seconds the hub back-dates notBefore (``protocol.pki.CLOCK_SKEW``, which cannot be
imported here without ``cryptography``; a test keeps the two equal)."""


def _iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, tz=datetime.timezone.utc).isoformat(
        timespec="seconds"
    )


class CertificateRenewer:
    """Holds the node's current TLS credentials and renews them over the live session.

    Args:
        paths: where the key, certificate and CA live.
        uniform: ``uniform(a, b)`` drawing the renewal point in ``RENEW_AT`` for each
            certificate (``random.uniform``; the caller owns randomness).
        response_timeout: seconds to wait for the hub's answer to one request.
        retry_base / retry_cap: seconds of back-off (full jitter) between failed attempts.
        on_renewed: called with the new credentials after each renewal is installed (the
            agent records the new expiry for ``edgeagent status``).
        clock: seconds since the epoch, as the hub counts them (default ``time.time``).
    """

    def __init__(
        self,
        paths: CertPaths,
        *,
        uniform: Callable[[float, float], float],
        response_timeout: float = 60.0,
        retry_base: float = 10.0,
        retry_cap: float = 600.0,
        on_renewed: Callable[[TLSCredentials], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.paths = paths
        self._uniform = uniform
        self.response_timeout = response_timeout
        self.retry_base = retry_base
        self.retry_cap = retry_cap
        self._credentials: TLSCredentials | None = None
        self._stamp: tuple | None = None
        self._renew_at = 0.0
        self._pending: dict[str, tuple[Any, asyncio.Future[CertRenewResponse]]] = {}
        self._on_renewed = on_renewed
        self._clock = clock
        self._schedule_stamp: tuple | None = None
        self._validity = (0.0, 0.0)
        self.renewals = 0
        """Certificates installed by this renewer."""

    # -- the current credentials ---------------------------------------------------------

    def _file_stamp(self) -> tuple:
        stamp = []
        for path in (self.paths.ca, self.paths.cert, self.paths.key):
            try:
                st = path.stat()
            except OSError:
                stamp.append(None)
            else:
                stamp.append((st.st_ino, st.st_mtime_ns, st.st_size))
        return tuple(stamp)

    def _reload(self) -> TLSCredentials:
        stamp = self._file_stamp()
        if self._credentials is None or stamp != self._stamp:
            credentials = self.paths.load()
            self._credentials, self._stamp = credentials, stamp
        return self._credentials

    def _schedule(self) -> tuple[float, float]:
        """``(renew_at, not_after)`` of the certificate on disk, read without
        ``cryptography``; the renewal point is drawn again for every new certificate.

        Raises:
            NotJoined: no certificate. CertificateFilesError: it cannot be read.
        """
        stamp = self._file_stamp()
        if self._schedule_stamp is None or stamp != self._schedule_stamp:
            from edgeagent.credentials import certificate_validity

            if not self.paths.joined():
                self.paths.load()  # raises NotJoined naming the join command
            try:
                validity = certificate_validity(self.paths.cert.read_bytes())
            except (OSError, ValueError) as exc:
                raise CertificateFilesError(
                    f"cannot read the node certificate {self.paths.cert}: {exc}"
                ) from exc
            if validity != self._validity or self._schedule_stamp is None:
                self._validity = validity
                issued, expires = _lifetime(*validity)
                self._renew_at = issued + self._uniform(*RENEW_AT) * (expires - issued)
            self._schedule_stamp = stamp
        return self._renew_at, self._validity[1]

    @property
    def node_name(self) -> str:
        """The node named by the current certificate.

        Raises:
            NotJoined / CertificateFilesError: no usable certificate.
        """
        from protocol import pki

        return pki.node_name_from_cert(self._reload().chain[0])

    def credentials(self) -> TLSCredentials:
        """The credentials for the next connection (re-read when the files changed, e.g.
        after ``edgeagent join --renew`` while the agent runs).

        Raises:
            NotJoined: no certificate yet.
            CertificateFilesError: the files are damaged.
            CertificateExpired: the certificate expired; the message names the recovery
                command.
        """
        credentials = self._reload()
        cert = credentials.chain[0]
        not_after = cert.not_valid_after_utc.timestamp()
        now = self._clock()
        if now >= not_after:
            name = self.node_name
            raise CertificateExpired(
                f"the certificate of node {name} expired at {_iso(not_after)} "
                f"({(now - not_after) / 86400:.1f} days ago): the node was offline longer "
                "than its certificate lifetime, and the hub refuses it. Ask the operator for "
                "a new token ('cloudhub token create') and run 'edgeagent join --renew "
                "--token NEW_TOKEN' on this node: it keeps the node's name, labels and store",
                node_name=name,
                not_after=not_after,
            )
        return credentials

    @property
    def renew_at(self) -> float:
        """When renewal starts for the current certificate, seconds since the epoch.

        Raises:
            NotJoined / CertificateFilesError: no usable certificate.
        """
        return self._schedule()[0]

    @property
    def not_after(self) -> float:
        """When the current certificate expires, seconds since the epoch.

        Raises:
            NotJoined / CertificateFilesError: no usable certificate.
        """
        return self._schedule()[1]

    # -- one renewal, sans I/O -------------------------------------------------------------

    def make_request(self) -> CertRenewRequest:
        """Make a new key (kept in memory) and the request carrying its CSR.

        Returns:
            The message to send on the live session.
        """
        from protocol import pki

        name = self.node_name
        key = pki.generate_private_key()
        request_id = uuid.uuid4().hex
        csr_pem = pki.dump_csr_pem(pki.build_node_csr(name, key))
        future: asyncio.Future[CertRenewResponse] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = (key, future)
        return CertRenewRequest(request_id=request_id, csr_pem=csr_pem)

    def handle(self, response: CertRenewResponse) -> bool:
        """Give the renewer a ``cert_renew_response`` that arrived on the session.

        Returns:
            True if it answered a request of ours (else it is stale: ignore it).
        """
        entry = self._pending.get(response.request_id)
        if entry is None:
            log.info("ignoring a certificate renewal answer to an unknown request")
            return False
        future = entry[1]
        if not future.done():
            future.set_result(response)
        return True

    def apply(self, response: CertRenewResponse) -> TLSCredentials:
        """Check the hub's answer against the request and install the new files.

        Returns:
            The new credentials (also returned by :meth:`credentials` from now on).

        Raises:
            RenewalFailed: the hub refused, or the certificate does not fit (another key,
                another node, not from the CA it sent).
            CertificateFilesError: the files could not be written (the old ones stay).
        """
        from protocol import pki

        entry = self._pending.pop(response.request_id, None)
        if entry is None:
            raise RenewalFailed(f"no renewal request {response.request_id!r} is pending")
        key = entry[0]
        if response.error is not None:
            raise RenewalFailed(f"the hub refused to renew the certificate: {response.error}")
        assert response.certificate_pem is not None and response.ca_pem is not None
        name = self.node_name
        try:
            cert = pki.load_certificate_pem(response.certificate_pem)
            cas = pki.load_certificates_pem(response.ca_pem)
            got = pki.verify_node_certificate(cert, cas=cas, now=self._clock())
        except pki.PKIError as exc:
            raise RenewalFailed(f"the renewed certificate is unusable: {exc}") from exc
        if got != name or not keys_match(cert, key):
            raise RenewalFailed(
                f"the hub answered with a certificate for node {got!r} or another key "
                f"(expected node {name!r} and the key just made)"
            )
        self.paths.install(
            key_pem=pki.dump_private_key_pem(key),
            cert_pem=pki.dump_certificate_pem(cert),
            ca_pem=pki.dump_certificate_pem(cas),
        )
        self.renewals += 1
        credentials = self._reload()
        self._schedule()
        log.info(
            "renewed the certificate of node %s: serial %x valid until %s; next renewal from %s",
            name,
            cert.serial_number,
            _iso(cert.not_valid_after_utc.timestamp()),
            _iso(self._renew_at),
        )
        if self._on_renewed is not None:
            self._on_renewed(credentials)
        return credentials

    def forget(self, request_id: str) -> None:
        """Drop a request that will not be answered (timeout, session closed)."""
        entry = self._pending.pop(request_id, None)
        if entry is not None and not entry[1].done():
            entry[1].cancel()

    # -- the loop for one live session ---------------------------------------------------

    async def renew_once(
        self, send: Callable[[CertRenewRequest], Awaitable[Any]]
    ) -> TLSCredentials:
        """One renewal now: make a key and request, send it, wait for the answer (given
        to :meth:`handle` by the session's reader), check it and install it.

        Args:
            send: sends a message on the live session.

        Returns:
            The new credentials.

        Raises:
            TimeoutError: no answer within ``response_timeout`` seconds.
            RenewalFailed / CertificateFilesError: see :meth:`apply`.
            HubUnavailable: ``send`` found no session (``HubLink.send``).
        """
        request = self.make_request()
        try:
            await send(request)
            future = self._pending[request.request_id][1]
            response = await asyncio.wait_for(future, self.response_timeout)
            return self.apply(response)
        except BaseException:
            self.forget(request.request_id)
            raise

    async def run(self, send: Callable[[CertRenewRequest], Awaitable[Any]]) -> None:
        """Renew whenever due, for as long as the session lasts (cancel it when the
        session ends; run one per session).

        Args:
            send: sends a message on the live session (``HubLink.send``); answers must be
                passed to :meth:`handle` by whoever reads the session's events.

        Never returns on its own; failures (a refusal, no answer, files that cannot be
        written, a send on a session that just closed) are logged and retried with
        back-off (full jitter up to ``retry_base`` doubling to ``retry_cap``), until the
        certificate expires.
        """
        failures = 0
        while True:
            try:
                due = self.renew_at
            except (NotJoined, CertificateFilesError) as exc:
                log.error("cannot renew the certificate: %s", exc)
                await asyncio.sleep(self.retry_cap)
                continue
            delay = due - self._clock()
            if delay > 0:
                # Wake at least hourly: the files may be replaced meanwhile.
                await asyncio.sleep(min(delay, 3600.0))
                continue
            try:
                await self.renew_once(send)
                failures = 0
            except asyncio.TimeoutError:
                failures += 1
                log.warning("no answer to certificate renewal within %.0f s", self.response_timeout)
            except EnvironmentFault as exc:  # RenewalFailed, CertificateFilesError, HubUnavailable
                failures += 1
                log.warning("certificate renewal failed: %s", exc)
            if failures:
                cap = min(self.retry_cap, self.retry_base * 2 ** (failures - 1))
                await asyncio.sleep(self._uniform(0.0, cap))


def _lifetime(not_before: float, not_after: float) -> tuple[float, float]:
    """``(issued, expires)`` of a certificate valid from ``not_before`` to ``not_after``,
    seconds since the epoch.

    The hub back-dates notBefore by ``protocol.pki.CLOCK_SKEW`` (so that a board a little
    behind accepts it); the lifetime the renewal point is a fraction of starts at issue.
    """
    issued = not_before + BACKDATED
    if issued >= not_after:  # not one of ours: use the whole validity
        issued = not_before
    return issued, not_after
