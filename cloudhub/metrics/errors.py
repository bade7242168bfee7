"""Errors of the hub's metrics package, a branch of the hub's tree (``cloudhub.errors``).

::

    HubError                  the hub's root
    └── MetricsError          catch this to catch everything from cloudhub.metrics
        ├── BatchRejected     the edge sent a metrics body that does not decode (peer misbehaved)
        └── MetricsNotFound   no metrics for the node or pod asked for (an HTTP 404)
"""

from __future__ import annotations

from cloudhub.errors import HubError

__all__ = ["BatchRejected", "MetricsError", "MetricsNotFound"]


class MetricsError(HubError):
    """Root of the errors raised by ``cloudhub.metrics``."""


class BatchRejected(MetricsError):
    """A ``metrics_batch`` body from a node does not decode.

    The session should still acknowledge the message (resending it cannot help) and
    answer ``Error(code=INVALID_MESSAGE)`` naming ``reason``.

    Attributes:
        node: the node that sent it.
        reason: what is wrong with the body.
    """

    def __init__(self, node: str, reason: str) -> None:
        super().__init__(f"metrics batch from node {node} rejected: {reason}")
        self.node = node
        self.reason = reason


class MetricsNotFound(MetricsError):
    """There are no metrics for the object asked for.

    Attributes:
        kind: ``"NodeMetrics"`` or ``"PodMetrics"``.
        namespace: the pod's namespace (``""`` for nodes).
        name: the object's name.
    """

    def __init__(self, kind: str, namespace: str, name: str) -> None:
        where = f"{namespace}/{name}" if namespace else name
        super().__init__(f"{kind} {where} not found")
        self.kind = kind
        self.namespace = namespace
        self.name = name
