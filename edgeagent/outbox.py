"""Between the store's outbox and the protocol session (what the uplink's ``on_link`` uses).

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

from collections.abc import Mapping
from typing import Any

from edgeagent.store import OutboxEntry, Store
from protocol.messages import (
    MAX_PROTOCOL_VERSION,
    MIN_PROTOCOL_VERSION,
    REGISTRY,
    Hello,
    Message,
    ObjectRef,
)

__all__ = ["hello", "sent_messages", "to_message"]


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
