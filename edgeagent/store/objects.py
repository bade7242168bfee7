"""Objects from the hub (Pods, ConfigMaps, Secrets, Devices, DeviceModels): stored
before they take effect, then the listeners are told; :meth:`ObjectsPart.inventory` is
what the hello carries."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from typing import Any, Protocol

from edgeagent.store.db import StoreCore, dumps

__all__ = ["ObjectChange", "ObjectsPart", "RefLike", "StoredObject", "ref_dict"]

log = logging.getLogger("edgeagent.store.store")


class RefLike(Protocol):
    """Anything with the four fields of ``protocol.messages.ObjectRef``."""

    kind: str
    namespace: str
    name: str
    uid: str


@dataclasses.dataclass(frozen=True, slots=True)
class StoredObject:
    """One object from the hub as stored.

    Attributes:
        uid: metadata.uid.
        kind: ``"Pod"``, ``"ConfigMap"``, ``"Secret"`` …
        namespace: ``""`` for cluster-scoped objects.
        name: metadata.name.
        resource_version: the API resourceVersion (opaque; compared for equality only).
        body: the raw API JSON as a dict.
    """

    uid: str
    kind: str
    namespace: str
    name: str
    resource_version: str
    body: dict[str, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class ObjectChange:
    """What a store listener is told after an object change was committed.

    Attributes:
        op: ``"upsert"`` or ``"delete"``.
        kind, namespace, name, uid: the object's identity.
        resource_version: the new (upsert) or last (delete) resourceVersion.
    """

    op: str
    kind: str
    namespace: str
    name: str
    uid: str
    resource_version: str


def ref_dict(ref: RefLike) -> dict[str, str]:
    """An object reference as the wire body carries it."""
    return {"kind": ref.kind, "namespace": ref.namespace, "name": ref.name, "uid": ref.uid}


class ObjectsPart(StoreCore):
    """The ``objects`` table (a part of :class:`~edgeagent.store.Store`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._listeners: list[Callable[[ObjectChange], None]] = []

    def add_listener(self, listener: Callable[[ObjectChange], None]) -> Callable[[], None]:
        """Call ``listener(change)`` after each committed object upsert/delete.

        Returns:
            A function that removes the listener.
        """
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def _notify(self, change: ObjectChange) -> None:
        for listener in list(self._listeners):
            try:
                listener(change)
            except Exception:
                log.exception("store listener failed for %s %s", change.op, change.uid)

    def inventory(self) -> dict[str, str]:
        """Every stored object's uid → resourceVersion (for the hello)."""
        return dict(self._read("SELECT uid, resource_version FROM objects"))

    def apply_upsert(self, ref: RefLike, resource_version: str, obj: dict[str, Any]) -> bool:
        """Store an object received from the hub and commit it, then tell listeners.

        Args:
            ref: the object's kind, namespace, name and uid.
            resource_version: its resourceVersion.
            obj: the raw API JSON.

        Returns:
            ``False`` when the same resourceVersion and body were already stored
            (nothing written), ``True`` otherwise.

        Raises:
            StoreFullError: not stored (the hub will resend it after the next inventory).
        """
        body = dumps(obj)
        row = self._read("SELECT resource_version, body FROM objects WHERE uid = ?", (ref.uid,))
        if row and row[0][0] == resource_version and row[0][1] == body:
            return False
        with self._write() as conn:
            conn.execute(
                "INSERT INTO objects (uid, kind, namespace, name, resource_version, body) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(uid) DO UPDATE SET kind=excluded.kind, "
                "namespace=excluded.namespace, name=excluded.name, "
                "resource_version=excluded.resource_version, body=excluded.body",
                (ref.uid, ref.kind, ref.namespace, ref.name, resource_version, body),
            )
        self.flush()
        self._notify(
            ObjectChange("upsert", ref.kind, ref.namespace, ref.name, ref.uid, resource_version)
        )
        return True

    def apply_delete(self, uid: str) -> bool:
        """Remove an object the hub deleted (and its last known pod status); commit; tell
        listeners.

        Returns:
            ``False`` if no object had that uid.

        Raises:
            StoreFullError: not removed (the hub repeats deletes after the next inventory).
        """
        row = self._read(
            "SELECT kind, namespace, name, resource_version FROM objects WHERE uid = ?", (uid,)
        )
        if not row:
            return False
        kind, namespace, name, rv = row[0]
        with self._write() as conn:
            conn.execute("DELETE FROM objects WHERE uid = ?", (uid,))
            conn.execute("DELETE FROM pod_status WHERE uid = ?", (uid,))
        self.flush()
        self._notify(ObjectChange("delete", kind, namespace, name, uid, rv))
        return True

    def get_object(self, uid: str) -> StoredObject | None:
        """The object with that uid, or ``None``."""
        rows = self._read(
            "SELECT uid, kind, namespace, name, resource_version, body FROM objects WHERE uid = ?",
            (uid,),
        )
        return _obj(rows[0]) if rows else None

    def find_object(self, kind: str, namespace: str, name: str) -> StoredObject | None:
        """The object of that kind and name (the newest if the hub briefly sent two)."""
        rows = self._read(
            "SELECT uid, kind, namespace, name, resource_version, body FROM objects "
            "WHERE kind = ? AND namespace = ? AND name = ? ORDER BY rowid DESC LIMIT 1",
            (kind, namespace, name),
        )
        return _obj(rows[0]) if rows else None

    def list_objects(self, kind: str | None = None) -> list[StoredObject]:
        """All stored objects, or those of one kind, in arrival order."""
        sql = "SELECT uid, kind, namespace, name, resource_version, body FROM objects"
        params: tuple = ()
        if kind is not None:
            sql += " WHERE kind = ?"
            params = (kind,)
        return [_obj(r) for r in self._read(sql + " ORDER BY rowid", params)]


def _obj(row: tuple) -> StoredObject:
    uid, kind, namespace, name, rv, body = row
    return StoredObject(uid, kind, namespace, name, rv, json.loads(body))
