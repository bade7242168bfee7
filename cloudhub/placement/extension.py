"""Placement as a hub extension: ``Hub(settings, extensions=[placement_extension(...)])``.

``cloudhub serve`` installs it (settings group ``placement``, on by default). At install
(after the hub's API client exists, before its informers start) it:

1. makes a :class:`~cloudhub.placement.controller.PlacementController` on the hub's own
   Kubernetes client, with the ``placement`` settings; it places apps/v1 Deployments and
   DaemonSets that target edge nodes too when ``place_workloads`` says so (``auto``: on
   the embedded API only, which has no kube-scheduler);
2. installs the EdgePlacement CRD when the hub runs its embedded API (on a cluster it
   comes from ``deploy/crds/`` and the hub's RBAC grants no CRD writes);
3. feeds the controller each edge node's connectivity from the hub's session registry:
   a session that becomes current reports the node online, the end of the current
   session reports it offline since that moment (a superseded session says nothing: the
   node is still connected through the newer one). An edge node the hub has not seen
   since it started counts as offline since then.
4. runs the controller as a task owned by the hub (cancelled at close; if it fails, the
   hub stops).

Why the session registry and not the Node's ``Ready`` condition: the hub refreshes
``Ready`` only every ``nodes.status_report_interval`` (10 min; kubelet 5; the Lease is
the frequent heartbeat) and sets it Unknown ``nodes.not_ready_grace`` after a loss,
keeping the last heartbeat time. Read from the Node, a connected node would look stale
after 40 s, and a lost one would look lost since its last status refresh — up to 5 min
before the real loss, so its replicas would fail over early. The registry knows the
moment a session ends; the offline tolerance counts from there.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from cloudhub.placement.controller import ControllerSettings, PlacementController
from cloudhub.placement.settings import PlacementSettings

if TYPE_CHECKING:
    from cloudhub.bridge.session import NodeSession
    from cloudhub.hub import Hub

__all__ = ["PlacementExtension", "placement_extension"]

log = logging.getLogger(__name__)


class PlacementExtension:
    """Installs placement into a hub (see the module docstring).

    Args:
        settings: the ``placement`` settings group.

    Attributes:
        controller: the running controller once installed (None when disabled or
            not installed yet); read-only use (``controller.planner`` for explain and
            status, ``controller.plans``).
    """

    def __init__(self, settings: PlacementSettings) -> None:
        self.settings = settings
        self.controller: PlacementController | None = None

    def __call__(self, hub: Hub) -> None:
        if not self.settings.enabled:
            log.info("placement disabled (placement.enabled=false)")
            return
        assert hub.kube is not None
        s = self.settings
        embedded = hub.settings.kube.mode == "embedded"
        nodes = hub.settings.nodes
        controller = PlacementController(
            hub.kube,
            ControllerSettings(
                namespace=s.namespace or None,
                namespaces=hub.settings.kube.namespaces,
                place_workloads=s.places_workloads(embedded),
                install_crd=embedded,
                writes_per_second=s.writes_per_second,
                write_burst=s.write_burst,
                write_concurrency=s.write_concurrency,
                settle_s=s.settle,
                resync_s=s.resync,
                # Nodes the hub does not report on (no edge role: kubelets of a real
                # cluster) post Ready as seldom as the hub does: every
                # status_report_interval, the Lease being the frequent heartbeat.
                heartbeat_grace_s=nodes.status_report_interval + nodes.not_ready_grace,
                hub_connectivity=True,
                all_workloads=embedded,  # nothing else runs them there
            ),
            events=self._recorder(hub),
            on_backoff=lambda kind: hub.metrics.controller_backoffs.labels(kind).inc(),
        )
        self.controller = controller
        hub.registry.on_connect.append(self._connected)
        hub.registry.on_disconnect.append(self._disconnected)
        hub.add_task(controller.run(), name="placement")
        log.info(
            "placement controller started (namespace %s, workloads %s)",
            s.namespace or "all",
            "placed" if controller.settings.place_workloads else "left to Kubernetes",
        )

    @staticmethod
    def _recorder(hub: Hub) -> Callable[[dict, str, str, str], None] | None:
        events = hub.events
        if events is None:
            return None

        def record(involved: dict, type_: str, reason: str, message: str) -> None:
            events.record(involved, type_, reason, message)

        return record

    def _connected(self, session: NodeSession) -> None:
        if self.controller is not None:
            self.controller.report_connectivity(session.node, None)

    def _disconnected(self, session: NodeSession, was_current: bool) -> None:
        if was_current and self.controller is not None:
            self.controller.report_connectivity(session.node, time.time())


def placement_extension(settings: PlacementSettings) -> PlacementExtension:
    """The placement extension for ``Hub(..., extensions=[...])``."""
    return PlacementExtension(settings)
