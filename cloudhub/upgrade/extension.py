"""Agent upgrades as a hub extension: ``Hub(settings, extensions=[upgrade_extension(...)])``.

At install it registers the edge's ``artifact_request`` (answered by the
:class:`~cloudhub.upgrade.artifacts.ArtifactServer`, to ordered nodes only) and
``upgrade_progress`` (applied to the node's rollout); it sends an upgrading node its order
again right after every reconnect (``registry.on_synced``); and it runs the controller
loop as a task the hub owns. Every ``upgrade.interval`` seconds the loop lists the
EdgeUpgrades and reads the edge Nodes and bound Pods from the hub's informer caches (a
list of 1,000 Nodes and their Pods every pass cost the hub more than the rollout itself),
and for each EdgeUpgrade:

1. validates it (an invalid one gets ``status.phase: Invalid`` with the field and reason);
2. builds each selected node's facts: connected (the hub's session registry), the agent
   version (the hello of its session here; the Node's ``edgefleet.io/agent-version``
   annotation, written from the hello, when it has none),
   its pods Running and Ready (or Succeeded);
3. steps its :class:`~cloudhub.upgrade.rollout.Rollout` (rebuilt from the status when the
   hub starts, so a restarted hub carries on) and sends the orders and rollbacks to the
   connected nodes;
4. writes the status when it changed.

With ``upgrade.admission`` on a real cluster it also serves the validating webhook
(:mod:`~cloudhub.upgrade.admission`) that refuses an EdgeUpgrade or EdgeImagePrePull whose
nodeSelector selects nodes its creator may not see (Kubernetes records no creator on the
object: the API server's AdmissionReview names the requester), as ``hub.admission_server``,
and writes the hub CA into the ValidatingWebhookConfiguration's caBundle.
"""

from __future__ import annotations

import asyncio
import logging
import pathlib
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import yaml

from cloudhub.errors import KubeAPIError, KubeConflict
from cloudhub.kube import CRDS
from cloudhub.nodes.model import AGENT_VERSION_ANNOTATION
from cloudhub.upgrade.artifacts import ArtifactServer
from cloudhub.upgrade.cli import EDGEUPGRADES
from cloudhub.upgrade.errors import IllegalTransition, InvalidUpgrade
from cloudhub.upgrade.model import (
    MAX_REPORT_MESSAGE,
    MAX_REPORT_REASON,
    Upgrade,
    parse_upgrade,
    selection_labels,
)
from cloudhub.upgrade.passes import invalid_status, run_passes
from cloudhub.upgrade.rollout import NodeFacts, NodePhase, Order, Rollback, Rollout
from cloudhub.upgrade.settings import UpgradeSettings
from protocol.upgrade import ArtifactRequest, UpgradeOrder, UpgradeProgress, UpgradeRollback

if TYPE_CHECKING:
    from cloudhub.bridge.dispatch import Inbound
    from cloudhub.bridge.session import NodeSession
    from cloudhub.hub import Hub

__all__ = [
    "AGENT_VERSION_ANNOTATION",
    "CRD_PATH",
    "UpgradeExtension",
    "cached_fleet",
    "upgrade_extension",
]

log = logging.getLogger(__name__)

CRD_PATH = pathlib.Path(__file__).with_name("crd.yaml")
"""The EdgeUpgrade CRD (the same file as ``deploy/crds/``)."""


def cached_fleet(hub: Hub) -> tuple[list[dict], list[dict]] | None:
    """The edge Nodes (slim: labels, ``edgefleet.io/`` annotations, Ready) and the Pods bound
    to nodes, from the hub's informers; ``None`` until every informer of the hub synced
    (the controllers skip that pass)."""
    if hub.nodes is None or not all(i.synced.is_set() for i in hub.informers):
        return None
    return hub.nodes.items(), hub.pods.items()


def pods_ready_by_node(pods: list[dict]) -> dict[str, bool]:
    """Node name -> whether every pod bound to it is Running and Ready (or Succeeded)."""
    ready: dict[str, bool] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            continue
        status = pod.get("status") or {}
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or ()}
        ok = status.get("phase") == "Succeeded" or (
            status.get("phase") == "Running" and conditions.get("Ready") == "True"
        )
        ready[node] = ready.get(node, True) and ok
    return ready


