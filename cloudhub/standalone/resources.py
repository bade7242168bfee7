"""The resource types the embedded API serves, as discovery describes them.

A :class:`ResourceType` is one REST collection at one group/version (``pods`` in
``v1``, ``deployments`` in ``apps/v1``, a custom resource defined by a CRD). It
carries what the REST layer needs to treat the collection as kube-apiserver
does: scope, status subresource, whether ``metadata.generation`` is kept, which
fields a ``fieldSelector`` may name, and the verbs listed in discovery.

The built-in table follows Kubernetes 1.20: the resources and the field
selectors each one supports are those of that release.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = [
    "BUILTIN_TYPES",
    "ResourceType",
    "field_value",
]

#: Verbs of a collection as discovery lists them (kube-apiserver's order).
ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")

#: The fields every resource can be selected by.
COMMON_FIELDS = ("metadata.name", "metadata.namespace")


@dataclasses.dataclass(frozen=True, slots=True)
class ResourceType:
    """One served REST collection.

    Attributes:
        group: API group, ``""`` for the core group.
        version: API version within the group (``v1``).
        kind: Object kind (``Pod``).
        plural: Resource name in URLs (``pods``).
        singular: Singular name (``pod``).
        namespaced: True for namespaced resources.
        short_names: Short names kubectl accepts (``po``).
        categories: Discovery categories (``all``).
        status_subresource: True when ``<plural>/status`` exists; then writes to the
            main resource ignore ``status`` and writes to ``/status`` change only it.
        has_generation: True when ``metadata.generation`` is kept and bumped on
            changes of the desired state (everything but metadata and status).
        generation_counts_annotations: True when annotation changes also bump the
            generation (Deployments, as kube-apiserver's deployment strategy does).
        fields: Extra field names a ``fieldSelector`` may use, each mapped to the
            dotted path it reads, besides ``metadata.name`` and ``metadata.namespace``.
        strategic_merge: True when strategic-merge-patch is accepted (built-in kinds;
            kube-apiserver refuses it for custom resources with 415).
        reset_status_on_create: True when a create drops the given ``status``.
        return_deleted_object: True when DELETE answers with the object rather
            than a ``Status`` (pods, custom resources and a few more in 1.20).
        allow_create_on_update: True when PUT of a missing object creates it.
        name_rule: What ``metadata.name`` must be: ``subdomain`` (RFC 1123
            subdomain, most kinds), ``label`` (RFC 1123 label: namespaces),
            ``label1035`` (RFC 1035 label: services) or ``path`` (any path segment
            name: RBAC objects such as ``system:node``).
        custom: True for a resource served from a CustomResourceDefinition.
        schema: For custom resources, the version's ``openAPIV3Schema`` (or None).
        printer_columns: For custom resources, the version's additionalPrinterColumns.
        storage_version: For custom resources, the version objects are stored in.
        scale: When ``<plural>/scale`` exists (autoscaling/v1 Scale): the dotted paths
            of the desired replicas, the observed replicas and the label selector
            (empty when none), as a CRD's ``subresources.scale`` names them.
    """

    group: str
    version: str
    kind: str
    plural: str
    singular: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    status_subresource: bool = False
    has_generation: bool = False
    generation_counts_annotations: bool = False
    fields: Mapping[str, str] = dataclasses.field(default_factory=dict)
    strategic_merge: bool = True
    reset_status_on_create: bool = False
    return_deleted_object: bool = False
    allow_create_on_update: bool = False
    name_rule: str = "subdomain"
    custom: bool = False
    schema: Mapping[str, Any] | None = None
    printer_columns: tuple[Mapping[str, Any], ...] = ()
    storage_version: str = ""
    scale: tuple[str, str, str] | None = None
    verbs: tuple[str, ...] = ALL_VERBS

    @property
    def api_version(self) -> str:
        """``apiVersion`` of the objects: ``v1`` or ``apps/v1``."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version(self) -> tuple[str, str]:
        return (self.group, self.version)

    @property
    def storage_key(self) -> str:
        """Key of the stored collection, the same for every version of a resource."""
        return f"{self.group}/{self.plural}" if self.group else self.plural

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def qualified(self) -> str:
        """``pods`` or ``deployments.apps``: the name errors use."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def selectable(self, field: str) -> bool:
        """True when ``field`` may appear in a fieldSelector for this resource."""
        return field in COMMON_FIELDS or field in self.fields


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The value of a dotted field path as a fieldSelector compares it.

    Missing fields read as ``""``; booleans as ``true``/``false``; numbers as text,
    as kube-apiserver's field label conversion renders them.
    """
    value: Any = obj
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return ""
        value = value.get(part)
        if value is None:
            return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return value if isinstance(value, str) else ""


def _t(
    group: str,
    version: str,
    kind: str,
    plural: str,
    namespaced: bool,
    short_names: Iterable[str] = (),
    categories: Iterable[str] = (),
    fields: Mapping[str, str] | None = None,
    **flags: Any,
) -> ResourceType:
    return ResourceType(
        group=group,
        version=version,
        kind=kind,
        plural=plural,
        singular=kind.lower(),
        namespaced=namespaced,
        short_names=tuple(short_names),
        categories=tuple(categories),
        fields=dict(fields or {}),
        **flags,
    )


_SCALE = ("spec.replicas", "status.replicas", "spec.selector")
_POD_FIELDS = {
    "spec.nodeName": "spec.nodeName",
    "spec.restartPolicy": "spec.restartPolicy",
    "spec.schedulerName": "spec.schedulerName",
    "spec.serviceAccountName": "spec.serviceAccountName",
    "status.phase": "status.phase",
    "status.podIP": "status.podIP",
    "status.nominatedNodeName": "status.nominatedNodeName",
}
_EVENT_FIELDS = {
    "involvedObject.kind": "involvedObject.kind",
    "involvedObject.namespace": "involvedObject.namespace",
    "involvedObject.name": "involvedObject.name",
    "involvedObject.uid": "involvedObject.uid",
    "involvedObject.apiVersion": "involvedObject.apiVersion",
    "involvedObject.resourceVersion": "involvedObject.resourceVersion",
    "involvedObject.fieldPath": "involvedObject.fieldPath",
    "reason": "reason",
    "reportingComponent": "reportingComponent",
    "source": "source.component",
    "type": "type",
}

#: Built-in resources, as Kubernetes 1.20 serves them.
BUILTIN_TYPES: tuple[ResourceType, ...] = (
    _t(
        "",
        "v1",
        "Namespace",
        "namespaces",
        False,
        ["ns"],
        fields={"status.phase": "status.phase"},
        status_subresource=True,
        name_rule="label",
        return_deleted_object=True,
    ),
    _t(
        "",
        "v1",
        "Node",
        "nodes",
        False,
        ["no"],
        fields={"spec.unschedulable": "spec.unschedulable"},
        status_subresource=True,
    ),
    _t(
        "",
        "v1",
        "Pod",
        "pods",
        True,
        ["po"],
        ["all"],
        _POD_FIELDS,
        status_subresource=True,
        reset_status_on_create=True,
        return_deleted_object=True,
    ),
    _t("", "v1", "ConfigMap", "configmaps", True, ["cm"]),
    _t("", "v1", "Secret", "secrets", True, fields={"type": "type"}),
    _t(
        "", "v1", "Event", "events", True, ["ev"], fields=_EVENT_FIELDS, allow_create_on_update=True
    ),
    _t(
        "",
        "v1",
        "Service",
        "services",
        True,
        ["svc"],
        ["all"],
        status_subresource=True,
        reset_status_on_create=True,
        name_rule="label1035",
    ),
    _t("", "v1", "ServiceAccount", "serviceaccounts", True, ["sa"]),
    _t("", "v1", "Endpoints", "endpoints", True, ["ep"], allow_create_on_update=True),
    _t("coordination.k8s.io", "v1", "Lease", "leases", True, allow_create_on_update=True),
    _t(
        "apps",
        "v1",
        "Deployment",
        "deployments",
        True,
        ["deploy"],
        ["all"],
        status_subresource=True,
        has_generation=True,
        generation_counts_annotations=True,
        reset_status_on_create=True,
        scale=_SCALE,
    ),
    _t(
        "apps",
        "v1",
        "DaemonSet",
        "daemonsets",
        True,
        ["ds"],
        ["all"],
        status_subresource=True,
        has_generation=True,
        reset_status_on_create=True,
    ),
    _t(
        "apps",
        "v1",
        "ReplicaSet",
        "replicasets",
        True,
        ["rs"],
        ["all"],
        fields={"status.replicas": "status.replicas"},
        status_subresource=True,
        has_generation=True,
        reset_status_on_create=True,
        scale=_SCALE,
    ),
    _t(
        "apps",
        "v1",
        "StatefulSet",
        "statefulsets",
        True,
        ["sts"],
        ["all"],
        status_subresource=True,
        has_generation=True,
        reset_status_on_create=True,
        scale=_SCALE,
    ),
    _t(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        False,
        ["crd", "crds"],
        status_subresource=True,
        has_generation=True,
        reset_status_on_create=True,
    ),
    _t("rbac.authorization.k8s.io", "v1", "Role", "roles", True, name_rule="path"),
    _t("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", True, name_rule="path"),
    _t("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", False, name_rule="path"),
    _t(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        False,
        name_rule="path",
    ),
    _t(
        "policy",
        "v1beta1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        True,
        ["pdb"],
        status_subresource=True,
        has_generation=True,
        reset_status_on_create=True,
    ),
    _t(
        "networking.k8s.io",
        "v1",
        "Ingress",
        "ingresses",
        True,
        ["ing"],
        status_subresource=True,
        has_generation=True,
        reset_status_on_create=True,
    ),
)


def builtin_index() -> dict[tuple[str, str, str], ResourceType]:
    """(group, version, plural) -> type for the built-in table."""
    return {(t.group, t.version, t.plural): t for t in BUILTIN_TYPES}


FieldGetter = Callable[[Mapping[str, Any]], str]
