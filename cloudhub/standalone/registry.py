"""REST semantics of the embedded API: what get, list, create, update, patch,
delete, deletecollection and watch do to stored objects, as kube-apiserver 1.20.

Every write runs synchronously on the event loop from reading the current
object to :meth:`Store.write` (so writes are applied in a total order and a
stale ``resourceVersion`` is always detected), then awaits :meth:`Store.sync`
before answering. Rules, and where they come from:

- create: ``generateName`` (5 random characters, as the name generator),
  ``uid``, ``creationTimestamp``, ``generation: 1`` for kinds that keep it,
  defaults and admission (:mod:`defaults`), validation (:mod:`validation`,
  :mod:`schema`), 409 AlreadyExists, 404 when the namespace does not exist and
  403 while it terminates;
- update/patch: 409 Conflict when ``metadata.resourceVersion`` is given and
  stale; system metadata kept from the stored object; with a status
  subresource the main resource ignores ``status`` and ``/status`` changes only
  ``status``; ``generation`` bumped when anything but metadata and status
  changed; a write that changes nothing is not stored (no new
  resourceVersion, no watch event), as etcd's GuaranteedUpdate;
- delete: preconditions, graceful deletion of pods bound to a node, two-step
  deletion while finalizers remain (``deletionTimestamp`` set, object kept
  until an update removes the last finalizer), propagation policies through
  the ``orphan``/``foregroundDeletion`` finalizers;
- list: consistent snapshots at one revision, ``limit``/``continue`` paging
  with ``remainingItemCount``, resourceVersion and resourceVersionMatch rules;
- watch: from a revision, or the current state as ADDED events first.
"""

from __future__ import annotations

import copy
import secrets
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from cloudhub.standalone import bodies, decode, defaults, errors, patch, schema, validation
from cloudhub.standalone.encoding import dumps, loads, now_rfc3339
from cloudhub.standalone.options import (
    DeleteOptions,
    ListParams,
    ListResult,
    WriteOptions,
    decode_continue,
    encode_continue,
    parse_resource_version,
)
from cloudhub.standalone.resources import BUILTIN_TYPES, ResourceType, field_value
from cloudhub.standalone.store import ADDED, DELETED, MODIFIED, Change, Entry, Store
from cloudhub.standalone.watch import Watch

__all__ = ["CRD_FINALIZER", "CRD_KEY", "NAMESPACES", "NAMESPACE_FINALIZER", "Registry"]

CRD_KEY = "apiextensions.k8s.io/customresourcedefinitions"
NAMESPACES = "namespaces"
CRD_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"
NAMESPACE_FINALIZER = "kubernetes"
_DS_TEMPLATE_GENERATION = "deprecated.daemonset.template.generation"
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # the apiserver name generator's alphabet
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
_SYSTEM_META = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "selfLink",
)


