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
import time
from collections.abc import Callable, Mapping
from typing import Any

from edgeagent.store import DeadLetter, OutboxEntry, Store
from edgeagent.uplink.scheduler import Priority
from edgeagent.uplink.sources.base import Outgoing
from protocol.errors import InvalidMessage, MessageTooLarge
from protocol.messages import (
    MAX_PROTOCOL_VERSION,
    MIN_PROTOCOL_VERSION,
    REGISTRY,
    Hello,
    Message,
    ObjectRef,
)

__all__ = [
    "OutboxSource",
    "dead_letter_warning",
    "hello",
    "resend_list",
    "sent_messages",
    "to_message",
]

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


def dead_letter_warning(dead: DeadLetter, node_name: str) -> dict[str, Any]:
    """The body of the Warning ``MessageTooLarge`` Event that says ``dead`` was given up on:
    on the object the message was about (its ``ref``), else on the node."""
    ref = dead.body.get("ref")
    if not (isinstance(ref, Mapping) and {"kind", "name", "uid"} <= set(ref)):
        ref = {"kind": "Node", "namespace": "", "name": node_name, "uid": node_name}
    what = dead.kind
    if dead.kind == "event":
        what = f"event {dead.body.get('reason', '')!s}"[:80]
    elif dead.kind == "twin_reported":
        what = f"twin_reported {dead.body.get('property', '')!s}"[:80]
    size = f" of {dead.size} bytes" if dead.size else ""
    return {
        "ref": dict(ref),
        "type": "Warning",
        "reason": "MessageTooLarge",
        "message": (
            f"{what}{size} from node {node_name} was not delivered after "
            f"{dead.attempts} attempt(s) and is kept in the agent's dead letters: "
            f"{dead.reason}"
        )[:1024],
        "timestamp": time.time(),
        "count": 1,
    }


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

    A message over the limits the session agreed (:meth:`too_large` at send,
    :meth:`send_failed` for a resend, :meth:`refused` by the hub) is skipped for the rest of
    the session, so what is behind it goes; after ``max_attempts`` sessions (at once when
    the hub refused it: the hub acknowledged its seq) it moves to the store's dead letters
    (:mod:`edgeagent.store.deadletters`) and a Warning ``MessageTooLarge`` Event goes up on
    the object it was about (the Node for a message about no object).

    Args:
        store: the agent store.
        node_name: the Node the Warning names when the message names no object.
        max_attempts: sessions a message is tried in before it is dead-lettered (>= 1).
    """

    name = "outbox"
    priority = Priority.STATUS

    def __init__(self, store: Store, *, node_name: str = "", max_attempts: int = 3) -> None:
        self.store = store
        self.node_name = node_name
        self.max_attempts = max_attempts
        self._skip: set[int] = set()
        """Outbox ids that failed in this session: not offered again until the next."""

    def add_wakeup(self, callback: Callable[[], None]) -> Callable[[], None]:
        return self.store.add_outbox_hook(callback)

    def messages_to_send(self, limit: int) -> list[Outgoing]:
        out: list[Outgoing] = []
        for entry in self.store.outbox_unsent(limit=limit + len(self._skip)):
            if entry.id in self._skip:
                continue
            if len(out) >= limit:
                break
            try:
                out.append(Outgoing(to_message(entry), entry))
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
        entry: OutboxEntry = item.token
        if seq is None:  # a kind that needs no ack: done once handed to the session
            self.store.outbox_drop(entry.id)
        else:
            self.store.outbox_mark_sent(entry.id, seq, missing_ok=True)

    def too_large(self, item: Outgoing, error: MessageTooLarge) -> None:
        """``send()`` raised :class:`~protocol.errors.MessageTooLarge` for ``item``
        (nothing was sent, no seq used)."""
        self._failed(item.token, str(error), error.size)

    def send_failed(self, seq: int, error: MessageTooLarge) -> None:
        """The session could not resend the message with ``seq`` (``SendFailed``)."""
        entry = self.store.outbox_by_seq(seq)
        if entry is not None:
            self._failed(entry, str(error), error.size)

    def refused(self, seq: int, reason: str) -> bool:
        """The hub answered ``error`` ``TOO_LARGE`` for ``seq`` (and acknowledges it).
        Returns whether the seq was one of the outbox's."""
        entry = self.store.outbox_by_seq(seq)
        if entry is None:
            return False
        self._failed(entry, f"refused by the hub: {reason}", 0, force=True)
        return True

    def _failed(self, entry: OutboxEntry, reason: str, size: int, *, force: bool = False) -> None:
        self._skip.add(entry.id)
        dead = self.store.outbox_send_failed(
            entry, reason, size=size, max_attempts=self.max_attempts, force=force
        )
        if dead is None:
            log.warning(
                "outbox message %d (%s) cannot be sent in this session (attempt %d of %d): %s",
                entry.id,
                entry.kind,
                self.store.send_attempts(entry.id),
                self.max_attempts,
                reason,
            )
            return
        log.error(
            "outbox message %d (%s) dead-lettered after %d attempt(s): %s",
            dead.id,
            dead.kind,
            dead.attempts,
            reason,
        )
        self.store.outbox_append("event", dead_letter_warning(dead, self.node_name))

    def acked(self, up_to: int) -> None:
        self.store.outbox_ack(up_to)

    def session_started(self, received_up_to: int) -> None:
        self._skip.clear()
        if received_up_to:
            self.store.outbox_ack(received_up_to)

    def session_ended(self) -> None:
        pass
