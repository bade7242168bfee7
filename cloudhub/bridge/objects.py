"""What each edge node must hold: the level the hub syncs every session to.

A node's *desired set* is computed from the shared informers by *sources*, in order:
the ConfigMaps and Secrets its pods reference, then its pods (so an object a pod needs
arrives before the pod), then whatever other parts add — device twins register a source
for the node's Devices. A source is a function ``node name -> raw objects``; when a
source's informer sees a change, it calls :meth:`NodeObjects.changed` with the nodes the
change concerns; the new desired set of every connected one among them is computed once
and handed to its session, which diffs it and streams the difference (level-based, as
docs/protocol.md says).

The same sets decide node authorization: a node may name exactly the objects it is sent
(and its own Node), as the Kubernetes Node authorizer allows a kubelet to read only what
its pods reference (:mod:`cloudhub.bridge.authz`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from protocol.messages import ObjectRef

__all__ = [
    "DesiredListener",
    "HeldBy",
    "Lookup",
    "NodeObjects",
    "ObjectSource",
    "object_ref",
    "object_uid",
]

log = logging.getLogger(__name__)

#: ``source(node) -> raw API objects the node must hold``.
ObjectSource = Callable[[str], Iterable[dict]]
#: ``lookup(namespace, name) -> the cached object or None`` for one kind.
Lookup = Callable[[str, str], "dict | None"]
#: ``listener(node, desired)``: the node's desired set (uid -> object) after a change.
DesiredListener = Callable[[str, "dict[str, dict]"], None]
#: ``held_by(node, obj) -> whether obj is in node's desired set``, from an index.
HeldBy = Callable[[str, dict], bool]


def object_uid(obj: dict) -> str:
    """``metadata.uid`` of a raw object (``""`` if absent)."""
    return (obj.get("metadata") or {}).get("uid") or ""


def object_ref(obj: dict) -> ObjectRef:
    """The protocol reference of a raw object (kind, namespace, name, uid).

    Raises:
        protocol.errors.InvalidMessage: the object has no kind, name or uid.
    """
    meta = obj.get("metadata") or {}
    return ObjectRef(
        obj.get("kind") or "",
        meta.get("namespace") or "",
        meta.get("name") or "",
        meta.get("uid") or "",
    )


class NodeObjects:
    """The registry of sources and kinds that make up every node's desired set."""

    def __init__(self) -> None:
        self._sources: list[tuple[str, ObjectSource]] = []
        self._lookups: dict[str, Lookup] = {}
        self._held_by: dict[str, HeldBy] = {}
        self._listeners: list[tuple[DesiredListener, Callable[[str], bool]]] = []

    def add_source(self, name: str, source: ObjectSource) -> None:
        """Append a source; objects of earlier sources are sent first.

        Args:
            name: for logs (``"pod-references"``, ``"pods"``, ``"devices"``).
            source: ``node -> objects``; must be cheap (it reads informer caches) and must
                not raise (a failing source is logged and skipped).
        """
        self._sources.append((name, source))

    def add_kind(self, kind: str, lookup: Lookup, *, held_by: HeldBy | None = None) -> None:
        """Say how to find a cached object of ``kind`` by namespace and name (for
        authorization of messages that name one), and, with ``held_by``, how to tell from
        an index whether a node holds one, so that :meth:`holds` needs no rebuild of the
        node's desired set (it must agree with the sources)."""
        self._lookups[kind] = lookup
        if held_by is not None:
            self._held_by[kind] = held_by

    def add_listener(self, listener: DesiredListener, *, wants: Callable[[str], bool]) -> None:
        """Call ``listener(node, desired)`` with the node's new desired set whenever it may
        have changed, for the nodes ``wants(node)`` says the listener serves (the session
        registry: the connected ones). The set is computed here, once per node and change,
        so the listener gets it with the announcement instead of asking for it back."""
        self._listeners.append((listener, wants))

    def changed(self, nodes: Iterable[str]) -> None:
        """Sources call this from their informer handlers with the nodes a change concerns."""
        for node in dict.fromkeys(n for n in nodes if n):
            desired: dict[str, dict] | None = None
            for listener, wants in self._listeners:
                if wants(node):
                    if desired is None:
                        desired = self.desired(node)
                    listener(node, desired)

    def desired(self, node: str) -> dict[str, dict]:
        """The objects ``node`` must hold, uid -> raw object, in sending order."""
        out: dict[str, dict] = {}
        for name, source in self._sources:
            try:
                for obj in source(node):
                    uid = object_uid(obj)
                    if uid and uid not in out:
                        out[uid] = obj
            except Exception:  # a broken source must not stop the others
                log.exception("object source %s failed", name, extra={"node": node})
        return out

    def holds(self, node: str, kind: str, obj: dict) -> bool:
        """Whether ``obj``, of ``kind`` (from :meth:`lookup`), is in ``node``'s desired set:
        one index lookup for kinds registered with ``held_by`` (pods, their ConfigMaps and
        Secrets), else a rebuild of the set (O(objects of the node))."""
        held_by = self._held_by.get(kind)
        if held_by is not None:
            return held_by(node, obj)
        return object_uid(obj) in self.desired(node)

    def lookup(self, ref: ObjectRef) -> dict | None:
        """The cached object ``ref`` names if its uid matches, else ``None`` (unknown kind,
        no such object, or a different object under the same name)."""
        find = self._lookups.get(ref.kind)
        if find is None:
            return None
        obj = find(ref.namespace, ref.name)
        if obj is None or object_uid(obj) != ref.uid:
            return None
        return obj
