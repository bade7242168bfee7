"""Event correlation: repeated Events become one Event with a count, as client-go's do.

A hub records the same few Events over and over (``EdgeConnected`` and
``EdgeDisconnected`` at every reconnect of a flapping node, ``SessionRefused`` at every
redial of a revoked one, a workload's failing pods). Written one object each they grow
the API without bound and bury everything else in ``kubectl describe``. client-go's event
correlator (``tools/record/events_cache.go``, what kubelet and every controller use) keeps
them to one object per kind of happening; this is the same three steps, applied to every
Event the hub records itself (the edge's own Events arrive already counted):

1. **Aggregate.** Events alike but for their message (same source, involved object,
   type, reason) are counted per ``max_interval_s`` window; from the ``max_events``-th
   distinct message on, the message becomes ``(combined from similar events): <latest>``
   and they all count on one Event.
2. **Deduplicate.** An Event identical to one recorded before (same key and message,
   remembered in an LRU of ``cache_size``) is not created again: the earlier Event's
   ``count`` goes up by one and ``lastTimestamp`` moves, a PATCH of the same object. Its
   ``series`` (``count``, ``lastObservedTime``) says the same in the newer Events API's
   terms, for readers of ``events.k8s.io/v1``.
3. **Rate-limit** (spam filter, applied first). Each (source, involved object, type,
   reason) draws from a token bucket of ``spam_burst`` tokens refilled at ``spam_qps``; an
   Event without a token is dropped (counted by the caller). client-go keys its bucket by
   source and object only; with the reason in the key a storm of one kind of Event (a
   flapping node's reconnects) cannot silence another (its certificate's revocation).

Pure: no I/O, the clock is an argument. Defaults are client-go's: 10 similar Events in
600 s, 4,096 remembered, bursts of 25 refilled one per 5 minutes.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["AGGREGATED_PREFIX", "Correlated", "EventCorrelator"]

AGGREGATED_PREFIX = "(combined from similar events): "
"""What an aggregated Event's message starts with (client-go's wording)."""


@dataclass(slots=True)
class Correlated:
    """What to write for one recorded Event.

    Attributes:
        event: the Event to create (for a repeat: the earlier Event's name, its
            ``firstTimestamp``, the new ``count``), so that a repeat whose earlier Event
            is gone (expired) can still be created whole.
        patch: for a repeat, the fields to PATCH on the existing Event (``count``,
            ``lastTimestamp``, ``message``, ``series``); ``None`` for a first occurrence.
    """

    event: dict
    patch: dict | None


@dataclass(slots=True)
class _Seen:
    name: str
    count: int
    first: str


@dataclass(slots=True)
class _Similar:
    messages: set[str]
    since: float


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float


def _object_key(event: dict) -> tuple[str, ...]:
    source = event.get("source") or {}
    obj = event.get("involvedObject") or {}
    return (
        str(source.get("component", "")),
        str(source.get("host", "")),
        str(obj.get("kind", "")),
        str(obj.get("namespace", "")),
        str(obj.get("name", "")),
        str(obj.get("uid", "")),
        str(obj.get("apiVersion", "")),
    )


class EventCorrelator:
    """Aggregates, deduplicates and rate-limits Events (see the module docstring).

    Args:
        clock: wall clock, epoch seconds.
        stamp: epoch seconds -> the RFC 3339 text Events carry (``lastTimestamp``).
        micro_stamp: epoch seconds -> MicroTime text (``series.lastObservedTime``).
        max_events: distinct messages of similar Events within ``max_interval_s`` before
            they are aggregated into one.
        max_interval_s: the aggregation window.
        cache_size: Events remembered for deduplication (least recently seen forgotten).
        spam_burst, spam_qps: the token bucket per (source, involved object, type,
            reason): burst size, and tokens per second.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        stamp: Callable[[float], str],
        micro_stamp: Callable[[float], str],
        max_events: int = 10,
        max_interval_s: float = 600.0,
        cache_size: int = 4096,
        spam_burst: int = 25,
        spam_qps: float = 1 / 300,
    ) -> None:
        self._clock = clock
        self._stamp = stamp
        self._micro = micro_stamp
        self.max_events = max_events
        self.max_interval_s = max_interval_s
        self.cache_size = cache_size
        self.spam_burst = spam_burst
        self.spam_qps = spam_qps
        self._seen: OrderedDict[tuple[str, ...], _Seen] = OrderedDict()
        self._similar: OrderedDict[tuple[str, ...], _Similar] = OrderedDict()
        self._buckets: OrderedDict[tuple[str, ...], _Bucket] = OrderedDict()

    def correlate(self, event: dict) -> Correlated | None:
        """What to write for ``event`` (a complete core/v1 Event with ``count`` 1), or
        ``None`` when the spam filter drops it.

        The caller creates ``event`` when ``patch`` is ``None``, else patches it (and
        creates it whole if it no longer exists).
        """
        now = self._clock()
        key = (*_object_key(event), str(event.get("type", "")), str(event.get("reason", "")))
        if not self._allow(key, now):
            return None
        message = str(event.get("message", ""))
        if self._aggregates(key, message, now):
            message = AGGREGATED_PREFIX + message
            event = {**event, "message": message}
            dedupe = (*key, AGGREGATED_PREFIX)
        else:
            dedupe = (*key, message)
        seen = self._seen.get(dedupe)
        if seen is None:
            self._remember(self._seen, dedupe, _Seen(event["metadata"]["name"], 1, ""))
            self._seen[dedupe].first = str(event.get("firstTimestamp", ""))
            return Correlated(event, None)
        self._seen.move_to_end(dedupe)
        seen.count += 1
        last = self._stamp(now)
        series = {"count": seen.count, "lastObservedTime": self._micro(now)}
        repeat = {
            **event,
            "metadata": {**event["metadata"], "name": seen.name},
            "count": seen.count,
            "firstTimestamp": seen.first or event.get("firstTimestamp"),
            "lastTimestamp": last,
            "series": series,
        }
        patch = {"count": seen.count, "lastTimestamp": last, "message": message, "series": series}
        return Correlated(repeat, patch)

    def _remember(self, cache: OrderedDict, key: tuple[str, ...], value: object) -> None:
        cache[key] = value
        cache.move_to_end(key)
        while len(cache) > self.cache_size:
            cache.popitem(last=False)

    def _aggregates(self, key: tuple[str, ...], message: str, now: float) -> bool:
        similar = self._similar.get(key)
        if similar is None or now - similar.since > self.max_interval_s:
            similar = _Similar(set(), now)
            self._remember(self._similar, key, similar)
        else:
            self._similar.move_to_end(key)
        similar.messages.add(message)
        return len(similar.messages) >= self.max_events

    def _allow(self, key: tuple[str, ...], now: float) -> bool:
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = _Bucket(float(self.spam_burst), now)
            self._remember(self._buckets, key, bucket)
        else:
            self._buckets.move_to_end(key)
            bucket.tokens = min(
                float(self.spam_burst), bucket.tokens + (now - bucket.at) * self.spam_qps
            )
            bucket.at = now
        if bucket.tokens < 1.0:
            return False
        bucket.tokens -= 1.0
        return True
