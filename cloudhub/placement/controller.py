"""The placement controller: informers in, planner in the middle, rate-limited writes out.

It watches EdgePlacements, Nodes and Pods (and, on the embedded API,
Deployments and DaemonSets whose template targets edge nodes), feeds them to
a :class:`~cloudhub.placement.planner.Planner`, and writes what each plan
decides: Pods bound to nodes, deletions, and status subresources.

Writes go through a queue served by a few workers under a token bucket
(``writes_per_second``, ``write_burst``), so a plan of thousands of pods does
not flood the API; the planner already counts them, so planning continues
while they are written. A failed create or delete is handed back to the
planner and the next plan is delayed with backoff (full jitter). A replica that fails on
its node (``Failed``: an agent refusing its spec, a crash) is replaced only after a
back-off per owner and node (:mod:`cloudhub.placement.failures`, as the DaemonSet
controller's), shown on the owner's status (``ReplicaFailure``) and in one Warning Event.

Workloads (on the embedded API): every Deployment and DaemonSet when ``all_workloads``
(nothing else runs them there: Kubernetes semantics, a selector-less DaemonSet on every
eligible node, a template ``nodeName`` binding), else those whose template targets edge
nodes. Their status gets ``Available`` and ``ReplicaFailure`` conditions (what placement
could not do: no eligible node, capacity, failing pods), and a Warning Event says the same.

Node connectivity: the hub's word (:meth:`PlacementController.report_connectivity`,
called from its session registry) wins. Without it, a node's ``Ready`` condition and
heartbeat are read (:func:`cloudhub.placement.nodes.offline_since`), re-evaluated every
``resync_s`` so that a heartbeat that stops is noticed. With ``hub_connectivity`` (the
controller runs inside the hub, :mod:`cloudhub.placement.extension`), an edge node the
hub has not reported on is offline since the controller started: its last contact is
unknown, and counting from then never fails its replicas over early.

Start it with::

    client = await KubeClient.from_kubeconfig(path)
    controller = PlacementController(client, ControllerSettings(place_workloads=embedded))
    await controller.run()          # until cancelled
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import pathlib
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from cloudhub.errors import KubeAPIError, KubeConflict, KubeNotFound
from cloudhub.kube import (
    CRDS,
    DAEMONSETS,
    DEPLOYMENTS,
    NODES,
    PODS,
    Informer,
    KubeClient,
    ResourceType,
    TokenBucket,
    scoped_informers,
    strip_object,
)
from cloudhub.placement.errors import InvalidObject, InvalidSpec
from cloudhub.placement.failures import FailureBackoff, owner_key
from cloudhub.placement.model import API_GROUP, KIND, PLURAL, PlacementKey, parse_placement
from cloudhub.placement.nodes import offline_since, slim_node
from cloudhub.placement.plan import PlacementStatus, Plan, PodCreate, PodDelete
from cloudhub.placement.planner import Planner
from cloudhub.placement.pods import pod_ready
from cloudhub.placement.prepull import PREPULL_CRD_PATH, PREPULLS, PrePullKeeper
from cloudhub.placement.workloads import (
    EDGE_ROLE_LABEL,
    failing_condition,
    placement_from_workload,
    targets_edge,
    workload_status,
)
from protocol.backoff import backoff

__all__ = ["CRD_PATH", "EDGEPLACEMENTS", "ControllerSettings", "PlacementController"]

log = logging.getLogger(__name__)

CRD_PATH = pathlib.Path(__file__).with_name("crd.yaml")
"""The EdgePlacement CRD (the same file as ``deploy/crds/``)."""

EDGEPLACEMENTS = ResourceType(API_GROUP, "v1alpha1", PLURAL, KIND, True)
"""The EdgePlacement resource type."""


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    """How the controller runs.

    Attributes:
        namespace: the namespace whose placements it handles, or None for all.
        namespaces: the hub's namespaced mode (``kube.namespaces``): without
            ``namespace``, placements, pods and workloads are watched in these
            namespaces only (one informer each); empty: cluster-wide.
        place_workloads: also place Deployments and DaemonSets that target edge
            nodes. Only on the embedded API: a real cluster has its own
            scheduler and controllers for them.
        install_crd: create the EdgePlacement CRD at start when it is missing.
        writes_per_second: sustained API writes (pod creates and deletes,
            status patches); 100/s keeps a 100,000-pod fleet's initial
            placement under 20 minutes without starving other clients.
        write_burst: writes allowed at once before the rate applies.
        write_concurrency: requests in flight at once.
        settle_s: pause after a change before planning, so that a burst of
            events (a relist, a node with many pods) makes one plan.
        resync_s: how often node connectivity is re-read from heartbeats.
        heartbeat_grace_s: how old a Ready node's heartbeat may be (the node
            lifecycle controller's 40 s).
        hub_connectivity: the hub reports the connectivity of every edge node
            (label ``node-role.kubernetes.io/edge``) with
            :meth:`PlacementController.report_connectivity`; until it does, an
            edge node is offline since the controller started. Other nodes are
            read from their heartbeat.
        all_workloads: with ``place_workloads``, place every Deployment and
            DaemonSet, not only those whose template targets edge nodes (the
            embedded API, where nothing else runs them).
        failure_backoff_s, failure_backoff_cap_s: the back-off before a replica
            that failed on a node is replaced there (the DaemonSet controller's
            1 s doubling to 15 min).
    """

    namespace: str | None = None
    namespaces: tuple[str, ...] = ()
    place_workloads: bool = False
    install_crd: bool = True
    writes_per_second: float = 100.0
    write_burst: int = 200
    write_concurrency: int = 8
    settle_s: float = 0.05
    resync_s: float = 5.0
    heartbeat_grace_s: float = 40.0
    hub_connectivity: bool = False
    all_workloads: bool = False
    failure_backoff_s: float = 1.0
    failure_backoff_cap_s: float = 900.0


#: ``record(involved, type, reason, message)``: a Kubernetes Event (the hub's recorder).
EventSink = Callable[[dict[str, Any], str, str, str], None]


class PlacementController:
    """Runs placement against a Kubernetes API (see the module docstring).

    Args:
        client: the API client (not closed by the controller).
        settings: how to run.
        events: where Warning Events about placements and workloads go (failing
            replicas, nothing placed), or ``None``.
        on_backoff: called with the owner's kind each time a replica is held back
            because the ones before failed (the hub counts it).

    Attributes:
        planner: the planner (read-only use: explain, status).
        failures: the back-off of failing replicas.
    """

    def __init__(
        self,
        client: KubeClient,
        settings: ControllerSettings | None = None,
        *,
        events: EventSink | None = None,
        on_backoff: Callable[[str], None] | None = None,
    ) -> None:
        self.client = client
        self.settings = settings or ControllerSettings()
        self.planner = Planner()
        s = self.settings
        self.failures = FailureBackoff(base_s=s.failure_backoff_s, cap_s=s.failure_backoff_cap_s)
        self._events = events
        self._on_backoff = on_backoff
        self._held: dict[tuple[str, str], PodCreate] = {}  # (namespace, name) -> create
        self._owners: dict[PlacementKey, dict[str, Any]] = {}  # key -> involvedObject
        self._pins: dict[PlacementKey, str] = {}  # workload -> its template's nodeName
        self._wake = asyncio.Event()
        self._queue: asyncio.Queue[PodCreate | PodDelete | PlacementKey] = asyncio.Queue()
        self._statuses: dict[PlacementKey, PlacementStatus] = {}
        self._invalid: dict[PlacementKey, str] = {}
        self._status_pending: set[PlacementKey] = set()
        self._nodes: dict[str, Mapping[str, Any]] = {}
        self._reported: dict[str, float | None] = {}
        self._bucket = TokenBucket(self.settings.writes_per_second, self.settings.write_burst)
        self._delays = _delays()
        self._retry_at = 0.0
        self._informers: list[Informer] = []
        self.prepulls = PrePullKeeper(client, self._on_pulled)
        self._started_at = time.time()
        self.plans = 0

    # --- running -------------------------------------------------------------------

    async def run(self) -> None:
        """Watch, plan and write until cancelled.

        Raises:
            KubeAPIError: the CRD cannot be installed (other API errors are retried).
        """
        self._started_at = time.time()
        if self.settings.install_crd:
            await self._install_crd()
        ns = self.settings.namespace
        scope = self.settings.namespaces
        self._informers = []
        if scope and not ns:  # namespaced mode: one informer per namespace
            self._watch_scoped(scope)
        else:
            # Each informer names its resource type, so the RBAC check sees every watch.
            watched = [
                (Informer(self.client, NODES, transform=slim_node), self._on_node),
                (Informer(self.client, EDGEPLACEMENTS, namespace=ns), self._on_placement),
                (Informer(self.client, PODS, transform=strip_object), self._on_pod),
            ]
            if self.settings.place_workloads:
                watched += [
                    (Informer(self.client, DEPLOYMENTS, namespace=ns), self._on_workload),
                    (Informer(self.client, DAEMONSETS, namespace=ns), self._on_workload),
                ]
            for informer, handler in watched:
                informer.add_handler(handler)
                self._informers.append(informer)
        extra = []
        if await self._prepull_served(ns or (scope[0] if scope else None)):
            if scope and not ns:
                view, informers = scoped_informers(self.client, PREPULLS, scope)
                view.add_handler(self.prepulls.prepull)
                self._informers += informers
            else:
                informer = Informer(self.client, PREPULLS, namespace=ns)
                informer.add_handler(self.prepulls.prepull)
                self._informers.append(informer)
            extra.append(asyncio.create_task(self.prepulls.run(), name="placement-prepulls"))
        tasks = extra + [
            asyncio.create_task(i.run(), name=f"placement-informer-{i.rt.plural}")
            for i in self._informers
        ]
        tasks += [
            asyncio.create_task(self._writer(), name=f"placement-writer-{n}")
            for n in range(self.settings.write_concurrency)
        ]
        tasks.append(asyncio.create_task(self._loop(), name="placement-loop"))
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _install_crd(self) -> None:
        crd = yaml.safe_load(CRD_PATH.read_text())
        try:
            # rbac: embedded API only (a cluster gets the CRD from deploy/crds)
            await self.client.create(CRDS, crd)
            log.info("installed CRD %s", crd["metadata"]["name"])
        except KubeConflict:
            pass  # AlreadyExists
        deadline = time.monotonic() + 30
        while True:  # wait until the new type is served
            try:
                await self.client.list(EDGEPLACEMENTS, limit=1)
                return
            except KubeNotFound:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)

    async def _prepull_served(self, namespace: str | None) -> bool:
        """Whether EdgeImagePrePulls are served (installed here on the embedded API);
        without them ``updateStrategy.prePull`` waits for ever (said once)."""
        if self.settings.install_crd:
            try:
                # rbac: embedded API only (a cluster gets the CRD from deploy/crds)
                await self.client.create(CRDS, yaml.safe_load(PREPULL_CRD_PATH.read_text()))
            except KubeConflict:
                pass
        deadline = time.monotonic() + (30 if self.settings.install_crd else 0)
        while True:
            try:
                # rbac: hub's ClusterRole (list edgeimageprepulls)
                await self.client.list(PREPULLS, namespace, limit=1)
                return True
            except KubeNotFound:
                if time.monotonic() >= deadline:
                    log.warning(
                        "no EdgeImagePrePull CRD (deploy/crds): updateStrategy.prePull waits"
                    )
                    return False
                await asyncio.sleep(0.1)
            except KubeAPIError as exc:
                log.warning("EdgeImagePrePulls not readable (%s): prePull waits", exc)
                return False

    def _on_pulled(self, key: PlacementKey, nodes: frozenset[str]) -> None:
        self.planner.set_pulled(key, nodes)
        self._wake.set()

    def _watch_scoped(self, scope: tuple[str, ...]) -> None:
        nodes = Informer(self.client, NODES, transform=slim_node)
        nodes.add_handler(self._on_node)
        self._informers.append(nodes)
        watched = [
            (scoped_informers(self.client, EDGEPLACEMENTS, scope), self._on_placement),
            (scoped_informers(self.client, PODS, scope, transform=strip_object), self._on_pod),
        ]
        if self.settings.place_workloads:
            watched += [
                (scoped_informers(self.client, DEPLOYMENTS, scope), self._on_workload),
                (scoped_informers(self.client, DAEMONSETS, scope), self._on_workload),
            ]
        for (view, informers), handler in watched:
            view.add_handler(handler)
            self._informers += informers

    async def _loop(self) -> None:
        for informer in self._informers:
            await informer.synced.wait()
        last_resync = time.monotonic()
        while True:
            now = time.time()
            if time.monotonic() - last_resync >= self.settings.resync_s:
                self._refresh_connectivity(now)
                last_resync = time.monotonic()
            plan = self.planner.plan(now)
            self.plans += 1
            self._submit(plan)
            self._release_held()
            deadline = self.planner.next_deadline()
            timeout = self.settings.resync_s
            if deadline is not None:
                timeout = min(timeout, max(deadline - now, 0.0) + 0.01)
            held = self._held_deadline()
            if held is not None:
                timeout = min(timeout, held + 0.01)
            timeout = max(timeout, self._retry_at - time.monotonic())
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)
            self._wake.clear()
            await asyncio.sleep(max(self.settings.settle_s, self._retry_at - time.monotonic()))

    def report_connectivity(self, node: str, offline_since_s: float | None) -> None:
        """The hub's word on a node's connection, which wins over the Node's heartbeat.

        Args:
            node: the node name.
            offline_since_s: when its session ended (epoch seconds), or None
                while it is connected.
        """
        self._reported[node] = offline_since_s
        self.planner.set_connectivity(node, offline_since_s)
        self._wake.set()

    def _offline_since(self, name: str, node: Mapping[str, Any], now: float) -> float | None:
        if name in self._reported:
            return self._reported[name]
        if self.settings.hub_connectivity and EDGE_ROLE_LABEL in (
            (node.get("metadata") or {}).get("labels") or {}
        ):
            return self._started_at
        return offline_since(node, now, self.settings.heartbeat_grace_s)

    def _refresh_connectivity(self, now: float) -> None:
        for name, node in self._nodes.items():
            self.planner.set_connectivity(name, self._offline_since(name, node, now))

    # --- inputs ----------------------------------------------------------------------

    def _on_node(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None = None) -> None:
        name = (obj.get("metadata") or {}).get("name")
        if kind == "DELETED":
            self._nodes.pop(name, None)
            self._reported.pop(name, None)
            self.planner.remove_node(name)
        else:
            self._nodes[name] = obj
            since = self._offline_since(name, obj, time.time())
            try:
                self.planner.upsert_node(obj, offline_since=since)
            except InvalidObject as exc:
                log.warning("ignoring node: %s", exc)
        self._wake.set()

    def _on_pod(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None = None) -> None:
        meta = obj.get("metadata") or {}
        if kind == "DELETED":
            self.planner.remove_pod(meta.get("namespace") or "default", meta.get("name"))
        else:
            try:
                self.planner.upsert_pod(obj)
            except InvalidObject as exc:
                log.warning("ignoring pod: %s", exc)
            self._pod_outcome(obj)
        self._wake.set()

    def _pod_outcome(self, pod: dict[str, Any]) -> None:
        """Count a replica's failure (back-off, Event, status) or its recovery."""
        owner = owner_key(pod)
        if owner is None:
            return
        failure = self.failures.failed(pod)
        if failure is not None:
            self._warn(
                owner,
                pod,
                "BackOff",
                f"replicas fail on node {failure.node}: {failure.reason}: {failure.message}; "
                "each new one waits longer (back-off, up to "
                f"{self.settings.failure_backoff_cap_s:.0f} s)",
            )
            self._queue_status(owner)
        elif pod_ready(pod) and self.failures.recovered(pod):
            self._queue_status(owner)

    def _warn(
        self, owner: PlacementKey, pod: dict[str, Any] | None, reason: str, text: str
    ) -> None:
        if self._events is None:
            return
        involved = self._owners.get(owner)
        if involved is None and pod is not None:
            for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
                if ref.get("controller"):
                    involved = {
                        "apiVersion": ref.get("apiVersion"),
                        "kind": owner.kind,
                        "namespace": owner.namespace,
                        "name": owner.name,
                        "uid": ref.get("uid"),
                    }
        if involved is not None:
            self._events(involved, "Warning", reason, text)

    def _on_placement(
        self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None = None
    ) -> None:
        meta = obj.get("metadata") or {}
        key = PlacementKey(KIND, meta.get("namespace") or "default", meta.get("name") or "")
        self._remember_owner(key, obj, kind)
        if kind == "DELETED":
            self._invalid.pop(key, None)
            self.planner.remove_placement(key)
            self.prepulls.placement(key, None)
        else:
            try:
                self.planner.upsert_placement(parse_placement(obj))
                self.prepulls.placement(key, obj)
                if self._invalid.pop(key, None) is not None:
                    self._queue_status(key)
            except InvalidSpec as exc:
                # Keep running the last valid spec (a typo must not tear pods down).
                log.warning("EdgePlacement %s/%s is invalid: %s", key.namespace, key.name, exc)
                self._invalid[key] = str(exc)
                self._queue_status(key)
        self._wake.set()

    def _on_workload(
        self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None = None
    ) -> None:
        meta = obj.get("metadata") or {}
        key = PlacementKey(
            str(obj.get("kind")), meta.get("namespace") or "default", meta.get("name") or ""
        )
        template = (obj.get("spec") or {}).get("template") or {}
        pin = (template.get("spec") or {}).get("nodeName")
        if isinstance(pin, str) and pin and kind != "DELETED":
            self._pins[key] = pin
        else:
            self._pins.pop(key, None)
        placed = self.settings.all_workloads or targets_edge(template)
        self._remember_owner(key, obj, kind if placed else "DELETED")
        if kind == "DELETED" or not placed:
            self.planner.remove_placement(key)
        else:
            try:
                self.planner.upsert_placement(placement_from_workload(obj))
            except InvalidSpec as exc:
                log.warning("%s %s/%s not placed: %s", key.kind, key.namespace, key.name, exc)
        self._wake.set()

    def _remember_owner(self, key: PlacementKey, obj: dict[str, Any], kind: str) -> None:
        if kind == "DELETED":
            self._owners.pop(key, None)
            self.failures.forget(key)
            return
        meta = obj.get("metadata") or {}
        self._owners[key] = {
            "apiVersion": obj.get("apiVersion") or "",
            "kind": key.kind,
            "namespace": key.namespace,
            "name": key.name,
            "uid": meta.get("uid") or "",
        }

    # --- outputs ---------------------------------------------------------------------

    def _submit(self, plan: Plan) -> None:
        for create in plan.creates:
            self._hold_or_queue(create)
        for delete in plan.deletes:
            self._held.pop((delete.namespace, delete.name), None)  # never created
            self._queue.put_nowait(delete)
        for key, status in plan.statuses.items():
            previous = self._statuses.get(key)
            status = self._explained(key, status)
            self._statuses[key] = status
            self._queue_status(key)
            placed = status.condition("Placed")
            was = previous.condition("Placed") if previous is not None else None
            if placed is not None and placed.status == "False" and placed != was:
                self._warn(key, None, placed.reason, placed.message)

    def _explained(self, key: PlacementKey, status: PlacementStatus) -> PlacementStatus:
        """A workload pinned to a node that does not exist says so in ``Placed``."""
        pin = self._pins.get(key)
        placed = status.condition("Placed")
        if pin is None or pin in self._nodes or placed is None or placed.status != "False":
            return status
        detail = f"{placed.message}: the template's nodeName {pin} names no such node"
        conditions = tuple(
            dataclasses.replace(c, message=detail) if c is placed else c for c in status.conditions
        )
        return dataclasses.replace(status, conditions=conditions)

    def _hold_or_queue(self, create: PodCreate) -> None:
        """Create now, or hold while the replicas before it fail on that node (back-off)."""
        owner = create.placement.key
        self.failures.forget(owner, keep_template=create.template.hash)
        if self.failures.wait(owner, create.node, create.template.hash) > 0:
            self._held[(create.namespace, create.name)] = create
            if self._on_backoff is not None:
                self._on_backoff(owner.kind)
            return
        self._queue.put_nowait(create)

    def _release_held(self) -> None:
        for where, create in list(self._held.items()):
            owner = create.placement.key
            if self.failures.wait(owner, create.node, create.template.hash) <= 0:
                del self._held[where]
                self._queue.put_nowait(create)

    def _held_deadline(self) -> float | None:
        """Seconds until the next held replica may be created, or ``None``."""
        waits = [
            self.failures.wait(c.placement.key, c.node, c.template.hash)
            for c in self._held.values()
        ]
        return min(waits) if waits else None

    def _queue_status(self, key: PlacementKey) -> None:
        if key not in self._status_pending:  # latest wins: one write per placement queued
            self._status_pending.add(key)
            self._queue.put_nowait(key)

    async def _writer(self) -> None:
        while True:
            item = await self._queue.get()
            try:
                await self._bucket.acquire()
                if isinstance(item, PodCreate):
                    await self._create(item)
                elif isinstance(item, PodDelete):
                    await self._delete(item)
                else:
                    await self._write_status(item)
            finally:
                self._queue.task_done()

    def _failed(self, what: str, exc: KubeAPIError) -> None:
        delay = next(self._delays)
        self._retry_at = time.monotonic() + delay
        log.warning("%s failed (%s); next plan in %.1f s", what, exc, delay)
        self._wake.set()

    async def _create(self, create: PodCreate) -> None:
        try:
            await self.client.create(PODS, create.render(), create.namespace)
            self._delays = _delays()
        except KubeConflict as exc:  # AlreadyExists: the informer reports it
            self.planner.pod_create_failed(create.namespace, create.name)
            if exc.reason != "AlreadyExists":
                self._failed(f"creating pod {create.namespace}/{create.name}", exc)
            self._wake.set()
        except KubeAPIError as exc:
            self.planner.pod_create_failed(create.namespace, create.name)
            self._failed(f"creating pod {create.namespace}/{create.name}", exc)

    async def _delete(self, delete: PodDelete) -> None:
        try:
            await self.client.delete(
                PODS,
                delete.name,
                delete.namespace,
                uid=delete.uid or None,
                grace_period_seconds=0 if delete.force else None,
            )
            log.info("deleted pod %s/%s: %s", delete.namespace, delete.name, delete.reason)
        except KubeNotFound:
            self.planner.remove_pod(delete.namespace, delete.name)
            self._wake.set()
        except KubeConflict:
            pass  # another pod of that name now: the informer reports it
        except KubeAPIError as exc:
            self.planner.pod_delete_failed(delete.namespace, delete.name)
            self._failed(f"deleting pod {delete.namespace}/{delete.name}", exc)

    async def _write_status(self, key: PlacementKey) -> None:
        self._status_pending.discard(key)
        status = self._statuses.get(key)
        body: dict[str, Any]
        if key.kind == KIND:
            body = status.to_json() if status is not None else {}
            conditions = list(body.get("conditions") or [])
            invalid = self._invalid.get(key)
            conditions.append(
                {
                    "type": "SpecValid",
                    "status": "False" if invalid else "True",
                    "reason": "InvalidSpec" if invalid else "Valid",
                    "message": invalid or "the spec is valid",
                    "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                }
            )
            failing = failing_condition(self.failures.failing(key))
            body["conditions"] = conditions + ([failing] if failing is not None else [])
        elif status is None:
            return
        else:
            body = workload_status(key.kind, status, self.failures.failing(key))
        patch = {"status": body}
        try:
            # One call per resource type, each named, so the RBAC check sees every one.
            if key.kind == KIND:
                await self.client.patch(
                    EDGEPLACEMENTS, key.name, patch, key.namespace, subresource="status"
                )
            elif key.kind == "Deployment":
                await self.client.patch(
                    DEPLOYMENTS, key.name, patch, key.namespace, subresource="status"
                )
            else:
                await self.client.patch(
                    DAEMONSETS, key.name, patch, key.namespace, subresource="status"
                )
        except KubeNotFound:
            pass
        except KubeAPIError as exc:
            self._failed(f"writing the status of {key}", exc)

    async def drained(self) -> None:
        """Wait until every queued write has been attempted."""
        await self._queue.join()


def _delays():
    """Delays before the next plan after failed writes (full jitter, 0.2 s to 30 s)."""
    return backoff(uniform=random.uniform, base=0.2, cap=30.0)
