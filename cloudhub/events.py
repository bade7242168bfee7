"""Kubernetes Events: the hub's own about Nodes, and those edges report (``event`` messages).

Hub Events (connected, disconnected, refused message) are recorded on the Node as kubelet
records its node events: in the ``default`` namespace (``nodes.event_namespace``), with
``involvedObject.uid`` set to the node name, which is what ``kubectl describe node`` looks
for. They are best effort, as client-go's event broadcaster: rate-limited with the other
node writes, and dropped (counted) when the queue is full. Every hub Event (on Nodes, and
on other objects through :meth:`EventRecorder.record`) goes through an
:class:`~cloudhub.correlator.EventCorrelator` first: a repeat of an Event already recorded
is a PATCH of that Event's ``count``/``lastTimestamp``/``series``, not a new object, and a
repeat still queued is folded into the queued write (latest wins), so a flapping node costs
the API one Event per kind of happening, whichever API it is.

Edge Events are at-least-once: each one is acknowledged once created. Its name is derived
from the node, the object, the reason and the edge's timestamp, so a resent Event finds
itself already there (409) instead of being recorded twice.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from cloudhub.bridge.authz import Decision, NodeAuthorizer
from cloudhub.bridge.dispatch import Dispatcher, Inbound
from cloudhub.correlator import EventCorrelator
from cloudhub.errors import KubeAPIError, KubeConflict, KubeNotFound
from cloudhub.kube import EVENTS, KubeClient, TokenBucket
from cloudhub.kube.times import micro_time, rfc3339
from cloudhub.observability.metrics import HubMetrics
from cloudhub.workers import next_item, run_workers
from protocol.backoff import backoff
from protocol.errors import ErrorCode
from protocol.messages import STORE_RECOVERED, KubeEvent
from protocol.tasks import TaskScope

__all__ = ["EventRecorder"]

log = logging.getLogger(__name__)

COMPONENT = "cloudhub"
REPORTING_COMPONENT = "edgefleet.io/cloudhub"

_CORE_KINDS = frozenset({"Pod", "Node", "ConfigMap", "Secret", "Service", "Namespace"})


@dataclass(slots=True)
class _Pending:
    event: dict
    required: bool  # edge events: retried until created; hub events: best effort
    done: Callable[[KubeAPIError | None], None] | None
    patch: dict | None = None  # a correlated repeat: PATCH these fields of ``event``
    writing: bool = False  # a worker is writing it now
    again: bool = False  # a repeat came while it was written: write the latest once more


class EventRecorder:
    """Writes Events, one queue, a few workers, rate-limited.

    Args:
        client: the API client.
        bucket: the rate limiter shared with other node writes.
        metrics: the hub's metrics.
        namespace: where Node Events go (kubelet: ``default``).
        instance: this hub's identity (``reportingInstance``).
        max_queue: hub Events waiting beyond this are dropped.
        workers: Event writes in flight at once.
    """

    def __init__(
        self,
        client: KubeClient,
        bucket: TokenBucket,
        metrics: HubMetrics,
        *,
        namespace: str = "default",
        instance: str = "cloudhub",
        max_queue: int = 1000,
        workers: int = 2,
    ) -> None:
        self.client = client
        self.bucket = bucket
        self.metrics = metrics
        self.namespace = namespace
        self.instance = instance
        self.max_queue = max_queue
        self.workers = workers
        self._queue: deque[_Pending] = deque()
        self._queued: dict[tuple[str, str], _Pending] = {}  # hub Events not yet written
        self._wake = asyncio.Event()
        self._scope = TaskScope()
        self.correlator = EventCorrelator(stamp=rfc3339, micro_stamp=micro_time)

    # -- recording ----------------------------------------------------------------------------

    def node_event(self, node: str, type_: str, reason: str, message: str) -> None:
        """Record a hub Event on Node ``node`` (best effort; never blocks)."""
        involved = {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node}
        self.record(involved, type_, reason, message, host=node, namespace=self.namespace)

    def record(
        self,
        involved: dict,
        type_: str,
        reason: str,
        message: str,
        *,
        host: str = "",
        namespace: str | None = None,
    ) -> None:
        """Record a hub Event about any object (best effort; never blocks), correlated.

        Args:
            involved: the ``involvedObject`` (``apiVersion``, ``kind``, ``namespace``,
                ``name``, ``uid``).
            type_: ``Normal`` or ``Warning``.
            reason: UpperCamelCase, what happened (``FailedPod``).
            message: for humans; cut at 1,024 characters.
            host: ``source.host`` (the node it is about, if any).
            namespace: where the Event goes; default the involved object's namespace, or
                ``nodes.event_namespace`` for cluster-scoped objects.
        """
        now = time.time()
        ns = namespace or involved.get("namespace") or self.namespace
        name = f"{involved.get('name', 'event')}.{time.time_ns():x}"
        event = self._event(ns, name, involved, type_, reason, message, now, 1, host)
        correlated = self.correlator.correlate(event)
        if correlated is None:  # the spam filter: this object had Events enough
            self.metrics.events_dropped.inc()
            return
        event = correlated.event
        key = (ns, event["metadata"]["name"])
        queued = self._queued.get(key)
        if queued is not None:  # not written yet, or being written: write the latest once
            queued.event = event
            if queued.writing:  # its write is on the wire: this repeat follows it, in order
                queued.patch = correlated.patch
                queued.again = True
            elif queued.patch is not None:
                queued.patch = correlated.patch
            return
        if len(self._queue) >= self.max_queue:
            self.metrics.events_dropped.inc()
            return
        pending = _Pending(event, False, None, correlated.patch)
        self._queued[key] = pending
        self._put(pending)

    def edge_event(
        self, node: str, message: KubeEvent, done: Callable[[KubeAPIError | None], None]
    ) -> None:
        """Record an Event an edge reported; ``done`` once it exists (or was refused)."""
        ref = message.ref
        involved: dict = {"kind": ref.kind, "name": ref.name, "uid": ref.uid}
        if ref.kind in _CORE_KINDS:
            involved["apiVersion"] = "v1"
        if ref.namespace:
            involved["namespace"] = ref.namespace
        if ref.kind == "Node":
            involved["uid"] = ref.name  # as kubelet names its Node in Events
        identity = f"{node}\0{ref.uid}\0{message.reason}\0{message.timestamp!r}\0{message.count}"
        digest = hashlib.sha256(identity.encode()).hexdigest()[:16]
        namespace = ref.namespace or self.namespace
        event = self._event(
            namespace,
            f"{ref.name}.{digest}",
            involved,
            message.type,
            message.reason,
            message.message,
            message.timestamp,
            message.count,
            node,
            component="edgeagent",
        )
        self._put(_Pending(event, True, done))

    def _event(
        self,
        namespace: str,
        name: str,
        involved: dict,
        type_: str,
        reason: str,
        message: str,
        at: float,
        count: int,
        node: str,
        component: str = COMPONENT,
    ) -> dict:
        stamp = rfc3339(at)
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": involved,
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": component, "host": node},
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": count,
            "reportingComponent": REPORTING_COMPONENT,
            "reportingInstance": self.instance,
        }

    def _put(self, pending: _Pending) -> None:
        self._queue.append(pending)
        self._wake.set()

    def register(self, dispatcher: Dispatcher, authorizer: NodeAuthorizer) -> None:
        """Route edge ``event`` messages here, after node authorization of the involved
        object (its own Node, its pods and what they reference)."""

        def on_event(inbound: Inbound) -> None:
            message = inbound.message
            assert isinstance(message, KubeEvent)
            decision = authorizer.check(inbound.node, message.ref)
            if decision is Decision.FORBIDDEN:
                ref = message.ref
                inbound.refuse(
                    ErrorCode.FORBIDDEN,
                    f"{ref.kind} {ref.namespace}/{ref.name} is not an object of node "
                    f"{inbound.node}",
                )
                return
            if decision is Decision.NOT_FOUND:
                inbound.session.send_error(
                    inbound, ErrorCode.NOT_FOUND, f"no {message.ref.kind} {message.ref.name}"
                )
                inbound.done()
                return

            try:
                rfc3339(message.timestamp)
            except (OverflowError, ValueError, OSError):
                inbound.refuse(
                    ErrorCode.INVALID_MESSAGE,
                    f"timestamp {message.timestamp!r} is not a time an Event can carry "
                    "(RFC 3339: years 1 to 9999)",
                )
                return

            if message.ref.kind == "Node" and message.reason == STORE_RECOVERED:
                self.metrics.edge_store_recoveries.inc()

            def done(error: KubeAPIError | None) -> None:
                if error is None:
                    inbound.done()
                else:
                    inbound.refuse(ErrorCode.INVALID_MESSAGE, f"the API refused the Event: {error}")

            self.edge_event(inbound.node, message, done)

        dispatcher.register(KubeEvent, on_event)

    # -- writing ------------------------------------------------------------------------------

    async def run(self) -> None:
        """Run the workers until cancelled."""
        await run_workers(self._scope, self._worker, self.workers, "events")

    async def _worker(self) -> None:
        queue = self._queue
        while True:
            pending = await next_item(queue, self._wake)
            pending.writing = True
            try:
                error = await self._create(pending)
                # Repeats that came meanwhile are written after it, never beside it: two
                # PATCHes of one Event in flight at once may land out of order (count 11
                # after 12).
                while pending.again:
                    pending.again = False
                    error = await self._create(pending)
            finally:
                if not pending.required:
                    meta = pending.event["metadata"]
                    self._queued.pop((meta["namespace"], meta["name"]), None)
            if pending.done is not None:
                pending.done(error)

    async def _write(self, pending: _Pending) -> None:
        event = pending.event
        meta = event["metadata"]
        if pending.patch is not None:
            try:
                await self.client.patch(EVENTS, meta["name"], pending.patch, meta["namespace"])
                return
            except KubeNotFound:
                pass  # expired (event TTL) or never written: record it whole
        try:
            await self.client.create(EVENTS, event)
        except KubeConflict:
            if pending.required:
                raise
            # A repeat raced its first occurrence's create: count on the Event that won.
            patch = pending.patch or {
                "count": event["count"],
                "lastTimestamp": event["lastTimestamp"],
                "message": event["message"],
            }
            await self.client.patch(EVENTS, meta["name"], patch, meta["namespace"])

    async def _create(self, pending: _Pending) -> KubeAPIError | None:
        delays = backoff(uniform=random.uniform, base=0.5, cap=30.0)
        attempts = 0
        event = pending.event
        while True:
            attempts += 1
            await self.bucket.acquire()
            try:
                await self._write(pending)
            except KubeConflict:  # already recorded (a resent edge Event)
                self.metrics.node_writes.labels("event", "exists").inc()
                return None
            except KubeAPIError as exc:
                if exc.retryable and (pending.required or attempts < 3):
                    self.metrics.node_writes.labels("event", "retried").inc()
                    await asyncio.sleep(next(delays))
                    continue
                self.metrics.node_writes.labels("event", "failed").inc()
                log.warning(
                    "cannot record Event %s: %s",
                    event["reason"],
                    exc,
                    extra={"node": event["source"]["host"]},
                )
                return exc if not exc.retryable else None
            self.metrics.node_writes.labels("event", "written").inc()
            return None
