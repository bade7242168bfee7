"""The up-going streams that keep their own outbox: device twin reports and metrics batches.

docs/protocol.md: streams are at-least-once — the sender keeps them until the hub
acknowledges them by sequence number — and the receiver de-duplicates. Two streams do not
use the store's generic outbox, because their own tables already are one:

- **twin reports** (``twin_reported``, acked, latest-wins per (device uid, property)): the
  ``twin_reported`` rows with ``delivered = 0`` are the outbox, coalesced by construction;
  history entries (reports made with ``history: true``) go the same way, oldest first.
  The hub keeps the highest version per property, so a resend is harmless.
- **metrics batches** (``metrics_batch``, acked): the forwarder's sealed batches are the
  outbox. A resend after a reconnect carries a new seq but the same bytes; the hub
  de-duplicates by the batch identity inside them.

:class:`HubStreams` is the seam between them and the uplink, and works like the generic
outbox (``Store.outbox_unsent`` / ``outbox_mark_sent`` / ``outbox_ack``). What the uplink
does, per session::

    streams.session_started(welcome.received_up_to)   # on Established
    # whenever woken (streams.add_wakeup) and the window has room — in the same task, and
    # in the same order, as it sends the generic outbox:
    for item in streams.messages_to_send(limit=session.window_free):
        streams.sent(item, await link.send(item.message))
    streams.acked(up_to)                               # on every Acked(up_to)
    streams.receive(message, now)                      # on MessageReceived (twin_desired)
    streams.session_ended()                            # on Closed

``sent()`` records the seq in the store (``Store.note_seq_used``), so every seq stays
below ``Store.next_seq()`` across restarts. Record seqs in the order the session gave
them: ``Store.outbox_mark_sent`` refuses a seq below one already recorded, so sending
from two tasks at once (where a later seq may be recorded first) is not allowed.

Messages in flight when a session ends are sent again on the next one (with new seqs),
except those the hub says it processed (the welcome's ``received_up_to``). The metrics
service talks to this object as its :class:`~edgeagent.metrics.MetricsUplink`.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from edgeagent.devices import EdgeTwins, TwinEvent
    from edgeagent.metrics import MetricsService, SealedBatch
    from edgeagent.store import Store
    from protocol.devices import ReportedValue
    from protocol.messages import Message

__all__ = ["HubStreams", "Outgoing"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class Outgoing:
    """A message for the uplink to send now, then to hand back to :meth:`HubStreams.sent`.

    Attributes:
        message: the protocol message (``TwinReported`` or ``MetricsBatch``).
        key: what it carries: ``("report", uid, property, version)``,
            ``("history", uid, property, version)`` or ``("metrics", batch_seq)``.
    """

    message: Message
    key: tuple[Any, ...]
    _report: ReportedValue | None = dataclasses.field(default=None, repr=False)
    _batch: SealedBatch | None = dataclasses.field(default=None, repr=False)


class HubStreams:
    """Twin reports and metrics batches between their stores and the hub session.

    Args:
        store: the agent store (seqs are recorded there).
        node_name: this node (``metrics_batch.node_name``).
        twins: the node's twins, or ``None`` when devices are disabled.
    """

    def __init__(self, store: Store, node_name: str, *, twins: EdgeTwins | None = None) -> None:
        self._store = store
        self._node_name = node_name
        self._twins = twins
        self._metrics: MetricsService | None = None
        self._connection: int | None = None
        self._connections = 0
        self._in_flight: dict[int, Outgoing] = {}
        self._sent_keys: set[tuple[Any, ...]] = set()
        self._batches: collections.deque[SealedBatch] = collections.deque()
        self._wakeups: list[Callable[[], None]] = []
        self._remove_listener = twins.add_listener(self._on_twin_event) if twins else None

    # -- wiring (the agent) ---------------------------------------------------------------

    def attach_metrics(self, service: MetricsService | None) -> None:
        """Route metrics acknowledgements to ``service`` (``None`` detaches it)."""
        self._metrics = service
        if service is not None and self._connection is not None:
            service.flush_soon()

    def close(self) -> None:
        """Stop listening to the twins."""
        if self._remove_listener is not None:
            self._remove_listener()
            self._remove_listener = None

    # -- what the uplink calls --------------------------------------------------------------

    def add_wakeup(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback()`` (synchronously; it must only set an event) whenever there may
        be something new to send: a twin report, a sealed metrics batch.

        Returns:
            A function that removes the callback.
        """
        self._wakeups.append(callback)
        return lambda: self._wakeups.remove(callback) if callback in self._wakeups else None

    def session_started(self, received_up_to: int = 0) -> int:
        """A session with the hub is established (call on ``Established``).

        What the previous session sent with a seq up to ``received_up_to`` (the welcome's:
        what the hub processed) counts as acknowledged; the rest of it will be sent again.
        Metrics go out at once rather than at the next batch interval.

        Args:
            received_up_to: the welcome's ``received_up_to``.

        Returns:
            The new connection id (what ``connection_id()`` now returns).
        """
        if received_up_to:
            self.acked(received_up_to)
        self._in_flight.clear()
        self._sent_keys.clear()
        self._batches.clear()
        self._connections += 1
        self._connection = self._connections
        if self._metrics is not None:
            self._metrics.flush_soon()
        self._wake()
        return self._connection

    def session_ended(self) -> None:
        """The session closed (call on ``Closed``); nothing is sent until the next one."""
        self._connection = None
        self._batches.clear()

    def messages_to_send(self, limit: int) -> list[Outgoing]:
        """What to send now, at most ``limit`` messages (the session's free window): sealed
        metrics batches oldest first, then twin reports oldest version first, then history.

        Nothing is marked sent until :meth:`sent`; calling again without sending returns
        the same messages. Empty while no session is established.

        Raises:
            StoreError: the store could not be read.
        """
        if self._connection is None or limit <= 0:
            return []
        from protocol.messages import ObjectRef, TwinReported

        out: list[Outgoing] = []
        for batch in self._batches:
            if len(out) >= limit:
                return out
            out.append(
                Outgoing(batch.message(self._node_name), ("metrics", batch.batch_seq), _batch=batch)
            )
        if self._twins is None:
            return out
        for kind, pending in (
            ("report", self._twins.pending_reports),
            ("history", self._twins.pending_history),
        ):
            room = limit - len(out)
            if room <= 0:
                break
            for report in pending(room + len(self._sent_keys)):
                key = (kind, report.uid, report.property, report.version)
                if key in self._sent_keys:
                    continue
                ref = ObjectRef("Device", report.namespace, report.name, report.uid)
                message = TwinReported(
                    ref=ref,
                    property=report.property,
                    value=report.value,
                    version=report.version,
                    timestamp=report.timestamp,
                )
                out.append(Outgoing(message, key, _report=report))
                if len(out) >= limit:
                    break
        return out

    def sent(self, item: Outgoing, seq: int | None) -> None:
        """The session sent ``item.message`` with ``seq``: remember it until acknowledged and
        record the seq in the store (call right after the send, before the next one).

        Raises:
            StoreFullError: the seq reservation could not be committed.
        """
        if seq is None:
            raise ValueError(f"{item.key[0]} messages need an ack: the session gave no seq")
        self._store.note_seq_used(seq)
        self._in_flight[seq] = item
        self._sent_keys.add(item.key)
        if item._batch is not None and self._batches and self._batches[0] is item._batch:
            self._batches.popleft()

    def acked(self, up_to: int) -> None:
        """The hub acknowledged every seq up to ``up_to`` (call on every ``Acked``; seqs of
        other streams are ignored here): mark reports and history delivered, tell the
        metrics service which batches arrived."""
        done = sorted(seq for seq in self._in_flight if seq <= up_to)
        last_batch = None
        for seq in done:
            item = self._in_flight.pop(seq)
            self._sent_keys.discard(item.key)
            if item._batch is not None:
                last_batch = max(last_batch or 0, item._batch.batch_seq)
            elif self._twins is not None and item._report is not None:
                if item.key[0] == "report":
                    self._twins.report_delivered(item._report)
                else:
                    r = item._report
                    self._twins.history_delivered(r.uid, r.property, r.version)
        if last_batch is not None and self._metrics is not None:
            self._metrics.batch_acked(last_batch)

    def receive(self, message: Message, now: float) -> bool:
        """Take a hub message for the twins (``twin_desired``); return whether it was one.

        Args:
            message: a received message.
            now: wall-clock seconds since the epoch.
        """
        from protocol.devices import DesiredState
        from protocol.messages import TwinDesired

        if not isinstance(message, TwinDesired):
            return False
        if self._twins is None:
            log.debug("twin_desired for %s ignored: devices are disabled", message.ref.name)
            return True
        ref = message.ref
        state = DesiredState(ref.namespace, ref.name, ref.uid, message.version, message.properties)
        outcome = self._twins.apply_desired(state, now)
        log.debug(
            "twin_desired %s/%s v%d: %s", ref.namespace, ref.name, message.version, outcome.value
        )
        return True

    # -- the metrics service's MetricsUplink ------------------------------------------------

    def connection_id(self) -> int | None:
        """The current session's id, ``None`` while there is none."""
        return self._connection

    async def send_metrics_batch(self, batch: SealedBatch) -> None:
        """Queue a sealed batch for the uplink (it leaves with the next
        :meth:`messages_to_send`).

        Raises:
            ConnectionError: no session: the batch stays unacknowledged in the store and is
                offered again on the next session.
        """
        if self._connection is None:
            raise ConnectionError("no hub session")
        self._batches.append(batch)
        self._wake()

    # -- internals ---------------------------------------------------------------------------

    def _on_twin_event(self, event: TwinEvent) -> None:
        from edgeagent.devices import EventKind

        if event.kind is EventKind.REPORTED and self._connection is not None:
            self._wake()

    def _wake(self) -> None:
        for callback in list(self._wakeups):
            try:
                callback()
            except Exception:  # a broken callback must not break a report
                log.exception("stream wake-up callback failed")
