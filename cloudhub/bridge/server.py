"""The edge-facing server: accepts sessions over QUIC and WebSocket and runs each one.

For every link the transports hand over (the TLS handshake done, the hello received):

1. Identity: the node is the name in its client certificate; a hello naming another node
   is refused (``UNAUTHORIZED``), as are peers the ``peer_checks`` refuse (the seam for
   certificate revocation: ``check(link) -> reason or None``).
2. The session becomes the node's current one (superseding an older one), the welcome is
   sent at once (registration of the Node object runs in the background, so a slow API
   never makes an agent's handshake time out), the ``on_connect`` hooks run, and the
   node's desired set is diffed against its inventory (:meth:`NodeSession.sync`), then the
   ``on_synced`` hooks run.
3. Every message is dispatched (:mod:`.dispatch`); when the link ends, the
   ``on_disconnect`` hooks run.
"""

from __future__ import annotations

import inspect
import itertools
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from cloudhub.bridge.dispatch import Dispatcher, Inbound
from cloudhub.bridge.objects import NodeObjects
from cloudhub.bridge.registry import SessionRegistry
from cloudhub.bridge.session import NodeSession
from cloudhub.observability.logs import LogSummary
from cloudhub.observability.metrics import HubMetrics
from protocol.errors import CloseCode, ErrorCode, InvalidMessage
from protocol.events import Closed, MessageReceived, PeerError, Refused
from protocol.messages import Message, Welcome
from protocol.transport import Link

__all__ = ["Admission", "EdgeServer", "PeerCheck", "Refusal"]

log = logging.getLogger(__name__)

#: ``check(link) -> None`` to allow, or a reason to refuse the session (``UNAUTHORIZED``).
PeerCheck = Callable[[Link], "Awaitable[str | None] | str | None"]


@dataclass(frozen=True, slots=True)
class Refusal:
    """An admission's answer that turns a session away for now (not for its identity).

    Attributes:
        code: the close code sent (``GOING_AWAY``, ``OVERLOADED``).
        reason: why, in words (the agent logs it).
        retry_after: seconds the agent waits at least before it dials again.
    """

    code: CloseCode
    reason: str
    retry_after: float | None = None


#: ``admit(link) -> None`` to serve the session, or a :class:`Refusal`; runs after the
#: peer checks passed, just before the welcome (hub HA: the node's ownership claim).
Admission = Callable[[Link], "Awaitable[Refusal | None]"]


