"""The uplink: which transport to dial, when to fall back, when to go back, how long to wait.

This is the agent's policy (STYLE.md §2, §7); the transports in ``protocol.transport`` only
connect. The loops, outer to inner:

- **Outer** (:meth:`Uplink.run`): forever until :meth:`Uplink.close`: dial, serve the link,
  wait a backoff delay (exponential with full jitter, base 1 s, cap 60 s,
  ``protocol.backoff``), again. The backoff resets after a healthy session (one that stayed
  open ``healthy_after`` seconds). A hub that turns the agent away with ``OVERLOADED`` or
  ``GOING_AWAY`` and a ``retry_after`` has already spread its agents (full jitter, or the
  owner's remaining Lease validity plus jitter): that ``retry_after`` is the delay itself,
  not a floor under the agent's own back-off, and it does not advance the back-off (the
  hub answered; it is not unreachable), so a failover to another replica takes the
  seconds the hub asked for (at most ``backoff_cap``), not up to a minute more. A
  final refusal (``VERSION_MISMATCH``, ``UNAUTHORIZED``: ``protocol.backoff.is_retryable``)
  is retried only at the cap, since only a change on one side can fix it.
- **Identity refused**: the hub refusing this node's certificate (at TLS: expired, not
  from its CA; or the session ``UNAUTHORIZED``: revoked), or no usable certificate here
  (not joined, expired by our clock, damaged files), is logged as an ERROR that says what
  to run (``edgeagent join --renew --token NEW_TOKEN``), reported to ``on_refused``, and
  retried at the cap: the agent and its pods keep running, and the files a re-join
  writes are used at the next dial, with no restart; that dial comes within
  :data:`WAKE_POLL` of the files changing (``wake``), not at the end of the back-off.
- **Dial**: QUIC first, with a short handshake timeout (3 s), because a network that drops
  UDP shows up as silence, not as an error. If QUIC fails at the transport level, fall
  back to WebSocket and remember it: later dials go straight to WebSocket until the QUIC
  retry interval (10 min) has passed. A session-level refusal (version mismatch,
  unauthorized, a rejected certificate) is not a transport failure and does not cause a
  fallback.
- **Middle** (one link): the application's ``on_link`` coroutine uses the link until it
  closes. While on WebSocket, the uplink checks whether a QUIC handshake now succeeds,
  ``quic_retry_first`` (30 s) after the fallback, then at doubling intervals up to
  ``quic_retry_interval`` (10 min); if one does, it closes the WebSocket session and dials
  QUIC at once (never two sessions at once, so sequence numbers and resends stay simple).
  The short first retry matters after a hub restart: a QUIC dial that began while the hub
  was down waits for retransmissions and can time out just as the hub comes back, while
  the WebSocket dial after it succeeds; the network was never blocking UDP.

The uplink knows nothing about the store: the hello, the unacknowledged messages to resend
and the next sequence number come from callbacks, read at every dial. Each transport's
adapter is imported the first time it is dialled (aioquic with ``cryptography`` costs about
14 MiB of RSS: an agent configured for WebSocket only never loads it).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from edgeagent.credentials import RENEW_HINT
from edgeagent.errors import AgentError
from edgeagent.tasks import wait_event
from protocol.backoff import backoff, is_retryable, retry_delay
from protocol.errors import CloseCode
from protocol.session import SessionConfig
from protocol.transport.errors import CertificateRejected, ConnectFailed, SessionRejected

if TYPE_CHECKING:
    from protocol.messages import Hello, Message
    from protocol.transport import Link, PEMCredentials, TLSCredentials

__all__ = ["QUIC", "WEBSOCKET", "Uplink", "UplinkSettings"]

logger = logging.getLogger(__name__)

QUIC = "quic"
WEBSOCKET = "websocket"

WAKE_POLL = 1.0
"""Seconds between ``wake()`` checks while waiting to redial: a re-join is picked up within
about a second instead of at the end of a back-off of up to ``backoff_cap`` (60 s)."""

_HUB_SPREAD = frozenset({CloseCode.OVERLOADED, CloseCode.GOING_AWAY})
"""Close codes whose ``retry_after`` the hub has jittered: used as the delay itself."""


@dataclass(frozen=True, slots=True)
class UplinkSettings:
    """How the agent reaches the hub (settings group ``transport``)."""

    host: str
    """Hub address or DNS name."""
    quic_port: int = 7443
    """Hub UDP port for QUIC."""
    websocket_port: int = 7443
    """Hub TCP port for WebSocket over TLS (the same number as QUIC by default: one Service
    with a UDP and a TCP port)."""
    server_name: str | None = None
    """Name to verify the hub certificate against, if not ``host``."""
    quic_handshake_timeout: float = 3.0
    """Seconds to wait for QUIC (handshake and welcome) before falling back: UDP blocked by
    a firewall looks like silence, so this bounds how long a fallback takes. 3 s covers
    several round trips on a slow cellular link."""
    quic_max_datagram_size: int = 1200
    """Bytes per UDP datagram toward a hub off this host (``protocol.transport.datagrams``:
    QUIC's minimum, as aioquic has no path MTU discovery; a hub on this host gets 8192)."""
    quic_loopback_datagram_size: int = 8192
    """Bytes per datagram toward a hub at a loopback address (0: ``quic_max_datagram_size``,
    for a loopback address that is a local relay onto a real path)."""
    websocket_timeout: float = 10.0
    """Seconds for TCP, TLS, upgrade and welcome over WebSocket."""
    quic_retry_interval: float = 600.0
    """While on WebSocket, the longest time in seconds between checks whether QUIC works
    again (10 min: rare enough to cost nothing, often enough to leave a fallback within the
    hour)."""
    quic_retry_first: float = 30.0
    """Seconds from a fallback to the first QUIC check; the wait doubles after each failed
    check, up to ``quic_retry_interval`` (a network that blocks UDP costs a few background
    handshake attempts in the first quarter hour, then one per interval)."""
    backoff_base: float = 1.0
    """Seconds: the first reconnect waits up to this long (full jitter)."""
    backoff_cap: float = 60.0
    """Seconds: no reconnect waits longer (a fleet rejoining after a hub outage spreads
    over a minute instead of stampeding)."""
    healthy_after: float = 10.0
    """Seconds a session must stay open to count as healthy and reset the backoff; a hub
    that accepts and drops at once keeps the agent backing off."""
    session: SessionConfig = field(default_factory=SessionConfig)
    """Session settings (ping interval, liveness, window, close timeout)."""
    transports: tuple[str, ...] = (QUIC, WEBSOCKET)
    """Which transports to dial: QUIC is tried first when listed; WebSocket is the
    fallback when listed (``(WEBSOCKET,)`` alone never tries QUIC)."""

    def __post_init__(self) -> None:
        if not self.transports or any(t not in (QUIC, WEBSOCKET) for t in self.transports):
            raise ValueError(
                f"transport.transports must name quic and/or websocket, not {self.transports}"
            )
        for name in (
            "quic_handshake_timeout",
            "websocket_timeout",
            "quic_retry_interval",
            "quic_retry_first",
            "backoff_base",
            "backoff_cap",
        ):
            if not getattr(self, name) > 0:
                raise ValueError(f"transport.{name} must be > 0 seconds")
        if self.healthy_after < 0:
            raise ValueError("transport.healthy_after must be >= 0 seconds")
        if self.quic_max_datagram_size < 1200:
            raise ValueError("transport.quic_max_datagram_size must be >= 1200 bytes")


class Uplink:
    """Keeps one session with the hub open, over QUIC when it can, WebSocket otherwise.

    Args:
        settings: addresses, timeouts, backoff.
        credentials: returns the current TLS credentials (read at every dial, so that a
            renewed certificate is used for the next connection). An ``AgentError`` it
            raises (not joined, files unreadable, certificate expired) is logged as an
            ERROR and given to ``on_refused``; the uplink asks again at the back-off cap.
        make_hello: returns the hello for the next session (inventory, node info).
        pending: returns the unacknowledged ``(seq, message)`` pairs to resend.
        next_seq: returns the next sequence number to assign.
        on_link: coroutine that uses an established link until it closes (reads its
            events, sends the outbox); the uplink closes the link when it returns.
        on_refused: ``on_refused(text, by_hub)``, called with the ERROR line's text whenever
            this node's identity is refused by the hub (``by_hub``) or unusable here (see
            the module docstring), e.g. to record it for ``edgeagent status``.
        explain: ``explain(exc)``: the cause of a failed dial the transport cannot name
            (e.g. this node's clock behind the hub's certificate), logged as an ERROR once
            per dial; for a :class:`CertificateRejected`, why the hub rejected this node's
            certificate (expired by whose clock, or not from its CA); or ``None``.
        wake: ``wake()``: polled every :data:`WAKE_POLL` seconds while waiting to redial;
            True ends the wait (e.g. the credential files changed: ``edgeagent join
            --renew`` ran while the agent waited at the back-off cap), or ``None``.
    """

    def __init__(
        self,
        settings: UplinkSettings,
        *,
        credentials: Callable[[], TLSCredentials | PEMCredentials],
        make_hello: Callable[[], Hello],
        pending: Callable[[], Sequence[tuple[int, Message]]],
        next_seq: Callable[[], int],
        on_link: Callable[[Link], Awaitable[None]],
        on_refused: Callable[[str, bool], None] | None = None,
        explain: Callable[[ConnectFailed], str | None] | None = None,
        wake: Callable[[], bool] | None = None,
    ) -> None:
        self.settings = settings
        self._credentials = credentials
        self._make_hello = make_hello
        self._pending = pending
        self._next_seq = next_seq
        self._on_link = on_link
        self._on_refused = on_refused
        self._explain = explain
        self._wake = wake
        self._explained = False
        self._identity_refused = False
        self._stop = asyncio.Event()
        self._link: Link | None = None
        self._preferred = QUIC
        self._quic_failed_at: float | None = None
        self._quic_retries = 0
        self._run_task: asyncio.Task[None] | None = None
        self._done = asyncio.Event()
        self._refusal: SessionRejected | None = None
        self.link_changed = asyncio.Condition()
        """Notified whenever a link opens or closes (wait on it to observe the uplink)."""

    # -- observation ------------------------------------------------------------------------

    @property
    def link(self) -> Link | None:
        """The open link, if any."""
        return self._link

    @property
    def transport(self) -> str | None:
        """``"quic"`` or ``"websocket"`` while a link is open, else ``None``."""
        return self._link.transport if self._link is not None else None

    @property
    def preferred(self) -> str:
        """The transport that worked last (dialled first next time)."""
        return self._preferred

    async def _set_link(self, link: Link | None) -> None:
        self._link = link
        async with self.link_changed:
            self.link_changed.notify_all()

    async def wait_for_transport(self, transport: str | None, timeout: float) -> None:
        """Wait until an open link uses ``transport`` (``None``: until no link is open).

        Raises:
            TimeoutError: not within ``timeout`` seconds.
        """

        def reached() -> bool:
            return self.transport == transport and (self._link is None or not self._link.closed)

        async with self.link_changed:
            await asyncio.wait_for(self.link_changed.wait_for(reached), timeout)

    # -- the loops --------------------------------------------------------------------------

    def _delays(self) -> Iterator[float]:
        s = self.settings
        return backoff(uniform=random.uniform, base=s.backoff_base, cap=s.backoff_cap)

    async def run(self) -> None:
        """Dial and serve links until :meth:`close` (the outer loop).

        Never raises for network or hub failures: they are logged and retried with backoff.
        Run it as its own task; :meth:`close` makes it return.
        """
        self._run_task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        delays = self._delays()
        try:
            while not self._stop.is_set():
                self._refusal = None
                self._identity_refused = False
                link = await self._until_stopped(self._dial())
                retry_after = None
                hub_spread = False  # the hub's retry_after is the whole (jittered) delay
                if link is not None:
                    opened_at = loop.time()
                    switch_to_quic = await self._serve(link)
                    if loop.time() - opened_at >= self.settings.healthy_after:
                        delays = self._delays()
                    if switch_to_quic:
                        continue
                    closed = link.close_event
                    if closed is not None:
                        retry_after = closed.retry_after
                        hub_spread = closed.code in _HUB_SPREAD
                elif self._refusal is not None:
                    retry_after = self._refusal.retry_after
                    hub_spread = self._refusal.code in _HUB_SPREAD
                    if not is_retryable(self._refusal.code):
                        # A final refusal (version mismatch, unauthorized) needs a change on
                        # one side; keep asking, but only at the slowest rate.
                        retry_after = max(retry_after or 0.0, self.settings.backoff_cap)
                elif self._identity_refused:  # only a new certificate helps: as above
                    retry_after = self.settings.backoff_cap
                if hub_spread and retry_after is not None:
                    delay = min(retry_after, self.settings.backoff_cap)
                else:
                    delay = retry_delay(next(delays), retry_after)
                if self._stop.is_set():
                    break
                if delay > 0:
                    logger.info("reconnecting to the hub in %.1f s", delay)
                    await self._wait_retry(delay)
        finally:
            self._done.set()

    async def _wait_retry(self, delay: float) -> None:
        """Wait ``delay`` seconds before the next dial, less if stopped or woken."""
        if self._wake is None:
            await wait_event(self._stop, delay)
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + delay
        while (left := deadline - loop.time()) > 0:
            if await wait_event(self._stop, min(left, WAKE_POLL)):
                return
            if self._wake():
                logger.info("the node's certificate files changed; dialling the hub now")
                return

    async def _until_stopped(self, coro: Awaitable[Link | None]) -> Link | None:
        """Run a dial, abandoning it (cancelled) if :meth:`close` is called meanwhile."""
        dial = asyncio.ensure_future(coro)
        stop = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({dial, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not dial.done():
                dial.cancel()
            await asyncio.gather(dial, stop, return_exceptions=True)
        if dial.cancelled():
            return None
        link = dial.result()
        if link is not None and self._stop.is_set():
            await link.close(CloseCode.GOING_AWAY, "agent stopping")
            await self._set_link(None)
            return None
        return link

    def _quic_due(self, now: float) -> bool:
        if QUIC not in self.settings.transports:
            return False
        if WEBSOCKET not in self.settings.transports:
            return True
        if self._preferred == QUIC or self._quic_failed_at is None:
            return True
        return now - self._quic_failed_at >= self._quic_retry_delay()

    def _quic_retry_delay(self) -> float:
        """Seconds from the last QUIC failure to the next check (doubling, capped)."""
        s = self.settings
        return min(s.quic_retry_first * 2**self._quic_retries, s.quic_retry_interval)

    def _note_quic_failed(self, now: float) -> None:
        if self._preferred == QUIC or self._quic_failed_at is None:
            self._quic_retries = 0  # a fresh fallback: check again soon
        else:
            self._quic_retries = min(self._quic_retries + 1, 32)
        self._quic_failed_at = now

    async def _dial(self) -> Link | None:
        """Try QUIC (when due), then WebSocket; ``None`` if both failed."""
        s = self.settings
        loop = asyncio.get_running_loop()
        self._explained = False
        common = {
            "hello": self._make_hello(),
            "pending": list(self._pending()),
            "next_seq": self._next_seq(),
            "config": s.session,
            "server_name": s.server_name,
        }
        try:
            credentials = self._credentials()
        except AgentError as exc:
            self._refused(f"cannot dial the hub: {exc}", by_hub=False)
            return None
        if self._quic_due(loop.time()):
            from protocol.transport.quic import connect_quic

            quic_options = {
                **common,
                "max_datagram_size": s.quic_max_datagram_size,
                "loopback_datagram_size": s.quic_loopback_datagram_size,
            }
            link, refused = await self._try(
                QUIC, connect_quic, s.quic_port, s.quic_handshake_timeout, credentials, quic_options
            )
            if refused:
                return None
            if link is not None:
                self._preferred = QUIC
                self._quic_failed_at = None
                self._quic_retries = 0
                await self._set_link(link)
                return link
            self._note_quic_failed(loop.time())
        if WEBSOCKET not in s.transports:
            return None
        from protocol.transport.websocket import connect_websocket

        link, _ = await self._try(
            WEBSOCKET, connect_websocket, s.websocket_port, s.websocket_timeout, credentials, common
        )
        if link is None:
            return None
        self._preferred = WEBSOCKET
        if self._quic_failed_at is None:
            self._quic_failed_at = loop.time()
        await self._set_link(link)
        return link

    def _explain_failure(self, exc: ConnectFailed) -> None:
        """A dial failure whose cause ``explain`` can name (this node's clock): an ERROR,
        once per dial."""
        if self._explain is None or self._explained:
            return
        text = self._explain(exc)
        if text:
            self._explained = True
            logger.error("%s", text)

    async def _try(
        self,
        transport: str,
        connect: Callable[..., Awaitable[Link]],
        port: int,
        timeout: float,
        credentials: TLSCredentials | PEMCredentials,
        common: dict[str, object],
    ) -> tuple[Link | None, bool]:
        """One dial over ``transport``: ``(link, False)`` on success, ``(None, True)`` when
        the hub or the TLS handshake refused this node (no fallback: another transport
        would be refused the same way), ``(None, False)`` on a transport failure."""
        host = self.settings.host
        try:
            return await connect(
                host, port, credentials=credentials, timeout=timeout, **common
            ), False
        except SessionRejected as exc:
            self._rejected(exc, transport)
        except CertificateRejected as exc:
            self._certificate_rejected(exc)
        except ConnectFailed as exc:
            if transport == QUIC:
                logger.info("QUIC to %s:%s failed (%s); trying WebSocket", host, port, exc)
            else:
                logger.warning("WebSocket to %s:%s failed: %s", host, port, exc)
            self._explain_failure(exc)
            return None, False
        return None, True

    def _refused(self, text: str, *, by_hub: bool = True) -> None:
        """This node's identity is refused or unusable: say so once per dial, loudly."""
        self._identity_refused = True
        logger.error("%s", text)
        if self._on_refused is not None:
            self._on_refused(text, by_hub)

    def _rejected(self, exc: SessionRejected, transport: str) -> None:
        self._refusal = exc
        if exc.code is CloseCode.UNAUTHORIZED:
            self._refused(
                f"the hub refused this node over {transport} ({exc.reason}): {RENEW_HINT}"
            )
        else:
            logger.warning("hub refused the session over %s: %s", transport, exc)

    def _certificate_rejected(self, exc: CertificateRejected) -> None:
        why = self._explain(exc) if self._explain is not None else None
        self._refused(
            f"the hub rejected this node's certificate ({exc}): "
            + (
                why
                or "it expired (check this node's clock: timedatectl status), was not issued "
                f"by this hub's CA, or is damaged; {RENEW_HINT}"
            )
        )

    async def _serve(self, link: Link) -> bool:
        """Run ``on_link`` until the link closes (the middle loop).

        Returns:
            True if the link was closed to move to QUIC.
        """
        loop = asyncio.get_running_loop()
        app = loop.create_task(self._on_link(link), name="uplink-on-link")
        ended = loop.create_task(link.wait_closed(), name="uplink-link-ended")
        tasks = [app, ended]
        retry = None
        if link.transport == WEBSOCKET and QUIC in self.settings.transports:
            retry = loop.create_task(self._retry_quic(), name="uplink-quic-retry")
            tasks.append(retry)
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            if app in done and not app.cancelled() and app.exception() is not None:
                logger.error("uplink link handler failed", exc_info=app.exception())
            switched = retry is not None and retry in done and retry.result()
            await link.close(
                CloseCode.GOING_AWAY if switched else CloseCode.NORMAL,
                "moving to QUIC" if switched else "",
            )
            return bool(switched)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._set_link(None)

    async def _retry_quic(self) -> bool:
        """While on WebSocket: check whether QUIC works, at the times the module
        docstring gives.

        Returns:
            True once a QUIC handshake succeeded (the caller moves to QUIC); never returns
            False (it is cancelled when the link ends).
        """
        s = self.settings
        loop = asyncio.get_running_loop()
        while True:
            assert self._quic_failed_at is not None
            wait = self._quic_failed_at + self._quic_retry_delay() - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            from protocol.transport.quic import quic_handshake_succeeds

            try:
                credentials = self._credentials()
            except AgentError as exc:
                logger.error("cannot try QUIC again: %s", exc)
                self._note_quic_failed(loop.time())
                continue
            ok = await quic_handshake_succeeds(
                s.host,
                s.quic_port,
                credentials=credentials,
                server_name=s.server_name,
                timeout=s.quic_handshake_timeout,
            )
            if ok:
                logger.info("QUIC to %s:%s works again; leaving WebSocket", s.host, s.quic_port)
                self._preferred = QUIC
                self._quic_failed_at = None
                self._quic_retries = 0
                return True
            self._note_quic_failed(loop.time())

    async def close(self) -> None:
        """Stop reconnecting and close the open link.

        Returns within the link's ``close_bound`` plus one second, even if a send, a ping
        or the application's ``on_link`` is stuck: a dial in progress is abandoned, and
        ``on_link`` is cancelled once its link has closed.
        """
        self._stop.set()
        link = self._link
        if link is not None:
            try:
                await asyncio.wait_for(
                    link.close(CloseCode.GOING_AWAY, "agent stopping"), link.close_bound
                )
            except asyncio.TimeoutError:
                pass
        task = self._run_task
        if task is not None and task is not asyncio.current_task() and not task.done():
            done, _ = await asyncio.wait({task}, timeout=1.0)
            if not done:
                logger.error("uplink did not stop within its bound; cancelling it")
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
