"""Event expiry: an Event is deleted one TTL after its last write, as kube-apiserver does.

kube-apiserver stores every Event with an etcd lease of ``--event-ttl`` (default 1 h),
renewed by each write of the Event (a correlator's count update included), so an Event
that stops recurring disappears an hour after its last occurrence and a cluster's Events
stay bounded by their rate, not by the cluster's age. Without it the embedded API kept
every Event forever: 5,760 EdgeConnected/EdgeDisconnected after 2,880 sessions, the API
growing ~2.5 MiB per round of reconnects (issue 15 item 17).

Here: one timer heap over the stored Events (at most one entry per Event), fed by the
store's commits; at its deadline an Event written since is rescheduled, else deleted with a
resourceVersion precondition (so a write racing the expiry wins) through the registry, so
watchers see a ``DELETED`` event as they do when etcd's lease expires. Events loaded at
start expire one TTL after the newest of their own timestamps (``lastTimestamp``,
``eventTime``, ``series.lastObservedTime``, ``creationTimestamp``): their write time was
not kept across the restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import heapq
import logging
import time
from collections.abc import Callable

from cloudhub.standalone.encoding import loads
from cloudhub.standalone.errors import StandaloneError, StatusError
from cloudhub.standalone.options import DeleteOptions
from cloudhub.standalone.store import DELETED, Change, Store

__all__ = ["EVENTS_KEY", "EventExpiry"]

log = logging.getLogger(__name__)

EVENTS_KEY = "events"
"""The storage key of core/v1 Events."""

_STAMPS = (("lastTimestamp",), ("eventTime",), ("series", "lastObservedTime"))


def _parse(stamp: object) -> float | None:
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def last_written(data: bytes, default: float) -> float:
    """When a stored Event was last written, as far as the Event itself says (epoch s).

    The newest of ``lastTimestamp``, ``eventTime``, ``series.lastObservedTime`` and
    ``metadata.creationTimestamp``; ``default`` when none parses.
    """
    obj = loads(data)
    found: list[float] = []
    for path in _STAMPS:
        value: object = obj
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        parsed = _parse(value)
        if parsed is not None:
            found.append(parsed)
    created = _parse((obj.get("metadata") or {}).get("creationTimestamp"))
    if created is not None:
        found.append(created)
    return max(found) if found else default


class EventExpiry:
    """Deletes Events ``ttl_s`` seconds after their last write.

    Args:
        store: the object store (its commits say when Events are written).
        delete: ``delete(namespace, name, options)``, the registry's delete of an Event
            (raises ``StatusError`` when it is gone or was written since).
        ttl_s: seconds an Event lives after its last write (kube-apiserver's
            ``--event-ttl``, 1 h by default).
        clock: wall clock, epoch seconds.
    """

    def __init__(
        self,
        store: Store,
        delete: Callable[[str, str, DeleteOptions], object],
        ttl_s: float,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self._delete = delete
        self.ttl_s = ttl_s
        self._clock = clock
        self._written: dict[tuple[str, str], float] = {}  # (namespace, name) -> epoch s
        self._heap: list[tuple[float, str, str]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.expired = 0
        """Events deleted so far."""

    async def start(self) -> None:
        """Schedule the stored Events, follow commits and start the timer task."""
        now = self._clock()
        for namespace, name, entry in self.store.items(EVENTS_KEY):
            self._schedule(namespace, name, min(last_written(entry.data, now), now))
        self.store.on_commit.append(self._on_commit)
        self._task = asyncio.get_running_loop().create_task(self._run(), name="event-expiry")

    async def close(self) -> None:
        with contextlib.suppress(ValueError):
            self.store.on_commit.remove(self._on_commit)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def __len__(self) -> int:
        """Events scheduled to expire."""
        return len(self._written)

    def _schedule(self, namespace: str, name: str, written: float) -> None:
        key = (namespace, name)
        first = key not in self._written
        self._written[key] = written
        if first:
            due = written + self.ttl_s
            earliest = self._heap[0][0] if self._heap else None
            heapq.heappush(self._heap, (due, namespace, name))
            if earliest is None or due < earliest:
                self._wake.set()

    def _on_commit(self, changes: list[Change]) -> None:
        now = None
        for change in changes:
            if change.resource != EVENTS_KEY:
                continue
            if change.type == DELETED:
                self._written.pop((change.namespace, change.name), None)
                continue
            now = self._clock() if now is None else now
            self._schedule(change.namespace, change.name, now)

    async def _run(self) -> None:
        while True:
            if not self._heap:
                await self._wake.wait()
                self._wake.clear()
                continue
            due, namespace, name = self._heap[0]
            delay = due - self._clock()
            if delay > 0:
                self._wake.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), delay)
                continue
            heapq.heappop(self._heap)
            written = self._written.get((namespace, name))
            if written is None:
                continue  # deleted meanwhile
            if written + self.ttl_s > due:  # written again since: keep it longer
                heapq.heappush(self._heap, (written + self.ttl_s, namespace, name))
                continue
            await self._expire(namespace, name)

    async def _expire(self, namespace: str, name: str) -> None:
        entry = self.store.get(EVENTS_KEY, namespace, name)
        if entry is None:
            self._written.pop((namespace, name), None)
            return
        try:
            result = self._delete(namespace, name, DeleteOptions(precondition_rv=str(entry.rv)))
            if asyncio.iscoroutine(result):
                await result
        except StatusError:
            return  # gone, or written since (its commit rescheduled it)
        except StandaloneError as exc:
            log.warning("could not expire Event %s/%s: %s; retrying", namespace, name, exc)
            heapq.heappush(self._heap, (self._clock() + 1.0, namespace, name))
            return
        self._written.pop((namespace, name), None)
        self.expired += 1
