"""Node authorization: a session may name only its own Node and the objects it is sent.

The rule is the Kubernetes Node authorizer's (``plugin/pkg/auth/authorizer/node``): a
kubelet reads its own Node, the pods bound to it and the ConfigMaps and Secrets those pods
reference, and nothing else. Here the node's desired set (:class:`NodeObjects`) is exactly
that list, so "may node N name object X" is "is X in N's desired set". The node's identity
is the name in its client certificate; the hub checks that the hello names the same node
before a session is accepted (:mod:`cloudhub.bridge.server`).
"""

from __future__ import annotations

import enum

from cloudhub.bridge.objects import NodeObjects
from protocol.messages import ObjectRef

__all__ = ["Decision", "NodeAuthorizer"]


class Decision(enum.Enum):
    """The answer for one object a node names."""

    ALLOWED = "allowed"
    """The node's own object."""
    FORBIDDEN = "forbidden"
    """It exists and belongs to another node (or to none): refuse, log, record an Event."""
    NOT_FOUND = "not_found"
    """No such object (any more): nothing to do, tell the node."""


class NodeAuthorizer:
    """Decides whether a node may name an object.

    Args:
        objects: the desired sets.
        enabled: ``False`` allows any existing object (``authorization.node_authorization``).
    """

    def __init__(self, objects: NodeObjects, *, enabled: bool = True) -> None:
        self.objects = objects
        self.enabled = enabled

    def check(self, node: str, ref: ObjectRef) -> Decision:
        """Decide for ``ref`` named by ``node`` (cache and index lookups only: no API call,
        and for pods, ConfigMaps and Secrets no rebuild of the node's desired set)."""
        if ref.kind == "Node":
            # The Node object may not exist yet (registration runs after the welcome).
            if ref.name == node or not self.enabled:
                return Decision.ALLOWED
            return Decision.FORBIDDEN
        obj = self.objects.lookup(ref)
        if obj is None:
            return Decision.NOT_FOUND
        if not self.enabled or self.objects.holds(node, ref.kind, obj):
            return Decision.ALLOWED
        return Decision.FORBIDDEN
