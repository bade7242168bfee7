"""An agent's up-going sources over a real protocol session, in memory.

:class:`Edge` is the drain loop of the hub session (``edgeagent.uplink.session``) over
sans-I/O client and server :class:`~protocol.session.Session` objects whose bytes are
pumped in memory: the send scheduler picks a source while the window has room, each item
is sent (``MessageTooLarge`` goes to the source's ``too_large``, as ``HubLink`` does), the
server's arrivals go to ``take``, and its acks back to every source. Shared by
test_sources.py and test_source_dead_letters.py.
"""

from __future__ import annotations

from collections.abc import Callable

from edgeagent.store import Store
from edgeagent.uplink.scheduler import SendScheduler
from edgeagent.uplink.sources.base import UpSource
from edgeagent.uplink.sources.outbox import hello
from protocol.config import SessionConfig
from protocol.errors import MessageTooLarge
from protocol.messages import Welcome
from protocol.session import Acked, HelloReceived, MessageReceived, Role, Session
from tests.edgeagent.uplink.test_outbox import pump

__all__ = ["Edge"]

#: The hub's clock in the welcome (seconds since the epoch).
HUB_NOW = 1_700_000_000.0


class Edge:
    """Sources of one agent over sessions to a hub.

    Args:
        store: the agent's store (``next_seq``, ``note_seq_used``, the hello).
        sources: the up-going sources, in the scheduler's order.
        limit: the hub's message limit in bytes (``None``: the protocol default).
        take: called with the server session after each delivery; default: append every
            received message to :attr:`received`.
        node: the node name in the hello.
    """

    def __init__(
        self,
        store: Store,
        *sources: UpSource,
        limit: int | None = None,
        take: Callable[[Session], None] | None = None,
        node: str = "edge-1",
    ) -> None:
        self.store, self.sources, self.limit, self.node = store, sources, limit, node
        self.scheduler: SendScheduler[UpSource] = SendScheduler()
        for source in sources:
            self.scheduler.add(source)
        self.take = take or self._take
        self.received: list[object] = []
        self.client: Session | None = None
        self.server: Session | None = None
        self.now = 1000.0

    def _take(self, server: Session) -> None:
        for event in server.events_received():
            if isinstance(event, MessageReceived):
                self.received.append(event.message)

    def connect(self, received_up_to: int = 0) -> None:
        """A new session; the hub welcomes it saying it received up to ``received_up_to``."""
        client = Session(Role.CLIENT, now=self.now, next_seq=self.store.next_seq())
        config = (
            SessionConfig() if self.limit is None else SessionConfig(max_message_size=self.limit)
        )
        server = Session(Role.SERVER, config, now=self.now)
        client.connect(hello(self.store, node_name=self.node, agent_version="t"), self.now)
        pump(client, server, self.now)
        [event] = [e for e in server.events_received() if isinstance(e, HelloReceived)]
        server.accept(Welcome(event.version, HUB_NOW, "s", received_up_to, 20.0), self.now)
        pump(client, server, self.now)
        client.events_received()
        if self.limit is not None:
            assert client.limits.max_message_size == self.limit
        self.client, self.server = client, server
        for source in self.sources:
            source.session_started(received_up_to)

    def send(self) -> int:
        """One drain: what the scheduler picks while the window has room; how many went."""
        client = self.client
        assert client is not None
        sent = 0
        self.scheduler.wake()
        while (pick := self.scheduler.next(client.window_free, client.config.window)) is not None:
            source, limit = pick
            items = source.messages_to_send(limit)
            if not items:
                self.scheduler.idle(source)
            for item in items:
                try:
                    seq = client.send(item.message, self.now)
                except MessageTooLarge as exc:  # as HubLink._too_large
                    handler = getattr(source, "too_large", None)
                    if handler is None:
                        self.scheduler.idle(source)
                    else:
                        handler(item, exc)
                    continue
                source.sent(item, seq)
                if seq is not None:
                    self.store.note_seq_used(seq)
                sent += 1
        return sent

    def deliver(self, *, ack: bool = True) -> None:
        """Bytes to the hub; with ``ack`` the hub's acks come back."""
        assert self.client is not None and self.server is not None
        self.server.receive_data(self.client.data_to_send(), self.now)
        self.take(self.server)
        if not ack:
            return
        self.now += 1.0
        self.server.handle_timer(self.now)  # the delayed ack is due
        self.client.receive_data(self.server.data_to_send(), self.now)
        for event in self.client.events_received():
            if isinstance(event, Acked):
                for source in self.sources:
                    source.acked(event.up_to)

    def drop(self) -> None:
        """The session ends (no close exchanged)."""
        self.client = self.server = None
        for source in self.sources:
            source.session_ended()
