"""Metrics batches to the hub: a pull source over the forwarder's sealed batches.

The forwarder's sealed-batch table is the stream's outbox (``metrics_batch``, acked): a
resend after a reconnect carries a new seq but the same bytes, and the hub de-duplicates by
the batch identity inside them. :class:`MetricsSource` is the stream's one bookkeeper of
what is in flight (which session seq carries which batch seq); the metrics service only
samples and says when a batch is due (:meth:`MetricsSource.batch_due`).

What is offered, per session:

1. the sealed batches not acknowledged and not yet sent on this session, oldest first
   (after a reconnect: the same batches again);
2. when a batch is due (a batch interval's worth of samples taken, a session started, an
   ack that left a backlog): new batches, sealed now, until the backlog is empty or
   ``max_in_flight`` batches await their ack (``MetricsForwarder.seal`` returns ``None``).

Sealing only when due keeps the cadence the metrics settings ask for (a batch holds whole
samples), however often other streams wake the session.

A batch the session cannot send (``MessageTooLarge``: over the message limit the session
agreed with the hub) is never retried in its place: :meth:`MetricsSource.too_large` keeps it
in the store's dead letters (``edgeagent.store.deadletters``) with a Warning Event on the
Node, and drops it from the forwarder as soon as every batch before it is acknowledged
(an ack covers the earlier batches too), so the batches behind it go.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from edgeagent.uplink.scheduler import Priority
from edgeagent.uplink.sources.base import Outgoing, Wakeups

if TYPE_CHECKING:
    from edgeagent.metrics import MetricsForwarder
    from edgeagent.store import Store
    from protocol.errors import MessageTooLarge

__all__ = ["MetricsSource"]

log = logging.getLogger(__name__)


class MetricsSource:
    """The metrics stream between the forwarder and the hub session.

    Args:
        node_name: this node (``metrics_batch.node_name``).
        dead_letters: the store that keeps batches that cannot be sent (and queues the
            Warning Event saying so); ``None``: such a batch is skipped for the session.

    The forwarder is attached by the metrics service while it runs
    (:meth:`attach`); without one, nothing is offered. Each :class:`Outgoing` token is the
    batch seq.
    """

    name = "metrics"
    priority = Priority.BULK

    def __init__(self, node_name: str, *, dead_letters: Store | None = None) -> None:
        self._node_name = node_name
        self._dead_letters = dead_letters
        self._dead: set[int] = set()
        """Batch seqs dead-lettered and still in the forwarder (behind unacked ones)."""
        self._forwarder: MetricsForwarder | None = None
        self._online = False
        self._due = False
        self._in_flight: dict[int, int] = {}
        """session seq → batch seq, this session's and the previous one's."""
        self._sent_now: set[int] = set()
        """Batch seqs already sent on this session."""
        self._wake = Wakeups()

    def attach(self, forwarder: MetricsForwarder | None) -> None:
        """Offer ``forwarder``'s batches (``None``: stop offering; what is in flight stays
        in its storage and goes again on a later session)."""
        self._forwarder = forwarder
        self._in_flight.clear()
        self._sent_now.clear()
        if forwarder is not None:
            self.batch_due()

    def batch_due(self) -> None:
        """Seal and send what is buffered at the next drain (the metrics service calls this
        once a batch interval's worth of samples is taken)."""
        self._due = True
        if self._online:
            self._wake()

    # -- UpSource ---------------------------------------------------------------------------

    def add_wakeup(self, callback: Callable[[], None]) -> Callable[[], None]:
        return self._wake.add(callback)

    def session_started(self, received_up_to: int) -> None:
        if received_up_to:
            self.acked(received_up_to)
        self._in_flight.clear()
        self._sent_now.clear()
        self._online = True
        self.batch_due()  # the backlog leaves now, not at the next batch interval

    def session_ended(self) -> None:
        self._online = False

    def messages_to_send(self, limit: int) -> list[Outgoing]:
        """Unacknowledged batches not sent on this session, then (when due) new ones.

        Raises:
            StoreError: the metrics buffer could not be read or a batch not sealed.
        """
        forwarder = self._forwarder
        if not self._online or forwarder is None or limit <= 0:
            return []
        out: list[Outgoing] = []
        for batch in forwarder.unacked():
            if batch.batch_seq not in self._sent_now and batch.batch_seq not in self._dead:
                out.append(Outgoing(batch.message(self._node_name), batch.batch_seq))
                if len(out) >= limit:
                    return out
        while self._due and len(out) < limit:
            batch = forwarder.seal()
            if batch is None:  # nothing buffered, or max_in_flight awaiting their ack
                self._due = False
                break
            out.append(Outgoing(batch.message(self._node_name), batch.batch_seq))
        return out

    def sent(self, item: Outgoing, seq: int | None) -> None:
        """Remember which batch ``seq`` carries.

        Raises:
            ValueError: ``seq`` is ``None`` (``metrics_batch`` always needs an ack).
        """
        if seq is None:
            raise ValueError("metrics_batch needs an ack: the session gave no seq")
        self._in_flight[seq] = item.token
        self._sent_now.add(item.token)

    def too_large(self, item: Outgoing, error: MessageTooLarge) -> None:
        """``send()`` refused ``item`` as over the agreed limits (no seq used): dead-letter
        the batch; it leaves the forwarder once the batches before it are acknowledged.

        Raises:
            StoreError: the dead letter could not be written (the batch stays queued).
        """
        batch_seq: int = item.token
        self._sent_now.add(batch_seq)  # not again in this session, whatever follows
        store = self._dead_letters
        if store is None:
            log.error("metrics batch %d cannot be sent this session: %s", batch_seq, error)
            return
        from edgeagent.uplink.sources.outbox import dead_letter_warning

        message = item.message
        body = {"node_name": self._node_name, "batch_seq": batch_seq, "samples": message.samples}
        dead = store.dead_letter_add(
            message.kind, body, size=error.size, reason=str(error), created_at=time.time()
        )
        log.error("metrics batch %d dead-lettered (%d): %s", batch_seq, dead.id, error)
        store.outbox_append("event", dead_letter_warning(dead, self._node_name))
        self._dead.add(batch_seq)
        self._drop_dead()

    def acked(self, up_to: int) -> None:
        """Forget the batches the ack covers (batches go in order: the highest covers the
        earlier ones); with a backlog left, seal more now."""
        done = [seq for seq in self._in_flight if seq <= up_to]
        if not done:
            return
        last = max(self._in_flight.pop(seq) for seq in done)
        self._sent_now = {s for s in self._sent_now if s > last}
        self._dead = {s for s in self._dead if s > last}
        forwarder = self._forwarder
        if forwarder is None:
            return
        forwarder.acked(last)
        self._drop_dead()

    def _drop_dead(self) -> None:
        """Drop the dead-lettered batches at the head of the forwarder's queue (nothing
        unacknowledged before them); with a backlog left, seal more now."""
        forwarder = self._forwarder
        if forwarder is None:
            return
        for batch in forwarder.unacked():
            if batch.batch_seq not in self._dead:
                break
            self._dead.discard(batch.batch_seq)
            forwarder.acked(batch.batch_seq)  # the head: it alone
        if forwarder.backlog():
            self.batch_due()
