"""The outbox of up-going messages and the persistent, ever-increasing sequence numbers
(the module docstring of :mod:`edgeagent.store.store` has the rules)."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from typing import Any

from edgeagent.errors import StoreError
from edgeagent.store._sqlite import sqlite3
from edgeagent.store.db import dumps
from edgeagent.store.state import StatePart

__all__ = ["SEQ_BLOCK", "SEQ_MARGIN", "OutboxEntry", "OutboxPart"]

log = logging.getLogger("edgeagent.store.store")

SEQ_BLOCK = 1024
"""Sequence numbers reserved per committed block (one small commit per ~512 messages)."""
SEQ_MARGIN = 512
"""The committed reservation stays this far above the next seq: more than the session
window (256) of messages that may be sent before their seqs are recorded."""


@dataclasses.dataclass(frozen=True, slots=True)
class OutboxEntry:
    """One up-going message not yet acknowledged.

    Attributes:
        id: local append order (send unsent messages in this order); never reused while
            the agent runs, so it names one message (the token of a send in flight).
        seq: the wire sequence number the session gave it, or ``None`` while unsent.
        kind: the message kind tag (``"pod_status"``, ``"event"`` …).
        body: the message fields by name, as the protocol dataclass has them.
        coalesce_key: latest-wins key, or ``None``.
        created_at: wall-clock seconds since the epoch when it was appended.
    """

    id: int
    seq: int | None
    kind: str
    body: dict[str, Any]
    coalesce_key: str | None
    created_at: float


class OutboxPart(StatePart):
    """The ``outbox`` table and the seq reservation (a part of
    :class:`~edgeagent.store.Store`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._outbox_hooks: list[Callable[[], None]] = []
        self._appends_since_trim = 0
        self._last_outbox_id = 0
        self._next_seq = 0
        self._reserved = 0

    def _after_open(self) -> None:
        self._last_outbox_id = self._conn.execute("SELECT MAX(id) FROM outbox").fetchone()[0] or 0
        reserved = self._get_state_raw("seq.reserved")
        top = self._conn.execute("SELECT MAX(seq) FROM outbox").fetchone()[0] or 0
        if reserved is None:
            # A fresh store starts at the wall clock in microseconds, so that a store
            # recreated after damage still counts above what the hub has seen from this
            # node (the uplink also calls advance_seq() with the hub's received_up_to,
            # for clocks that start at 1970 before NTP).
            start = max(int(self._wall() * 1_000_000), 1)
        else:
            start = int(reserved)
        self._next_seq = max(start, top + 1)
        self._reserve(self._next_seq + SEQ_BLOCK)
        self.flush()

    def _after_rollback(self) -> None:
        # Seqs handed out in the rolled-back batch may have been sent: never reuse them.
        # The committed reservation is above all of them, so restart from it.
        reserved = self._get_state_raw("seq.reserved")
        if reserved is not None:
            self._reserved = int(reserved)
            self._next_seq = max(self._next_seq, self._reserved)

    def add_outbox_hook(self, hook: Callable[[], None]) -> Callable[[], None]:
        """Call ``hook()`` after every message appended to the outbox (a status change, an
        event), so that the hub connection sends it at once instead of on a timer. The
        append is not committed yet when the hook runs (that is fine: see the module
        docstring on sequence numbers).

        Returns:
            A function that removes the hook.
        """
        self._outbox_hooks.append(hook)
        return lambda: self._outbox_hooks.remove(hook)

    def outbox_append(
        self, kind: str, body: dict[str, Any], *, coalesce_key: str | None = None
    ) -> int:
        """Queue an up-going message, unsent (batched commit).

        Args:
            kind: the protocol kind tag (``"event"``, ``"pod_deleted"`` …).
            body: the message's fields by name, JSON-serialisable (object references as
                ``{"kind", "namespace", "name", "uid"}``).
            coalesce_key: when given, an unsent message with the same key is dropped
                (latest wins); this one goes to the end of the queue.

        Returns:
            The message's outbox id.

        Raises:
            StoreFullError: no space.
        """
        with self._write() as conn:
            return self._append(conn, kind, body, coalesce_key)

    def _append(
        self, conn: sqlite3.Connection, kind: str, body: dict, coalesce_key: str | None
    ) -> int:
        if coalesce_key is not None:
            conn.execute(
                "DELETE FROM outbox WHERE coalesce_key = ? AND seq IS NULL", (coalesce_key,)
            )
        # Ids are never reused while the agent runs: SQLite would give a new row the id of
        # the highest one just deleted, and a status replaced (latest wins) while its
        # predecessor was being sent would then be marked sent in the predecessor's place
        # and never go up.
        self._last_outbox_id += 1
        cur = conn.execute(
            "INSERT INTO outbox (id, seq, kind, coalesce_key, body, created_at) "
            "VALUES (?,NULL,?,?,?,?)",
            (self._last_outbox_id, kind, coalesce_key, dumps(body), self._wall()),
        )
        if coalesce_key is None:
            self._appends_since_trim += 1
            if self._appends_since_trim >= 100:
                self._trim(conn)
        for hook in list(self._outbox_hooks):
            try:
                hook()
            except Exception:  # a hook's bug must not fail the write
                log.exception("outbox hook failed")
        return int(cur.lastrowid or 0)

    def _trim(self, conn: sqlite3.Connection) -> None:
        self._appends_since_trim = 0
        limit = self.settings.outbox_max_events
        (count,) = conn.execute("SELECT COUNT(*) FROM outbox WHERE coalesce_key IS NULL").fetchone()
        if count > limit:
            conn.execute(
                "DELETE FROM outbox WHERE id IN (SELECT id FROM outbox WHERE coalesce_key "
                "IS NULL ORDER BY id LIMIT ?)",
                (count - limit,),
            )
            log.warning(
                "outbox over %d uncoalesced messages while the hub is away: dropped the %d oldest",
                limit,
                count - limit,
            )

    def _reserve(self, upto: int) -> None:
        self._reserved = upto
        self._conn.execute(
            "INSERT INTO state (key, value) VALUES ('seq.reserved', ?) "
            "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
            (dumps(upto),),
        )
        self._touch()

    def _keep_reserved(self) -> None:
        """Commit a new seq block when the next seq comes within SEQ_MARGIN of its end."""
        if self._reserved - self._next_seq < SEQ_MARGIN:
            with self._write():
                self._reserve(self._next_seq + SEQ_BLOCK)
            self.flush()

    def _entries(self, where: str, order: str, params: tuple = ()) -> list[OutboxEntry]:
        rows = self._read(
            f"SELECT id, seq, kind, body, coalesce_key, created_at FROM outbox {where} "
            f"ORDER BY {order}",
            params,
        )
        return [
            OutboxEntry(i, seq, kind, json.loads(body), key, created)
            for i, seq, kind, body, key, created in rows
        ]

    def outbox_unsent(self, limit: int | None = None) -> list[OutboxEntry]:
        """Messages not yet handed to a session, oldest first: send them in this order and
        record each seq with :meth:`outbox_mark_sent`."""
        if limit is None:
            return self._entries("WHERE seq IS NULL", "id")
        return self._entries("WHERE seq IS NULL", "id LIMIT ?", (limit,))

    def outbox_mark_sent(self, entry_id: int, seq: int, *, missing_ok: bool = False) -> bool:
        """Record the seq ``Session.send`` gave a message (batched commit). Call it right
        after the send, for every send, in order.

        Args:
            entry_id: the message's outbox id.
            seq: the seq the session gave it.
            missing_ok: a message replaced by a newer one with its coalescing key (latest
                wins) while it was being sent is gone: return ``False`` instead of raising.
                The seq is still recorded as used.

        Returns:
            ``True`` when the message was marked, ``False`` when it was gone (``missing_ok``).

        Raises:
            StoreError: the message is gone or was already sent (without ``missing_ok``), or
                ``seq`` is below :meth:`next_seq` (seqs only go up).
            StoreFullError: no space.
        """
        if seq < self._next_seq:
            raise StoreError(f"seq {seq} is not above the seqs used before (next {self._next_seq})")
        with self._write() as conn:
            cur = conn.execute(
                "UPDATE outbox SET seq = ? WHERE id = ? AND seq IS NULL", (seq, entry_id)
            )
            self._next_seq = max(self._next_seq, seq + 1)
            if cur.rowcount != 1 and not missing_ok:
                raise StoreError(f"outbox message {entry_id} is gone or was already sent")
        self._keep_reserved()
        return cur.rowcount == 1

    def note_seq_used(self, seq: int) -> None:
        """Record that the session gave ``seq`` to a message kept elsewhere (metrics batches
        have their own store-and-forward buffer), so that :meth:`next_seq` stays above it.
        Writes nothing except, once per ~512 seqs, a new reservation block."""
        if seq >= self._next_seq:
            self._next_seq = seq + 1
            self._keep_reserved()

    def outbox_drop(self, entry_id: int) -> bool:
        """Remove one message that can never be sent (its stored body no longer makes a
        valid message); the caller logs what was lost (batched commit).

        Returns:
            ``False`` if no message had that id.
        """
        with self._write() as conn:
            return conn.execute("DELETE FROM outbox WHERE id = ?", (entry_id,)).rowcount == 1

    def outbox_sent(self) -> list[OutboxEntry]:
        """Messages sent and not acknowledged, by seq: the ``pending`` to hand to the next
        ``Session.connect`` (all are below :meth:`next_seq`)."""
        return self._entries("WHERE seq IS NOT NULL", "seq")

    def outbox_pending(self) -> list[OutboxEntry]:
        """Every message not acknowledged: sent ones by seq, then unsent ones in order."""
        return self.outbox_sent() + self.outbox_unsent()

    def outbox_ack(self, up_to: int) -> int:
        """Drop messages the hub acknowledged (cumulative: every seq ≤ ``up_to``).

        Returns:
            How many were removed. An ack that covers none of them (it acknowledged twin
            reports or metrics batches, which have their own outbox) writes nothing, so
            it costs no commit.
        """
        if not self._read(
            "SELECT 1 FROM outbox WHERE seq IS NOT NULL AND seq <= ? LIMIT 1", (up_to,)
        ):
            return 0
        with self._write() as conn:
            cur = conn.execute("DELETE FROM outbox WHERE seq IS NOT NULL AND seq <= ?", (up_to,))
            return cur.rowcount

    def outbox_depth(self) -> int:
        """How many messages wait for an acknowledgement (sent or not)."""
        return self._read("SELECT COUNT(*) FROM outbox")[0][0]

    def next_seq(self) -> int:
        """The seq for ``Session(next_seq=…)``: above every seq that may have left this
        node, in this life or an earlier one."""
        self._keep_reserved()
        return self._next_seq

    def advance_seq(self, past: int) -> None:
        """Make every future seq greater than ``past`` (call with the welcome's
        ``received_up_to``: after a fresh store the hub may have seen higher seqs from
        this node, and it would drop lower ones as duplicates)."""
        if past >= self._next_seq:
            with self._write():
                self._next_seq = past + 1
                self._reserve(self._next_seq + SEQ_BLOCK)
            self.flush()
