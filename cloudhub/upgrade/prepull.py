"""Image pre-pull as a hub extension: ``Hub(settings, extensions=[prepull_extension(...)])``.

Every ``upgrade.interval`` seconds the controller lists the EdgeImagePrePulls and reads the
edge Nodes from the hub's informer cache, and for each EdgeImagePrePull:

1. checks it (images by :func:`protocol.prepull.check_image`, 1 to 32; the node selector);
   an invalid one gets ``status.phase: Invalid`` with the field and reason;
2. selects the Nodes its ``nodeSelector`` matches that this hub serves (a session here);
   a node keeps its entry while it is away, and loses it once it no longer matches;
3. sends each selected node that has not reported an end (``Pulled``/``Failed``) for the
   current generation an ``image_pull_order`` (once per session: again after every
   reconnect, ``registry.on_synced``); a new generation (the images changed) starts every
   node at ``Pending`` again;
4. writes the status when it changed: per node ``phase`` (Pending → Pulling →
   Pulled | Failed), ``generation``, ``images`` pulled, ``reason``, ``message``,
   ``lastTransitionTime``; the counts for the printer columns; ``phase`` Pulling,
   Completed, Failed, or Pending with ``reason: NoNodes``.

Progress from the nodes (``image_pull_progress``, at-least-once from their outboxes) is
applied at once and acknowledged once the status holds it; a report of another
generation, of an unknown pre-pull, a repeat of the last one applied, or anything after
``Pulled`` for the same generation is acknowledged and dropped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from cloudhub.errors import KubeAPIError
from cloudhub.placement.errors import InvalidSpec
from cloudhub.placement.prepull import PREPULLS
from cloudhub.placement.selectors import LabelSelector, parse_label_selector
from cloudhub.upgrade.extension import cached_fleet
from cloudhub.upgrade.model import MAX_REPORT_MESSAGE, MAX_REPORT_REASON, selection_labels
from cloudhub.upgrade.passes import invalid_status, run_passes
from cloudhub.upgrade.settings import UpgradeSettings
from protocol.errors import InvalidMessage
from protocol.prepull import MAX_IMAGES, ImagePullOrder, ImagePullProgress, check_image

if TYPE_CHECKING:
    from cloudhub.bridge.dispatch import Inbound
    from cloudhub.bridge.session import NodeSession
    from cloudhub.hub import Hub

__all__ = ["PrePullExtension", "parse_prepull", "prepull_extension"]

log = logging.getLogger(__name__)


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


@dataclass(frozen=True, slots=True)
class NodePull:
    """One node's entry in an EdgeImagePrePull's status."""

    phase: str = "Pending"
    generation: int = 0
    images: int = 0
    reason: str = ""
    message: str = ""
    last_transition: str = ""
    observed_at: float = 0.0
    ordered_at: float = 0.0
    """Epoch seconds of the last order (a Failed node is ordered again after the retry)."""


@dataclass(slots=True)
class PrePull:
    """What the controller knows of one EdgeImagePrePull."""

    name: str
    namespace: str
    uid: str
    generation: int
    images: tuple[str, ...]
    selector: LabelSelector
    nodes: dict[str, NodePull] = field(default_factory=dict)
    sent: dict[str, int] = field(default_factory=dict)
    """node -> id() of the session the current generation's order went on."""

    def order(self) -> ImagePullOrder:
        return ImagePullOrder(self.name, self.namespace, self.uid, self.generation, self.images)

    def to_status(self) -> dict[str, Any]:
        entries = []
        for name in sorted(self.nodes):
            n = self.nodes[name]
            entry: dict[str, Any] = {"name": name, "phase": n.phase, "generation": n.generation}
            for key, value in (
                ("images", n.images),
                ("reason", n.reason),
                ("message", n.message),
                ("lastTransitionTime", n.last_transition),
            ):
                if value:
                    entry[key] = value
            entries.append(entry)
        phases = [n.phase for n in self.nodes.values()]
        pulling = sum(p in ("Pending", "Pulling") for p in phases)
        failed = phases.count("Failed")
        if not phases:
            phase, reason = "Pending", "NoNodes"
        elif pulling:
            phase, reason = "Pulling", ""
        elif failed:
            phase, reason = "Failed", "NodeFailed"
        else:
            phase, reason = "Completed", ""
        return {
            "observedGeneration": self.generation,
            "phase": phase,
            "reason": reason,
            "nodeCount": len(phases),
            "pulled": phases.count("Pulled"),
            "pulling": pulling,
            "failed": failed,
            "nodes": entries,
        }


