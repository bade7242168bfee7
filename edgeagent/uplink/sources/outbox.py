"""The store's outbox as an up-going source: pod status, ``pod_deleted``, events.

:class:`OutboxSource` is the stream's one bookkeeper (the seqs live in the outbox table);
the helpers here translate between the store's entries and protocol messages.

The store keeps up-going messages as (kind, body) with JSON bodies; the session takes
``protocol.messages`` objects. One link session, in outline::

    session = Session(Role.CLIENT, now=now, next_seq=store.next_seq())
    session.connect(hello(store, ...), now, pending=sent_messages(store))
    ...on Established(welcome): store.advance_seq(welcome.received_up_to) if needed
    ...then and whenever the store has more (a dirty hook wakes you):
        for entry in store.outbox_unsent(limit=session.window_free):
            store.outbox_mark_sent(entry.id, session.send(to_message(entry), now))
    ...on Acked(up_to): store.outbox_ack(up_to)
    ...on MessageReceived(ObjectUpsert/ObjectDelete): store.apply_upsert / apply_delete

Imported only by the uplink path: ``protocol.messages`` is not needed offline.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from edgeagent.store import OutboxEntry, Store
from edgeagent.uplink.scheduler import Priority
from edgeagent.uplink.sources.base import Outgoing
from protocol.errors import InvalidMessage
from protocol.messages import (
    MAX_PROTOCOL_VERSION,
    MIN_PROTOCOL_VERSION,
    REGISTRY,
    Hello,
    Message,
    ObjectRef,
)

__all__ = ["OutboxSource", "hello", "resend_list", "sent_messages", "to_message"]

log = logging.getLogger(__name__)


def to_message(entry: OutboxEntry) -> Message:
    """The protocol message an outbox entry stands for.

    Raises:
        protocol.errors.InvalidMessage: the stored body does not make a valid message.
        KeyError: the kind is unknown to this protocol version.
    """
    cls = REGISTRY[entry.kind]
    fields: dict[str, Any] = {
        name: ObjectRef(**value) if name == "ref" and isinstance(value, Mapping) else value
        for name, value in entry.body.items()
    }
    return cls(**fields)


def sent_messages(store: Store) -> list[tuple[int, Message]]:
    """The ``pending`` for ``Session.connect``: sent, unacknowledged, by seq."""
    return [(e.seq, to_message(e)) for e in store.outbox_sent() if e.seq is not None]


def hello(
    store: Store,
    *,
    node_name: str,
    agent_version: str,
    capabilities: tuple[str, ...] = (),
    node_info: dict[str, Any] | None = None,
) -> Hello:
    """The hello for a new session: versions, identity and the store's inventory."""
    return Hello(
        min_version=MIN_PROTOCOL_VERSION,
        max_version=MAX_PROTOCOL_VERSION,
        node_name=node_name,
        agent_version=agent_version,
        capabilities=capabilities,
        inventory=store.inventory(),
        node_info=node_info or {},
    )


_BAD_BODY = (InvalidMessage, KeyError, TypeError, ValueError)
"""What :func:`to_message` raises for a stored body that no longer makes a message."""


def resend_list(store: Store) -> list[tuple[int, Message]]:
    """The outbox's sent-but-unacknowledged messages, for the session to resend at connect;
    one whose stored body no longer makes a valid message (an agent upgrade tightened a
    rule) is dropped with an ERROR line rather than stopping every connect."""
    out = []
    for entry in store.outbox_sent():
        try:
            out.append((entry.seq, to_message(entry)))
        except _BAD_BODY as exc:
            log.error(
                "dropping sent outbox message %d (%s, seq %s), not a valid message: %s",
                entry.id,
                entry.kind,
                entry.seq,
                exc,
            )
            store.outbox_drop(entry.id)
    return out


class OutboxSource:
    """The store's outbox as an up-going source (:class:`~edgeagent.uplink.sources.base.UpSource`).

    Sent-but-unacknowledged messages are resent by the session itself at the next connect
    (with their seqs, :func:`resend_list`: the hub drops duplicates). A stored message that
    no longer makes a valid message is dropped with an ERROR line naming it, instead of
    blocking everything behind it. Every append wakes the session (the store's outbox
    hook), so a status goes up as soon as it changes; what waits for the window is
    coalesced in the outbox (latest wins per pod).

    Args:
        store: the agent store.
    """

    name = "outbox"
    priority = Priority.STATUS

    def __init__(self, store: Store) -> None:
        self.store = store

    def add_wakeup(self, callback: Callable[[], None]) -> Callable[[], None]:
        return self.store.add_outbox_hook(callback)

    def messages_to_send(self, limit: int) -> list[Outgoing]:
        out = []
        for entry in self.store.outbox_unsent(limit=limit):
            try:
                out.append(Outgoing(to_message(entry), entry.id))
            except _BAD_BODY as exc:
                log.error(
                    "dropping outbox message %d (%s), which is not a valid message: %s",
                    entry.id,
                    entry.kind,
                    exc,
                )
                self.store.outbox_drop(entry.id)
        return out

    def sent(self, item: Outgoing, seq: int | None) -> None:
        if seq is None:  # a kind that needs no ack: done once handed to the session
            self.store.outbox_drop(item.token)
        else:
            self.store.outbox_mark_sent(item.token, seq, missing_ok=True)

    def acked(self, up_to: int) -> None:
        self.store.outbox_ack(up_to)

    def session_started(self, received_up_to: int) -> None:
        if received_up_to:
            self.store.outbox_ack(received_up_to)

    def session_ended(self) -> None:
        pass
