"""update and patch in the embedded API: resourceVersion preconditions, system
metadata kept, the status subresource, generation bumps, no-op writes not stored.

Part of :class:`cloudhub.standalone.rest.Registry`.
"""

from __future__ import annotations

import copy
from typing import Any

from cloudhub.standalone import defaults, errors, patch, schema, validation
from cloudhub.standalone.encoding import loads
from cloudhub.standalone.options import (
    WriteOptions,
)
from cloudhub.standalone.resources import ResourceType
from cloudhub.standalone.rest.types import CRD_KEY, DS_TEMPLATE_GENERATION, NAMESPACES
from cloudhub.standalone.store import MODIFIED, Entry

__all__ = ["Updates"]

_SYSTEM_META = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "selfLink",
)


class Updates:
    """The update and patch verbs."""

    async def update(
        self,
        rtype: ResourceType,
        namespace: str,
        name: str,
        body: Any,
        *,
        subresource: str = "",
        opts: WriteOptions | None = None,
    ) -> tuple[Entry, bool]:
        """Replace an object (PUT). Returns (stored state, created).

        Raises:
            StatusError: 400 for a mismatched name/namespace/kind; 404 when missing
                (unless the kind allows create on update); 409 Conflict on a stale
                resourceVersion; 422 Invalid.
        """
        opts = opts or WriteOptions()
        ns = namespace if rtype.namespaced else ""
        current = self.store.get(rtype.storage_key, ns, name)
        if current is None:
            if not rtype.allow_create_on_update or subresource:
                raise errors.not_found(rtype.plural, rtype.group, name)
            obj = self._check_body(rtype, body, namespace, name, opts)
            obj["metadata"].pop("resourceVersion", None)
            obj["metadata"]["name"] = name
            entry = self._create_now(rtype, namespace, obj, opts)
            await self.store.sync()
            return entry, True
        obj = self._check_body(rtype, body, namespace, name, opts)
        given_uid = obj["metadata"].get("uid")
        if given_uid and given_uid != current.uid:
            # A uid in the body is a precondition, as kube-apiserver's update: it
            # keeps a stale read-modify-write from replacing a recreated object.
            raise errors.conflict(
                rtype.plural,
                rtype.group,
                name,
                f"Precondition failed: UID in precondition: {given_uid}, UID in object meta: "
                f"{current.uid}",
            )
        entry = self._update_now(rtype, ns, name, current, obj, subresource, opts)
        await self.store.sync()
        return entry, False

    async def patch(
        self,
        rtype: ResourceType,
        namespace: str,
        name: str,
        content_type: str,
        patch_body: Any,
        *,
        subresource: str = "",
        opts: WriteOptions | None = None,
    ) -> Entry:
        """Patch an object with a JSON patch, merge patch or strategic merge patch.

        Raises:
            StatusError: 404 when missing; 415 for strategic merge patch on a
                custom resource or an unknown patch type; 400/422 for a patch that
                does not apply; 409 on a stale resourceVersion in the patch.
        """
        opts = opts or WriteOptions()
        ns = namespace if rtype.namespaced else ""
        current = self.store.get(rtype.storage_key, ns, name)
        if content_type == patch.STRATEGIC_MERGE_PATCH and not rtype.strategic_merge:
            raise errors.unsupported_media_type(content_type, [patch.JSON_PATCH, patch.MERGE_PATCH])
        if current is None:
            raise errors.not_found(rtype.plural, rtype.group, name)
        original = loads(self._convert_out(rtype, current))
        if content_type == patch.JSON_PATCH:
            obj = patch.apply_json_patch(original, patch_body)
        elif content_type == patch.MERGE_PATCH:
            if not isinstance(patch_body, dict):
                raise errors.bad_request("a merge patch must be a JSON object")
            obj = patch.apply_merge_patch(original, patch_body)
        elif content_type == patch.STRATEGIC_MERGE_PATCH:
            obj = patch.apply_strategic_merge_patch(
                original, patch_body, patch.strategic_rules(rtype.kind)
            )
        else:
            raise errors.unsupported_media_type(content_type, list(patch.PATCH_TYPES))
        obj = self._check_body(rtype, obj, namespace, name, opts)
        patched_uid = obj["metadata"].get("uid")
        if patched_uid and patched_uid != current.uid:
            self._fail_invalid(
                rtype,
                name,
                [
                    errors.StatusCause(
                        "FieldValueInvalid",
                        f'Invalid value: "{patched_uid}": field is immutable',
                        "metadata.uid",
                    )
                ],
            )
        patched_rv = obj["metadata"].get("resourceVersion")
        if patched_rv == original["metadata"].get("resourceVersion"):
            # The patch did not ask for a precondition: do not turn it into one.
            obj["metadata"].pop("resourceVersion", None)
        entry = self._update_now(rtype, ns, name, current, obj, subresource, opts)
        await self.store.sync()
        return entry

    def _update_now(
        self,
        rtype: ResourceType,
        ns: str,
        name: str,
        current: Entry,
        obj: dict[str, Any],
        subresource: str,
        opts: WriteOptions,
    ) -> Entry:
        store = self.store
        old = loads(current.data)
        meta = obj["metadata"]
        asked_rv = meta.get("resourceVersion")
        if asked_rv and asked_rv != str(current.rv):
            raise errors.conflict(rtype.plural, rtype.group, name)
        meta["name"] = name
        old_meta = old["metadata"]
        for key in _SYSTEM_META:
            if key in old_meta:
                meta[key] = old_meta[key]
            else:
                meta.pop(key, None)
        if rtype.namespaced:
            meta["namespace"] = ns
        meta.pop("managedFields", None)
        if subresource == "status":
            new = copy.deepcopy(old)
            if "status" in obj:
                new["status"] = obj["status"]
            else:
                new.pop("status", None)
            obj = new
        elif subresource == "finalize":
            new = copy.deepcopy(old)
            new.setdefault("spec", {})["finalizers"] = (obj.get("spec") or {}).get(
                "finalizers"
            ) or []
            obj = new
        elif rtype.status_subresource:
            if "status" in old:
                obj["status"] = old["status"]
            else:
                obj.pop("status", None)
        if not rtype.custom:
            if rtype.kind == "Service" and isinstance(obj.get("spec"), dict):
                old_spec = old.get("spec") or {}
                for key in ("clusterIP", "clusterIPs"):
                    if key in old_spec and not obj["spec"].get(key):
                        obj["spec"][key] = old_spec[key]
            defaults.fold_string_data(rtype.kind, obj) if not rtype.custom else None
            defaults.apply_defaults(rtype.kind, obj)
            if rtype.storage_key == CRD_KEY and subresource != "status":
                schema.crd_defaults(obj)
                obj["status"] = self._crd_status(obj, old.get("status"))
        if rtype.has_generation and self._generation_changed(rtype, obj, old):
            meta = obj["metadata"]
            meta["generation"] = int(old_meta.get("generation") or 1) + 1
        if rtype.kind == "DaemonSet" and not rtype.custom:
            # The annotation shows the DaemonSet's template generation: it is the
            # server's, whatever the client sent, and counts template changes.
            old_generation = (old_meta.get("annotations") or {}).get(DS_TEMPLATE_GENERATION, "1")
            if not old_generation.isdigit():
                old_generation = "1"
            changed = (obj.get("spec") or {}).get("template") != (old.get("spec") or {}).get(
                "template"
            )
            value = str(int(old_generation) + 1) if changed else old_generation
            obj["metadata"].setdefault("annotations", {})[DS_TEMPLATE_GENERATION] = value
        self._validate(rtype, obj, name, opts)
        self._fail_invalid(rtype, name, validation.validate_update(rtype, obj, old))
        obj = self._ordered(rtype, obj)
        if rtype.custom:
            obj["apiVersion"] = old.get("apiVersion", obj["apiVersion"])
        obj["metadata"]["resourceVersion"] = old_meta.get("resourceVersion")
        if obj == old:
            return current
        if opts.dry_run:
            return self._entry(rtype, obj, 0)
        meta = obj["metadata"]
        if (
            meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and not (rtype.storage_key == NAMESPACES and (obj.get("spec") or {}).get("finalizers"))
            and not meta.get("deletionGracePeriodSeconds")
        ):
            return self._remove(rtype, ns, name, obj)
        entry = self._new_entry(rtype, obj)
        store.write(MODIFIED, rtype.storage_key, ns, name, entry)
        if rtype.storage_key == CRD_KEY and not meta.get("deletionTimestamp"):
            self._serve_crd(obj)
        return entry
