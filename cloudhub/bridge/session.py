"""One edge node's session on the hub: what it holds, what it is sent, what it has not acked.

The hub keeps per session only what it needs to stream the difference between the node's
desired set and what the node holds (``held``: uid -> resourceVersion and reference), the
outbox and the acknowledgement tracker; everything else is read from the shared informers.

Sync (docs/protocol.md, "Delivery semantics"): at every (re)connect ``held`` starts as the
hello's inventory; :meth:`NodeSession.refresh` queues an ``object_delete`` for everything
held that is no longer desired and an ``object_upsert`` for everything desired that is new
or at another resourceVersion, and the first refresh ends with ``sync_done``. After that,
every informer change that concerns the node triggers the same diff, so changes stream
down in order, latest wins (:mod:`.outbox`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from cloudhub.bridge.acks import AckTracker
from cloudhub.bridge.objects import NodeObjects, object_ref
from cloudhub.bridge.outbox import Outbox
from protocol.errors import CloseCode, ErrorCode, InvalidMessage
from protocol.messages import Error, Message, ObjectDelete, ObjectRef, ObjectUpsert, SyncDone
from protocol.transport import Link

__all__ = ["UNKNOWN_KIND", "Answerable", "NodeSession"]

log = logging.getLogger(__name__)


class Answerable(Protocol):
    """What the session needs of an edge message it answers or refuses: its seq.
    :class:`cloudhub.bridge.dispatch.Inbound` is one; the dispatcher sits above the
    session and imports it, never the reverse."""

    @property
    def seq(self) -> int | None: ...


UNKNOWN_KIND = "Unknown"
"""The kind in an ``object_delete`` for an object the hub no longer knows anything about
but its uid (deleted while the node was offline, before this hub process started): the
edge deletes by uid; the name is the uid too."""


class NodeSession:
    """The hub's side of one node's session.

    Args:
        node: the authenticated node name (from the client certificate).
        link: the accepted link.
        session_id: the id sent in the welcome (for logs on both sides).
        objects: the desired sets.
        on_refused: called for every refused message (metrics, logs, Events).
        on_sent: called for every message handed to the link (metrics).
        on_dead_letter: ``(session, message, error)`` for every message the link cannot
            send (:mod:`.deadletters`: metrics, Events, the table).
    """

    __slots__ = (
        "_close_task",
        "_on_refused",
        "_synced",
        "acks",
        "held",
        "link",
        "log",
        "node",
        "objects",
        "outbox",
        "session_id",
    )

    def __init__(
        self,
        node: str,
        link: Link,
        session_id: str,
        objects: NodeObjects,
        *,
        on_refused: Callable[[Answerable, ErrorCode, str], None] | None = None,
        on_sent: Callable[[Message], None] | None = None,
        on_dead_letter: Callable[[NodeSession, Message, InvalidMessage], None] | None = None,
    ) -> None:
        self.node = node
        self.link = link
        self.session_id = session_id
        self.objects = objects
        self.held: dict[str, tuple[str, ObjectRef | None]] = {}
        dead = None if on_dead_letter is None else (lambda m, e: on_dead_letter(self, m, e))
        self.outbox = Outbox(link, on_sent, dead)
        self.acks = AckTracker(link)
        self.log = logging.LoggerAdapter(log, {"node": node, "session": session_id})
        self._on_refused = on_refused
        self._synced = False
        self._close_task: asyncio.Task[None] | None = None

    @property
    def transport(self) -> str:
        """``"quic"`` or ``"websocket"``."""
        return self.link.transport

    @property
    def closed(self) -> bool:
        """The link has ended."""
        return self.link.closed

    # -- down: objects ----------------------------------------------------------------------

    def sync(self, inventory: dict[str, str]) -> int:
        """Start from the edge's inventory and queue the difference, then ``sync_done``.

        Args:
            inventory: the hello's uid -> resourceVersion.

        Returns:
            How many objects were queued (upserts and deletes).
        """
        self.held = {uid: (rv, None) for uid, rv in inventory.items()}
        queued, size = self._diff()
        self.outbox.put(SyncDone(inventory_size=size))
        self._synced = True
        return queued

    def refresh(self, desired: dict[str, dict] | None = None) -> int:
        """Queue the difference between the desired set and what the node holds (called
        when an informer change concerns this node, with the new set; ``None``: compute
        it here). Returns how many were queued."""
        if not self._synced or self.link.closed:
            return 0
        return self._diff(desired)[0]

    def _diff(self, desired: dict[str, dict] | None = None) -> tuple[int, int]:
        if desired is None:
            desired = self.objects.desired(self.node)
        held = self.held
        queued = 0
        for uid in [u for u in held if u not in desired]:
            _, ref = held.pop(uid)
            if ref is None:
                ref = ObjectRef(UNKNOWN_KIND, "", uid, uid)
            self.outbox.put(ObjectDelete(ref=ref, resource_version=""))
            queued += 1
        for uid, obj in desired.items():
            rv = str((obj.get("metadata") or {}).get("resourceVersion", ""))
            have = held.get(uid)
            if have is not None and have[0] == rv:
                continue
            try:
                ref = object_ref(obj)
                message = ObjectUpsert(ref=ref, resource_version=rv, object=obj)
            except InvalidMessage as exc:  # an object no edge could use: say so, skip it
                self.log.error("cannot send object %s: %s", uid, exc)
                continue
            held[uid] = (rv, ref)
            self.outbox.put(message)
            queued += 1
        return queued, len(desired)

    def send(self, message: Message) -> None:
        """Queue any other hub message (errors, certificate responses...)."""
        self.outbox.put(message)

    # -- up: refusals -----------------------------------------------------------------------

    def send_error(self, inbound: Answerable, code: ErrorCode, text: str) -> None:
        """Answer ``inbound`` with an ``error`` (information for the edge, e.g. NOT_FOUND)."""
        self.outbox.put(Error(code=code, message=text[:1024], in_reply_to=inbound.seq))

    def refuse(self, inbound: Answerable, code: ErrorCode, text: str) -> None:
        """Answer ``inbound`` with an ``error`` and report the refusal (see
        :meth:`cloudhub.bridge.dispatch.Inbound.refuse`, which callers use)."""
        self.send_error(inbound, code, text)
        if self._on_refused is not None:
            self._on_refused(inbound, code, text)

    # -- ending -------------------------------------------------------------------------------

    def close_soon(self, code: CloseCode, reason: str) -> None:
        """Start closing the link without waiting (the handler's loop then ends); used when
        a newer session supersedes this one or the Node is deleted."""
        if self._close_task is None and not self.link.closed:
            self._close_task = asyncio.get_running_loop().create_task(
                self.link.close(code, reason), name=f"close-{self.node}"
            )

    async def aclose(self) -> None:
        """Stop the outbox and wait for a close started by :meth:`close_soon`."""
        await self.outbox.aclose()
        if self._close_task is not None:
            await asyncio.gather(self._close_task, return_exceptions=True)
