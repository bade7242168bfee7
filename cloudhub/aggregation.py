"""API groups served by code in the hub's process, not stored: the embedded API's
counterpart of kube-apiserver's aggregation layer (an ``APIService`` pointing at an
extension API server, as ``metrics.k8s.io`` points at metrics-server).

An :class:`AggregatedAPI` names its group, version and resources; the embedded server
lists them in discovery (``/apis``, ``/apis/<group>``, ``/apis/<group>/<version>``, so
``kubectl`` finds them) and hands every ``get`` and ``list`` under
``/apis/<group>/<version>/`` to :meth:`AggregatedAPI.handle`, after the same bearer-token
check as every other path. Register one with ``EmbeddedAPIServer.add_api(api)``.
Other verbs are answered 405, unknown resources 404, as kube-apiserver does.

The interface is the hub's, not the embedded server's: a feature (``cloudhub.metrics``)
implements it without importing ``cloudhub.standalone``, which is optional in production
(pyproject's contracts). It imports nothing of the hub.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "AggregatedAPI",
    "AggregatedRequest",
    "AggregatedResource",
    "LabelSelector",
    "PodSubresource",
]


class LabelSelector(Protocol):
    """A parsed ``labelSelector`` (the embedded server passes its own,
    ``cloudhub.standalone.selectors.LabelSelector``)."""

    @property
    def empty(self) -> bool:
        """True when it selects everything."""
        ...

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether an object with these labels is selected."""
        ...


@dataclass(frozen=True, slots=True)
class AggregatedResource:
    """One resource of an aggregated group (read-only: ``get`` and ``list``).

    Attributes:
        plural: the name in paths (``"nodes"``).
        singular: the singular name (``"node"``).
        kind: the object kind (``"NodeMetrics"``).
        namespaced: whether objects live in a namespace.
    """

    plural: str
    singular: str
    kind: str
    namespaced: bool

    def discovery(self) -> dict[str, Any]:
        """The resource's entry in its group version's APIResourceList."""
        return {
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": ["get", "list"],
        }


@dataclass(frozen=True, slots=True)
class AggregatedRequest:
    """A ``get`` (``name`` set) or ``list`` (``name`` ``None``) of an aggregated resource.

    Attributes:
        resource: which resource.
        namespace: the namespace in the path, or ``None`` (cluster-scoped resource, or a
            list across all namespaces).
        name: the object's name for a ``get``, ``None`` for a ``list``.
        label_selector: the parsed ``labelSelector`` (empty: everything).
        query: the request's query parameters as sent.
    """

    resource: AggregatedResource
    namespace: str | None
    name: str | None
    label_selector: LabelSelector
    query: Mapping[str, str]


class AggregatedAPI(Protocol):
    """What an in-process API group implements.

    Attributes:
        group: the API group (``"metrics.k8s.io"``).
        version: the served version (``"v1beta1"``).
        resources: the resources served.
    """

    group: str
    version: str
    resources: Sequence[AggregatedResource]

    def handle(self, request: AggregatedRequest) -> Awaitable[dict[str, Any] | None]:
        """Answer a ``get`` or ``list``: the JSON object, or ``None`` for a ``get`` of
        something that does not exist (answered 404 NotFound)."""
        ...


PodSubresource = Callable[[Any, str, str], Awaitable[Any]]
"""A pod subresource served by code (``log``, ``exec``, ``attach``, ``portforward``, as
kube-apiserver proxies them to the node's kubelet): ``handler(request, namespace, pod)``
gets the embedded API's aiohttp request, after its bearer-token check, and returns the
aiohttp response. Register one with ``EmbeddedAPIServer.add_pod_subresource(name, handler)``."""
