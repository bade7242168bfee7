"""The dispatch table: edge message kind -> handler.

Every application message an edge sends is handed, as an :class:`Inbound`, to the handler
registered for its class. This is the seam other parts plug into::

    hub.dispatcher.register(TwinReported, twins.on_reported)        # device twins
    hub.dispatcher.register(MetricsBatch, metrics.on_batch)         # edge metrics
    hub.dispatcher.register(CertRenewRequest, pki.on_renew_request) # certificates

A handler is called synchronously in the session's reader and must not block. It either
finishes at once, or hands the work to something that calls ``inbound.done()`` when the
effect is durable, or returns an awaitable, which the dispatcher runs as a task it owns
(``done()`` is then called when it returns, unless the handler called ``refuse()``).
Until ``done()``, the message stays unacknowledged on the edge (:mod:`.acks`).

A kind with no handler is refused with ``UNSUPPORTED`` (and acknowledged, so that the edge
does not resend it forever); a handler that raises is logged and answered ``INTERNAL``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from cloudhub.bridge.session import NodeSession
from protocol.errors import ErrorCode
from protocol.messages import Message
from protocol.tasks import TaskScope

__all__ = ["Dispatcher", "Handler", "Inbound"]

log = logging.getLogger(__name__)

#: ``handler(inbound)``: returns ``None`` or an awaitable the dispatcher runs as a task.
Handler = Callable[["Inbound"], "Awaitable[Any] | None"]
#: ``on_refused(inbound, code, text)``: metrics, logs and Events for refused messages.
RefusalObserver = Callable[["Inbound", ErrorCode, str], None]


class Inbound:
    """One message from an edge node, with what the handler may do about it.

    Attributes:
        session: the node's session (``session.node`` is the authenticated node name).
        seq: the message's sequence number, or ``None`` for kinds that need no ack.
        message: the decoded message.
    """

    __slots__ = ("_finished", "message", "seq", "session")

    def __init__(self, session: NodeSession, seq: int | None, message: Message) -> None:
        self.session = session
        self.seq = seq
        self.message = message
        self._finished = False

    @property
    def node(self) -> str:
        """The authenticated node name of the sender."""
        return self.session.node

    @property
    def finished(self) -> bool:
        """``done()`` or ``refuse()`` has been called."""
        return self._finished

    def done(self) -> None:
        """The message's effect is durable: it may be acknowledged. Idempotent."""
        if self._finished:
            return
        self._finished = True
        if self.seq is not None:
            self.session.acks.done(self.seq)

    def reply(self, message: Message) -> None:
        """Send a message back to the node (e.g. a ``cert_renew_response``)."""
        self.session.send(message)

    def refuse(self, code: ErrorCode, text: str) -> None:
        """Answer with an ``error`` naming this message, record the refusal, and mark the
        message done (refused is processed: the edge must not resend it)."""
        if self._finished:
            return
        self.session.refuse(self, code, text)
        self.done()


class Dispatcher:
    """Routes edge messages to handlers by message class.

    Args:
        max_tasks: awaitable handlers running at once across all sessions; beyond that the
            next one waits (in its own task) for a slot.
    """

    def __init__(self, *, max_tasks: int = 256) -> None:
        self._handlers: dict[type[Message], Handler] = {}
        self._scope = TaskScope()
        self._slots = asyncio.Semaphore(max_tasks)

    def register(self, kind: type[Message], handler: Handler) -> None:
        """Route messages of class ``kind`` to ``handler`` (replacing any earlier one).

        Raises:
            ValueError: ``kind`` is not a message the edge may send.
        """
        if not (isinstance(kind, type) and issubclass(kind, Message) and kind.from_edge):
            raise ValueError(f"{kind!r} is not a message kind an edge sends")
        if kind.control:
            raise ValueError(f"{kind.kind} is handled by the session itself")
        self._handlers[kind] = handler

    def handles(self, kind: type[Message]) -> bool:
        """Whether a handler is registered for ``kind``."""
        return kind in self._handlers

    def dispatch(self, inbound: Inbound) -> None:
        """Hand ``inbound`` to its handler (called by the session's reader)."""
        cls = type(inbound.message)
        handler = self._handlers.get(cls)
        if handler is None:
            inbound.refuse(ErrorCode.UNSUPPORTED, f"this hub does not handle {cls.kind}")
            return
        try:
            result = handler(inbound)
        except Exception:
            log.exception("handler for %s failed", cls.kind, extra={"node": inbound.node})
            inbound.refuse(ErrorCode.INTERNAL, f"the hub failed handling {cls.kind}")
            return
        if inspect.isawaitable(result):
            self._scope.create_task(self._run(inbound, result), name=f"handle-{cls.kind}")

    async def _run(self, inbound: Inbound, awaitable: Awaitable[Any]) -> None:
        kind = type(inbound.message).kind
        try:
            async with self._slots:
                await awaitable
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("handler for %s failed", kind, extra={"node": inbound.node})
            inbound.refuse(ErrorCode.INTERNAL, f"the hub failed handling {kind}")
            return
        inbound.done()

    async def aclose(self) -> None:
        """Cancel the handler tasks still running (at hub shutdown)."""
        await self._scope.aclose()
