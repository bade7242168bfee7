"""Which containers run on which edge node: container keys back to names and labels.

Container series arrive keyed by ``protocol.metrics_codec.container_key(namespace, pod,
container)``. The hub knows every pod bound to an edge node (it streams them down), so the
bridge feeds this index from its pod informer (:meth:`PodIndex.observe_pod` on add and
update, :meth:`PodIndex.forget_pod` on delete); exposition and the metrics API resolve
keys through it when they are read, so the order of pod events and metric batches does
not matter.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from protocol.metrics_codec import container_key

__all__ = ["ContainerName", "PodIndex"]


@dataclass(frozen=True, slots=True)
class ContainerName:
    """The names a container series is labelled with."""

    namespace: str
    pod: str
    container: str


@dataclass(slots=True)
class _Pod:
    node: str
    keys: tuple[int, ...]
    labels: Mapping[str, str]


class PodIndex:
    """Container keys of the pods bound to edge nodes; fed from the pod informer."""

    def __init__(self) -> None:
        self._pods: dict[tuple[str, str], _Pod] = {}
        self._by_node: dict[str, dict[int, ContainerName]] = {}
        self._generation: dict[str, int] = {}

    def observe_pod(self, pod: Mapping[str, Any]) -> None:
        """Index (or re-index) a pod from its raw API JSON.

        Pods without ``spec.nodeName`` are not bound yet and are ignored; containers
        and init containers are both indexed.
        """
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        namespace = meta.get("namespace") or "default"
        name = meta.get("name")
        node = spec.get("nodeName")
        if not name:
            return
        if not node:
            self.forget_pod(pod)
            return
        containers = [
            c.get("name")
            for group in ("initContainers", "containers")
            for c in spec.get(group) or ()
            if c.get("name")
        ]
        keys = tuple(container_key(namespace, name, c) for c in containers)
        labels = dict(meta.get("labels") or {})
        old = self._pods.get((namespace, name))
        if old is not None and old.node == node and old.keys == keys:
            old.labels = labels
            return
        if old is not None:
            self._drop(namespace, name)
        self._pods[(namespace, name)] = _Pod(node, keys, labels)
        index = self._by_node.setdefault(node, {})
        for key, container in zip(keys, containers, strict=True):
            index[key] = ContainerName(namespace, name, container)
        self._bump(node)

    def forget_pod(self, pod: Mapping[str, Any]) -> None:
        """Remove a pod (raw API JSON; only namespace and name are read)."""
        meta = pod.get("metadata") or {}
        self._drop(meta.get("namespace") or "default", meta.get("name") or "")

    def replace_node_pods(self, node: str, pods: Iterable[Mapping[str, Any]]) -> None:
        """Make the pods of ``node`` exactly ``pods`` (after an informer relist)."""
        for namespace, name in [k for k, p in self._pods.items() if p.node == node]:
            self._drop(namespace, name)
        for pod in pods:
            self.observe_pod(pod)
        self._bump(node)

    def resolve(self, node: str, key: int) -> ContainerName | None:
        """Return the names of the container with ``key`` on ``node``, or ``None``."""
        index = self._by_node.get(node)
        return index.get(key) if index is not None else None

    def pod_labels(self, namespace: str, name: str) -> Mapping[str, str]:
        """Return the pod's labels (empty if unknown)."""
        pod = self._pods.get((namespace, name))
        return pod.labels if pod is not None else {}

    def pod_node(self, namespace: str, name: str) -> str | None:
        """Return the node the pod is bound to, or ``None`` if unknown."""
        pod = self._pods.get((namespace, name))
        return pod.node if pod is not None else None

    def generation(self, node: str) -> int:
        """Return a number that changes whenever the node's set of containers changes."""
        return self._generation.get(node, 0)

    def _drop(self, namespace: str, name: str) -> None:
        pod = self._pods.pop((namespace, name), None)
        if pod is None:
            return
        index = self._by_node.get(pod.node, {})
        for key in pod.keys:
            found = index.get(key)
            if found is not None and found.pod == name and found.namespace == namespace:
                del index[key]
        if not index:
            self._by_node.pop(pod.node, None)
        self._bump(pod.node)

    def _bump(self, node: str) -> None:
        self._generation[node] = self._generation.get(node, 0) + 1
