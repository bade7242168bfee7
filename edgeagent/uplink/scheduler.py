"""The one send scheduler: which up-going source the session drains next, and how much.

Sans-I/O (no asyncio, no clock): the session (:mod:`edgeagent.uplink.session`) asks
:meth:`SendScheduler.next` after every batch it sent, so a message of a higher priority
that appears while a lower one is being drained goes next, not after the whole backlog.

Priorities, highest first (:class:`Priority`):

- ``CONTROL``: what keeps the session and the node's identity alive. The protocol session
  sends its own control messages (hello, ack, ping, pong, close) outside the window, so
  they never wait for anything; a source of this class (certificate renewal, later the
  hardening issue's frame-limit negotiation) is drained before everything else.
- ``STATUS``: latest-wins state the hub acts on (pod status, ``pod_deleted``, events,
  twin reports).
- ``BULK``: large, delay-tolerant streams (metrics batches, later the day-2 streams). A
  bulk source is drained in small batches and never takes the last eighth of the window
  (:attr:`SendScheduler.reserve_fraction`), so a status change always finds room and never
  queues behind a metrics backlog.

Within one class, sources are drained in the order they were added.
"""

from __future__ import annotations

import enum
from typing import Generic, Protocol, TypeVar

__all__ = ["Priority", "SendScheduler"]


class Priority(enum.IntEnum):
    """A source's class; lower values are drained first."""

    CONTROL = 0
    STATUS = 1
    BULK = 2


class _Prioritised(Protocol):
    @property
    def priority(self) -> Priority: ...


S = TypeVar("S", bound=_Prioritised)


class SendScheduler(Generic[S]):
    """Picks the next source to drain.

    Args:
        batch: most messages taken from a source at a time, per class (one storage read
            per batch); a small bulk batch bounds how long a new status change waits.
        reserve_fraction: the share of the session's window bulk sources may not use.
    """

    DEFAULT_BATCH = {Priority.CONTROL: 64, Priority.STATUS: 64, Priority.BULK: 8}

    def __init__(
        self, *, batch: dict[Priority, int] | None = None, reserve_fraction: float = 1 / 8
    ) -> None:
        self.batch = {**self.DEFAULT_BATCH, **(batch or {})}
        if any(n <= 0 for n in self.batch.values()):
            raise ValueError(f"batch sizes must be positive, not {self.batch}")
        if not 0 <= reserve_fraction < 1:
            raise ValueError(f"reserve_fraction must be in [0, 1), not {reserve_fraction}")
        self.reserve_fraction = reserve_fraction
        self._sources: list[S] = []
        self._idle: set[int] = set()

    @property
    def sources(self) -> list[S]:
        """Every source, in drain order (priority, then order added)."""
        return list(self._sources)

    def add(self, source: S) -> None:
        """Drain ``source`` after those of its class added before it."""
        self._sources.append(source)
        self._sources.sort(key=lambda s: s.priority)  # stable: keeps the order added

    def remove(self, source: S) -> None:
        """Stop draining ``source`` (no error if it was not added)."""
        if source in self._sources:
            self._sources.remove(source)
        self._idle.discard(id(source))

    def wake(self) -> None:
        """There may be something new anywhere: ask every source again."""
        self._idle.clear()

    def idle(self, source: S) -> None:
        """``source`` offered nothing: skip it until the next :meth:`wake`."""
        self._idle.add(id(source))

    def next(self, window_free: int, window: int) -> tuple[S, int] | None:
        """The source to drain now and how many messages to ask it for.

        Args:
            window_free: messages the session may send before an ack.
            window: the session's whole window (the bulk reserve is a share of it).

        Returns:
            ``(source, limit)`` with ``limit >= 1``, or ``None``: nothing may be sent until
            a source wakes or an ack frees the window.
        """
        reserve = int(window * self.reserve_fraction)
        for source in self._sources:
            if id(source) in self._idle:
                continue
            room = window_free - (reserve if source.priority is Priority.BULK else 0)
            if room <= 0:
                continue  # a later source cannot be of a higher class: only bulk waits here
            return source, min(room, self.batch[source.priority])
        return None
