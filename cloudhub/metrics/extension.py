"""Edge metrics as a hub extension: ``Hub(settings, extensions=[metrics_extension(...)])``.

``cloudhub serve`` installs it (settings group ``metrics``, on by default). At install it:

1. handles ``metrics_batch`` (``hub.dispatcher``): a batch is refused with ``FORBIDDEN``
   when it names another node than the session's certificate, with ``INVALID_MESSAGE``
   when its body is larger than ``metrics.max_batch_bytes`` or does not decode; otherwise
   it goes into the :class:`~cloudhub.metrics.EdgeMetricsStore` (de-duplicated by batch
   identity) and only then is marked done, so the session acknowledges it. A refused batch
   is acknowledged too (a resend would fail the same way) and the edge gets an ``error``
   naming the reason;
2. keeps the :class:`~cloudhub.metrics.PodIndex` from the hub's pod informer (container
   keys back to namespace, pod and container names, and pod labels);
3. appends the edge series to the hub's ``/metrics`` (``hub.metrics.add_exposition``:
   :class:`~cloudhub.metrics.EdgeMetricsExposition`, cached per node);
4. gives the Node MemoryPressure and DiskPressure from the edge's latest figures
   (``hub.lifecycle.condition_providers``; :func:`~cloudhub.metrics.evaluate_pressure`
   with the configured thresholds, kubelet's eviction signals) and asks for a status
   write when a status changes from what the Node says;
5. on the embedded API, serves ``metrics.k8s.io/v1beta1`` NodeMetrics and PodMetrics
   (``EmbeddedAPIServer.add_api``), so ``kubectl top node`` / ``kubectl top pod`` work;
6. forgets a deleted Node's metrics (``hub.on_node_deleted``);
7. with ``metrics.aggregated_api`` on a real cluster, reads the API server's front-proxy
   settings (``kube-system/extension-apiserver-authentication``) and serves the same
   group over HTTPS (:class:`~cloudhub.metrics.aggregated.AggregatedAPIServer`) for the
   APIService ``v1beta1.metrics.k8s.io``, as ``hub.aggregated_server``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from cloudhub.aggregation import AggregatedRequest, AggregatedResource
from cloudhub.metrics.conditions import PressureState, evaluate_pressure, node_usage
from cloudhub.metrics.errors import BatchRejected, MetricsNotFound
from cloudhub.metrics.exposition import EdgeMetricsExposition
from cloudhub.metrics.pods import PodIndex
from cloudhub.metrics.resource_metrics import ResourceMetricsAPI
from cloudhub.metrics.settings import HubMetricsSettings
from cloudhub.metrics.store import EdgeMetricsStore
from protocol.errors import ErrorCode
from protocol.messages import MetricsBatch
from protocol.metrics_codec import MetricsBodyError, from_samples_field

if TYPE_CHECKING:
    from cloudhub.bridge.dispatch import Inbound
    from cloudhub.hub import Hub

__all__ = ["MetricsExtension", "ResourceMetricsGroup", "metrics_extension"]

log = logging.getLogger(__name__)


class MetricsExtension:
    """Installs edge metrics into a hub (see the module docstring).

    Args:
        settings: the ``metrics`` settings group.
        clock: wall clock, seconds since the epoch (condition times, ``creationTimestamp``).

    Attributes:
        store: the edge metrics (latest samples per node and container).
        pods: the pod index fed from the hub's pod informer.
        exposition: the Prometheus text of the edge series.
        resource_metrics: NodeMetrics / PodMetrics built from ``store`` and ``pods``.
        clock: the wall clock it was given.
    """

    def __init__(
        self, settings: HubMetricsSettings, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.settings = settings
        self.store = EdgeMetricsStore()
        self.pods = PodIndex()
        self.exposition = EdgeMetricsExposition(self.store, self.pods)
        self.resource_metrics = ResourceMetricsAPI(self.store, self.pods)
        self.clock = clock
        self._thresholds = settings.thresholds()
        self._pressure: dict[str, PressureState] = {}
        self._hub: Hub | None = None

    def __call__(self, hub: Hub) -> Awaitable[None] | None:
        if not self.settings.enabled:
            log.info("edge metrics are off (metrics.enabled: false)")
            return None
        self._hub = hub
        hub.dispatcher.register(MetricsBatch, self.on_batch)
        hub.pods.add_handler(self._on_pod)
        hub.metrics.add_exposition(self.exposition.render)
        hub.on_node_deleted.append(self._forget)
        if self.settings.pressure_conditions and hub.lifecycle is not None:
            hub.lifecycle.condition_providers.append(self.pressure_conditions)
        if hub.embedded_api is not None:
            hub.embedded_api.add_api(ResourceMetricsGroup(self, hub))
        if self.settings.aggregated_api and hub.kube is not None and hub.embedded_api is None:
            return self._serve_aggregated(hub)
        return None

    async def _serve_aggregated(self, hub: Hub) -> None:
        """Start the HTTPS aggregated API (item 7 of the module docstring).

        Raises:
            ConfigError: the API server publishes no front-proxy CA, or it does not load.
        """
        from cloudhub.errors import ConfigError
        from cloudhub.kube import CONFIGMAPS
        from cloudhub.metrics.aggregated import (
            AUTHENTICATION_CONFIGMAP,
            AggregatedAPIServer,
            front_proxy_config,
            publish_ca_bundle,
        )
        from protocol import pki

        namespace, name = AUTHENTICATION_CONFIGMAP
        assert hub.kube is not None
        try:
            found = await hub.kube.get(CONFIGMAPS, name, namespace)
        except Exception as exc:
            raise ConfigError(f"metrics.aggregated_api: reading {namespace}/{name}: {exc}") from exc
        credentials = hub._credentials_source()
        server = AggregatedAPIServer(
            [ResourceMetricsGroup(self, hub)],
            credentials,
            front_proxy_config((found or {}).get("data") or {}),
            host=self.settings.aggregated_host,
            port=self.settings.aggregated_port,
        )
        await server.start()
        server.owned_by(hub, "aggregated-api")  # closed with the hub, also if what follows fails
        hub.aggregated_server = server  # type: ignore[attr-defined]
        if self.settings.apiservice:
            cas = credentials().cas
            await publish_ca_bundle(
                hub.kube, self.settings.apiservice, pki.dump_certificate_pem(cas)
            )

    # -- ingest -------------------------------------------------------------------------------

    def on_batch(self, inbound: Inbound) -> None:
        """The ``metrics_batch`` handler: store, then done (see the module docstring)."""
        message = inbound.message
        assert isinstance(message, MetricsBatch)
        node = inbound.node
        if message.node_name != node:
            inbound.refuse(
                ErrorCode.FORBIDDEN,
                f"metrics_batch names node {message.node_name!r} but the session is node "
                f"{node!r}: a node reports only its own metrics",
            )
            return
        try:
            body = from_samples_field(message.samples)
        except MetricsBodyError as exc:
            self.store.stats.rejected += 1
            inbound.refuse(ErrorCode.INVALID_MESSAGE, f"metrics_batch rejected: {exc}")
            return
        limit = self.settings.max_batch_bytes
        if len(body) > limit:
            self.store.stats.rejected += 1
            inbound.refuse(
                ErrorCode.INVALID_MESSAGE,
                f"metrics_batch rejected: body of {len(body)} bytes is over the hub's limit "
                f"of {limit} bytes (metrics.max_batch_bytes)",
            )
            return
        now = self.clock()
        try:
            result = self.store.ingest(node, body, now)
        except BatchRejected as exc:
            inbound.refuse(ErrorCode.INVALID_MESSAGE, str(exc))
            return
        if result.accepted and self.settings.pressure_conditions:
            self._evaluate(node, now)
        inbound.done()

    # -- node conditions ----------------------------------------------------------------------

    def pressure_conditions(self, node: str, now: float) -> list[dict[str, Any]]:
        """The lifecycle's condition provider: MemoryPressure and DiskPressure from the
        node's latest figures (nothing before its first metrics: the defaults stay)."""
        if self.store.node(node) is None:
            return []
        state = self._evaluate_state(node, now)
        return [dict(c) for c in state.conditions]

    def _evaluate_state(self, node: str, now: float) -> PressureState:
        state = evaluate_pressure(
            node_usage(self.store.node(node)), self._thresholds, now, self._pressure.get(node)
        )
        self._pressure[node] = state
        return state

    def _evaluate(self, node: str, now: float) -> None:
        state = self._evaluate_state(node, now)
        hub = self._hub
        if hub is None or hub.lifecycle is None:
            return
        cached = hub.nodes.get(node) if hub.nodes is not None else None
        written = {
            c.get("type"): c.get("status")
            for c in ((cached or {}).get("status") or {}).get("conditions") or ()
        }
        if any(written.get(c["type"]) != c["status"] for c in state.conditions):
            hub.lifecycle.conditions_changed(node)

    # -- informer and hooks -------------------------------------------------------------------

    def _on_pod(self, event: str, pod: dict, old: dict | None) -> None:
        if event == "DELETED":
            self.pods.forget_pod(pod)
        else:
            self.pods.observe_pod(pod)

    def _forget(self, node: str) -> None:
        self.store.forget_node(node)
        self._pressure.pop(node, None)


