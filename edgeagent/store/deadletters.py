"""Dead letters: up-going outbox messages that cannot be sent (issue 15, docs/hublink.md).

A message over the limits the session agreed with the hub (``protocol.errors.
MessageTooLarge`` at send, a ``SendFailed`` resend, an ``error`` ``TOO_LARGE`` from the hub)
is never retried in the same session: its failed attempts are counted in ``send_failure``
(one per session it failed in) and, at the bound, the message moves from ``outbox`` to
``dead_letter`` in one transaction, so it is either queued or kept here, never lost. The
rows stay for the operator (``edgeagent status`` shows the count and the latest ones);
:meth:`DeadLettersPart.dead_letters_clear` removes them.

Streams with their own tables instead of the outbox (twin reports, metrics batches:
``edgeagent.uplink.sources``) hand a message that cannot be sent to
:meth:`DeadLettersPart.dead_letter_add`: such rows get ids below zero, so that they never
collide with an outbox id a later outbox dead letter keeps.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any

from edgeagent.store.outbox import OutboxEntry, OutboxPart

__all__ = ["DeadLetter", "DeadLettersPart"]


def _jsonable(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"base64": base64.b64encode(bytes(value)).decode("ascii")}
    return str(value)


@dataclasses.dataclass(frozen=True, slots=True)
class DeadLetter:
    """One message given up on.

    Attributes:
        id: the outbox id it had (below zero: a message of a stream with its own table).
        kind: the message kind tag (``"event"``, ``"pod_status"`` …).
        body: the message fields by name, as the outbox kept them.
        size: its encoded size (bytes) when it last failed, 0 if unknown.
        reason: why it could not be sent (sizes and limit, in words).
        attempts: failed attempts, one per session.
        created_at: when it was queued, seconds since the epoch.
        dead_at: when it was dead-lettered, seconds since the epoch.
    """

    id: int
    kind: str
    body: dict[str, Any]
    size: int
    reason: str
    attempts: int
    created_at: float
    dead_at: float


class DeadLettersPart(OutboxPart):
    """The ``send_failure`` and ``dead_letter`` tables (a part of
    :class:`~edgeagent.store.Store`)."""

    def outbox_by_seq(self, seq: int) -> OutboxEntry | None:
        """The sent, unacknowledged outbox message that has ``seq``, or ``None``."""
        found = self._entries("WHERE seq = ?", "id", (seq,))
        return found[0] if found else None

    def outbox_send_failed(
        self, entry: OutboxEntry, reason: str, *, size: int, max_attempts: int, force: bool = False
    ) -> DeadLetter | None:
        """Count one failed attempt of an outbox message; at ``max_attempts`` (or with
        ``force``) move it to the dead letters (batched commit, one transaction).

        A message kept for another attempt is made unsent again (it had a seq from a
        ``SendFailed`` resend): unless a newer one with its coalescing key replaced it, in
        which case it is dropped (latest wins).

        Args:
            entry: the message (as read from the outbox).
            reason: why it failed (sizes and limit).
            size: its encoded size, bytes.
            max_attempts: the bound (>= 1).
            force: dead-letter now (the hub refused it and acknowledged its seq).

        Returns:
            The dead letter, or ``None`` if the message stays queued (or is gone).

        Raises:
            StoreFullError: no space.
        """
        now = self._wall()
        with self._write() as conn:
            # Attempts of messages that went after all (acked, replaced, trimmed): forget.
            conn.execute("DELETE FROM send_failure WHERE outbox_id NOT IN (SELECT id FROM outbox)")
            row = conn.execute(
                "SELECT kind, body, created_at FROM outbox WHERE id = ?", (entry.id,)
            ).fetchone()
            if row is None:
                conn.execute("DELETE FROM send_failure WHERE outbox_id = ?", (entry.id,))
                return None
            conn.execute(
                "INSERT INTO send_failure (outbox_id, attempts, reason, last_at) "
                "VALUES (?, 1, ?, ?) ON CONFLICT(outbox_id) DO UPDATE SET "
                "attempts = attempts + 1, reason = excluded.reason, last_at = excluded.last_at",
                (entry.id, reason, now),
            )
            (attempts,) = conn.execute(
                "SELECT attempts FROM send_failure WHERE outbox_id = ?", (entry.id,)
            ).fetchone()
            if not force and attempts < max_attempts:
                if entry.seq is not None:
                    self._unsend(conn, entry)
                return None
            kind, body, created_at = row
            conn.execute(
                "INSERT OR REPLACE INTO dead_letter (id, kind, body, size, reason, attempts, "
                "created_at, dead_at) VALUES (?,?,?,?,?,?,?,?)",
                (entry.id, kind, body, size, reason, attempts, created_at, now),
            )
            conn.execute("DELETE FROM outbox WHERE id = ?", (entry.id,))
            conn.execute("DELETE FROM send_failure WHERE outbox_id = ?", (entry.id,))
        return DeadLetter(entry.id, kind, json.loads(body), size, reason, attempts, created_at, now)

    def dead_letter_add(
        self, kind: str, body: dict[str, Any], *, size: int, reason: str, created_at: float
    ) -> DeadLetter:
        """Keep a message that is not in the outbox (a twin report, a metrics batch) as a
        dead letter (batched commit), with one attempt and an id below zero.

        Args:
            kind: the message kind tag (``"twin_reported"``, ``"metrics_batch"``).
            body: the message's fields by name; bytes are kept as ``{"base64": text}``
                (a metrics batch's packed samples), anything else JSON cannot carry as its
                ``str()``.
            size: its encoded size, bytes (0 if unknown).
            reason: why it cannot be sent (sizes and limit).
            created_at: when it was made, seconds since the epoch.

        Returns:
            The dead letter as stored.

        Raises:
            StoreFullError: no space.
        """
        now = self._wall()
        text = json.dumps(body, default=_jsonable)
        with self._write() as conn:
            (lowest,) = conn.execute("SELECT MIN(id) FROM dead_letter").fetchone()
            new_id = min(int(lowest or 0), 0) - 1
            conn.execute(
                "INSERT INTO dead_letter (id, kind, body, size, reason, attempts, created_at, "
                "dead_at) VALUES (?,?,?,?,?,1,?,?)",
                (new_id, kind, text, size, reason, created_at, now),
            )
        return DeadLetter(new_id, kind, json.loads(text), size, reason, 1, created_at, now)

    def _unsend(self, conn: Any, entry: OutboxEntry) -> None:
        if (
            entry.coalesce_key is not None
            and conn.execute(
                "SELECT 1 FROM outbox WHERE coalesce_key = ? AND seq IS NULL", (entry.coalesce_key,)
            ).fetchone()
        ):
            conn.execute("DELETE FROM outbox WHERE id = ?", (entry.id,))
            conn.execute("DELETE FROM send_failure WHERE outbox_id = ?", (entry.id,))
        else:
            conn.execute("UPDATE outbox SET seq = NULL WHERE id = ?", (entry.id,))

    def send_attempts(self, entry_id: int) -> int:
        """Failed attempts counted for a queued outbox message (0 if none)."""
        rows = self._read("SELECT attempts FROM send_failure WHERE outbox_id = ?", (entry_id,))
        return int(rows[0][0]) if rows else 0

    def dead_letters(self, limit: int | None = None) -> list[DeadLetter]:
        """The dead letters, latest first (``limit`` of them if given)."""
        sql = (
            "SELECT id, kind, body, size, reason, attempts, created_at, dead_at FROM dead_letter "
            "ORDER BY dead_at DESC, id DESC"
        )
        rows = self._read(sql + " LIMIT ?", (limit,)) if limit is not None else self._read(sql)
        return [
            DeadLetter(i, kind, json.loads(body), size, reason, attempts, created, dead)
            for i, kind, body, size, reason, attempts, created, dead in rows
        ]

    def dead_letter_count(self) -> int:
        """How many messages were dead-lettered (and not cleared)."""
        return self._read("SELECT COUNT(*) FROM dead_letter")[0][0]

    def dead_letters_clear(self) -> int:
        """Remove every dead letter (batched commit). Returns how many."""
        with self._write() as conn:
            return conn.execute("DELETE FROM dead_letter").rowcount
