"""One watch: the events waiting for its HTTP stream, filtered by its selectors."""

from __future__ import annotations

import collections
from collections.abc import Callable

from cloudhub.standalone.options import ListParams
from cloudhub.standalone.resources import ResourceType
from cloudhub.standalone.store import ADDED, DELETED, MODIFIED, Change, Entry, Subscriber

__all__ = ["PREV_DELETED", "Watch"]

#: Queue marker: send DELETED with the object's previous state (it left the selection).
PREV_DELETED = "DELETED(prev)"


class Watch(Subscriber):
    """One watch's pending events, fed by the store, drained by the HTTP handler.

    Attributes:
        rtype: The watched resource type.
        ended: Why the watch ended early ("overflow"), or None.
    """

    def __init__(
        self,
        rtype: ResourceType,
        namespace: str | None,
        params: ListParams,
        since: int,
        max_queued: int,
    ) -> None:
        self.rtype = rtype
        self.namespace = namespace
        self.params = params
        self.since = since
        self.max_queued = max_queued
        self.queue: collections.deque[tuple[str, Change]] = collections.deque()
        self.initial: list[tuple[str, str, Entry]] = []
        self.wakeup: Callable[[], None] | None = None
        self.ended: str | None = None
        # The history replayed at subscription is not limited (kube-apiserver sends
        # a watch's initial events outside its bounded buffer); live events are.
        self.bounded = False

    def deliver(self, change: Change) -> bool:
        if self.ended:
            return False
        if change.rev <= self.since:
            return True
        if self.namespace is not None and change.namespace != self.namespace:
            return True
        params = self.params
        if not params.filtered:
            event = change.type
        else:
            now = change.type != DELETED and params.matches(
                change.namespace, change.name, change.entry
            )
            if change.type == DELETED:
                before = params.matches(change.namespace, change.name, change.entry)
                event = DELETED if before else ""
            elif change.type == ADDED:
                event = ADDED if now else ""
            else:
                before = change.prev is not None and params.matches(
                    change.namespace, change.name, change.prev
                )
                if now and before:
                    event = MODIFIED
                elif now:
                    event = ADDED
                elif before:
                    # No longer selected: DELETED with the last state that matched,
                    # at this change's resourceVersion (as the watch cache does).
                    event = PREV_DELETED
                else:
                    event = ""
        if not event:
            return True
        if self.bounded and len(self.queue) >= self.max_queued:
            # The watch ends here: its backlog is dropped at once (the client
            # re-watches from the last resourceVersion it got), so a client that
            # stopped reading holds no events.
            self.ended = "overflow"
            self.queue.clear()
            if self.wakeup:
                self.wakeup()
            return False
        self.queue.append((event, change))
        if self.wakeup:
            self.wakeup()
        return True
