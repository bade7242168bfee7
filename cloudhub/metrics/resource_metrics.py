"""NodeMetrics and PodMetrics (``metrics.k8s.io/v1beta1``) for edge nodes.

:class:`ResourceMetricsAPI` builds the JSON objects that metrics-server serves and
``kubectl top`` reads, from the hub's latest edge samples:

- ``usage.cpu`` is a quantity in nanocores (``"152918469n"``): CPU time over the latest
  sample's window divided by the window;
- ``usage.memory`` is the working set in KiB (``"1454560Ki"``);
- ``timestamp`` is the end of that window and ``window`` its length as a Go duration
  (``"15s"``, ``"1m0s"``): the usage was measured over ``[timestamp - window,
  timestamp]``, as the API documents.

The HTTP side (the embedded API's ``/apis/metrics.k8s.io/v1beta1/...`` routes, or the
hub's aggregated API server, :mod:`cloudhub.metrics.aggregated`, behind the APIService of
``deploy/overlays/metrics-api``) calls these, through
:class:`~cloudhub.metrics.extension.ResourceMetricsGroup`, and answers a 404 for a
:class:`~cloudhub.metrics.errors.MetricsNotFound`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from cloudhub.metrics.conditions import rfc3339
from cloudhub.metrics.errors import MetricsNotFound
from cloudhub.metrics.pods import PodIndex
from cloudhub.metrics.store import ContainerState, EdgeMetricsStore, NodeState, Rate
from protocol.metrics_codec import Metric

__all__ = ["API_VERSION", "ResourceMetricsAPI", "cpu_quantity", "go_duration", "memory_quantity"]

API_VERSION = "metrics.k8s.io/v1beta1"


def cpu_quantity(rate: Rate | None) -> str:
    """Format a CPU rate (ms of CPU per window) as a nanocores quantity (``"0"`` if none)."""
    if rate is None:
        return "0"
    return f"{rate.increment * 1_000_000_000 // rate.window_ms}n"


def memory_quantity(kib: int | None) -> str:
    """Format a working set in KiB as a binary-SI quantity (``"1454560Ki"``)."""
    return f"{kib or 0}Ki"


def go_duration(ms: int) -> str:
    """Format milliseconds as Go's ``time.Duration.String()`` does (``"1m0s"``)."""
    if ms == 0:
        return "0s"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds, millis = divmod(rest, 1000)
    sec = f"{seconds}.{millis:03d}".rstrip("0").rstrip(".") if millis else str(seconds)
    if hours:
        return f"{hours}h{minutes}m{sec}s"
    if minutes:
        return f"{minutes}m{sec}s"
    return f"{sec}s"


