"""Device status written to the API: coalesced per Device, rate-limited, retried.

Two things change a Device's ``status``: reported values from its node (``twin_reported``:
``cloudhub.devices.merge_reported``, latest version per property wins) and the desired
values the hub rejects (``status_with_rejections``: a new spec or a new model). Every write
also sets the ``ModelAvailable`` condition (:mod:`cloudhub.devices.conditions`). The writer
keeps at most one pending write per Device (namespace, name): reports arriving while one
is pending join it (the highest version per property is kept, which is all the merge would
write), and the callbacks of every report it carries are called together once it is
written. Every write recomputes the rejections too, so a status is always complete.

A write is a PUT on the ``status`` subresource of the informer's cached Device (one
request, no GET first). A 409 Conflict re-reads the Device and merges again (the merge is
a pure function of the Device, so nothing is lost or doubled). A Device that no longer
exists, or exists under another uid (deleted and recreated: a new device), makes its
reports stale: nothing is written and they count as done. 5xx, 429 and timeouts are
retried with back-off (full jitter, capped) until they succeed: meanwhile the reports stay
unacknowledged on the edge (store-and-forward).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from cloudhub.devices.conditions import ModelLookup, model_condition, with_condition
from cloudhub.devices.twin import evaluate_desired, merge_reported, status_with_rejections
from cloudhub.errors import KubeAPIError, KubeConflict, KubeNotFound
from cloudhub.kube import DEVICES, Informer, KubeClient, TokenBucket
from cloudhub.workers import next_item, run_workers
from protocol.backoff import backoff
from protocol.devices import InvalidDocument, ReportedValue, parse_device
from protocol.tasks import TaskScope

__all__ = ["DeviceStatusWriter", "Outcome"]

log = logging.getLogger(__name__)

#: ``callback(error)``: ``None`` once durable (or stale), the API's error if it refused
#: the write for good (e.g. 422).
Outcome = Callable[["KubeAPIError | None"], None]


@dataclass(slots=True)
class _Pending:
    reports: dict[str, ReportedValue] = field(default_factory=dict)  # property -> newest
    callbacks: list[Outcome] = field(default_factory=list)

    def add(self, reports: list[ReportedValue]) -> None:
        for report in reports:
            have = self.reports.get(report.property)
            if have is None or report.version > have.version or report.uid != have.uid:
                self.reports[report.property] = report


class DeviceStatusWriter:
    """Writes Device status: reported values and desired-value rejections.

    Args:
        client: the API client.
        devices: the Device informer (its cache is the base of every write).
        model_for: ``(namespace, model name) -> ModelLookup`` (from the model informer).
        bucket: the rate limiter for these writes.
        workers: writes in flight at once.
        retry_cap: longest back-off between retries, seconds.
        on_refused: ``on_refused(device, error)`` for a write the API refused for good
            (the hub records a Warning Event on the Device and counts it).
        clock: wall clock, epoch seconds (condition transition times).
    """

    def __init__(
        self,
        client: KubeClient,
        devices: Informer,
        model_for: Callable[[str, str], ModelLookup],
        bucket: TokenBucket,
        *,
        workers: int = 8,
        retry_cap: float = 30.0,
        on_refused: Callable[[dict, KubeAPIError], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.devices = devices
        self.model_for = model_for
        self.bucket = bucket
        self.workers = workers
        self.retry_cap = retry_cap
        self.on_refused = on_refused
        self._clock = clock
        self.written = 0
        """Status writes the API accepted (for tests and metrics)."""
        self._pending: dict[tuple[str, str], _Pending] = {}
        self._in_flight: set[tuple[str, str]] = set()
        self._queue: deque[tuple[str, str]] = deque()
        self._wake = asyncio.Event()
        self._scope = TaskScope()

    def __len__(self) -> int:
        """Devices with a write waiting or in flight."""
        return len(self._pending) + len(self._in_flight)

    # -- submitting -----------------------------------------------------------------------

    def submit_reports(
        self, namespace: str, name: str, reports: list[ReportedValue], done: Outcome
    ) -> None:
        """Queue reported values of one Device; ``done(None)`` once written (or found
        stale), ``done(error)`` if the API refused the write for good."""
        self._entry(namespace, name).add(reports)
        self._entry(namespace, name).callbacks.append(done)

    def submit_rejections(self, namespace: str, name: str) -> None:
        """Queue a write of the Device's rejected desired values (its spec or its model
        changed and the status shows other rejections than it should)."""
        self._entry(namespace, name)

    def _entry(self, namespace: str, name: str) -> _Pending:
        key = (namespace, name)
        entry = self._pending.get(key)
        if entry is None:
            entry = self._pending[key] = _Pending()
            if key not in self._in_flight:
                self._queue.append(key)
                self._wake.set()
        return entry

    # -- the workers ----------------------------------------------------------------------

    async def run(self) -> None:
        """Run the workers until cancelled."""
        await run_workers(self._scope, self._worker, self.workers, "device-status")

    async def _worker(self) -> None:
        queue = self._queue
        while True:
            key = await next_item(queue, self._wake)
            entry = self._pending.pop(key, None)
            if entry is None:
                continue
            self._in_flight.add(key)
            outcome: KubeAPIError | None = None
            try:
                outcome = await self._write(key, entry)
            except Exception as exc:  # a bug: keep the worker, refuse the reports
                log.exception("writing the status of Device %s/%s failed", *key)
                outcome = KubeAPIError(0, "", f"internal error: {exc}")
            finally:
                self._in_flight.discard(key)
                if key in self._pending:  # more arrived meanwhile
                    queue.append(key)
                    self._wake.set()
            for callback in entry.callbacks:
                try:
                    callback(outcome)
                except Exception:
                    log.exception("device status callback failed")

    async def _write(self, key: tuple[str, str], entry: _Pending) -> KubeAPIError | None:
        delays = backoff(uniform=random.uniform, base=0.2, cap=self.retry_cap)
        while True:
            try:
                await self._write_status(key, entry)
                return None
            except KubeAPIError as exc:
                if not exc.retryable:
                    log.warning("the API refused the status of Device %s/%s: %s", *key, exc)
                    obj = self.devices.get(key[1], key[0])
                    if self.on_refused is not None and obj is not None:
                        self.on_refused(obj, exc)
                    return exc
                delay = next(delays)
                log.info(
                    "writing the status of Device %s/%s failed (%s); retrying in %.1f s",
                    *key,
                    exc,
                    delay,
                )
                await asyncio.sleep(delay)

    async def _write_status(self, key: tuple[str, str], entry: _Pending) -> None:
        namespace, name = key
        obj = self.devices.get(name, namespace)
        while True:
            if obj is None:
                return  # gone: its reports are stale
            status = self._merged(obj, entry)
            if status is None:
                return
            await self.bucket.acquire()
            try:
                await self.client.replace(DEVICES, {**obj, "status": status}, subresource="status")
            except KubeNotFound:
                return
            except KubeConflict:
                await self.bucket.acquire()  # the fresh read is a request too
                try:
                    obj = await self.client.get(DEVICES, name, namespace)
                except KubeNotFound:
                    obj = None
                continue
            self.written += 1
            return

    def _merged(self, obj: dict, entry: _Pending) -> dict | None:
        """The status to write, or ``None`` when nothing changes."""
        try:
            device = parse_device(obj)
        except InvalidDocument as exc:
            log.warning("a Device is not valid, its status is not written: %s", exc)
            return None
        found = self.model_for(device.namespace, device.model_name)
        model = found.model
        rejections = status_with_rejections(device, evaluate_desired(device, model))
        merged = merge_reported(
            dataclasses.replace(device, status=rejections.status),
            model,
            entry.reports.values(),
        )
        status, waits = with_condition(merged.status, model_condition(device, found), self._clock())
        for report, error in merged.invalid:
            log.warning(
                "Device %s/%s: reported %s not written: %s",
                device.namespace or "default",
                device.name,
                report.property,
                error,
            )
        if not (rejections.changed or merged.changed or waits):
            return None
        return status