class UpgradeExtension:
    """Installs agent upgrades into a hub (see the module docstring).

    Args:
        settings: the ``upgrade`` settings group.
        clock: epoch seconds (the rollouts' time).
    """

    def __init__(self, settings: UpgradeSettings, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.clock = clock
        self.server = ArtifactServer(pathlib.Path(settings.artifact_dir))
        self.rollouts: dict[str, tuple[Upgrade, Rollout]] = {}
        self._dirty: set[str] = set()
        self._observed: dict[tuple[str, str], set[tuple[str, float]]] = {}
        """(upgrade uid, node) -> (phase, ``observed_at``) of the progress applied (a
        node's clock may step back before NTP: only exact repeats are duplicates)."""
        self._changes: dict[str, int] = {}
        self._written: dict[str, int] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._hub: Hub | None = None

    async def __call__(self, hub: Hub) -> None:
        if not self.settings.enabled:
            return
        self._hub = hub
        if self.settings.install_crd and hub.settings.kube.mode == "embedded":
            await self._install_crd()
        hub.dispatcher.register(ArtifactRequest, self._on_artifact_request)
        hub.dispatcher.register(UpgradeProgress, self._on_progress)
        hub.registry.on_synced.append(self._on_synced)
        hub.add_task(self._loop(), name="upgrade")
        if self.settings.admission and hub.kube is not None and hub.embedded_api is None:
            await self._serve_admission(hub)

    async def _serve_admission(self, hub: Hub) -> None:
        """Start the node-selection webhook (module docstring) and publish the CA for it."""
        from cloudhub.upgrade.admission import (
            AdmissionServer,
            SubjectAccessReviewer,
            keep_webhook_ca_bundle,
            publish_webhook_ca_bundle,
        )
        from protocol import pki

        assert hub.kube is not None
        credentials = hub._credentials_source()
        server = AdmissionServer(
            SubjectAccessReviewer(hub.kube),
            credentials,
            host=self.settings.admission_host,
            port=self.settings.admission_port,
        )
        await server.start()
        server.owned_by(hub, "admission-webhook")  # closed with the hub, also if what follows fails
        hub.admission_server = server  # type: ignore[attr-defined]
        if self.settings.admission_webhook:
            ca_pem = pki.dump_certificate_pem(credentials().cas)
            try:
                await publish_webhook_ca_bundle(hub.kube, self.settings.admission_webhook, ca_pem)
            except KubeAPIError as exc:  # the webhook still answers; the API server
                # refuses to call it (TLS) until the bundle is there: logged, not fatal
                log.error("ValidatingWebhookConfiguration %s: caBundle not written (%s)",
                          self.settings.admission_webhook, exc)  # fmt: skip
            # and again while the hub runs: the configuration may come later, or be
            # written back without the bundle
            hub.add_task(
                keep_webhook_ca_bundle(
                    hub.kube, self.settings.admission_webhook,
                    lambda: pki.dump_certificate_pem(credentials().cas),
                    self.settings.admission_ca_interval,
                ),
                name="admission-ca-bundle",
            )  # fmt: skip

    async def _install_crd(self) -> None:
        assert self._hub is not None and self._hub.kube is not None
        try:
            # rbac: embedded API only (a cluster gets the CRD from deploy/crds)
            await self._hub.kube.create(CRDS, yaml.safe_load(CRD_PATH.read_text()))
        except KubeConflict:
            pass

    # -- from the edges ----------------------------------------------------------------------

    def _on_artifact_request(self, inbound: Inbound) -> None:
        inbound.reply(self.server.answer(inbound.node, inbound.message))

    async def _on_progress(self, inbound: Inbound) -> None:
        """Apply a node's ``upgrade_progress`` and acknowledge it once the EdgeUpgrade's
        status holds it (the dispatcher calls ``done()`` when this returns).

        At-least-once from the agent's outbox, so duplicates are expected: a report with
        the phase and ``observed_at`` (seconds) of one already applied for that node and
        upgrade, one for an upgrade this hub does not know, and a move the rollout does
        not allow are logged and acknowledged without effect (never left unacknowledged:
        that would hold every later cumulative ack of the session). A status write that
        fails is retried by the controller loop from the rollout in memory.
        """
        message: UpgradeProgress = inbound.message
        found = self.rollouts.get(message.uid)
        if found is None:
            log.info("progress of unknown upgrade %s from %s", message.uid, inbound.node)
            return
        seen = self._observed.setdefault((message.uid, inbound.node), set())
        if (message.phase, message.observed_at) in seen:
            log.debug("duplicate progress of %s from %s", found[0].name, inbound.node)
            return
        seen.add((message.phase, message.observed_at))
        reason = message.reason[:MAX_REPORT_REASON]
        try:
            if message.phase == "Deferred":
                found[1].defer(
                    inbound.node, self.clock(), reason, message=message.message[:MAX_REPORT_MESSAGE]
                )
            else:
                found[1].report(
                    inbound.node,
                    NodePhase(message.phase),
                    self.clock(),
                    reason,
                    message.message[:MAX_REPORT_MESSAGE],
                )
        except (IllegalTransition, ValueError) as exc:
            log.warning("upgrade %s: %s", found[0].name, exc)
            return
        self._dirty.add(message.uid)
        self._changes[message.uid] = self._changes.get(message.uid, 0) + 1
        await self._write_status(message.uid)

    async def _write_status(self, uid: str) -> None:
        """Write the status of upgrade ``uid`` from its rollout, once for every change
        made before the call (concurrent callers share one write)."""
        hub = self._hub
        assert hub is not None and hub.kube is not None
        wanted = self._changes.get(uid, 0)
        lock = self._locks.setdefault(uid, asyncio.Lock())
        async with lock:
            found = self.rollouts.get(uid)
            if found is None or self._written.get(uid, 0) >= wanted:
                return
            upgrade, rollout = found
            changes = self._changes.get(uid, 0)
            status = rollout.to_status(upgrade.generation)
            try:
                # rbac: hub's ClusterRole (patch edgeupgrades/status)
                await hub.kube.patch(
                    EDGEUPGRADES, upgrade.name, {"status": status}, subresource="status"
                )
            except KubeAPIError as exc:
                log.warning("upgrade %s: status not written (%s); retried", upgrade.name, exc)
                self._dirty.add(uid)
                return
            self._written[uid] = changes

    def _on_synced(self, session: NodeSession) -> None:
        for upgrade, rollout in self.rollouts.values():
            order = rollout.order_for(session.node)
            if order is not None:
                session.send(self._order(upgrade, rollout))

    # -- the controller ------------------------------------------------------------------

    def _order(self, upgrade: Upgrade, rollout: Rollout) -> UpgradeOrder:
        artifact = upgrade.spec.artifact
        return UpgradeOrder(
            upgrade=upgrade.name,
            uid=upgrade.uid,
            version=str(upgrade.spec.version),
            sha256=artifact.sha256,
            artifact=artifact.name,
            url=artifact.url,
            size=artifact.size,
            allow_downgrade=upgrade.spec.allow_downgrade,
            gate_s=upgrade.spec.gate.timeout_s,
        )

    async def _loop(self) -> None:
        await run_passes(
            self.tick, self.settings.interval,
            kind="EdgeUpgrade", name="upgrade", off="upgrades are off", log=log,
        )  # fmt: skip

    async def tick(self) -> None:
        """One pass over every EdgeUpgrade (see the module docstring)."""
        hub = self._hub
        assert hub is not None and hub.kube is not None
        fleet = cached_fleet(hub)
        if fleet is None:
            return
        # rbac: hub's ClusterRole (list edgeupgrades)
        upgrades, _ = await hub.kube.list(EDGEUPGRADES)
        seen = {str((obj.get("metadata") or {}).get("uid", "")) for obj in upgrades}
        for uid in set(self.rollouts) - seen:  # deleted (the last one too): no more orders
            self._forget(uid)
        if not upgrades:
            return
        nodes, pods = fleet
        ready = pods_ready_by_node(pods)
        for obj in upgrades:
            try:
                await self._step(obj, nodes, ready)
            except KubeAPIError as exc:  # this one's write; the others still get their pass
                name = (obj.get("metadata") or {}).get("name")
                if exc.status != 404:  # 404: deleted since the list
                    log.warning("EdgeUpgrade %s: status not written (%s)", name, exc)

    def _forget(self, uid: str) -> None:
        """Drop a deleted EdgeUpgrade: its rollout, its bookkeeping and the artifact
        grants of its nodes (a reconnecting node is not ordered again, nor served)."""
        upgrade, rollout = self.rollouts.pop(uid)
        for node in rollout.nodes:
            self.server.revoke(node, upgrade.spec.artifact.sha256)
        for table in (self._changes, self._written, self._locks):
            table.pop(uid, None)
        for key in [k for k in self._observed if k[0] == uid]:
            del self._observed[key]

    async def _step(self, obj: Mapping[str, Any], nodes: list[dict], ready: dict) -> None:
        hub = self._hub
        assert hub is not None and hub.kube is not None
        name = obj["metadata"]["name"]
        try:
            upgrade = parse_upgrade(obj)
        except InvalidUpgrade as exc:
            body = invalid_status(obj, exc)
            if body is not None:
                # rbac: hub's ClusterRole (patch edgeupgrades/status)
                await hub.kube.patch(EDGEUPGRADES, name, body, subresource="status")
            return
        facts = {}
        for node in nodes:
            meta = node.get("metadata") or {}
            if not upgrade.spec.node_selector.matches(selection_labels(node)):
                continue
            node_name = meta.get("name", "")
            session = hub.registry.get(node_name)
            connected = session is not None and not session.closed
            hello = session.link.hello if connected and session is not None else None
            facts[node_name] = NodeFacts(
                node_name,
                connected=connected,
                # The live session's hello is the agent's own word, at once; the Node's
                # annotation is the same word written later, through the rate limiter
                # (100 reconnects of a batch waited ~20 s for it).
                version=hello.agent_version
                if hello is not None
                else (meta.get("annotations") or {}).get(AGENT_VERSION_ANNOTATION, ""),
                pods_ready=ready.get(node_name, True),
            )
        known = self.rollouts.get(upgrade.uid)
        if known is None:
            # restored from the status: only of nodes the spec selects (the status may
            # have been written by anyone with edgeupgrades/status: no admission check)
            rollout = Rollout.from_status(upgrade.spec, upgrade.status, selected=facts)
        elif known[0].generation != upgrade.generation:
            rollout = Rollout(upgrade.spec, known[1].nodes.values(), known[1].batch)
        else:
            rollout = known[1]
        self.rollouts[upgrade.uid] = (upgrade, rollout)
        before = rollout.to_status(upgrade.generation)
        for action in rollout.step(facts, self.clock()):
            self._act(upgrade, rollout, action)
        status = rollout.to_status(upgrade.generation)
        if status != before or status != dict(upgrade.status) or upgrade.uid in self._dirty:
            self._dirty.discard(upgrade.uid)
            self._changes[upgrade.uid] = self._changes.get(upgrade.uid, 0) + 1
            await self._write_status(upgrade.uid)

    def _act(self, upgrade: Upgrade, rollout: Rollout, action: Order | Rollback) -> None:
        assert self._hub is not None
        session = self._hub.registry.get(action.node)
        if isinstance(action, Order):
            artifact = upgrade.spec.artifact
            if artifact.name:
                self.server.allow(action.node, artifact.sha256, artifact.name)
            message: Any = self._order(upgrade, rollout)
        else:
            message = UpgradeRollback(upgrade.name, upgrade.uid, action.reason)
        if session is not None and not session.closed:
            session.send(message)


def upgrade_extension(settings: UpgradeSettings) -> UpgradeExtension:
    """The upgrade extension for ``Hub(..., extensions=[...])``."""
    return UpgradeExtension(settings)
