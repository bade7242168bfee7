"""``ObjectRef``: which Kubernetes object a message is about, as a small validated value.

Also the ``MISSING`` sentinel the generated field checks of :mod:`protocol.fields` use for an
absent field, and the slot setters they build decoded references with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from protocol.errors import InvalidMessage

__all__ = ["MISSING", "REF_SETTERS", "ObjectRef"]

MISSING: Any = type("_Missing", (), {"__repr__": lambda self: "<missing>"})()
"""An absent field (distinct from ``None``, which optional fields may hold)."""


@dataclass(frozen=True, slots=True, init=False)
class ObjectRef:
    """Which Kubernetes object a message is about (a small value, never a joined string).

    Raises:
        InvalidMessage: a field is not a str, or ``kind``, ``name`` or ``uid`` is empty.
    """

    kind: str
    """The object's kind, e.g. ``"Pod"``, ``"ConfigMap"``, ``"Device"``."""
    namespace: str
    """Its namespace, ``""`` for cluster-scoped objects (Node, Device classes)."""
    name: str
    """Its ``metadata.name``."""
    uid: str
    """Its ``metadata.uid``: the identity that survives renames and recreations."""

    def __init__(self, kind: str, namespace: str, name: str, uid: str) -> None:
        # Written out rather than generated: every decoded pod status and event carries a
        # ref, so the valid case is one expression and four slot stores.
        if not (
            isinstance(kind, str)
            and kind
            and isinstance(namespace, str)
            and isinstance(name, str)
            and name
            and isinstance(uid, str)
            and uid
        ):
            for field_name, value in (
                ("kind", kind),
                ("namespace", namespace),
                ("name", name),
                ("uid", uid),
            ):
                if not isinstance(value, str):
                    got = "nothing" if value is MISSING else type(value).__name__
                    raise InvalidMessage(field_name, f"expected str, got {got}")
                if not value and field_name != "namespace":
                    raise InvalidMessage(field_name, "must not be empty")
        _ref_kind(self, kind)  # the slots, set as the frozen dataclass __init__ would
        _ref_namespace(self, namespace)
        _ref_name(self, name)
        _ref_uid(self, uid)

    def _to_wire(self) -> dict[str, str]:
        return {"kind": self.kind, "namespace": self.namespace, "name": self.name, "uid": self.uid}


# ObjectRef's slots, set directly by ObjectRef() and the decoders once the values are checked.
REF_SETTERS = {f"_ref_{n}": ObjectRef.__dict__[n].__set__ for n in ObjectRef.__slots__}
_ref_kind = REF_SETTERS["_ref_kind"]
_ref_namespace = REF_SETTERS["_ref_namespace"]
_ref_name = REF_SETTERS["_ref_name"]
_ref_uid = REF_SETTERS["_ref_uid"]