def parse_prepull(obj: Mapping[str, Any]) -> PrePull:
    """An EdgeImagePrePull object, checked.

    Raises:
        InvalidSpec: an image that is not a reference, none or over 32, a duplicate, or a
            bad node selector (the error names the field).
    """
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    images = spec.get("images")
    if not isinstance(images, list) or not 1 <= len(images) <= MAX_IMAGES:
        raise InvalidSpec("spec.images", f"must list 1 to {MAX_IMAGES} images")
    for i, image in enumerate(images):
        try:
            check_image(image)
        except InvalidMessage as exc:
            raise InvalidSpec(f"spec.images[{i}]", str(exc)) from exc
    if len(set(images)) != len(images):
        raise InvalidSpec("spec.images", "names an image twice")
    return PrePull(
        name=str(meta.get("name", "")),
        namespace=str(meta.get("namespace") or "default"),
        uid=str(meta.get("uid", "")),
        generation=int(meta.get("generation") or 1),
        images=tuple(images),
        selector=parse_label_selector(spec.get("nodeSelector"), "spec.nodeSelector"),
    )


def _from_status(prepull: PrePull, status: Mapping[str, Any]) -> None:
    for entry in status.get("nodes") or ():
        if isinstance(entry, Mapping) and entry.get("name"):
            prepull.nodes[str(entry["name"])] = NodePull(
                phase=str(entry.get("phase", "Pending")),
                generation=int(entry.get("generation") or 0),
                images=int(entry.get("images") or 0),
                reason=str(entry.get("reason", "")),
                message=str(entry.get("message", "")),
                last_transition=str(entry.get("lastTransitionTime", "")),
            )


