"""The pod reconciler: one worker per pod, fed by the store and the runtime.

Entry points:

- :meth:`PodReconciler.run` — the long-running coroutine the agent owns. It starts a
  worker for every pod cached in the store at once (offline recovery: no hub needed),
  removes containers of pods the store no longer has, follows runtime events, and every
  ``pods.resync_period`` relists all containers in one call to catch a missed event.
  Cancelling it stops the workers, never the pods.
- Store listener (registered by ``run``): an object upsert/delete committed by the uplink
  wakes the pod's worker, or every worker using a changed ConfigMap/Secret.
- :meth:`PodReconciler.summary` — pod counts for the agent's status line.
"""

from __future__ import annotations

import asyncio
import logging
import pathlib
import time
from collections.abc import Callable, Mapping
from typing import Any

from edgeagent.errors import ContainerRuntimeError, StoreError
from edgeagent.pods.volumes import VolumeManager
from edgeagent.pods.worker import PodRef, PodWorker
from edgeagent.runtime.base import ContainerRuntime, ContainerState, Labels
from edgeagent.settings import AgentSettings
from edgeagent.store import ObjectChange, Store, ref_dict
from edgeagent.tasks import TaskSet

__all__ = ["PodReconciler"]

log = logging.getLogger(__name__)


class PodReconciler:
    """Drives the runtime's containers to the pods in the store.

    Args:
        store: the agent store (desired pods, ConfigMaps, Secrets; status goes back in).
        runtime: a connected container runtime.
        settings: agent settings (pod timings, state directory).
        node_name: this node's name (event source).
        host_ip: the node IP (``status.hostIP``; host-network pods' IP).
        wall_clock: seconds since the epoch (status timestamps).
    """

    def __init__(
        self,
        store: Store,
        runtime: ContainerRuntime,
        settings: AgentSettings,
        *,
        node_name: str,
        host_ip: str,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.runtime = runtime
        self.settings = settings
        self.node_name = node_name
        self.host_ip = host_ip
        self.wall = wall_clock
        self.volumes = VolumeManager(settings.state_dir / "pods", pathlib.Path("/dev/shm"))
        self.logs_dir = settings.state_dir / "logs"
        self._workers: dict[str, PodWorker] = {}
        self._tasks = TaskSet("pods")
        self._store_error_logged_at = 0.0
        self._closing = False
        self._orphans_deferred = False
        self.started_at: dict[tuple[str, str], float] = {}
        """(pod uid, container name) → wall time its latest attempt was started."""

    # --- entry points -------------------------------------------------------------------

    async def run(self) -> None:
        """Run pods until cancelled (their containers keep running after that)."""
        remove_listener = self.store.add_listener(self.on_object_change)
        self.store.add_lost_writes_listener(self._lost_writes)
        try:
            for obj in self.store.list_objects("Pod"):
                self._ensure_worker(obj.uid)
            self._tasks.spawn(self._collect_orphans(), "orphans")
            self._tasks.spawn(self._relist(), "relist")
            await self._watch_runtime()
        finally:
            self._closing = True
            remove_listener()
            await self._tasks.close()
            self._workers.clear()

    def on_object_change(self, change: ObjectChange) -> None:
        """Store listener: wake whoever the change concerns."""
        if change.kind == "Pod":
            worker = self._workers.get(change.uid)
            if worker is not None:
                worker.spec_changed()
            elif change.op == "upsert":
                self._ensure_worker(change.uid)
        elif change.kind in ("ConfigMap", "Secret"):
            for worker in self._workers.values():
                if worker.references(change.kind, change.namespace, change.name):
                    worker.config_changed()

    def summary(self) -> dict[str, int]:
        """Pod counts by last reported phase (for the status line)."""
        counts: dict[str, int] = {}
        for worker in self._workers.values():
            phase = worker.phase
            counts[phase] = counts.get(phase, 0) + 1
        return counts

    # --- used by workers ----------------------------------------------------------------

    def lookup(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The body of a stored ConfigMap/Secret, or ``None``."""
        obj = self.store.find_object(kind, namespace, name)
        return obj.body if obj is not None else None

    def event(self, ref: PodRef, etype: str, reason: str, message: str) -> None:
        """Queue a Kubernetes Event about a pod (``event`` message, at-least-once)."""
        log.info("%s %s/%s: %s: %s", etype, ref.namespace, ref.name, reason, message)
        try:
            self.store.outbox_append(
                "event",
                {
                    "ref": ref_dict(ref),
                    "type": etype,
                    "reason": reason,
                    "message": message,
                    "timestamp": self.wall(),
                    "count": 1,
                },
            )
        except StoreError as exc:
            self.store_failed(exc)

    def store_failed(self, exc: StoreError) -> None:
        """A status/event write failed (disk full): log it at most once a minute."""
        now = time.monotonic()
        if now - self._store_error_logged_at > 60:
            self._store_error_logged_at = now
            log.error("%s (pods keep running; status will be written when it can)", exc)

    def note_started(self, uid: str, container: str) -> None:
        self.started_at[(uid, container)] = self.wall()

    # --- internals ----------------------------------------------------------------------

    def _ensure_worker(self, uid: str) -> None:
        if uid in self._workers:
            return
        worker = PodWorker(self, uid)
        self._workers[uid] = worker
        task = self._tasks.spawn(worker.run(), uid[:8])
        task.add_done_callback(lambda t, uid=uid, w=worker: self._worker_done(uid, w, t))

    def _worker_done(self, uid: str, worker: PodWorker, task: asyncio.Task[Any]) -> None:
        if self._workers.get(uid) is worker:
            del self._workers[uid]
            for key in [k for k in self.started_at if k[0] == uid]:
                del self.started_at[key]
            # Re-added while it was tearing down (the same uid upserted again)?
            if not self._closing and not task.cancelled() and self.store.get_object(uid):
                self._ensure_worker(uid)

    def _lost_writes(self) -> None:
        # Every pod reports again (each failed commit is retried store.full_retry later,
        # so a full disk costs one attempt per pod per retry, not a busy loop).
        for worker in self._workers.values():
            worker.lost_writes()
            worker.wake.set()

    def on_container_event(self, container_id: str, labels: Mapping[str, str]) -> None:
        """Runtime event: wake the pod the container belongs to."""
        worker = self._workers.get(labels.get(Labels.POD_UID, ""))
        if worker is not None:
            worker.wake.set()

    async def _watch_runtime(self) -> None:
        delay = 0.5
        while True:
            try:
                await self.runtime.watch(self.on_container_event)
            except ContainerRuntimeError as exc:
                log.warning("container events: %s; retrying in %.1fs", exc, delay)
            for worker in self._workers.values():
                worker.wake.set()  # we may have missed events
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)

    async def _relist(self) -> None:
        """Every ``resync_period``, list all managed containers in one call and wake the
        pods whose containers changed (kubelet's PLEG relist, behind the event stream)."""
        period = self.settings.pods.resync_period
        last: dict[str, tuple] | None = None
        while True:
            await asyncio.sleep(period)
            try:
                infos = await self.runtime.list()
            except ContainerRuntimeError as exc:
                log.warning("relist: %s", exc)
                continue
            now: dict[str, list] = {}
            for info in infos:
                uid = info.labels.get(Labels.POD_UID, "")
                now.setdefault(uid, []).append((info.id, info.state.value, info.exit_code))
            fingerprints = {uid: tuple(sorted(items)) for uid, items in now.items()}
            if self._orphans_deferred and not self.store.resync_pending:
                await self._collect_orphans()
            if last is not None:
                for uid in set(fingerprints) | set(last):
                    worker = self._workers.get(uid)
                    if worker is not None and fingerprints.get(uid) != last.get(uid):
                        worker.wake.set()
            last = fingerprints

    async def _collect_orphans(self) -> None:
        """Remove containers of pods that are no longer in the store (deleted while the
        agent was down). Deferred while the store is recreated empty and not yet resynced
        (``Store.resync_pending``): then every running container would look orphaned;
        :meth:`_relist` runs it once the hub's sync is in."""
        if self.store.resync_pending:
            if not self._orphans_deferred:
                self._orphans_deferred = True
                log.warning(
                    "the store was recreated empty: keeping this node's containers running "
                    "until the hub has resent its pods (containers of pods it no longer "
                    "assigns are removed then)"
                )
            return
        self._orphans_deferred = False
        try:
            containers = await self.runtime.list()
        except ContainerRuntimeError as exc:
            log.warning("orphan scan skipped: %s", exc)
            return
        known = set(self.store.inventory())
        orphans = [c for c in containers if c.labels.get(Labels.POD_UID) not in known]
        grace = self.settings.pods.default_grace_period
        apps = [c for c in orphans if c.labels.get(Labels.CONTAINER_TYPE) != "sandbox"]

        async def stop(c: Any) -> None:
            if c.state is ContainerState.RUNNING:
                await self.runtime.stop(c.id, grace)
            await self.runtime.remove(c.id)

        try:
            await asyncio.gather(*(stop(c) for c in apps))
            for c in orphans:
                if c not in apps:
                    await self.runtime.remove(c.id)
        except ContainerRuntimeError as exc:
            log.warning("orphan removal: %s", exc)
        for uid in {c.labels.get(Labels.POD_UID, "") for c in orphans}:
            if uid:
                self.volumes.cleanup(uid)
                log.info("removed containers of pod %s, which is no longer assigned", uid)