class ResourceMetricsGroup:
    """``metrics.k8s.io/v1beta1`` on the embedded API (``cloudhub.aggregation.AggregatedAPI``):
    NodeMetrics (``nodes``) and PodMetrics (``pods``) of edge nodes, as metrics-server
    serves them; ``labelSelector`` filters by the Node's or the pod's labels."""

    group = "metrics.k8s.io"
    version = "v1beta1"

    def __init__(self, extension: MetricsExtension, hub: Hub) -> None:
        self.resources = (
            AggregatedResource("nodes", "", "NodeMetrics", namespaced=False),
            AggregatedResource("pods", "", "PodMetrics", namespaced=True),
        )
        self._extension = extension
        self._hub = hub

    def _node_labels(self) -> Mapping[str, Mapping[str, str]]:
        nodes = self._hub.nodes.items() if self._hub.nodes is not None else []
        return {
            (n.get("metadata") or {}).get("name", ""): (n.get("metadata") or {}).get("labels") or {}
            for n in nodes
        }

    async def handle(self, request: AggregatedRequest) -> dict[str, Any] | None:
        """Answer a get or list (``None``: not found, a 404)."""
        api = self._extension.resource_metrics
        now = self._extension.clock()
        selector = request.label_selector
        if request.resource.plural == "nodes":
            labels = self._node_labels()
            if request.name is not None:
                try:
                    return api.node_metrics(request.name, now, labels.get(request.name))
                except MetricsNotFound:
                    return None
            names = None
            if not selector.empty:
                names = [n for n, node_labels in labels.items() if selector.matches(node_labels)]
            return api.list_node_metrics(now, names, labels)
        if request.name is not None:
            try:
                return api.pod_metrics(request.namespace or "", request.name, now)
            except MetricsNotFound:
                return None
        listed = api.list_pod_metrics(now, request.namespace)
        if not selector.empty:
            listed["items"] = [
                item
                for item in listed["items"]
                if selector.matches(item["metadata"].get("labels") or {})
            ]
        return listed


def metrics_extension(settings: HubMetricsSettings) -> MetricsExtension:
    """The edge metrics extension for ``Hub(..., extensions=[...])``."""
    return MetricsExtension(settings)
