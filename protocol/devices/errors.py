"""Errors raised by the device model and value rules.

``DeviceError`` is the root of this branch of the ``protocol.errors`` tree (under
``ProtocolError``). ``InvalidDocument`` says a DeviceModel or Device document breaks the
schema (every problem with its field path); ``InvalidValue`` says a twin value breaks its
model property (type, range, access mode). Both are "the input is bad" errors: the caller
reports them, nothing is half-applied. Every ``DeviceError`` is also a ``ValueError``, as
these errors were before they joined the tree, so ``except ValueError`` handlers keep
catching them.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol.errors import ProtocolError

__all__ = ["DeviceError", "InvalidDocument", "InvalidValue", "Problem"]


class DeviceError(ProtocolError, ValueError):
    """Root of the device model errors (the ``devices`` branch of ``protocol.errors``)."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One schema problem in a document.

    Attributes:
        path: where, as a field path from the document root, e.g.
            ``spec.properties[2].type``.
        message: what is wrong and, where we know, how to fix it.
    """

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class InvalidDocument(DeviceError):
    """A DeviceModel or Device document breaks the schema.

    Attributes:
        problems: every problem found (parsing does not stop at the first), in document order.
        kind: ``"DeviceModel"``, ``"Device"`` or ``""`` when the kind itself is unknown.
        name: ``namespace/name`` of the document when it could be read, else ``""``.
    """

    def __init__(self, problems: list[Problem], *, kind: str = "", name: str = "") -> None:
        self.problems = tuple(problems)
        self.kind = kind
        self.name = name
        what = " ".join(p for p in (kind, name) if p) or "document"
        lines = "; ".join(str(p) for p in self.problems)
        super().__init__(f"invalid {what}: {lines}")


class InvalidValue(DeviceError):
    """A twin value does not fit its model property.

    Attributes:
        property: the property name.
        reason: a CamelCase machine-readable reason, one of ``Reason``'s values
            (``TypeMismatch``, ``OutOfRange``, ``ReadOnly``, ``UnknownProperty``,
            ``NotATwinProperty``, ``TooLarge``, ``ModelNotFound``).
        message: a sentence for people, naming the property, the value and the rule.
    """

    def __init__(self, property: str, reason: str, message: str) -> None:
        self.property = property
        self.reason = reason
        self.message = message
        super().__init__(message)
