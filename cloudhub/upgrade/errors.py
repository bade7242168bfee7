"""Exceptions raised by the upgrade package.

One tree, rooted at :class:`UpgradeError` (under :class:`cloudhub.errors.HubError`).
``InvalidUpgrade`` is the caller's mistake (a bad EdgeUpgrade); ``IllegalTransition`` is
a node's report that its per-node state machine does not allow (the peer's).
"""

from __future__ import annotations

from cloudhub.errors import HubError

__all__ = ["IllegalTransition", "InvalidUpgrade", "UpgradeError"]


class UpgradeError(HubError):
    """Root of every error raised by ``cloudhub.upgrade``."""


class InvalidUpgrade(UpgradeError, ValueError):
    """An EdgeUpgrade (or a field of one) is invalid.

    Attributes:
        path: the JSON path of the offending field (``"spec.artifact.sha256"``).
        reason: what is wrong with it, in words.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class IllegalTransition(UpgradeError):
    """A node's upgrade cannot go from ``current`` to ``wanted``.

    Attributes:
        node: the node's name.
        current: its phase now.
        wanted: the phase it reported or was given.
    """

    def __init__(self, node: str, current: object, wanted: object) -> None:
        super().__init__(f"node {node}: no transition {current} -> {wanted}")
        self.node = node
        self.current = current
        self.wanted = wanted