class ResourceMetricsAPI:
    """Builds metrics.k8s.io objects for edge nodes and their pods.

    Args:
        store: the hub's edge metrics.
        pods: the pod index (names, labels, node of each pod).
    """

    def __init__(self, store: EdgeMetricsStore, pods: PodIndex) -> None:
        self._store = store
        self._pods = pods

    # --- nodes ------------------------------------------------------------------------------

    def node_metrics(
        self, name: str, now: float, labels: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """Return the NodeMetrics of one edge node.

        Args:
            name: the node's name.
            now: current time (s since the epoch), the object's ``creationTimestamp``.
            labels: the Node's labels, copied into the metadata as metrics-server does.

        Raises:
            MetricsNotFound: the node never reported a CPU rate and working set.
        """
        item = self._node_item(self._store.node(name), now, labels)
        if item is None:
            raise MetricsNotFound("NodeMetrics", "", name)
        return {"kind": "NodeMetrics", "apiVersion": API_VERSION, **item}

    def list_node_metrics(
        self,
        now: float,
        names: Iterable[str] | None = None,
        labels: Mapping[str, Mapping[str, str]] | None = None,
    ) -> dict[str, Any]:
        """Return a NodeMetricsList of the given edge nodes (all with metrics if ``None``).

        Nodes without metrics are left out, as metrics-server does.
        """
        states = [self._store.node(n) for n in names] if names is not None else self._store.nodes()
        items = []
        for state in states:
            if state is None:
                continue
            item = self._node_item(state, now, (labels or {}).get(state.node))
            if item is not None:
                items.append(item)
        items.sort(key=lambda i: i["metadata"]["name"])
        return {
            "kind": "NodeMetricsList",
            "apiVersion": API_VERSION,
            "metadata": {},
            "items": items,
        }

    def _node_item(
        self, state: NodeState | None, now: float, labels: Mapping[str, str] | None
    ) -> dict[str, Any] | None:
        if state is None:
            return None
        rate = state.rates.get((Metric.NODE_CPU_USAGE_MS, None))
        working_set = state.gauge(Metric.NODE_MEMORY_WORKING_SET_KIB)
        if rate is None or working_set is None:
            return None
        metadata: dict[str, Any] = {"name": state.node, "creationTimestamp": rfc3339(now)}
        if labels:
            metadata["labels"] = dict(labels)
        return {
            "metadata": metadata,
            "timestamp": rfc3339(rate.t_ms / 1000),
            "window": go_duration(rate.window_ms),
            "usage": {"cpu": cpu_quantity(rate), "memory": memory_quantity(working_set)},
        }

    # --- pods -------------------------------------------------------------------------------

    def pod_metrics(self, namespace: str, name: str, now: float) -> dict[str, Any]:
        """Return the PodMetrics of one pod on an edge node.

        Raises:
            MetricsNotFound: the pod is unknown, not on a node with metrics, or none of
                its containers has a CPU rate yet.
        """
        node = self._pods.pod_node(namespace, name)
        groups = self._pod_groups(node) if node is not None else {}
        containers = groups.get((namespace, name))
        if not containers:
            raise MetricsNotFound("PodMetrics", namespace, name)
        return {
            "kind": "PodMetrics",
            "apiVersion": API_VERSION,
            **self._pod_item(namespace, name, containers, now),
        }

    def list_pod_metrics(self, now: float, namespace: str | None = None) -> dict[str, Any]:
        """Return a PodMetricsList of the pods on edge nodes (of one namespace if given)."""
        items = []
        for state in self._store.nodes():
            for (ns, pod), containers in self._pod_groups(state.node).items():
                if namespace is None or ns == namespace:
                    items.append(self._pod_item(ns, pod, containers, now))
        items.sort(key=lambda i: (i["metadata"]["namespace"], i["metadata"]["name"]))
        return {"kind": "PodMetricsList", "apiVersion": API_VERSION, "metadata": {}, "items": items}

    def _pod_groups(self, node: str) -> dict[tuple[str, str], list[tuple[str, ContainerState]]]:
        state = self._store.node(node)
        groups: dict[tuple[str, str], list[tuple[str, ContainerState]]] = {}
        if state is None:
            return groups
        for key, container in state.containers.items():
            if container.cpu is None:
                continue  # no complete window yet, as metrics-server skips such containers
            names = self._pods.resolve(node, key)
            if names is None:
                continue
            groups.setdefault((names.namespace, names.pod), []).append((names.container, container))
        return groups

    def _pod_item(
        self, namespace: str, name: str, containers: list[tuple[str, ContainerState]], now: float
    ) -> dict[str, Any]:
        containers = sorted(containers, key=lambda c: c[0])
        newest = max((c.cpu for _, c in containers if c.cpu), key=lambda r: r.t_ms)
        metadata: dict[str, Any] = {
            "name": name,
            "namespace": namespace,
            "creationTimestamp": rfc3339(now),
        }
        labels = self._pods.pod_labels(namespace, name)
        if labels:
            metadata["labels"] = dict(labels)
        return {
            "metadata": metadata,
            "timestamp": rfc3339(newest.t_ms / 1000),
            "window": go_duration(newest.window_ms),
            "containers": [
                {
                    "name": cname,
                    "usage": {
                        "cpu": cpu_quantity(c.cpu),
                        "memory": memory_quantity(c.memory_working_set_kib),
                    },
                }
                for cname, c in containers
            ],
        }
