"""Namespaced mode: one informer per listed namespace, read as one cache.

A hub bound by RoleBindings only (``kube.namespaces``, deploy/overlays/namespaced) may
not list or watch a namespaced resource across the cluster: that call is a 403 and the
informer would back off and retry it forever. :func:`scoped_informers` makes one
:class:`~cloudhub.kube.informer.Informer` per namespace instead (each its own
list+watch, as client-go's ``NewFilteredSharedInformerFactory`` with ``WithNamespace``
does), and :class:`NamespacedInformers` presents their caches with the reading side of
one informer (``get``, ``items``, ``by_index``, ``add_handler``, ``wait_synced``), so the
code reading pods, ConfigMaps, Secrets or Devices does not know which mode it runs in.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from cloudhub.kube.client import KubeClient
from cloudhub.kube.informer import EventHandler, Informer
from cloudhub.kube.resources import ResourceType

__all__ = ["NamespacedInformers", "scoped_informers"]


class NamespacedInformers:
    """The caches of several per-namespace informers of one resource type, read as one.

    Args:
        informers: one per namespace, all of the same resource type, none cluster-wide.

    Raises:
        ValueError: no informer, mixed resource types, a cluster-wide informer, or one
            namespace twice.
    """

    def __init__(self, informers: Sequence[Informer]) -> None:
        if not informers:
            raise ValueError("NamespacedInformers needs at least one informer")
        self.rt = informers[0].rt
        self._by_namespace: dict[str, Informer] = {}
        for informer in informers:
            if informer.rt != self.rt:
                raise ValueError(f"mixed resource types: {self.rt.plural}, {informer.rt.plural}")
            if not informer.namespace:
                raise ValueError(f"{informer.rt.plural}: a cluster-wide informer is not scoped")
            if informer.namespace in self._by_namespace:
                raise ValueError(f"{informer.rt.plural}: namespace {informer.namespace} twice")
            self._by_namespace[informer.namespace] = informer

    @property
    def informers(self) -> list[Informer]:
        """The per-namespace informers (to run, and for the informer metrics)."""
        return list(self._by_namespace.values())

    @property
    def namespaces(self) -> list[str]:
        """The namespaces watched, in the order given."""
        return list(self._by_namespace)

    def get(self, name: str, namespace: str = "") -> dict | None:
        """The cached object, or ``None`` (also for a namespace not watched)."""
        informer = self._by_namespace.get(namespace)
        return informer.get(name, namespace) if informer is not None else None

    def by_index(self, index: str, value: str) -> list[dict]:
        """Cached objects of every namespace whose indexer ``index`` yields ``value``.

        Raises:
            KeyError: no indexer of that name.
        """
        return [obj for i in self._by_namespace.values() for obj in i.by_index(index, value)]

    def items(self) -> list[dict]:
        """A snapshot list of every cached object, namespace by namespace."""
        return [obj for i in self._by_namespace.values() for obj in i.items()]

    def add_handler(self, handler: EventHandler) -> None:
        """Register a handler on every namespace's informer (the namespaces are disjoint,
        so each object's events come from one informer, in order)."""
        for informer in self._by_namespace.values():
            informer.add_handler(handler)

    async def wait_synced(self, timeout: float | None = None) -> None:
        """Wait until every namespace's first list has been applied.

        Raises:
            TimeoutError: not all synced within ``timeout`` seconds.
        """
        waits = [i.synced.wait() for i in self._by_namespace.values()]
        await asyncio.wait_for(asyncio.gather(*waits), timeout)


def scoped_informers(
    client: KubeClient,
    rt: ResourceType,
    namespaces: Sequence[str],
    **kwargs: Any,
) -> tuple[Informer | NamespacedInformers, list[Informer]]:
    """The informer to read ``rt`` from, and the informers to run for it.

    Args:
        client: the raw-JSON API client.
        rt: the resource type.
        namespaces: ``kube.namespaces``; empty (or a cluster-scoped ``rt``, such as
            Nodes): one cluster-wide informer.
        kwargs: as :class:`~cloudhub.kube.informer.Informer` takes them (not
            ``namespace``).

    Returns:
        ``(view, to_run)``: the view is the informer itself in cluster-wide mode.
    """
    if not namespaces or not rt.namespaced:
        informer = Informer(client, rt, **kwargs)
        return informer, [informer]
    view = NamespacedInformers([Informer(client, rt, namespace=ns, **kwargs) for ns in namespaces])
    return view, view.informers
