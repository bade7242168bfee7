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
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from edgeagent.uplink.scheduler import Priority
from edgeagent.uplink.sources.base import Outgoing, Wakeups

if TYPE_CHECKING:
    from edgeagent.metrics import MetricsForwarder

__all__ = ["MetricsSource"]

log = logging.getLogger(__name__)


class MetricsSource:
    """The metrics stream between the forwarder and the hub session.

    Args:
        node_name: this node (``metrics_batch.node_name``).

    The forwarder is attached by the metrics service while it runs
    (:meth:`attach`); without one, nothing is offered. Each :class:`Outgoing` token is the
    batch seq.
    """

    name = "metrics"
    priority = Priority.BULK

    def __init__(self, node_name: str) -> None:
        self._node_name = node_name
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
            if batch.batch_seq not in self._sent_now:
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

    def acked(self, up_to: int) -> None:
        """Forget the batches the ack covers (batches go in order: the highest covers the
        earlier ones); with a backlog left, seal more now."""
        done = [seq for seq in self._in_flight if seq <= up_to]
        if not done:
            return
        last = max(self._in_flight.pop(seq) for seq in done)
        self._sent_now = {s for s in self._sent_now if s > last}
        forwarder = self._forwarder
        if forwarder is None:
            return
        forwarder.acked(last)
        if forwarder.backlog():
            self.batch_due()
