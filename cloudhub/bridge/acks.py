"""When to acknowledge an edge message: once its effect is durable in the API.

Edge messages are numbered and arrive in order, but their effects complete out of order
(the status of pod A may wait for a rate-limiter token while the deletion of pod B is
already written). Acks are cumulative, so the hub may ack up to just below the oldest
message still in progress: the highest contiguous done seq. Everything above it stays
unacknowledged on the edge and is resent after a reconnect, so an API outage or a hub crash
loses nothing (store-and-forward).
"""

from __future__ import annotations

from collections import deque

from protocol.transport import Link

__all__ = ["AckTracker"]


class AckTracker:
    """Tracks one session's edge messages in progress and releases acks in order.

    Args:
        link: the session's link (a ``manual_ack`` session).
    """

    __slots__ = ("_done", "_link", "_pending")

    def __init__(self, link: Link) -> None:
        self._link = link
        # Made on first use: an idle session (most of 10,000) never needs them, and an
        # empty deque costs 600 bytes.
        self._pending: deque[int] | tuple[()] = ()  # seqs in arrival (= seq) order, not done
        self._done: set[int] | None = None  # done seqs behind an older one in progress

    @property
    def in_progress(self) -> int:
        """Edge messages delivered whose effect is not yet durable."""
        return len(self._pending) - (len(self._done) if self._done else 0)

    def received(self, seq: int) -> None:
        """A numbered message was delivered; its effect is now in progress."""
        if self._pending.__class__ is tuple:
            self._pending = deque()
        self._pending.append(seq)  # type: ignore[union-attr]

    def done(self, seq: int) -> None:
        """The effect of message ``seq`` is durable (or it was refused): release what can be
        released. Calling it twice, or after the link closed, is harmless."""
        pending = self._pending
        if pending and pending[0] == seq:
            pending.popleft()  # type: ignore[union-attr]
            done = self._done
            while done and pending and pending[0] in done:
                done.discard(pending.popleft())  # type: ignore[union-attr]
        elif seq in pending:
            if self._done is None:
                self._done = set()
            self._done.add(seq)
            return
        self.release()

    def release(self) -> None:
        """Release everything below the oldest message in progress (call after a message
        that needed no work, or to cover seqs the session handled itself)."""
        link = self._link
        if link.closed:
            return
        up_to = self._pending[0] - 1 if self._pending else link.session.received_up_to
        if up_to > link.session.acked_up_to:
            link.release(up_to)
