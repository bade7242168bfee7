"""Stored entries of the embedded API: building them from objects, checking request
bodies, validation, rendering at a served version, and removal.

Part of :class:`cloudhub.standalone.rest.Registry`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cloudhub.standalone import bodies, decode, errors, schema, validation
from cloudhub.standalone.encoding import dumps, loads
from cloudhub.standalone.options import (
    WriteOptions,
)
from cloudhub.standalone.resources import ResourceType, field_value
from cloudhub.standalone.rest.types import CRD_KEY, NAMESPACES
from cloudhub.standalone.store import DELETED, Change, Entry

__all__ = ["Entries"]

_META_ORDER = (
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
)


class Entries:
    """The helpers every verb uses; they read ``store``, ``max_object_bytes`` and
    ``terminating_namespaces`` of the registry."""

    def _entry(self, rtype: ResourceType, obj: dict[str, Any], rv: int) -> Entry:
        meta = obj["metadata"]
        if rv:
            meta["resourceVersion"] = str(rv)
        labels = meta.get("labels")
        fields = {f: field_value(obj, path) for f, path in rtype.fields.items()}
        owners = tuple(
            r["uid"]
            for r in meta.get("ownerReferences") or ()
            if isinstance(r, dict) and "uid" in r
        )
        return Entry(
            rv,
            dumps(obj),
            dict(labels) if isinstance(labels, dict) else {},
            fields,
            meta.get("uid", ""),
            owners,
        )

    def _new_entry(self, rtype: ResourceType, obj: dict[str, Any]) -> Entry:
        """The entry of a new state of ``obj`` at the next revision, for :meth:`Store.write`.

        Raises:
            StatusError: 413 when its JSON is over ``max_object_bytes`` (etcd refuses
                values over its request limit, 1.5 MiB by default; a patch can grow an
                object past any one request body).
        """
        rv = self.store.next_revision()
        entry = self._entry(rtype, obj, rv)
        if len(entry.data) > self.max_object_bytes:
            self.store.release_revision(rv)
            raise errors.StatusError(
                413,
                "RequestEntityTooLarge",
                f"{rtype.kind} {obj['metadata'].get('name', '')!r} would be {len(entry.data)} "
                f"bytes of JSON, over the {self.max_object_bytes}-byte limit of the store",
            )
        return entry

    def _ordered(self, rtype: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.get("metadata") or {}
        ordered_meta = {k: meta[k] for k in _META_ORDER if k in meta}
        ordered_meta.update((k, v) for k, v in meta.items() if k not in ordered_meta)
        out: dict[str, Any] = {
            "kind": rtype.kind,
            "apiVersion": rtype.api_version,
            "metadata": ordered_meta,
        }
        for key, value in obj.items():
            if key not in out:
                out[key] = value
        return out

    def _check_namespace(
        self, rtype: ResourceType, namespace: str, name: str, create: bool
    ) -> None:
        if not rtype.namespaced:
            return
        if self.store.get(NAMESPACES, "", namespace) is None:
            raise errors.not_found("namespaces", "", namespace)
        if create and namespace in self.terminating_namespaces:
            raise errors.forbidden(
                rtype.plural,
                rtype.group,
                name,
                f"unable to create new content in namespace {namespace} because it is being "
                "terminated",
            )

    def _check_body(
        self,
        rtype: ResourceType,
        body: Any,
        namespace: str,
        name: str | None,
        opts: WriteOptions,
    ) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise errors.bad_request(
                f"the body of the request must be a JSON object for a {rtype.kind}"
            )
        try:
            # A patch can nest an object deeper than any one request body.
            bodies.check_depth(body)
        except bodies.BodyError as exc:
            raise errors.bad_request(f"the {rtype.kind} is refused: {exc}") from None
        kind, api_version = body.get("kind"), body.get("apiVersion")
        if kind and kind != rtype.kind:
            raise errors.bad_request(
                f'{kind} in version "{rtype.version}" cannot be handled as a {rtype.kind}: '
                f"the object kind does not match the requested resource"
            )
        if api_version and api_version != rtype.api_version:
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({rtype.api_version})"
            )
        meta = body.get("metadata")
        if meta is None:
            meta = body["metadata"] = {}
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be a JSON object")
        if rtype.namespaced:
            given = meta.get("namespace")
            if given and given != namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on "
                    "the request"
                )
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if name is not None and meta.get("name") and meta["name"] != name:
            raise errors.bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL "
                f"({name})"
            )
        if rtype.custom:
            opts.unknown_fields(rtype, decode.decode_metadata(rtype.kind, rtype.version, meta))
        else:
            opts.unknown_fields(rtype, decode.decode_builtin(rtype.kind, rtype.version, body))
            if rtype.kind == "Secret":
                decode.check_secret_data(body)
        return body

    def _fail_invalid(self, rtype: ResourceType, name: str, causes: list[Any]) -> None:
        if causes:
            raise errors.invalid(rtype.kind, rtype.group, name, causes)

    def _validate(
        self, rtype: ResourceType, obj: dict[str, Any], name: str, opts: WriteOptions
    ) -> None:
        causes = validation.validate_object(rtype, obj)
        if rtype.custom:
            schema_causes, pruned = schema.apply_schema(rtype, obj)
            opts.unknown_fields(rtype, pruned)
            causes += schema_causes
        elif rtype.storage_key == CRD_KEY:
            causes += schema.validate_crd(obj)
            if not causes:
                causes += self._crd_conflicts(obj)
        self._fail_invalid(rtype, name, causes)

    def _crd_conflicts(self, crd: Mapping[str, Any]) -> list[Any]:
        spec = crd["spec"]
        for version in spec["versions"]:
            found = self.lookup(spec["group"], version["name"], spec["names"]["plural"])
            if found is not None and not found.custom:
                return [
                    errors.StatusCause(
                        "FieldValueInvalid",
                        f'Invalid value: "{spec["names"]["plural"]}": a built-in resource has '
                        "this name",
                        "spec.names.plural",
                    )
                ]
        return []

    def _generation_changed(
        self, rtype: ResourceType, new: Mapping[str, Any], old: Mapping[str, Any]
    ) -> bool:
        skip = {"metadata", "kind", "apiVersion"}
        if rtype.status_subresource or not rtype.custom:
            skip.add("status")
        keys = (set(new) | set(old)) - skip
        if any(new.get(k) != old.get(k) for k in keys):
            return True
        if rtype.generation_counts_annotations:
            return (new["metadata"].get("annotations") or {}) != (
                old["metadata"].get("annotations") or {}
            )
        return False

    def _convert_out(self, rtype: ResourceType, entry: Entry) -> bytes:
        """The object JSON at the version ``rtype`` serves (custom resources stored at
        another version get their apiVersion rewritten; conversion strategy None)."""
        if rtype.custom and rtype.version != rtype.storage_version:
            obj = loads(entry.data)
            obj["apiVersion"] = rtype.api_version
            return dumps(obj)
        return entry.data

    def render(self, rtype: ResourceType, entry: Entry) -> bytes:
        """The JSON bytes of ``entry`` as served at ``rtype``'s version."""
        return self._convert_out(rtype, entry)

    def render_previous(self, rtype: ResourceType, change: Change) -> bytes:
        """The state before ``change``, stamped with the change's resourceVersion."""
        assert change.prev is not None
        obj = loads(self._convert_out(rtype, change.prev))
        obj["metadata"]["resourceVersion"] = str(change.rev)
        return dumps(obj)

    def _remove(self, rtype: ResourceType, ns: str, name: str, obj: dict[str, Any]) -> Entry:
        store = self.store
        rv = store.next_revision()
        entry = self._entry(rtype, obj, rv)
        store.write(DELETED, rtype.storage_key, ns, name, entry)
        if rtype.storage_key == CRD_KEY:
            spec = obj.get("spec") or {}
            names = spec.get("names") or {}
            self._unserve_crd(f"{spec.get('group')}/{names.get('plural')}")
        if rtype.storage_key == NAMESPACES:
            self.terminating_namespaces.discard(name)
        return entry
