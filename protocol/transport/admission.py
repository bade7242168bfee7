"""Admission of new connections: a bound on handshakes pending per source address, and
what both listeners do with a connection once its transport handshake is done.

A TLS handshake that never completes holds a connection, an OpenSSL object and its buffers
(~57 KiB measured on the hub while pending) until the hello deadline drops it; a peer that
opens thousands and sends nothing more holds thousands. :class:`PendingLimit` counts, per
source address, the connections still in TLS or the upgrade, and refuses more than
``limit`` at once: the excess is dropped as it arrives, before any TLS work. A connection
leaves the count once its upgrade is done or it ends. Legitimate handshakes take
milliseconds, so the bound only bites on connections left half-open (or on a site whose
whole fleet, behind one NAT address, dials in the same instant: they retry with back-off).

Once TLS (QUIC's, or the WebSocket upgrade's) is done, both listeners make the server
side of a session with :func:`server_link` and hand it to :func:`serve_link`: wait for the
hello, run the hub's handler, close the link if the handler failed; at shutdown both end
their links and handlers with :func:`shut_down`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from protocol.config import SessionConfig
from protocol.errors import CloseCode
from protocol.session import Role, Session
from protocol.transport.link import Link

if TYPE_CHECKING:
    from cryptography import x509

__all__ = ["PendingLimit", "serve_link", "server_link", "shut_down"]


def server_link(
    transport: str,
    config: SessionConfig,
    *,
    peer_node_name: str | None,
    peer_certificate: x509.Certificate | None,
) -> Link:
    """The hub's side of a new session on a connection whose TLS handshake is done.

    Args:
        transport: ``"quic"`` or ``"websocket"`` (:attr:`Link.transport`).
        config: the session settings.
        peer_node_name: the node name of the client certificate.
        peer_certificate: the client certificate.

    Returns:
        A link in the session's first state (waiting for the hello); the caller attaches
        it to its connection, then calls :func:`serve_link`.
    """
    now = asyncio.get_running_loop().time()
    session = Session(role=Role.SERVER, config=config, now=now, next_seq=1)
    return Link(
        transport, session, peer_node_name=peer_node_name, peer_certificate=peer_certificate
    )


async def serve_link(
    link: Link,
    handler: Callable[[Link], Awaitable[None]],
    hello_timeout: float,
    log: logging.Logger,
) -> None:
    """Wait for the hello, then run ``handler(link)``.

    Returns without calling the handler when no hello came within ``hello_timeout``
    seconds or the link closed first. A handler that raises is logged on ``log`` and the
    link is closed with ``INTERNAL_ERROR``. The caller closes the link in any case.
    """
    try:
        opened = await link.wait_opened(hello_timeout)
    except asyncio.TimeoutError:
        return
    if opened is None or link.closed:
        return
    try:
        await handler(link)
    except Exception:
        log.exception(
            "%s link handler failed (node %s)", _NAMES[link.transport], link.peer_node_name
        )
        await link.close(CloseCode.INTERNAL_ERROR, "handler failed")


_NAMES = {"quic": "QUIC", "websocket": "WebSocket"}


async def shut_down(
    links: Iterable[Link],
    tasks: Iterable[asyncio.Task[None]],
    retry_after: Callable[[], float | None] | None = None,
) -> None:
    """A listener's end: close every link with ``GOING_AWAY`` ("hub shutting down"; each
    close is bounded by the link's close bound), then cancel the handler tasks still
    running and wait for all of them. Errors of either are not raised.

    Args:
        links: the listener's open links.
        tasks: its handler tasks.
        retry_after: called once per link for the ``retry_after`` (seconds) its close
            carries, so that the caller spreads the fleet's reconnects (full jitter);
            ``None``: the closes carry none.
    """
    draw = retry_after or (lambda: None)
    await asyncio.gather(
        *(
            link.close(CloseCode.GOING_AWAY, "hub shutting down", retry_after=draw())
            for link in list(links)
        ),
        return_exceptions=True,
    )
    running = [task for task in list(tasks) if not task.done()]
    for task in running:
        task.cancel()
    await asyncio.gather(*running, return_exceptions=True)


class PendingLimit:
    """At most ``limit`` pending connections per source address, and at most ``total`` in
    all (``busy_total`` while ``busy()`` says the server cannot take sessions now).

    A pending connection is one in TLS or the upgrade. Each costs the loop a handshake, so
    the total bounds how far a burst of arrivals (a fleet reconnecting at once) can put
    the event loop behind: arrivals beyond it are dropped before TLS, which costs
    nothing, and their agents retry with back-off. While the server behind the listener
    is busy (its hub turns sessions away once they are past TLS), the smaller
    ``busy_total`` sheds the arrivals before their handshake is paid for, and still lets
    a few through, so that the server sees when it can take sessions again and the few
    hear why (``OVERLOADED`` and a ``retry_after``).

    Args:
        limit: pending connections allowed per source address (>= 1).
        total: pending connections allowed in all (>= 1), ``None`` for no bound.
        busy: ``() -> bool``, asked on each arrival; ``None``: never busy.
        busy_total: pending connections allowed in all while ``busy()`` (>= 1).

    Raises:
        ValueError: a bound below 1.
    """

    def __init__(
        self,
        limit: int,
        total: int | None = None,
        *,
        busy: Callable[[], bool] | None = None,
        busy_total: int = 1,
    ) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        if total is not None and total < 1:
            raise ValueError(f"total must be >= 1, got {total}")
        if busy_total < 1:
            raise ValueError(f"busy_total must be >= 1, got {busy_total}")
        self.limit = limit
        self.total = total
        self.busy = busy
        self.busy_total = busy_total
        self._pending: dict[str, int] = {}
        self.pending = 0
        """Connections pending now."""
        self.refused = 0
        """Connections refused so far because their source was at ``limit``."""
        self.refused_total = 0
        """Connections refused so far because ``total`` (or, busy, ``busy_total``) were
        pending."""

    def __len__(self) -> int:
        """Source addresses with pending connections."""
        return len(self._pending)

    def admit(self, peername: Any) -> Callable[[], None] | None:
        """Count a new connection from ``peername`` (``transport.get_extra_info``).

        Returns:
            ``release()`` to call exactly once when it is no longer pending, or ``None``
            when it is refused (its source is at ``limit``, or ``total`` are pending, or
            ``busy_total`` while busy).
        """
        source = str(peername[0]) if isinstance(peername, tuple) and peername else "?"
        total = self.total
        if self.busy is not None and self.busy():
            total = self.busy_total if total is None else min(total, self.busy_total)
        if total is not None and self.pending >= total:
            self.refused_total += 1
            return None
        count = self._pending.get(source, 0)
        if count >= self.limit:
            self.refused += 1
            return None
        self._pending[source] = count + 1
        self.pending += 1
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            self.pending -= 1
            left = self._pending.get(source, 1) - 1
            if left > 0:
                self._pending[source] = left
            else:
                self._pending.pop(source, None)

        return release
