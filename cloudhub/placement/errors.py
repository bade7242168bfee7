"""Exceptions raised by the placement package.

One tree, rooted at :class:`PlacementError`. ``InvalidSpec`` is the caller's
mistake (a bad EdgePlacement, a bad quantity); ``InvalidObject`` is a peer's
(a Node or Pod from the API that does not have the shape Kubernetes gives it);
``TranslationError`` is a foreign document that cannot be read at all.

The root sits under the hub's :class:`cloudhub.errors.HubError`.
"""

from __future__ import annotations

from cloudhub.errors import HubError


class PlacementError(HubError):
    """Root of every error raised by ``cloudhub.placement``."""


class InvalidSpec(PlacementError, ValueError):
    """A placement (or a value inside one) is invalid.

    Attributes:
        path: the JSON path of the offending field, e.g.
            ``"spec.groups.maxSkew"`` or ``"spec.template.spec.containers[0].image"``.
        reason: what is wrong with it, in words.
    """

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}" if path else reason)


class InvalidObject(PlacementError, ValueError):
    """A Node or Pod read from the API does not have the expected shape.

    Attributes:
        kind: ``"Node"`` or ``"Pod"``.
        name: the object's name (``""`` if it has none).
        reason: what is wrong with it.
    """

    def __init__(self, kind: str, name: str, reason: str) -> None:
        self.kind = kind
        self.name = name
        self.reason = reason
        super().__init__(f"{kind} {name or '<unnamed>'}: {reason}")


class TranslationError(PlacementError):
    """A foreign placement document cannot be read at all (not YAML, not a mapping).

    Documents that can be read but only partly translated do not raise: their
    untranslated parts are listed in the import result.

    Attributes:
        source: the file or document the error is about.
        reason: what is wrong.
    """

    def __init__(self, source: str, reason: str) -> None:
        self.source = source
        self.reason = reason
        super().__init__(f"{source}: {reason}")