class PrePullExtension:
    """Installs image pre-pull into a hub (see the module docstring).

    Args:
        settings: the ``upgrade`` settings group (``enabled``, ``interval``).
        clock: epoch seconds.
        retry_failed_s: seconds after which a node that reported Failed is ordered again
            (a registry that was down, an image pushed late).
    """

    def __init__(
        self,
        settings: UpgradeSettings,
        clock: Callable[[], float] = time.time,
        *,
        retry_failed_s: float = 60.0,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.retry_failed_s = retry_failed_s
        self.prepulls: dict[str, PrePull] = {}
        self._hub: Hub | None = None
        self._written: dict[str, dict[str, Any]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def __call__(self, hub: Hub) -> None:
        if not self.settings.enabled:
            return
        self._hub = hub
        hub.dispatcher.register(ImagePullProgress, self._on_progress)
        hub.registry.on_synced.append(self._on_synced)
        hub.add_task(self._loop(), name="prepull")

    # -- from the edges ----------------------------------------------------------------------

    async def _on_progress(self, inbound: Inbound) -> None:
        """Apply an ``image_pull_progress``; acknowledged when this returns (the status
        holds it, or it was a duplicate or stale: see the module docstring)."""
        message: ImagePullProgress = inbound.message
        prepull = self.prepulls.get(message.uid)
        if prepull is None or message.generation != prepull.generation:
            log.info("pull progress of unknown or old pre-pull %s from %s", message, inbound.node)
            return
        old = prepull.nodes.get(inbound.node)
        if old is None or (message.phase, message.observed_at) == (old.phase, old.observed_at):
            return  # not selected here, or a repeat of the report applied last
        if old.phase == "Pulled" and old.generation == message.generation:
            return  # the end: a late Pulling (or a Failed of an older attempt) changes nothing
        prepull.nodes[inbound.node] = NodePull(
            phase=message.phase,
            generation=message.generation,
            images=min(message.pulled, len(prepull.images)),
            reason=message.reason[:MAX_REPORT_REASON],
            message=message.message[:MAX_REPORT_MESSAGE],
            last_transition=_iso(self.clock())
            if message.phase != old.phase
            else old.last_transition,
            observed_at=message.observed_at,
            ordered_at=old.ordered_at,
        )
        await self._write(prepull)

    def _on_synced(self, session: NodeSession) -> None:
        for prepull in self.prepulls.values():
            self._send(prepull, session.node, session)

    def _send(self, prepull: PrePull, node: str, session: Any) -> None:
        entry = prepull.nodes.get(node)
        if entry is None or session is None or session.closed:
            return
        now = self.clock()
        if entry.generation == prepull.generation and entry.phase == "Pulled":
            return
        if entry.generation == prepull.generation and entry.phase == "Failed":
            if now - entry.ordered_at < self.retry_failed_s:
                return
            prepull.sent.pop(node, None)
        if prepull.sent.get(node) == id(session):
            return
        prepull.sent[node] = id(session)
        prepull.nodes[node] = replace(entry, ordered_at=now)
        session.send(prepull.order())

    # -- the controller ------------------------------------------------------------------

    async def _loop(self) -> None:
        await run_passes(
            self.tick, self.settings.interval,
            kind="EdgeImagePrePull", name="pre-pull", off="pre-pull is off", log=log,
        )  # fmt: skip

    async def tick(self) -> None:
        """One pass over every EdgeImagePrePull (see the module docstring)."""
        hub = self._hub
        assert hub is not None and hub.kube is not None
        fleet = cached_fleet(hub)
        if fleet is None:
            return
        # rbac: hub's ClusterRole (list edgeimageprepulls)
        objects, _ = await hub.kube.list(PREPULLS)
        if not objects and not self.prepulls:
            return
        nodes = fleet[0]
        labels = {(n.get("metadata") or {}).get("name", ""): selection_labels(n) for n in nodes}
        seen = set()
        for obj in objects:
            seen.add(str((obj.get("metadata") or {}).get("uid", "")))
            try:
                await self._step(obj, labels)
            except KubeAPIError as exc:  # this one's write; the others still get their pass
                meta = obj.get("metadata") or {}
                if exc.status != 404:  # 404: deleted since the list
                    log.warning(
                        "EdgeImagePrePull %s/%s: status not written (%s)",
                        meta.get("namespace"),
                        meta.get("name"),
                        exc,
                    )
        for uid in set(self.prepulls) - seen:
            del self.prepulls[uid]
            self._written.pop(uid, None)
            self._locks.pop(uid, None)

    async def _step(self, obj: Mapping[str, Any], labels: Mapping[str, Mapping]) -> None:
        hub = self._hub
        assert hub is not None and hub.kube is not None
        meta = obj.get("metadata") or {}
        try:
            parsed = parse_prepull(obj)
        except InvalidSpec as exc:
            body = invalid_status(obj, exc)
            if body is not None:
                # rbac: hub's ClusterRole (patch edgeimageprepulls/status)
                await hub.kube.patch(
                    PREPULLS, meta["name"], body, meta.get("namespace"), subresource="status"
                )
            return
        known = self.prepulls.get(parsed.uid)
        if known is None:
            known = parsed
            _from_status(known, obj.get("status") or {})
            self.prepulls[parsed.uid] = known
        elif known.generation != parsed.generation or known.selector != parsed.selector:
            known.generation, known.images, known.selector = (
                parsed.generation,
                parsed.images,
                parsed.selector,
            )
            known.sent.clear()
        for name in list(known.nodes):
            if name not in labels or not known.selector.matches(labels[name]):
                del known.nodes[name]
        for name, node_labels in labels.items():
            session = hub.registry.get(name)
            if name not in known.nodes and session is not None and not session.closed:
                if known.selector.matches(node_labels):
                    known.nodes[name] = NodePull(generation=known.generation)
        for name, entry in list(known.nodes.items()):
            if entry.generation != known.generation:
                known.nodes[name] = NodePull(
                    generation=known.generation, last_transition=_iso(self.clock())
                )
            self._send(known, name, hub.registry.get(name))
        await self._write(known, current=obj.get("status") or {})

    async def _write(self, prepull: PrePull, current: Mapping[str, Any] | None = None) -> None:
        """Write ``prepull``'s status unless it is what was last written (or ``current``)."""
        hub = self._hub
        assert hub is not None and hub.kube is not None
        lock = self._locks.setdefault(prepull.uid, asyncio.Lock())
        async with lock:
            status = prepull.to_status()
            last = self._written.get(prepull.uid)
            if status == last or (last is None and current is not None and status == current):
                self._written[prepull.uid] = status
                return
            try:
                # rbac: hub's ClusterRole (patch edgeimageprepulls/status)
                await hub.kube.patch(
                    PREPULLS,
                    prepull.name,
                    {"status": status},
                    prepull.namespace,
                    subresource="status",
                )
            except KubeAPIError as exc:
                log.warning(
                    "EdgeImagePrePull %s/%s: status not written (%s)",
                    prepull.namespace,
                    prepull.name,
                    exc,
                )
                return
            self._written[prepull.uid] = status


def prepull_extension(settings: UpgradeSettings) -> PrePullExtension:
    """The pre-pull extension for ``Hub(..., extensions=[...])``."""
    return PrePullExtension(settings)
