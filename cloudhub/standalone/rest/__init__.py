"""REST semantics of the embedded API (``Registry``): what get, list, create, update, patch,
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

One module per verb family, composed into :class:`Registry`: ``types`` (what is served),
``entries`` (the helpers every verb uses), ``read``, ``create``, ``update`` (update and
patch), ``scale`` and ``delete``.
"""

from __future__ import annotations

from cloudhub.standalone.resources import BUILTIN_TYPES, ResourceType
from cloudhub.standalone.rest.create import Creates
from cloudhub.standalone.rest.delete import Deletes
from cloudhub.standalone.rest.entries import Entries
from cloudhub.standalone.rest.read import Reads
from cloudhub.standalone.rest.scale import Scales
from cloudhub.standalone.rest.types import (
    CRD_FINALIZER,
    CRD_KEY,
    NAMESPACE_FINALIZER,
    NAMESPACES,
    ServedTypes,
)
from cloudhub.standalone.rest.update import Updates
from cloudhub.standalone.store import Store

__all__ = ["CRD_FINALIZER", "CRD_KEY", "NAMESPACES", "NAMESPACE_FINALIZER", "Registry"]


class Registry(ServedTypes, Entries, Reads, Creates, Updates, Scales, Deletes):
    """Served resource types and the REST operations on their objects: the state below,
    and the verbs of the modules it is composed of.

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
