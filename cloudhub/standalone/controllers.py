"""The control loops a cluster runs that the API alone does not: here, the ones
whose absence would leave objects stuck or dangling on one machine.

- **Namespace lifecycle** (kube-controller-manager's namespace controller):
  a deleted namespace is ``Terminating`` until its content is deleted, then its
  ``kubernetes`` finalizer is removed and it disappears.
- **CRD cleanup** (apiextensions-apiserver's finalizer controller): a deleted
  CRD keeps the ``customresourcecleanup.apiextensions.k8s.io`` finalizer until
  every custom resource of it is deleted; then it is removed and not served.
- **Garbage collection** (kube-controller-manager's garbage collector): an
  object whose owners (``ownerReferences``) are all gone is deleted; a reference
  to a deleted owner is dropped when other owners remain; the ``orphan`` and
  ``foregroundDeletion`` finalizers are honoured.

They react to committed changes (``Store.on_commit``) and run in one task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from cloudhub.standalone.encoding import loads
from cloudhub.standalone.errors import StandaloneError, StatusError
from cloudhub.standalone.options import DeleteOptions
from cloudhub.standalone.rest import (
    CRD_FINALIZER,
    CRD_KEY,
    NAMESPACE_FINALIZER,
    NAMESPACES,
    Registry,
)
from cloudhub.standalone.store import DELETED, Change

__all__ = ["Controllers"]

log = logging.getLogger(__name__)


class Controllers:
    """Namespace lifecycle, CRD cleanup and garbage collection for one registry."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._owners: dict[str, int] = {}
        self._gc_due = True  # a change may have left dependents or GC finalizers to handle

    async def start(self) -> None:
        """Index owner references and start the loop (it first catches up on
        whatever was terminating when the server stopped)."""
        store = self.registry.store
        for key in store.resources():
            for _, _, entry in store.items(key):
                for uid in entry.owners:
                    self._owners[uid] = self._owners.get(uid, 0) + 1
        store.on_commit.append(self._on_commit)
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name="apiserver-controllers"
        )
        self._wake.set()

    async def close(self) -> None:
        store = self.registry.store
        with contextlib.suppress(ValueError):
            store.on_commit.remove(self._on_commit)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def _on_commit(self, changes: list[Change]) -> None:
        kick = False
        owners = self._owners
        for change in changes:
            if change.prev is not None:
                for uid in change.prev.owners:
                    left = owners.get(uid, 0) - 1
                    if left > 0:
                        owners[uid] = left
                    else:
                        owners.pop(uid, None)
            if change.type != DELETED:
                for uid in change.entry.owners:
                    owners[uid] = owners.get(uid, 0) + 1
            data = change.entry.data
            if change.type == DELETED:
                if change.entry.uid in owners or change.entry.owners:
                    # Its dependents may be garbage now, or its owner waits for it.
                    self._gc_due = kick = True
                if change.namespace in self.registry.terminating_namespaces:
                    kick = True
                if self._crd_terminating(change.resource):
                    kick = True  # its last objects going lets the CRD go
            elif b'"deletionTimestamp"' in data:
                kick = True
                if b'"orphan"' in data or b'"foregroundDeletion"' in data:
                    self._gc_due = True
            elif change.resource in (NAMESPACES, CRD_KEY):
                kick = True
        if kick:
            self._wake.set()

    def _crd_terminating(self, storage_key: str) -> bool:
        """Whether ``storage_key`` holds custom resources of a CRD being deleted."""
        rtype = self.registry.type_for_key(storage_key)
        if rtype is None or not rtype.custom:
            return False
        crd = self.registry.store.get(CRD_KEY, "", f"{rtype.plural}.{rtype.group}")
        return crd is not None and b'"deletionTimestamp"' in crd.data

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._namespaces()
                await self._crds()
                await self._garbage()
            except asyncio.CancelledError:
                raise
            except StandaloneError as exc:
                log.warning("embedded controllers: %s; retrying in 1 s", exc)
                self._gc_due = True
                await asyncio.sleep(1.0)
                self._wake.set()

    # -- namespaces ----------------------------------------------------------------

    async def _namespaces(self) -> None:
        registry = self.registry
        store = registry.store
        ns_type = registry.lookup("", "v1", "namespaces")
        assert ns_type is not None
        for namespace in sorted(registry.terminating_namespaces):
            remaining = 0
            for key in store.resources():
                rtype = registry.type_for_key(key)
                if rtype is None or not rtype.namespaced:
                    continue
                for _, name, entry in store.items(key, namespace):
                    remaining += 1
                    if b'"deletionTimestamp"' in entry.data:
                        continue
                    with contextlib.suppress(StatusError):
                        await registry.delete(rtype, namespace, name, DeleteOptions())
            if remaining:
                continue
            entry = store.get(NAMESPACES, "", namespace)
            if entry is None:
                registry.terminating_namespaces.discard(namespace)
                continue
            obj = loads(entry.data)
            finalizers = [
                f
                for f in (obj.get("spec") or {}).get("finalizers") or []
                if f != NAMESPACE_FINALIZER
            ]
            if finalizers == (obj.get("spec") or {}).get("finalizers"):
                continue
            obj.setdefault("spec", {})["finalizers"] = finalizers
            with contextlib.suppress(StatusError):
                await registry.update(ns_type, "", namespace, obj, subresource="finalize")

    # -- CRDs ------------------------------------------------------------------------

    async def _crds(self) -> None:
        registry = self.registry
        store = registry.store
        crd_type = registry.type_for_key(CRD_KEY)
        assert crd_type is not None
        for _, name, entry in store.items(CRD_KEY):
            crd = loads(entry.data)
            meta = crd["metadata"]
            if not meta.get("deletionTimestamp") or CRD_FINALIZER not in (
                meta.get("finalizers") or []
            ):
                continue
            spec = crd.get("spec") or {}
            key = f"{spec.get('group')}/{(spec.get('names') or {}).get('plural')}"
            rtype = registry.type_for_key(key)
            if rtype is not None:
                for ns, obj_name, obj_entry in store.items(key):
                    if b'"deletionTimestamp"' in obj_entry.data:
                        continue
                    with contextlib.suppress(StatusError):
                        await registry.delete(rtype, ns, obj_name, DeleteOptions())
            if store.count(key):
                continue
            meta["finalizers"] = [f for f in meta["finalizers"] if f != CRD_FINALIZER]
            with contextlib.suppress(StatusError):
                await registry.update(crd_type, "", name, crd)

    # -- garbage collection --------------------------------------------------------------

    async def _garbage(self) -> None:
        registry = self.registry
        store = registry.store
        if not self._gc_due:
            return
        self._gc_due = False
        alive = {entry.uid for key in store.resources() for _, _, entry in store.items(key)}
        dying: dict[str, str] = {}  # uid -> "orphan" | "foregroundDeletion"
        for key in store.resources():
            for _, _, entry in store.items(key):
                if b'"deletionTimestamp"' not in entry.data:
                    continue
                if b'"orphan"' in entry.data or b'"foregroundDeletion"' in entry.data:
                    fins = loads(entry.data)["metadata"].get("finalizers") or []
                    if "orphan" in fins:
                        dying[entry.uid] = "orphan"
                    elif "foregroundDeletion" in fins:
                        dying[entry.uid] = "foregroundDeletion"
        waiting: set[str] = set()
        for key in list(store.resources()):
            rtype = registry.type_for_key(key)
            if rtype is None:
                continue
            for ns, name, entry in store.items(key):
                if not entry.owners:
                    continue
                dead = [u for u in entry.owners if u not in alive]
                orphaned = [u for u in entry.owners if dying.get(u) == "orphan"]
                foreground = [u for u in entry.owners if dying.get(u) == "foregroundDeletion"]
                if foreground:
                    waiting.update(foreground)
                drop = set(dead) | set(orphaned)
                if not drop and not foreground:
                    continue
                live = [u for u in entry.owners if u not in drop]
                delete = not orphaned and (
                    not live or (bool(foreground) and set(live) <= set(foreground))
                )
                if delete:
                    if b'"deletionTimestamp"' not in entry.data:
                        with contextlib.suppress(StatusError):
                            await registry.delete(rtype, ns, name, DeleteOptions())
                    continue
                if not drop:
                    continue
                obj = loads(entry.data)
                refs = obj["metadata"].get("ownerReferences") or []
                obj["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") not in drop]
                if not obj["metadata"]["ownerReferences"]:
                    del obj["metadata"]["ownerReferences"]
                with contextlib.suppress(StatusError):
                    await registry.update(rtype, ns, name, obj)
        for uid, finalizer in dying.items():
            if finalizer == "foregroundDeletion" and uid in waiting:
                continue
            await self._drop_finalizer(uid, finalizer)

    async def _drop_finalizer(self, uid: str, finalizer: str) -> None:
        registry = self.registry
        store = registry.store
        for key in store.resources():
            rtype = registry.type_for_key(key)
            if rtype is None:
                continue
            for ns, name, entry in store.items(key):
                if entry.uid != uid:
                    continue
                obj: dict[str, Any] = loads(entry.data)
                meta = obj["metadata"]
                meta["finalizers"] = [f for f in meta.get("finalizers") or [] if f != finalizer]
                with contextlib.suppress(StatusError):
                    await registry.update(rtype, ns, name, obj)
                return
