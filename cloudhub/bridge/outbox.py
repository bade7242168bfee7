"""A session's queue of hub-to-edge messages: in order, latest wins per object.

Object state is level-based: if an object changes twice before its first upsert went out,
only the newest version is worth sending. The outbox keys messages by their
``coalesce_key()`` (the object's uid); putting a newer message under a key replaces the
queued one and moves it to the back, so it still goes out after anything queued before it
(a ConfigMap queued before the pod that now needs it stays ahead of that pod). Messages
without a key (errors, ``sync_done``) are never coalesced.

A message the link refuses to send (over the limits agreed with the agent, or one that
does not encode) is a dead letter: handed to ``on_dead_letter`` (:mod:`.deadletters`) and
skipped, so it never blocks what is queued behind it.

No task runs while the outbox is empty: a flush task is started when a message is queued
and ends when the queue is drained, so 10,000 idle sessions cost no tasks here.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Hashable

from protocol.errors import ConnectionClosed, InvalidMessage, StateError
from protocol.messages import Message
from protocol.transport import Link

__all__ = ["Outbox"]

log = logging.getLogger(__name__)

_unique = itertools.count()


class Outbox:
    """Coalescing, ordered queue in front of one link.

    Args:
        link: where messages go.
        on_sent: called with each message once handed to the link (metrics).
        on_dead_letter: called with each message the link cannot send and why (the
            ``InvalidMessage``, e.g. ``MessageTooLarge``); logged if ``None``.
    """

    __slots__ = ("_items", "_link", "_on_dead_letter", "_on_sent", "_task")

    def __init__(
        self,
        link: Link,
        on_sent: Callable[[Message], None] | None = None,
        on_dead_letter: Callable[[Message, InvalidMessage], None] | None = None,
    ) -> None:
        self._link = link
        self._items: dict[Hashable, Message] = {}
        self._on_sent = on_sent
        self._on_dead_letter = on_dead_letter
        self._task: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._items)

    def put(self, message: Message) -> None:
        """Queue ``message``, replacing a queued one with the same coalescing key."""
        key = message.coalesce_key()
        items = self._items
        if key is None:
            key = ("_", next(_unique))
        else:
            items.pop(key, None)
        items[key] = message
        if self._task is None and not self._link.closed:
            self._task = asyncio.get_running_loop().create_task(self._flush(), name="outbox")

    async def _flush(self) -> None:
        items, link = self._items, self._link
        try:
            while items:
                key = next(iter(items))
                message = items.pop(key)
                try:
                    await link.send(message)
                except InvalidMessage as exc:  # e.g. an object over the agreed message size
                    if self._on_dead_letter is None:
                        log.error("cannot send %s: %s", message.kind, exc)
                    else:
                        self._on_dead_letter(message, exc)
                    continue
                if self._on_sent is not None:
                    self._on_sent(message)
        except (ConnectionClosed, StateError):  # closed, or closing (no send after close)
            items.clear()  # level-based: the next session's sync resends what matters
        finally:
            self._task = None

    async def drained(self) -> None:
        """Wait until everything queued so far has been handed to the link (tests, close)."""
        while self._task is not None:
            await asyncio.shield(self._task)

    async def aclose(self) -> None:
        """Drop what is queued and stop the flush task."""
        self._items.clear()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
