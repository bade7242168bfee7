"""Feed ``EdgeTwins`` from the agent store's Device and DeviceModel objects.

Devices and models reach the node as objects (``object_upsert``/``object_delete`` of kinds
``Device`` and ``DeviceModel``), which the uplink puts into the store like pods. The feed
loads them at start — before the device API and the uplink run — and then follows the
store's object listener, so the twins always serve what the store holds:

- a DeviceModel upsert/delete → ``upsert_model``/``remove_model``;
- a Device upsert → ``upsert_device`` (a new uid under an old name replaces the old device
  and drops its twin state: it is a new device); a Device whose ``spec.nodeName`` names
  another node is not served here (it moved) and its twin state is dropped;
- a Device delete → ``remove_device`` (its twin state goes).

At start, twin state kept for a uid that has no Device object any more (deleted while a
commit was pending, or moved away) is dropped. An object that breaks the v1beta1 schema is
logged and not served; a valid earlier version of it stays served, and its twin state is
kept until it is fixed or deleted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from edgeagent.devices.twins import EdgeTwins
from protocol.devices import InvalidDocument

if TYPE_CHECKING:
    from edgeagent.store import ObjectChange, Store

__all__ = ["DEVICE_KINDS", "TwinFeed"]

log = logging.getLogger(__name__)

DEVICE_KINDS = ("Device", "DeviceModel")


class TwinFeed:
    """Keeps ``twins`` equal to the store's Device and DeviceModel objects.

    Args:
        store: the agent store.
        twins: the node's twins over ``store.twins()``.
        node_name: this node; Devices assigned to another node are not served.
    """

    def __init__(self, store: Store, twins: EdgeTwins, node_name: str) -> None:
        self._store = store
        self._twins = twins
        self._node_name = node_name
        self._remove: Callable[[], None] | None = None

    def start(self) -> None:
        """Load every model, then every device, drop orphaned twin state, and follow the
        store from now on.

        Raises:
            StoreError: the store could not be read or the orphans not dropped.
        """
        for obj in self._store.list_objects("DeviceModel"):
            self._model(obj.body)
        for obj in self._store.list_objects("Device"):
            self._device(obj.uid, obj.body)
        kept = {
            obj.uid for obj in self._store.list_objects("Device") if self._assigned_here(obj.body)
        }
        for uid in self._store.twins().device_uids() - kept:
            log.info("device twins: dropping the state of %s (no Device on this node)", uid)
            self._twins.remove_device(uid)
        self._remove = self._store.add_listener(self._changed)

    def close(self) -> None:
        """Stop following the store."""
        if self._remove is not None:
            self._remove()
            self._remove = None

    def _changed(self, change: ObjectChange) -> None:
        if change.kind not in DEVICE_KINDS:
            return
        if change.op == "delete":
            if change.kind == "Device":
                self._twins.remove_device(change.uid)
            else:
                self._twins.remove_model(change.namespace, change.name)
            return
        obj = self._store.get_object(change.uid)
        if obj is None:  # deleted again since (listeners run after each commit)
            return
        if change.kind == "Device":
            self._device(obj.uid, obj.body)
        else:
            self._model(obj.body)

    def _assigned_here(self, body: Mapping[str, Any]) -> bool:
        spec = body.get("spec")
        node = spec.get("nodeName") if isinstance(spec, Mapping) else None
        return not node or node == self._node_name

    def _device(self, uid: str, body: Mapping[str, Any]) -> None:
        if not self._assigned_here(body):
            log.info("Device %s is assigned to another node; not served here", _name(body))
            self._twins.remove_device(uid)
            return
        try:
            self._twins.upsert_device(body)
        except (InvalidDocument, ValueError) as exc:
            log.warning("Device %s is not served: %s", _name(body), exc)

    def _model(self, body: Mapping[str, Any]) -> None:
        try:
            self._twins.upsert_model(body)
        except InvalidDocument as exc:
            log.warning("DeviceModel %s is not used: %s", _name(body), exc)


def _name(body: Mapping[str, Any]) -> str:
    meta = body.get("metadata")
    if not isinstance(meta, Mapping):
        return "?"
    return f"{meta.get('namespace') or 'default'}/{meta.get('name', '?')}"