class Registry:
    """Served resource types and the REST operations on their objects.

    Args:
        store: The object store (opened).
        watch_queue_events: Per-watch buffer (see settings).
        max_object_bytes: Largest stored object, as JSON (see settings).
    """

    def __init__(
        self,
        store: Store,
        *,
        watch_queue_events: int = 10_000,
        max_object_bytes: int = 1_572_864,
    ) -> None:
        self.store = store
        self.watch_queue_events = watch_queue_events
        self.max_object_bytes = max_object_bytes
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        self._by_key: dict[str, list[ResourceType]] = {}
        for rtype in BUILTIN_TYPES:
            self._add_type(rtype)
        self.terminating_namespaces: set[str] = set()
        store.on_undo.append(self._undone)

    # -- types -------------------------------------------------------------------

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
                    if not _crd_gone(crd):
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
                if not _crd_gone(crd):
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

    # -- helpers -----------------------------------------------------------------

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

    # -- reads -------------------------------------------------------------------

    async def get(self, rtype: ResourceType, namespace: str, name: str) -> Entry:
        """The stored object.

        Raises:
            StatusError: 404 NotFound.
        """
        entry = self.store.get(rtype.storage_key, namespace, name)
        await self.store.sync()
        if entry is None:
            raise errors.not_found(rtype.plural, rtype.group, name)
        return entry

    async def list(
        self, rtype: ResourceType, namespace: str | None, params: ListParams
    ) -> ListResult:
        """One page of the collection (all of it without ``limit``).

        Raises:
            StatusError: 400 for bad paging parameters; 410 Expired when the
                ``continue`` token or the exact resourceVersion asked is older than
                the kept history; 504 when the resourceVersion asked is newer than
                the store's after 3 s.
        """
        store = self.store
        key = rtype.storage_key
        start = ""
        rv_param, match = params.resource_version, params.resource_version_match
        if match and match not in ("Exact", "NotOlderThan"):
            raise errors.bad_request(
                f'resourceVersionMatch: Unsupported value: "{match}": supported values: '
                '"Exact", "NotOlderThan"'
            )
        if match and not rv_param:
            raise errors.bad_request(
                "resourceVersionMatch is forbidden unless resourceVersion is provided"
            )
        if params.continue_token:
            if rv_param:
                raise errors.bad_request(
                    "specifying resource version is not allowed when using continue"
                )
            revision, start = decode_continue(params.continue_token)
            if revision < store.compacted_revision:
                raise errors.StatusError(
                    410,
                    "Expired",
                    "The provided continue parameter is too old to display a consistent list "
                    "result. You can start a new list without the continue parameter.",
                )
            rows = store.items_at(key, namespace, revision)
        elif rv_param and rv_param != "0":
            asked = parse_resource_version(rv_param)
            exact = match == "Exact" or (not match and params.limit > 0)
            if asked > store.revision and not await store.wait_for_revision(asked, 3.0):
                raise errors.too_large_resource_version(asked, store.revision)
            if exact:
                revision = asked
                rows = store.items_at(key, namespace, asked)
            else:
                revision = store.revision
                rows = store.items(key, namespace)
        else:
            if match == "Exact":
                raise errors.bad_request(
                    'resourceVersionMatch "exact" is forbidden for resourceVersion "0"'
                )
            revision = store.revision
            rows = store.items(key, namespace)
        limit = params.limit
        if rv_param == "0" and not params.continue_token:
            limit = 0  # served from the watch cache, which ignores limit (as in 1.20)
        out: list[Entry] = []
        token, remaining = "", None
        last = ""
        for index, (ns, name, entry) in enumerate(rows):
            if start and f"{ns}/{name}" <= start:
                continue
            if params.filtered and not params.matches(ns, name, entry):
                continue
            if limit and len(out) == limit:
                token = encode_continue(revision, last)
                if not params.filtered:
                    remaining = len(rows) - index
                break
            out.append(entry)
            last = f"{ns}/{name}"
        await store.sync()
        return ListResult(revision, out, token, remaining)

    async def watch(self, rtype: ResourceType, namespace: str | None, params: ListParams) -> Watch:
        """Subscribe to changes; the caller drains ``watch.initial`` then ``watch.queue``
        and must call :meth:`unwatch`.

        Raises:
            StatusError: 410 Expired when the resourceVersion asked is older than
                the kept history (the HTTP layer sends it as an ERROR event).
        """
        store = self.store
        rv = params.resource_version
        if rv in ("", "0"):
            since = store.revision
            watch = Watch(rtype, namespace, params, since, self.watch_queue_events)
            watch.initial = [
                (ns, name, entry)
                for ns, name, entry in store.items(rtype.storage_key, namespace)
                if not params.filtered or params.matches(ns, name, entry)
            ]
            store.subscribe_now(rtype.storage_key, watch)
            watch.bounded = True
            try:
                await store.sync()
            except BaseException:
                store.unsubscribe(rtype.storage_key, watch)
                raise
            return watch
        since = parse_resource_version(rv)
        watch = Watch(rtype, namespace, params, since, self.watch_queue_events)
        store.subscribe(rtype.storage_key, since, watch)
        watch.bounded = True
        return watch

    def unwatch(self, watch: Watch) -> None:
        self.store.unsubscribe(watch.rtype.storage_key, watch)

    # -- create ------------------------------------------------------------------

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
            obj["metadata"].setdefault("annotations", {})[_DS_TEMPLATE_GENERATION] = "1"

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

    # -- update and patch ------------------------------------------------------------

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
            old_generation = (old_meta.get("annotations") or {}).get(_DS_TEMPLATE_GENERATION, "1")
            if not old_generation.isdigit():
                old_generation = "1"
            changed = (obj.get("spec") or {}).get("template") != (old.get("spec") or {}).get(
                "template"
            )
            value = str(int(old_generation) + 1) if changed else old_generation
            obj["metadata"].setdefault("annotations", {})[_DS_TEMPLATE_GENERATION] = value
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

    # -- scale -------------------------------------------------------------------

    def scale_of(self, rtype: ResourceType, entry: Entry) -> dict[str, Any]:
        """The ``autoscaling/v1`` Scale of an object with a scale subresource."""
        assert rtype.scale is not None
        spec_path, status_path, selector_path = rtype.scale
        obj = loads(entry.data)
        meta = obj["metadata"]
        scale_meta = {
            k: meta[k]
            for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if k in meta
        }
        status: dict[str, Any] = {"replicas": int(_get_path(obj, status_path) or 0)}
        selector = _selector_string(_get_path(obj, selector_path)) if selector_path else ""
        if selector:
            status["selector"] = selector
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": scale_meta,
            "spec": {"replicas": int(_get_path(obj, spec_path) or 0)},
            "status": status,
        }

    async def get_scale(self, rtype: ResourceType, namespace: str, name: str) -> dict[str, Any]:
        """GET ``<plural>/<name>/scale``. Raises StatusError 404 when missing."""
        return self.scale_of(rtype, await self.get(rtype, namespace, name))

    async def update_scale(
        self,
        rtype: ResourceType,
        namespace: str,
        name: str,
        change: Callable[[dict[str, Any]], Any],
        opts: WriteOptions | None = None,
    ) -> dict[str, Any]:
        """PUT or PATCH ``<plural>/<name>/scale``: ``change`` maps the current Scale
        to the new one; only ``spec.replicas`` is written back to the object.

        Raises:
            StatusError: 404 when missing; 409 on a stale resourceVersion; 422 for
                a negative or missing replica count.
        """
        assert rtype.scale is not None
        opts = opts or WriteOptions()
        ns = namespace if rtype.namespaced else ""
        current = self.store.get(rtype.storage_key, ns, name)
        if current is None:
            raise errors.not_found(rtype.plural, rtype.group, name)
        scale = change(self.scale_of(rtype, current))
        if not isinstance(scale, dict):
            raise errors.bad_request("a Scale must be a JSON object")
        replicas = (scale.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise errors.invalid(
                "Scale",
                "autoscaling",
                name,
                [
                    errors.StatusCause(
                        "FieldValueInvalid",
                        f"Invalid value: {replicas!r}: must be greater than or equal to 0",
                        "spec.replicas",
                    )
                ],
            )
        asked = (scale.get("metadata") or {}).get("resourceVersion")
        if asked and asked != str(current.rv):
            raise errors.conflict(rtype.plural, rtype.group, name)
        obj = loads(current.data)
        _set_path(obj, rtype.scale[0], replicas)
        obj["metadata"].pop("resourceVersion", None)
        entry = self._update_now(rtype, ns, name, current, obj, "", opts)
        await self.store.sync()
        return self.scale_of(rtype, entry)

    # -- delete ------------------------------------------------------------------

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


def _crd_gone(crd: Mapping[str, Any]) -> bool:
    meta = crd.get("metadata") or {}
    return bool(meta.get("deletionTimestamp")) and not meta.get("finalizers")


def _get_path(obj: Any, path: str) -> Any:
    for part in path.split(".") if path else ():
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


def _set_path(obj: dict[str, Any], path: str, value: Any) -> None:
    parts = path.split(".")
    for part in parts[:-1]:
        obj = obj.setdefault(part, {})
    obj[parts[-1]] = value


def _selector_string(selector: Any) -> str:
    """A label selector object (matchLabels/matchExpressions) in its string form."""
    if isinstance(selector, str):
        return selector
    if not isinstance(selector, dict):
        return ""
    terms = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        op, key, values = expr.get("operator"), expr.get("key"), expr.get("values") or []
        if op == "In":
            terms.append(f"{key} in ({','.join(values)})")
        elif op == "NotIn":
            terms.append(f"{key} notin ({','.join(values)})")
        elif op == "Exists":
            terms.append(str(key))
        elif op == "DoesNotExist":
            terms.append(f"!{key}")
    return ",".join(terms)
