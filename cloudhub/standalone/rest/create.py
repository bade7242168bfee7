"""create in the embedded API: generateName, uid, creationTimestamp, generation,
defaults and admission, validation, AlreadyExists, the namespace checks.

Part of :class:`cloudhub.standalone.rest.Registry`.
"""

from __future__ import annotations

import copy
import secrets
import uuid
from collections.abc import Mapping
from typing import Any

from cloudhub.standalone import defaults, errors, schema
from cloudhub.standalone.encoding import loads, now_rfc3339
from cloudhub.standalone.options import (
    WriteOptions,
)
from cloudhub.standalone.resources import ResourceType
from cloudhub.standalone.rest.types import CRD_FINALIZER, CRD_KEY, DS_TEMPLATE_GENERATION
from cloudhub.standalone.store import ADDED, Entry

__all__ = ["Creates"]

_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # the apiserver name generator's alphabet


class Creates:
    """The create verb and the CRD status it derives."""

    async def create(
        self, rtype: ResourceType, namespace: str, body: Any, opts: WriteOptions | None = None
    ) -> Entry:
        """Create an object; returns the stored state.

        Raises:
            StatusError: 400 for a body of the wrong kind, version or namespace;
                404 when the namespace is missing; 403 when it terminates; 409
                AlreadyExists; 422 Invalid; 500 when the commit fails.
        """
        entry = self._create_now(rtype, namespace, body, opts or WriteOptions())
        await self.store.sync()
        return entry

    def _create_now(
        self, rtype: ResourceType, namespace: str, body: Any, opts: WriteOptions
    ) -> Entry:
        obj = self._check_body(rtype, body, namespace, None, opts)
        meta = obj["metadata"]
        store = self.store
        if not meta.get("name") and meta.get("generateName"):
            prefix = str(meta["generateName"])
            for _ in range(20):
                candidate = prefix + "".join(secrets.choice(_NAME_CHARS) for _ in range(5))
                if (
                    store.get(rtype.storage_key, namespace if rtype.namespaced else "", candidate)
                    is None
                ):
                    meta["name"] = candidate
                    break
        name = meta.get("name") or ""
        self._check_namespace(rtype, namespace, name, create=True)
        if meta.get("resourceVersion"):
            raise errors.storage_refused(
                "resourceVersion should not be set on objects to be created"
            )
        if rtype.custom:
            crd = self._crd_for(rtype)
            if crd is not None and (crd.get("metadata") or {}).get("deletionTimestamp"):
                raise errors.method_not_allowed("create", rtype.qualified)
        for key in ("deletionTimestamp", "deletionGracePeriodSeconds", "selfLink", "managedFields"):
            meta.pop(key, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        if rtype.has_generation:
            meta["generation"] = 1
        else:
            meta.pop("generation", None)
        if rtype.reset_status_on_create:
            obj.pop("status", None)
        self._prepare_create(rtype, obj)
        ns = namespace if rtype.namespaced else ""
        self._validate(rtype, obj, name, opts)
        if store.get(rtype.storage_key, ns, name) is not None:
            raise errors.already_exists(rtype.plural, rtype.group, name)
        obj = self._ordered(rtype, obj)
        if rtype.custom and rtype.version != rtype.storage_version:
            obj["apiVersion"] = f"{rtype.group}/{rtype.storage_version}"
        if opts.dry_run:
            return self._entry(rtype, obj, 0)
        entry = self._new_entry(rtype, obj)
        store.write(ADDED, rtype.storage_key, ns, name, entry)
        if rtype.storage_key == CRD_KEY:
            self._serve_crd(obj)
        return entry

    def _prepare_create(self, rtype: ResourceType, obj: dict[str, Any]) -> None:
        if rtype.custom:
            return
        kind = rtype.kind
        used: list[str] = []
        if kind == "Service":
            used = [
                loads(e.data).get("spec", {}).get("clusterIP", "")
                for _, _, e in self.store.items("services")
            ]
        defaults.fold_string_data(rtype.kind, obj) if not rtype.custom else None
        defaults.apply_defaults(kind, obj, used)
        defaults.apply_create_admission(kind, obj)
        if kind == "Pod" and isinstance(obj.get("spec"), dict):
            obj["status"] = {"phase": "Pending", "qosClass": defaults.pod_qos_class(obj["spec"])}
        elif kind == "Service":
            obj["status"] = {"loadBalancer": {}}
        elif kind == "CustomResourceDefinition":
            schema.crd_defaults(obj)
            meta = obj["metadata"]
            finalizers = meta.setdefault("finalizers", [])
            if CRD_FINALIZER not in finalizers:
                finalizers.append(CRD_FINALIZER)
            obj["status"] = self._crd_status(obj)
        elif kind in defaults.INITIAL_STATUS:
            obj["status"] = copy.deepcopy(defaults.INITIAL_STATUS[kind])
        if kind == "DaemonSet":
            # What apps/v1 shows of the DaemonSet's templateGeneration.
            obj["metadata"].setdefault("annotations", {})[DS_TEMPLATE_GENERATION] = "1"

    def _crd_status(
        self, crd: dict[str, Any], old: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        spec = crd.get("spec") or {}
        now = now_rfc3339()
        storage = [
            v.get("name")
            for v in spec.get("versions") or []
            if isinstance(v, dict) and v.get("storage")
        ]
        stored = list((old or {}).get("storedVersions") or [])
        for version in storage:
            if version and version not in stored:
                stored.append(version)
        if old and old.get("conditions") and old.get("acceptedNames") == spec.get("names"):
            return {**old, "storedVersions": stored}
        return {
            "conditions": [
                {
                    "type": "NamesAccepted",
                    "status": "True",
                    "lastTransitionTime": now,
                    "reason": "NoConflicts",
                    "message": "no conflicts found",
                },
                {
                    "type": "Established",
                    "status": "True",
                    "lastTransitionTime": now,
                    "reason": "InitialNamesAccepted",
                    "message": "the initial names have been accepted",
                },
            ],
            "acceptedNames": dict(spec.get("names") or {}),
            "storedVersions": stored,
        }

    def _crd_for(self, rtype: ResourceType) -> dict[str, Any] | None:
        entry = self.store.get(CRD_KEY, "", f"{rtype.plural}.{rtype.group}")
        return loads(entry.data) if entry else None
