"""Pods bound to edge nodes and the ConfigMaps and Secrets they reference, as node objects.

Three shared informers (one list+watch per kind, never one per node) feed two sources of
:class:`~cloudhub.bridge.objects.NodeObjects`: the references first, then the pods. The pod
informer is indexed by ``spec.nodeName`` and by reference (``"ConfigMap/ns/name"``), so that
both "the pods of node N" and "the nodes that need this ConfigMap" are index lookups.
"""

from __future__ import annotations

from collections.abc import Iterator

from cloudhub.bridge.objects import NodeObjects
from cloudhub.kube import Informer
from protocol.podrefs import CONFIGMAP, SECRET, pod_references, reference_key, reference_keys

__all__ = ["BY_NODE", "BY_REFERENCE", "POD_INDEXERS", "PodSource"]

BY_NODE = "node"
BY_REFERENCE = "references"


def _node_of(pod: dict) -> list[str]:
    node = (pod.get("spec") or {}).get("nodeName")
    return [node] if node else []


POD_INDEXERS = {BY_NODE: _node_of, BY_REFERENCE: reference_keys}
"""The indexers the pod informer must be built with."""


class PodSource:
    """Connects the pod, ConfigMap and Secret informers to the node objects.

    Args:
        pods: informer over bound pods, built with :data:`POD_INDEXERS`.
        configmaps / secrets: informers over every ConfigMap / Secret.
        objects: where the two sources and the three kinds are registered.
    """

    def __init__(
        self, pods: Informer, configmaps: Informer, secrets: Informer, objects: NodeObjects
    ) -> None:
        self.pods = pods
        self._by_kind = {CONFIGMAP: configmaps, SECRET: secrets}
        self._objects = objects
        objects.add_source("pod-references", self.references_of)
        objects.add_source("pods", self.pods_of)
        objects.add_kind("Pod", lambda ns, name: pods.get(name, ns), held_by=self._holds_pod)
        for kind, informer in self._by_kind.items():
            objects.add_kind(
                kind,
                lambda ns, name, informer=informer: informer.get(name, ns),
                held_by=self._held_by_reference(kind),
            )
        pods.add_handler(self._on_pod)
        configmaps.add_handler(self._on_referenced(CONFIGMAP))
        secrets.add_handler(self._on_referenced(SECRET))

    # -- sources --------------------------------------------------------------------------

    def pods_of(self, node: str) -> list[dict]:
        """The pods bound to ``node`` (terminating ones included: the edge must stop them)."""
        return self.pods.by_index(BY_NODE, node)

    def references_of(self, node: str) -> Iterator[dict]:
        """The existing ConfigMaps and Secrets the pods of ``node`` reference."""
        for pod in self.pods.by_index(BY_NODE, node):
            namespace = (pod.get("metadata") or {}).get("namespace") or ""
            for kind, name in pod_references(pod):
                obj = self._by_kind[kind].get(name, namespace)
                if obj is not None:
                    yield obj

    # -- ownership, from the indexes (node authorization) -----------------------------------

    @staticmethod
    def _holds_pod(node: str, pod: dict) -> bool:
        """A pod is the node's when it is bound to it (what :meth:`pods_of` returns)."""
        return node in _node_of(pod)

    def _held_by_reference(self, kind: str):
        def held_by(node: str, obj: dict) -> bool:
            """A ConfigMap or Secret is the node's when one of its pods references it (what
            :meth:`references_of` returns): one lookup in the by-reference index."""
            meta = obj.get("metadata") or {}
            key = reference_key(kind, meta.get("namespace") or "", meta.get("name") or "")
            return any(node in _node_of(pod) for pod in self.pods.by_index(BY_REFERENCE, key))

        return held_by

    # -- informer handlers ----------------------------------------------------------------

    def _on_pod(self, event: str, pod: dict, old: dict | None) -> None:
        nodes = set(_node_of(pod))
        if old is not None:
            nodes.update(_node_of(old))
        self._objects.changed(nodes)

    def _on_referenced(self, kind: str):
        def handler(event: str, obj: dict, old: dict | None) -> None:
            meta = obj.get("metadata") or {}
            key = reference_key(kind, meta.get("namespace") or "", meta.get("name") or "")
            pods = self.pods.by_index(BY_REFERENCE, key)
            if pods:
                self._objects.changed({n for p in pods for n in _node_of(p)})

        return handler
