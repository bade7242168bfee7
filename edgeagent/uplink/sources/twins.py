"""Device twins to and from the hub: reports and history up, ``twin_desired`` down.

docs/protocol.md: streams are at-least-once — the sender keeps them until the hub
acknowledges them by sequence number — and the receiver de-duplicates. Twin reports do not
use the store's generic outbox, because their own table already is one: the
``twin_reported`` rows with ``delivered = 0`` are the outbox, latest-wins per (device uid,
property) by construction; history entries (reports made with ``history: true``) go the
same way, oldest first. The hub keeps the highest version per property, so a resend is
harmless.

:class:`TwinSource` is the stream's one bookkeeper: which report went under which seq.
Messages in flight when a session ends are sent again on the next one (with new seqs),
except those the hub says it processed (the welcome's ``received_up_to``).

A report the session cannot send (``MessageTooLarge``: a value over the message limit the
session agreed with the hub) is never retried in its place: :meth:`TwinSource.too_large`
keeps it in the store's dead letters (``edgeagent.store.deadletters``) with a Warning
Event on the Device, and marks it delivered, so the reports behind it go. At once, not
after attempts: the table keeps only the latest report per property, so a newer report
(which may fit) would replace it anyway. Without a store it is skipped for the session.

Down, :meth:`TwinSource.on_desired` is the handler the agent registers for
``twin_desired`` (``HubLink.register``): the value goes to the twins, which decide by
version whether it wins.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from edgeagent.uplink.scheduler import Priority
from edgeagent.uplink.sources.base import Outgoing, Wakeups

if TYPE_CHECKING:
    from edgeagent.devices import EdgeTwins, TwinEvent
    from edgeagent.store import Store
    from protocol.errors import MessageTooLarge
    from protocol.messages import Message

__all__ = ["TwinSource"]

log = logging.getLogger(__name__)

_REPORT = "report"
_HISTORY = "history"
_SCAN = 4096  # pending history entries read to find the oldest of one property


class TwinSource:
    """Twin reports and history between the twins' tables and the hub session.

    Args:
        twins: the node's twins, or ``None`` when devices are disabled (nothing goes up;
            ``twin_desired`` is ignored with a DEBUG line).
        wall_clock: seconds since the epoch (when a desired value arrived).
        dead_letters: the store that keeps reports that cannot be sent (and queues the
            Warning Event saying so); ``None``: such a report is skipped for the session.
        node_name: this node, for that Event.

    Each :class:`Outgoing` token is ``(key, report)``, ``key`` being ``("report" |
    "history", uid, property, version)``.
    """

    name = "twins"
    priority = Priority.STATUS

    def __init__(
        self,
        twins: EdgeTwins | None,
        *,
        wall_clock: Callable[[], float] = time.time,
        dead_letters: Store | None = None,
        node_name: str = "",
    ) -> None:
        self._twins = twins
        self._wall = wall_clock
        self._dead_letters = dead_letters
        self._node_name = node_name
        self._online = False
        self._in_flight: dict[int, tuple[tuple[Any, ...], Any]] = {}
        self._sent_keys: set[tuple[Any, ...]] = set()
        self._parked: dict[tuple[Any, ...], Any] = {}
        """Dead-lettered history entries waiting for the older entries of their property
        (``drop_history`` drops every version up to the one given)."""
        self._wake = Wakeups()
        self._remove_listener = twins.add_listener(self._on_twin_event) if twins else None

    def close(self) -> None:
        """Stop listening to the twins."""
        if self._remove_listener is not None:
            self._remove_listener()
            self._remove_listener = None

    # -- UpSource ---------------------------------------------------------------------------

    def add_wakeup(self, callback: Callable[[], None]) -> Callable[[], None]:
        return self._wake.add(callback)

    def session_started(self, received_up_to: int) -> None:
        if received_up_to:
            self.acked(received_up_to)
        self._in_flight.clear()
        self._sent_keys.clear()
        self._online = True
        self._wake()

    def session_ended(self) -> None:
        self._online = False

    def messages_to_send(self, limit: int) -> list[Outgoing]:
        """Reports oldest version first, then history; nothing while offline.

        Raises:
            StoreError: the twin tables could not be read.
        """
        if not self._online or limit <= 0 or self._twins is None:
            return []
        from protocol.messages import ObjectRef, TwinReported  # not needed offline

        out: list[Outgoing] = []
        for kind, pending in (
            (_REPORT, self._twins.pending_reports),
            (_HISTORY, self._twins.pending_history),
        ):
            room = limit - len(out)
            if room <= 0:
                break
            for report in pending(room + len(self._sent_keys)):
                key = (kind, report.uid, report.property, report.version)
                if key in self._sent_keys or key in self._parked:
                    continue
                message = TwinReported(
                    ref=ObjectRef("Device", report.namespace, report.name, report.uid),
                    property=report.property,
                    value=report.value,
                    version=report.version,
                    timestamp=report.timestamp,
                )
                out.append(Outgoing(message, (key, report)))
                if len(out) >= limit:
                    break
        return out

    def sent(self, item: Outgoing, seq: int | None) -> None:
        """Remember ``item`` under ``seq`` until acknowledged.

        Raises:
            ValueError: ``seq`` is ``None`` (``twin_reported`` always needs an ack).
        """
        if seq is None:
            raise ValueError("twin_reported needs an ack: the session gave no seq")
        key, report = item.token
        self._in_flight[seq] = (key, report)
        self._sent_keys.add(key)

    def too_large(self, item: Outgoing, error: MessageTooLarge) -> None:
        """``send()`` refused ``item`` as over the agreed limits (no seq used): dead-letter
        it and mark it delivered, so that it is not offered again (see the module doc).

        Raises:
            StoreError: the dead letter could not be written (the report stays pending).
        """
        key, report = item.token
        store = self._dead_letters
        if store is None:
            self._sent_keys.add(key)  # not again in this session; the next one tries
            log.error("twin report %s cannot be sent this session: %s", key[1:], error)
            return
        import dataclasses

        from edgeagent.store import ref_dict
        from edgeagent.uplink.sources.outbox import dead_letter_warning

        message = item.message
        body = {f.name: getattr(message, f.name) for f in dataclasses.fields(message)}
        body["ref"] = ref_dict(body["ref"])
        dead = store.dead_letter_add(
            message.kind, body, size=error.size, reason=str(error), created_at=report.timestamp
        )
        log.error(
            "twin report %s/%s %s v%d dead-lettered (%d): %s",
            report.namespace,
            report.name,
            report.property,
            report.version,
            dead.id,
            error,
        )
        store.outbox_append("event", dead_letter_warning(dead, self._node_name))
        if key[0] == _REPORT or self._oldest_history(report):
            self._delivered(key, report)
        else:  # older entries of the property are still to be acknowledged
            self._parked[key] = report

    def acked(self, up_to: int) -> None:
        """Mark the reports and history entries up to ``up_to`` delivered."""
        for seq in sorted(seq for seq in self._in_flight if seq <= up_to):
            key, report = self._in_flight.pop(seq)
            self._sent_keys.discard(key)
            self._delivered(key, report)
        for key, report in list(self._parked.items()):
            if self._oldest_history(report):
                del self._parked[key]
                self._delivered(key, report)

    def _oldest_history(self, report: Any) -> bool:
        """True if no older history entry of ``report``'s property is still pending (False
        when that cannot be told from the first ``_SCAN`` pending entries: kept parked)."""
        assert self._twins is not None
        pending = self._twins.pending_history(_SCAN)
        for entry in pending:
            if (entry.uid, entry.property) == (report.uid, report.property):
                return entry.version >= report.version
        return len(pending) < _SCAN

    def _delivered(self, key: tuple[Any, ...], report: Any) -> None:
        if self._twins is None:
            return
        if key[0] == _REPORT:
            self._twins.report_delivered(report)
        else:
            self._twins.history_delivered(report.uid, report.property, report.version)

    # -- down ---------------------------------------------------------------------------------

    def on_desired(self, message: Message) -> None:
        """The ``twin_desired`` handler: hand the value to the twins.

        Raises:
            TypeError: ``message`` is not a ``TwinDesired`` (a wiring mistake).
            StoreError: the twins could not store it.
        """
        from protocol.devices import DesiredState
        from protocol.messages import TwinDesired

        if not isinstance(message, TwinDesired):
            raise TypeError(f"twin_desired handler given {type(message).__name__}")
        ref = message.ref
        if self._twins is None:
            log.debug("twin_desired for %s ignored: devices are disabled", ref.name)
            return
        state = DesiredState(ref.namespace, ref.name, ref.uid, message.version, message.properties)
        outcome = self._twins.apply_desired(state, self._wall())
        log.debug(
            "twin_desired %s/%s v%d: %s", ref.namespace, ref.name, message.version, outcome.value
        )

    # -- internals ----------------------------------------------------------------------------

    def _on_twin_event(self, event: TwinEvent) -> None:
        from edgeagent.devices import EventKind

        if event.kind is EventKind.REPORTED and self._online:
            self._wake()
