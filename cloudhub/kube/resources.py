"""REST collections by group, version and plural."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CRDS", "DAEMONSETS", "DEPLOYMENTS", "EDGEPLACEMENTS", "NODES", "PODS", "Resource"]


@dataclass(frozen=True, slots=True)
class Resource:
    """One REST collection.

    Attributes:
        group: API group ("" for the core group).
        version: API version.
        plural: resource name in URLs.
        kind: object kind.
        namespaced: whether objects live in namespaces.
    """

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        """``v1`` or ``group/version``."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """The URL path of the collection, or of one object (and its subresource).

        ``namespace=None`` on a namespaced resource is the all-namespaces collection.
        """
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace is not None:
            root += f"/namespaces/{namespace}"
        root += f"/{self.plural}"
        if name is not None:
            root += f"/{name}"
            if subresource:
                root += f"/{subresource}"
        return root


PODS = Resource("", "v1", "pods", "Pod")
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
DAEMONSETS = Resource("apps", "v1", "daemonsets", "DaemonSet")
EDGEPLACEMENTS = Resource("apps.edgefleet.io", "v1alpha1", "edgeplacements", "EdgePlacement")
CRDS = Resource(
    "apiextensions.k8s.io",
    "v1",
    "customresourcedefinitions",
    "CustomResourceDefinition",
    namespaced=False,
)
