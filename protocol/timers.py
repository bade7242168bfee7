"""The session's clock rules: when to ping, when the peer is dead, when acks are due.

A mixin of :class:`protocol.session.Session` (kept apart so that each file stays readable):
``get_timer()`` says when ``handle_timer(now)`` must run; ``handle_timer`` applies the close
timeout, the liveness deadline (any byte received counts, see ``Session.heard``), the
delayed ack and the client's ping. Sans-I/O like the session: the time comes in.
"""

from __future__ import annotations

from protocol.errors import CloseCode
from protocol.events import Closed, PeerDead
from protocol.messages import Ping
from protocol.states import SessionState

__all__ = ["SessionTimers"]

_PING_SLACK = 1.05  # the client's ping rules wait ping_interval x this (see _next_ping_at)


class SessionTimers:
    """``get_timer`` / ``handle_timer`` for :class:`protocol.session.Session` (whose
    slots they read: not imported here, so that the two modules form no cycle)."""

    __slots__ = ()

    def get_timer(self) -> float | None:
        """The next time ``handle_timer()`` must run (same clock as ``now``), or ``None``."""
        state = self._state
        if state is SessionState.CLOSED:
            return None
        if state is SessionState.CLOSING:
            return self._close_deadline
        deadline = self._last_received + self.config.liveness_timeout
        if state is SessionState.OPEN:
            if self._ack_deadline is not None and self._ack_deadline < deadline:
                deadline = self._ack_deadline
            if self._is_client:
                ping_at = self._next_ping_at()
                if ping_at < deadline:
                    deadline = ping_at
        return deadline

    def _next_ping_at(self) -> float:
        # Both rules wait the interval plus 5% (_PING_SLACK). The slack keeps an application
        # that sends every N intervals (metrics every 60 s, pings every 20 s) from tying
        # with the N-th ping, which would then go out just before the application's message
        # and be wasted: each ping slips by the slack, so the N-th comes after the message
        # whichever of two timers due at the same moment runs first.
        wait = self._ping_interval * _PING_SLACK
        # The hub (and the NATs on the way) hear from us at least this often.
        keep_fed = self._last_sent + wait
        # Is the hub still there? Probe when nothing was heard for as long since we last
        # asked for an answer: our last ping, or our oldest unacknowledged message (its ack
        # is an answer on its way; pinging before it is due would cost a ping per message).
        asked = self._last_ping
        awaited = self._acks_awaited_since
        if awaited is not None and awaited > asked:
            asked = awaited
        heard = self._last_received
        probe = (heard if heard > asked else asked) + wait
        return keep_fed if keep_fed < probe else probe

    def handle_timer(self, now: float) -> None:
        """Run what is due at ``now``: close timeout, liveness, delayed ack, ping.

        Then drain ``events_received()`` and ``data_to_send()`` and re-arm with
        ``get_timer()``. Calling it early is harmless.

        Args:
            now: the current time (s).
        """
        state = self._state
        if state is SessionState.CLOSED:
            return
        if state is SessionState.CLOSING:
            if self._close_deadline is not None and now >= self._close_deadline:
                self._go("close_timeout")
                reason = self._close_reason or "closed"
                self._events.append(
                    Closed(
                        self._close_code,
                        f"{reason} (no close from the peer within {self.config.close_timeout} s)",
                        False,
                        self._close_retry_after,
                    )
                )
            return
        silent_for = now - self._last_received
        if silent_for >= self.config.liveness_timeout:
            self._go("peer_dead")
            self._acks_owed, self._ack_deadline = 0, None
            self._events.append(PeerDead(silent_for))
            self._events.append(
                Closed(CloseCode.PEER_DEAD, f"nothing received for {silent_for:.1f} s", True)
            )
            return
        if state is not SessionState.OPEN:
            return
        if self._ack_deadline is not None and now >= self._ack_deadline:
            self._flush_ack(now)
        if self._is_client and now >= self._next_ping_at():
            self._ping_nonce += 1
            self._last_ping = now
            self._queue(Ping(self._ping_nonce), None, now)
