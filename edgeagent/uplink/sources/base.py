"""What every up-going stream offers the hub session: :class:`UpSource` and its :class:`Outgoing`.

One source per up-stream (``sources/outbox.py``: pod status, ``pod_deleted``, events;
``sources/twins.py``: twin reports and history; ``sources/metrics.py``: metrics batches).
Each source is its stream's one bookkeeper: it alone knows which of its messages are in
flight under which seq, and what an ack covering them means for its storage. The session
(:mod:`edgeagent.uplink.session`) only moves messages, in the order the send scheduler
(:mod:`edgeagent.uplink.scheduler`) picks by each source's :attr:`UpSource.priority`, and
records every seq it hands out in the store (``Store.note_seq_used``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from edgeagent.uplink.scheduler import Priority

if TYPE_CHECKING:
    from protocol.messages import Message

__all__ = ["DownHandler", "Outgoing", "UpSource", "Wakeups"]

DownHandler = Callable[["Message"], "Awaitable[None] | None"]
"""``handler(message)``: called for each hub message of its kind, in arrival order.
Raising :class:`~edgeagent.errors.StoreError` ends the session (the hub resends)."""


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One up-going message a source offers, handed back to the source once sent.

    Attributes:
        message: the protocol message.
        token: the source's own reference to what the message carries (an outbox id, a
            ``(key, report)`` pair, a metrics batch seq); the session never looks at it.
    """

    message: Message
    token: Any = None


class UpSource(Protocol):
    """An up-going stream the hub session drains, in one task, one message at a time,
    recording each seq before the next send. Methods are called from the event loop and
    must not block.

    Attributes:
        name: for log lines.
        priority: the scheduler's class for this stream (:class:`Priority`).
    """

    name: str
    priority: Priority

    def add_wakeup(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback()`` (synchronously; it only sets an event) whenever there may be
        something new to send. Returns a function that removes the callback."""
        ...

    def messages_to_send(self, limit: int) -> Sequence[Outgoing]:
        """Up to ``limit`` messages to send now, oldest first; empty when there is none.
        What was offered and not reported :meth:`sent` may be offered again.

        Raises:
            StoreError: the source's storage could not be read (the session ends; the
                next one starts from what the store holds).
        """
        ...

    def sent(self, item: Outgoing, seq: int | None) -> None:
        """``item`` was handed to the session and got ``seq`` (``None``: a kind that needs
        no ack). Raising :class:`~edgeagent.errors.StoreError` closes the session."""
        ...

    def acked(self, up_to: int) -> None:
        """The hub acknowledged every seq up to ``up_to`` (cumulative: this session's, the
        resent ones' and other streams' seqs, which a source ignores)."""
        ...

    def session_started(self, received_up_to: int) -> None:
        """A new session is open; the hub has processed every seq up to
        ``received_up_to`` (the welcome's). What was sent before and not acknowledged, and
        is not resent by the session itself, is offered again."""
        ...

    def session_ended(self) -> None:
        """The session closed; nothing is sent until the next one."""
        ...


class Wakeups:
    """The wake-up callbacks of one source (what :meth:`UpSource.add_wakeup` keeps)."""

    def __init__(self) -> None:
        self._callbacks: list[Callable[[], None]] = []

    def add(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Keep ``callback``; returns its remover (safe to call twice)."""
        self._callbacks.append(callback)

        def remove() -> None:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

        return remove

    def __call__(self) -> None:
        """Call every callback (they only set events, so none may fail)."""
        for callback in list(self._callbacks):
            callback()
