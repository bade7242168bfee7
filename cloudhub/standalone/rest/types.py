"""The resource types the embedded API serves: the built-in ones and those of CRDs.

Part of :class:`cloudhub.standalone.rest.Registry` (see its docstring for the rules).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from cloudhub.standalone import schema
from cloudhub.standalone.encoding import loads
from cloudhub.standalone.resources import ResourceType
from cloudhub.standalone.store import Change, Entry

__all__ = [
    "CRD_FINALIZER",
    "CRD_KEY",
    "DS_TEMPLATE_GENERATION",
    "NAMESPACES",
    "NAMESPACE_FINALIZER",
    "ServedTypes",
    "crd_gone",
]

CRD_KEY = "apiextensions.k8s.io/customresourcedefinitions"
NAMESPACES = "namespaces"
CRD_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"
NAMESPACE_FINALIZER = "kubernetes"
DS_TEMPLATE_GENERATION = "deprecated.daemonset.template.generation"
"""The DaemonSet annotation that counts template changes (set at create, bumped by update)."""


class ServedTypes:
    """Which types are served at which path, kept in step with the stored CRDs
    (``load`` at start, ``_undone`` after a failed commit)."""

    def _add_type(self, rtype: ResourceType) -> None:
        self._types[(rtype.group, rtype.version, rtype.plural)] = rtype
        self._by_key.setdefault(rtype.storage_key, []).append(rtype)

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        """The type served at ``/apis/<group>/<version>/<plural>``, or None."""
        return self._types.get((group, version, plural))

    def types(self) -> list[ResourceType]:
        """Every served type."""
        return list(self._types.values())

    def type_for_key(self, storage_key: str) -> ResourceType | None:
        found = self._by_key.get(storage_key)
        if not found:
            return None
        for rtype in found:
            if not rtype.custom or rtype.version == rtype.storage_version:
                return rtype
        return found[0]

    def _serve_crd(self, crd: Mapping[str, Any]) -> None:
        spec = crd["spec"]
        self._unserve_crd(f"{spec['group']}/{spec['names']['plural']}")
        for rtype in schema.crd_types(crd):
            self._add_type(rtype)

    def _unserve_crd(self, storage_key: str) -> None:
        for rtype in self._by_key.pop(storage_key, []):
            self._types.pop((rtype.group, rtype.version, rtype.plural), None)

    def _undone(self, changes: list[Change]) -> None:
        """Re-derive, from the store as a failed commit left it, what was changed at
        write time besides the store: the types served for CRDs and the set of
        terminating namespaces. Otherwise a CRD whose create was never committed
        would stay served, and a namespace whose deletion failed would refuse
        creates until a restart."""
        for change in changes:
            if change.resource == CRD_KEY:
                for entry in (change.entry, change.prev):
                    if entry is not None:
                        spec = loads(entry.data).get("spec") or {}
                        names = spec.get("names") or {}
                        self._unserve_crd(f"{spec.get('group')}/{names.get('plural')}")
                current = self.store.get(CRD_KEY, "", change.name)
                if current is not None:
                    crd = loads(current.data)
                    if not crd_gone(crd):
                        self._serve_crd(crd)
            elif change.resource == NAMESPACES:
                current = self.store.get(NAMESPACES, "", change.name)
                if current is not None and b'"deletionTimestamp"' in current.data:
                    self.terminating_namespaces.add(change.name)
                else:
                    self.terminating_namespaces.discard(change.name)

    def load(self, rows: Iterable[Any]) -> None:
        """Index rows loaded from the durable store (CRDs first, so their types exist)."""
        rows = list(rows)
        for row in rows:
            if row.resource == CRD_KEY:
                crd = loads(row.data)
                if not crd_gone(crd):
                    try:
                        self._serve_crd(crd)
                    except (KeyError, StopIteration, TypeError):
                        pass
        for row in rows:
            rtype = self.type_for_key(row.resource)
            obj = loads(row.data)
            entry = (
                self._entry(rtype, obj, row.rv)
                if rtype
                else Entry(row.rv, row.data, {}, {}, (obj.get("metadata") or {}).get("uid", ""))
            )
            self.store.restore(row.resource, row.namespace, row.name, entry)
            if row.resource == NAMESPACES and (obj.get("metadata") or {}).get("deletionTimestamp"):
                self.terminating_namespaces.add(row.name)


def crd_gone(crd: Mapping[str, Any]) -> bool:
    """Whether a CRD's deletion is complete (deletionTimestamp set, no finalizer left)."""
    meta = crd.get("metadata") or {}
    return bool(meta.get("deletionTimestamp")) and not meta.get("finalizers")
