"""Which session holds each node, and the hooks run when nodes come and go.

At most one session per node is current. A new session for a node supersedes the current
one at once (an agent restarted faster than its old connection was noticed as dead): the
old link is closed with ``SUPERSEDED``, and when the old session's handler finishes later,
its cleanup sees it is no longer current and leaves the node alone — the new session keeps
receiving, its Lease keeps being renewed.

Hooks (the seam for other parts): ``on_connect(session)`` after a session is accepted and
current; ``on_synced(session)`` right after the reconnect diff (every ``object_upsert`` and
``object_delete`` of the sync, then ``sync_done``) is queued, so that what a hook sends
goes out after the objects it refers to (device twins send ``twin_desired`` here);
``on_disconnect(session, was_current)`` when its handler ends. ``was_current`` is
``False`` for a superseded session: the node is still connected through the newer one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from cloudhub.bridge.session import NodeSession
from protocol.errors import CloseCode

__all__ = ["SessionRegistry"]

log = logging.getLogger(__name__)


class SessionRegistry:
    """Node name -> current session, plus what the hub remembers about each node's seqs."""

    def __init__(self) -> None:
        self._sessions: dict[str, NodeSession] = {}
        # node -> (acked up to, received up to) of its last ended session, for the welcome
        # and for counting resends; lost when the hub restarts (the welcome then says 0 and
        # the edge resends everything unacknowledged, which is still correct).
        self._seqs: dict[str, tuple[int, int]] = {}
        self.on_connect: list[Callable[[NodeSession], None]] = []
        self.on_synced: list[Callable[[NodeSession], None]] = []
        self.on_disconnect: list[Callable[[NodeSession, bool], None]] = []

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, node: object) -> bool:
        return node in self._sessions

    def get(self, node: str) -> NodeSession | None:
        """The current session of ``node``, if connected."""
        return self._sessions.get(node)

    def sessions(self) -> list[NodeSession]:
        """A snapshot of every current session."""
        return list(self._sessions.values())

    def acked_up_to(self, node: str) -> int:
        """The highest seq of ``node`` the hub acknowledged in an earlier session (for the
        welcome's ``received_up_to``), 0 if unknown."""
        current = self._sessions.get(node)
        if current is not None:
            return current.link.session.acked_up_to
        return self._seqs.get(node, (0, 0))[0]

    def received_up_to(self, node: str) -> int:
        """The highest seq of ``node`` any earlier session received (0 if unknown): a
        message at or below it that arrives again is a resend."""
        current = self._sessions.get(node)
        if current is not None:
            return current.link.session.received_up_to
        return self._seqs.get(node, (0, 0))[1]

    def attach(self, session: NodeSession) -> NodeSession | None:
        """Make ``session`` current for its node; returns the superseded session, if any
        (already told to close)."""
        previous = self._sessions.get(session.node)
        self._sessions[session.node] = session
        if previous is not None:
            self._remember(previous)
            previous.log.info("superseded by session %s", session.session_id)
            previous.close_soon(CloseCode.SUPERSEDED, "a newer session of this node connected")
        for hook in self.on_connect:
            try:
                hook(session)
            except Exception:
                session.log.exception("on_connect hook failed")
        return previous

    def synced(self, session: NodeSession) -> None:
        """The session's reconnect diff is queued: run the ``on_synced`` hooks."""
        for hook in self.on_synced:
            try:
                hook(session)
            except Exception:
                session.log.exception("on_synced hook failed")

    def detach(self, session: NodeSession) -> bool:
        """The session's handler ended; returns whether it was still current."""
        current = self._sessions.get(session.node) is session
        if current:
            del self._sessions[session.node]
            self._remember(session)
        for hook in self.on_disconnect:
            try:
                hook(session, current)
            except Exception:
                session.log.exception("on_disconnect hook failed")
        return current

    def _remember(self, session: NodeSession) -> None:
        s = session.link.session
        acked, received = self._seqs.get(session.node, (0, 0))
        self._seqs[session.node] = (max(acked, s.acked_up_to), max(received, s.received_up_to))

    def connected(self, node: str) -> bool:
        """Whether ``node`` has a current session."""
        return node in self._sessions

    def refresh(self, node: str, desired: dict[str, dict]) -> None:
        """``NodeObjects`` listener: diff the node's new desired set in its session."""
        session = self._sessions.get(node)
        if session is not None:
            session.refresh(desired)

    def close_node(self, node: str, code: CloseCode, reason: str) -> bool:
        """Close the node's current session, if any (e.g. its Node was deleted)."""
        session = self._sessions.get(node)
        if session is None:
            return False
        session.log.info("closing the session: %s", reason)
        session.close_soon(code, reason)
        return True

    def forget(self, node: str) -> None:
        """Drop what is remembered about a node's seqs (its Node was deleted)."""
        self._seqs.pop(node, None)