class EdgeServer:
    """Runs edge sessions: identity, registry, sync, dispatch.

    Args:
        registry: node -> current session and the connect/disconnect hooks.
        objects: the desired sets.
        dispatcher: the kind -> handler table.
        metrics: the hub's metrics.
        heartbeat_interval: seconds, sent in every welcome.
        on_refused: called for every refused message (logs, Events); see
            :meth:`cloudhub.bridge.session.NodeSession.refuse`.
        on_dead_letter: ``(session, message, error)`` for every hub message a link cannot
            send (:mod:`cloudhub.bridge.deadletters`).
        on_sent: ``(session, message)`` for every hub message handed to a link (the
            dead-letter table forgets an object that reached its node after all).
    """

    def __init__(
        self,
        registry: SessionRegistry,
        objects: NodeObjects,
        dispatcher: Dispatcher,
        metrics: HubMetrics,
        *,
        heartbeat_interval: float,
        on_refused: Callable[[Inbound, ErrorCode, str], None] | None = None,
        on_dead_letter: Callable[[NodeSession, Message, InvalidMessage], None] | None = None,
        on_sent: Callable[[NodeSession, Message], None] | None = None,
    ) -> None:
        self.registry = registry
        self.objects = objects
        self.dispatcher = dispatcher
        self.metrics = metrics
        self.heartbeat_interval = heartbeat_interval
        self.turned_away = LogSummary(log, "turned %d more sessions away")
        """The warnings of sessions turned away by an admission hook: the first of each
        close code per 10 s in full, then a count (:class:`LogSummary`)."""
        self.peer_checks: list[PeerCheck] = []
        self.admission: list[Admission] = []
        """``admit(link)`` hooks run after the peer checks; a :class:`Refusal` turns the
        session away with its code and ``retry_after``."""
        self.on_session_refused: list[Callable[[Link, str], None]] = []
        """``hook(link, reason)`` for every session refused ``UNAUTHORIZED`` (the hub
        records a Warning Event on the node the certificate names)."""
        self.on_abandoned: list[Callable[[Link], None]] = []
        """``hook(link)`` for a link that closed while an admission hook awaited (the
        agent's handshake timed out): what the admissions took for it is given back (the
        hub releases the node's ownership claim)."""
        self.closing = False
        """Set when the hub shuts down: new sessions are turned away (``GOING_AWAY``)."""
        self.going_away_retry: Callable[[], float] = lambda: 1.0
        """``() -> seconds``: the ``retry_after`` of each ``GOING_AWAY`` a shutting-down hub
        sends (the hub sets a full-jitter draw over its shutdown spread)."""
        self._on_refused = on_refused
        self._on_dead_letter = on_dead_letter
        self._on_sent = on_sent
        self._ids = itertools.count(1)
        self._id_prefix = f"{os.getpid():x}-{int(time.time()) & 0xFFFFFF:x}"
        objects.add_listener(registry.refresh, wants=registry.connected)

    async def handle(self, link: Link) -> None:
        """The transports' handler: one session from hello to close."""
        hello = link.hello
        assert hello is not None
        node = hello.node_name
        metrics = self.metrics
        if self.closing:
            link.reject(
                CloseCode.GOING_AWAY, "hub shutting down", retry_after=self.going_away_retry()
            )
            return
        refusal = await self._refusal(link)
        if refusal is not None:
            log.warning("refused a session: %s", refusal, extra={"node": node})
            metrics.sessions_refused.labels(link.transport).inc()
            link.reject(CloseCode.UNAUTHORIZED, refusal)
            for hook in self.on_session_refused:
                try:
                    hook(link, refusal)
                except Exception:
                    log.exception("on_session_refused hook failed", extra={"node": node})
            return
        for admit in self.admission:
            refused = await admit(link)
            if link.closed:  # the agent gave up while it waited (its handshake timeout)
                log.info(
                    "the agent left while its session was being admitted", extra={"node": node}
                )
                for abandoned in self.on_abandoned:
                    try:
                        abandoned(link)
                    except Exception:
                        log.exception("on_abandoned hook failed", extra={"node": node})
                return
            if refused is None and self.closing:
                refused = Refusal(
                    CloseCode.GOING_AWAY, "hub shutting down", self.going_away_retry()
                )
            if refused is not None:
                self.turned_away.warning(
                    refused.code.name,
                    f"turned a session away: {refused.reason}",
                    extra={"node": node},
                )
                metrics.sessions_refused.labels(link.transport).inc()
                link.reject(refused.code, refused.reason, retry_after=refused.retry_after)
                return
        session_id = f"{self._id_prefix}-{next(self._ids)}"
        on_sent = self._count_sent
        if self._on_sent is not None:
            hook, count = self._on_sent, self._count_sent

            def on_sent(message: Message) -> None:
                count(message)
                hook(session, message)  # bound below, before the outbox sends anything

        session = NodeSession(
            node,
            link,
            session_id,
            self.objects,
            on_refused=self._on_refused,
            on_sent=on_sent,
            on_dead_letter=self._on_dead_letter,
        )
        registry = self.registry
        resend_below = registry.received_up_to(node) + 1
        link.accept(
            Welcome(
                version=link.version or 1,
                hub_time=time.time(),
                session_id=session_id,
                received_up_to=registry.acked_up_to(node),
                heartbeat_interval=self.heartbeat_interval,
            )
        )
        registry.attach(session)
        transport = link.transport
        metrics.sessions_opened.labels(transport).inc()
        metrics.connected.labels(transport).inc()
        queued = session.sync(hello.inventory)
        registry.synced(session)
        session.log.info(
            "connected over %s: agent %s, inventory %d, %d objects to sync",
            transport,
            hello.agent_version,
            len(hello.inventory),
            queued,
        )
        code = CloseCode.CONNECTION_LOST
        try:
            async for event in link:
                if event.__class__ is MessageReceived:
                    self._on_message(session, event, resend_below)
                elif isinstance(event, PeerError):
                    session.log.warning("the agent reported an error: %s", event.error.message)
                elif isinstance(event, Refused):  # by our session: unknown kind, too large
                    self._count_refused(session, event)
                elif isinstance(event, Closed):
                    code = event.code
                    session.log.info(
                        "disconnected: %s %s%s",
                        event.code.name,
                        event.reason,
                        " (by the agent)" if event.by_peer else "",
                    )
        finally:
            await session.aclose()
            metrics.connected.labels(transport).dec()
            metrics.sessions_closed.labels(transport, code.name).inc()
            metrics.add_link_bytes(link)
            registry.detach(session)

    async def _refusal(self, link: Link) -> str | None:
        hello = link.hello
        assert hello is not None
        if link.peer_node_name != hello.node_name:
            return (
                f"the hello names node {hello.node_name!r} but the client certificate "
                f"names {link.peer_node_name!r}"
            )
        for check in self.peer_checks:
            result = check(link)
            if inspect.isawaitable(result):
                result = await result
            if result:
                return str(result)
        return None

    def _on_message(self, session: NodeSession, event: MessageReceived, resend_below: int) -> None:
        seq, message = event.seq, event.message
        self.metrics.messages.labels("in", message.kind).inc()
        if seq is not None:
            if seq < resend_below:
                self.metrics.resends.inc()
            session.acks.received(seq)
        self.dispatcher.dispatch(Inbound(session, seq, message))

    def _count_refused(self, session: NodeSession, event: Refused) -> None:
        error = event.error
        reason = "too_large" if error.code is ErrorCode.TOO_LARGE else "unknown_kind"
        self.metrics.dead_letters.labels("up", "unknown", reason).inc()
        session.log.warning("refused a message of the agent: %s", error.message)

    def _count_sent(self, message: Message) -> None:
        self.metrics.messages.labels("out", message.kind).inc()
