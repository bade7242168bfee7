"""Pod reports from the edge written to the API: coalesced per pod, rate-limited, retried.

An edge reports, per pod, either its latest status (``pod_status``) or that it has stopped
and removed a terminating pod (``pod_deleted``). The writer keeps one pending report per
pod uid: a newer report replaces one not yet written (latest wins; a deletion replaces a
status), and the messages it replaced are acknowledged together when it is written. A
fixed pool of workers writes them, each write waiting for a token from one
:class:`~cloudhub.kube.TokenBucket` (``status.qps``/``status.burst``), so a reconnecting
fleet resending thousands of statuses cannot flood the API.

A status is written through the ``status`` subresource with a PUT on the informer's cached
pod (one request; no GET first); a 409 Conflict re-reads the pod and merges again, as
kubelet's status manager does. A status that changes nothing is not written at all. A
deletion is a DELETE with grace period 0 and a uid precondition, as kubelet does once the
containers are gone. 5xx, 429 and timeouts are retried with back-off (full jitter, capped
at ``status.retry_cap``) until they succeed: a transient API error loses nothing, and the
edge messages stay unacknowledged meanwhile. A write refused for good (another 4xx, e.g.
422 Invalid) is refused to the edge and reported through ``on_refused`` (the hub records a
Warning Event on the pod and counts it): the pod's status in the API is stale, and the log
is not where an operator looks for why.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from cloudhub.errors import KubeAPIError, KubeConflict, KubeNotFound
from cloudhub.kube import PODS, Informer, KubeClient, TokenBucket
from cloudhub.observability.metrics import HubMetrics
from cloudhub.pods.status import merge_status
from cloudhub.workers import next_item, run_workers
from protocol.backoff import backoff
from protocol.messages import ObjectRef
from protocol.tasks import TaskScope

__all__ = ["Outcome", "PodReportWriter", "Refused"]

log = logging.getLogger(__name__)

#: ``callback(outcome)`` once the report is durable or refused.
Outcome = Callable[["KubeAPIError | None"], None]

#: ``on_refused(node, pod, what, error)``: the API refused a report for good; ``what`` is
#: ``"status"`` or ``"deletion"``.
Refused = Callable[[str, ObjectRef, str, KubeAPIError], None]


@dataclass(slots=True)
class _Report:
    node: str
    ref: ObjectRef
    status: dict | None  # None: the pod was deleted on the edge
    callbacks: list[Outcome] = field(default_factory=list)


class _Dropped:
    """A report not written because this replica no longer owns its node."""


_DROPPED = _Dropped()


class _Lost(Exception):
    """Raised after the rate limit's wait when this replica no longer owns the node."""


