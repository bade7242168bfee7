"""Resource types the hub reads and writes, and their REST paths.

A :class:`ResourceType` is a small value naming one Kubernetes resource (group,
version, plural, kind, scope). Paths follow the Kubernetes REST layout:
``/api/v1/...`` for the core group, ``/apis/<group>/<version>/...`` otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

__all__ = [
    "CONFIGMAPS",
    "CRDS",
    "DAEMONSETS",
    "DEPLOYMENTS",
    "DEVICEMODELS",
    "DEVICES",
    "EVENTS",
    "LEASES",
    "NAMESPACES",
    "NODES",
    "PODS",
    "SECRETS",
    "ResourceType",
]


@dataclass(frozen=True, slots=True)
class ResourceType:
    """One Kubernetes resource type.

    Attributes:
        group: API group, ``""`` for the core group.
        version: API version within the group (``"v1"``).
        plural: the resource name in paths (``"pods"``).
        kind: the object kind (``"Pod"``).
        namespaced: whether objects live in a namespace.
    """

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        """The ``apiVersion`` field of objects of this type (``"v1"``, ``"apps/v1"``)."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """REST path for the collection, one object, or one object's subresource.

        Args:
            namespace: the namespace for namespaced types; ``None`` lists across all
                namespaces. Ignored for cluster-scoped types.
            name: the object's name, or ``None`` for the collection.
            subresource: ``"status"`` and the like; needs ``name``.

        Raises:
            ValueError: a subresource without a name.
        """
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{quote(name, safe='')}"
        if subresource:
            if name is None:
                raise ValueError("a subresource path needs an object name")
            base += f"/{subresource}"
        return base


PODS = ResourceType("", "v1", "pods", "Pod", True)
NODES = ResourceType("", "v1", "nodes", "Node", False)
CONFIGMAPS = ResourceType("", "v1", "configmaps", "ConfigMap", True)
SECRETS = ResourceType("", "v1", "secrets", "Secret", True)
EVENTS = ResourceType("", "v1", "events", "Event", True)
NAMESPACES = ResourceType("", "v1", "namespaces", "Namespace", False)
LEASES = ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True)
DEPLOYMENTS = ResourceType("apps", "v1", "deployments", "Deployment", True)
DAEMONSETS = ResourceType("apps", "v1", "daemonsets", "DaemonSet", True)
CRDS = ResourceType(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False
)
DEVICES = ResourceType("devices.kubeedge.io", "v1beta1", "devices", "Device", True)
"""KubeEdge's Device (deploy/crds): desired values in spec, reported ones in status."""
DEVICEMODELS = ResourceType("devices.kubeedge.io", "v1beta1", "devicemodels", "DeviceModel", True)
"""KubeEdge's DeviceModel (deploy/crds): property names, types, bounds, access modes."""
