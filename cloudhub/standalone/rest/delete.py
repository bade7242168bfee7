"""delete and deletecollection in the embedded API: preconditions, graceful deletion
of bound pods, two-step deletion while finalizers remain, propagation policies.

Part of :class:`cloudhub.standalone.rest.Registry`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from cloudhub.standalone import errors
from cloudhub.standalone.encoding import loads, now_rfc3339
from cloudhub.standalone.options import (
    DeleteOptions,
    ListParams,
)
from cloudhub.standalone.resources import ResourceType
from cloudhub.standalone.rest.types import NAMESPACES
from cloudhub.standalone.store import MODIFIED, Entry

__all__ = ["Deletes"]


class Deletes:
    """The delete verbs."""

    async def delete(
        self, rtype: ResourceType, namespace: str, name: str, options: DeleteOptions
    ) -> tuple[Entry, bool]:
        """Delete an object. Returns (its last state, whether it is gone now).

        Raises:
            StatusError: 404 when missing; 409 Conflict when a precondition fails.
        """
        ns = namespace if rtype.namespaced else ""
        current = self.store.get(rtype.storage_key, ns, name)
        if current is None:
            raise errors.not_found(rtype.plural, rtype.group, name)
        entry, gone = self._delete_now(rtype, ns, name, current, options)
        await self.store.sync()
        return entry, gone

    def _delete_now(
        self, rtype: ResourceType, ns: str, name: str, current: Entry, options: DeleteOptions
    ) -> tuple[Entry, bool]:
        obj = loads(current.data)
        meta = obj["metadata"]
        if options.precondition_uid and options.precondition_uid != meta.get("uid"):
            raise errors.conflict(
                rtype.plural,
                rtype.group,
                name,
                f"Precondition failed: UID in precondition: {options.precondition_uid}, UID in "
                f"object meta: {meta.get('uid')}",
            )
        if options.precondition_rv and options.precondition_rv != meta.get("resourceVersion"):
            raise errors.conflict(
                rtype.plural,
                rtype.group,
                name,
                f"Precondition failed: ResourceVersion in precondition: "
                f"{options.precondition_rv}, ResourceVersion in object meta: "
                f"{meta.get('resourceVersion')}",
            )
        finalizers = list(meta.get("finalizers") or [])
        if options.propagation == "Orphan" and "orphan" not in finalizers and current.uid:
            if self._has_dependents(current.uid) and not meta.get("deletionTimestamp"):
                finalizers.append("orphan")
        if options.propagation == "Foreground" and "foregroundDeletion" not in finalizers:
            if self._has_dependents(current.uid) and not meta.get("deletionTimestamp"):
                finalizers.append("foregroundDeletion")
        grace = self._grace_period(rtype, obj, options)
        if rtype.storage_key == NAMESPACES:
            if options.dry_run:
                return current, False
            if not meta.get("deletionTimestamp"):
                meta["deletionTimestamp"] = now_rfc3339()
                meta["finalizers"] = finalizers
                obj.setdefault("status", {})["phase"] = "Terminating"
                if not finalizers:
                    meta.pop("finalizers")
                self.terminating_namespaces.add(name)
                return self._write_modified(rtype, ns, name, obj), False
            return current, False
        if finalizers or grace > 0:
            if options.dry_run:
                return current, False
            changed = False
            if finalizers != list(meta.get("finalizers") or []):
                meta["finalizers"] = finalizers
                changed = True
            if not meta.get("deletionTimestamp"):
                meta["deletionTimestamp"] = now_rfc3339(time.time() + grace)
                meta["deletionGracePeriodSeconds"] = grace
                changed = True
            elif grace < int(meta.get("deletionGracePeriodSeconds") or 0):
                meta["deletionTimestamp"] = now_rfc3339(time.time() + grace)
                meta["deletionGracePeriodSeconds"] = grace
                changed = True
            if grace == 0 and not finalizers:
                return self._remove(rtype, ns, name, obj), True
            if not changed:
                return current, False
            return self._write_modified(rtype, ns, name, obj), False
        if options.dry_run:
            return current, True
        if rtype.storage_key == "pods" and not meta.get("deletionTimestamp"):
            # Pods are deleted through the graceful path even with no grace: their
            # last state carries the deletion time and a grace period of 0.
            meta["deletionTimestamp"] = now_rfc3339()
            meta["deletionGracePeriodSeconds"] = 0
        return self._remove(rtype, ns, name, obj), True

    def _write_modified(
        self, rtype: ResourceType, ns: str, name: str, obj: dict[str, Any]
    ) -> Entry:
        entry = self._new_entry(rtype, obj)
        self.store.write(MODIFIED, rtype.storage_key, ns, name, entry)
        return entry

    def _grace_period(
        self, rtype: ResourceType, obj: Mapping[str, Any], options: DeleteOptions
    ) -> int:
        """Graceful deletion applies to pods bound to a node and not finished, as
        kube-apiserver's pod strategy (CheckGracefulDelete)."""
        if rtype.storage_key != "pods":
            return 0
        spec = obj.get("spec") or {}
        if not spec.get("nodeName"):
            return 0
        if (obj.get("status") or {}).get("phase") in ("Failed", "Succeeded"):
            return 0
        if options.grace_period_s is not None:
            return max(0, options.grace_period_s)
        return int(spec.get("terminationGracePeriodSeconds", 30) or 0)

    def _has_dependents(self, uid: str) -> bool:
        return bool(uid) and any(
            uid in e.owners for key in self.store.resources() for _, _, e in self.store.items(key)
        )

    async def delete_collection(
        self,
        rtype: ResourceType,
        namespace: str | None,
        params: ListParams,
        options: DeleteOptions,
    ) -> tuple[int, list[Entry]]:
        """Delete every object the selectors match. Returns (revision, deleted states)."""
        if namespace is not None and rtype.namespaced:
            self._check_namespace(rtype, namespace, "", create=False)
        out: list[Entry] = []
        for ns, name, entry in self.store.items(rtype.storage_key, namespace):
            if params.filtered and not params.matches(ns, name, entry):
                continue
            done, _ = self._delete_now(rtype, ns, name, entry, options)
            out.append(done)
        await self.store.sync()
        return self.store.revision, out