class PodReportWriter:
    """Writes pod status and pod deletions reported by edges.

    Args:
        client: the API client.
        pods: the pod informer (its cache is the base of every status write).
        bucket: the rate limiter for these writes.
        metrics: the hub's metrics.
        workers: writes in flight at once.
        retry_cap: longest back-off between retries, seconds.
        on_refused: called for each report the API refused for good (see the module
            docstring).
        may_write: ``may_write(node) -> bool``, checked before every attempt (hub HA:
            whether this replica still owns the node). A report of a node it no longer
            owns is dropped unacknowledged: the agent resends it to the new owner.
    """

    def __init__(
        self,
        client: KubeClient,
        pods: Informer,
        bucket: TokenBucket,
        metrics: HubMetrics,
        *,
        workers: int = 8,
        retry_cap: float = 30.0,
        on_refused: Refused | None = None,
        may_write: Callable[[str], bool] | None = None,
    ) -> None:
        self.may_write = may_write
        self.client = client
        self.pods = pods
        self.bucket = bucket
        self.metrics = metrics
        self.workers = workers
        self.retry_cap = retry_cap
        self.on_refused = on_refused
        self._pending: dict[str, _Report] = {}  # uid -> newest report not yet being written
        self._in_flight: set[str] = set()
        self._queue: deque[str] = deque()  # uids with a pending report, oldest first
        self._wake = asyncio.Event()
        self._scope = TaskScope()

    def __len__(self) -> int:
        """Reports waiting or being written."""
        return len(self._pending) + len(self._in_flight)

    # -- submitting ---------------------------------------------------------------------------

    def submit_status(self, node: str, ref: ObjectRef, status: dict, done: Outcome) -> None:
        """Queue the pod's latest status; ``done(None)`` once written (or found unchanged or
        the pod gone), ``done(error)`` if the API refused it for good (e.g. 422)."""
        self._submit(node, ref, status, done)

    def submit_deleted(self, node: str, ref: ObjectRef, done: Outcome) -> None:
        """Queue the final deletion of a terminating pod the edge has stopped."""
        self._submit(node, ref, None, done)

    def _submit(self, node: str, ref: ObjectRef, status: dict | None, done: Outcome) -> None:
        uid = ref.uid
        report = self._pending.get(uid)
        if report is None:
            self._pending[uid] = _Report(node, ref, status, [done])
            if uid not in self._in_flight:
                self._queue.append(uid)
                self._wake.set()
            return
        # latest wins; a deletion is never replaced by a status
        if report.status is not None:
            report.status = status
        report.callbacks.append(done)

    # -- the workers --------------------------------------------------------------------------

    async def run(self) -> None:
        """Run the workers until cancelled."""
        await run_workers(self._scope, self._worker, self.workers, "pod-writer")

    async def _worker(self) -> None:
        queue = self._queue
        while True:
            uid = await next_item(queue, self._wake)
            report = self._pending.pop(uid, None)
            if report is None:
                continue
            self._in_flight.add(uid)
            outcome: KubeAPIError | _Dropped | None = None
            try:
                outcome = await self._write(report)
            except Exception as exc:  # a bug: do not lose the worker, refuse the report
                log.exception("writing pod %s failed", report.ref.name, extra={"node": report.node})
                outcome = KubeAPIError(0, "", f"internal error: {exc}")
            finally:
                self._in_flight.discard(uid)
                if uid in self._pending:  # a newer report arrived meanwhile
                    queue.append(uid)
            if isinstance(outcome, _Dropped):
                self._count(report, "dropped")
                continue
            for callback in report.callbacks:
                try:
                    callback(outcome)
                except Exception:
                    log.exception("pod report callback failed", extra={"node": report.node})

    async def _write(self, report: _Report) -> KubeAPIError | _Dropped | None:
        delays = backoff(uniform=random.uniform, base=0.2, cap=self.retry_cap)
        while True:
            if self.may_write is not None and not self.may_write(report.node):
                return _DROPPED
            try:
                if report.status is None:
                    await self._delete(report)
                else:
                    await self._write_status(report)
                return None
            except _Lost:
                return _DROPPED
            except KubeAPIError as exc:
                if not exc.retryable:
                    self._count(report, "refused")
                    what = "status" if report.status is not None else "deletion"
                    log.warning(
                        "the API refused the %s of pod %s/%s: %s",
                        what,
                        report.ref.namespace,
                        report.ref.name,
                        exc,
                        extra={"node": report.node},
                    )
                    if self.on_refused is not None:
                        self.on_refused(report.node, report.ref, what, exc)
                    return exc
                self._count(report, "retried")
                delay = next(delays)
                log.info(
                    "writing pod %s/%s failed (%s); retrying in %.1f s",
                    report.ref.namespace,
                    report.ref.name,
                    exc,
                    delay,
                    extra={"node": report.node},
                )
                await asyncio.sleep(delay)

    def _count(self, report: _Report, result: str) -> None:
        if report.status is None:
            self.metrics.pod_deletions.labels(result).inc()
        else:
            self.metrics.status_writes.labels(result).inc()

    async def _acquire(self, report: _Report) -> None:
        """Wait for the rate limit, then check the node is still this replica's to write
        (the wait can be long: ownership may have moved meanwhile). Raises _Lost."""
        await self.bucket.acquire()
        if self.may_write is not None and not self.may_write(report.node):
            raise _Lost

    async def _write_status(self, report: _Report) -> None:
        ref, status = report.ref, report.status
        assert status is not None
        pod = self.pods.get(ref.name, ref.namespace)
        while True:
            if pod is None or (pod.get("metadata") or {}).get("uid") != ref.uid:
                self._count(report, "gone")
                return
            merged = merge_status(pod.get("status"), status)
            if merged == pod.get("status"):
                self._count(report, "unchanged")
                return
            await self._acquire(report)
            try:
                await self.client.replace(PODS, {**pod, "status": merged}, subresource="status")
            except KubeNotFound:
                self._count(report, "gone")
                return
            except KubeConflict:
                self._count(report, "conflict")
                await self.bucket.acquire()  # the fresh read is a request too
                try:
                    pod = await self.client.get(PODS, ref.name, ref.namespace)
                except KubeNotFound:
                    pod = None
                continue
            self._count(report, "written")
            return

    async def _delete(self, report: _Report) -> None:
        ref = report.ref
        await self._acquire(report)
        try:
            await self.client.delete(
                PODS, ref.name, ref.namespace, grace_period_seconds=0, uid=ref.uid
            )
        except KubeNotFound:
            self._count(report, "gone")
            return
        except KubeConflict:  # the uid precondition failed: another pod has the name now
            self._count(report, "gone")
            return
        self._count(report, "deleted")
