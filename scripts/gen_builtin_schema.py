#!/usr/bin/env python3
"""Regenerate ``cloudhub/standalone/builtin_schema.json`` from kubernetes_asyncio's models.

The embedded API server decodes built-in objects the way kube-apiserver does:
fields a kind does not have are unknown (dropped, or refused with
``fieldValidation=Strict``) and values of the wrong JSON type are refused. It
needs the field names and types of every built-in kind it serves; the generated
models of the official client carry exactly that (``openapi_types`` and
``attribute_map``). This script walks them from each served kind and writes a
compact table, so that the server itself never imports the Kubernetes client.

Run it after upgrading kubernetes_asyncio::

    python scripts/gen_builtin_schema.py
"""

from __future__ import annotations

import inspect
import json
import pathlib
import re

import kubernetes_asyncio
import kubernetes_asyncio.client.models as models

OUT = pathlib.Path(__file__).resolve().parent.parent / "cloudhub/standalone/builtin_schema.json"

#: Kind served -> model class. PodDisruptionBudget is served at policy/v1beta1, whose
#: fields are those of policy/v1 (the client no longer ships the v1beta1 model).
KINDS = {
    "Namespace": "V1Namespace",
    "Node": "V1Node",
    "Pod": "V1Pod",
    "ConfigMap": "V1ConfigMap",
    "Secret": "V1Secret",
    "Event": "CoreV1Event",
    "Service": "V1Service",
    "ServiceAccount": "V1ServiceAccount",
    "Endpoints": "V1Endpoints",
    "Lease": "V1Lease",
    "Deployment": "V1Deployment",
    "DaemonSet": "V1DaemonSet",
    "ReplicaSet": "V1ReplicaSet",
    "StatefulSet": "V1StatefulSet",
    "CustomResourceDefinition": "V1CustomResourceDefinition",
    "Role": "V1Role",
    "RoleBinding": "V1RoleBinding",
    "ClusterRole": "V1ClusterRole",
    "ClusterRoleBinding": "V1ClusterRoleBinding",
    "PodDisruptionBudget": "V1PodDisruptionBudget",
    "Ingress": "V1Ingress",
    "DeleteOptions": "V1DeleteOptions",
}
PRIMITIVES = {"str", "int", "bool", "float", "datetime", "date", "object", "quantity", "microtime"}
#: Fields of type metav1.MicroTime (RFC 3339 with exactly 6 fractional digits); the
#: models type them as ``datetime`` like metav1.Time (seconds): written as ``microtime``.
MICROTIMES = {
    ("V1LeaseSpec", "acquireTime"),
    ("V1LeaseSpec", "renewTime"),
    ("CoreV1Event", "eventTime"),
    ("CoreV1EventSeries", "lastObservedTime"),
}
#: Fields of type resource.Quantity, which the client's models type as plain strings
#: but which accept JSON numbers too (``cpu: 1``): written as ``quantity``.
QUANTITIES = {
    ("V1ContainerStatus", "allocatedResources"),
    ("V1EmptyDirVolumeSource", "sizeLimit"),
    ("V1NodeStatus", "allocatable"),
    ("V1NodeStatus", "capacity"),
    ("V1PersistentVolumeClaimStatus", "allocatedResources"),
    ("V1PersistentVolumeClaimStatus", "capacity"),
    ("V1PodSpec", "overhead"),
    ("V1PodStatus", "allocatedResources"),
    ("V1ResourceFieldSelector", "divisor"),
    ("V1ResourceRequirements", "limits"),
    ("V1ResourceRequirements", "requests"),
    ("V1VolumeResourceRequirements", "limits"),
    ("V1VolumeResourceRequirements", "requests"),
}


#: Scalar fields that are plain (not pointer) Go values with ``omitempty``: their zero
#: value ("", 0, false) disappears from what kube-apiserver stores, so kubectl apply
#: sees them missing (e.g. ``readOnly: false`` on a volume mount). Pointer fields
#: (``privileged``, ``replicas``...) keep their zero value and are not listed. The
#: list covers the fields of the served kinds that manifests commonly set to zero.
ZERO_OMITTED = {
    ("V1VolumeMount", "readOnly"),
    ("V1Container", "stdin"),
    ("V1Container", "stdinOnce"),
    ("V1Container", "tty"),
    ("V1Container", "workingDir"),
    ("V1ContainerPort", "hostPort"),
    ("V1ContainerPort", "hostIP"),
    ("V1ContainerPort", "name"),
    ("V1EnvVar", "value"),
    ("V1PodSpec", "hostNetwork"),
    ("V1PodSpec", "hostPID"),
    ("V1PodSpec", "hostIPC"),
    ("V1PodSpec", "nodeName"),
    ("V1PodSpec", "serviceAccountName"),
    ("V1PodSpec", "hostname"),
    ("V1PodSpec", "subdomain"),
    ("V1Probe", "initialDelaySeconds"),
    ("V1ServicePort", "nodePort"),
    ("V1ServicePort", "name"),
    ("V1ServiceSpec", "publishNotReadyAddresses"),
    ("V1NodeSpec", "unschedulable"),
    ("V1DeploymentSpec", "paused"),
    ("V1DeploymentSpec", "minReadySeconds"),
    ("V1DaemonSetSpec", "minReadySeconds"),
    ("V1StatefulSetSpec", "minReadySeconds"),
    ("V1PersistentVolumeClaimVolumeSource", "readOnly"),
    ("V1NFSVolumeSource", "readOnly"),
    ("V1JSONSchemaProps", "uniqueItems"),
    ("V1JSONSchemaProps", "nullable"),
    ("V1JSONSchemaProps", "exclusiveMaximum"),
    ("V1JSONSchemaProps", "exclusiveMinimum"),
    ("V1JSONSchemaProps", "x-kubernetes-int-or-string"),
    ("V1JSONSchemaProps", "x-kubernetes-embedded-resource"),
    ("V1CustomResourceDefinitionVersion", "deprecated"),
    ("V1CustomResourceDefinitionSpec", "preserveUnknownFields"),
}
#: Lists that Go serialises even when empty although the OpenAPI schema calls them
#: optional (``json:"rules"`` without omitempty).
KEEP_EMPTY = {("V1ClusterRole", "rules"), ("V1Role", "rules")}


def required(cls: type, attr: str) -> bool:
    """Whether the field is required: the generated setter refuses None. Required
    fields are the ones without ``omitempty`` in the Go types, so that an empty
    list or map in them is kept; optional empty ones are dropped by Go's JSON."""
    source = inspect.getsource(getattr(cls, attr).fset)
    return "must not be `None`" in source


def refs(type_name: str) -> list[str]:
    return [
        t
        for t in re.findall(r"[A-Za-z0-9]+", type_name)
        if t not in PRIMITIVES and t not in ("list", "dict")
    ]


def main() -> None:
    types: dict[str, dict[str, str]] = {}
    todo = list(KINDS.values())
    while todo:
        name = todo.pop()
        if name in types:
            continue
        cls = getattr(models, name)
        fields = {}
        for attr, kind in cls.openapi_types.items():
            field = cls.attribute_map[attr]
            if (kind.startswith(("list[", "dict("))) and (
                required(cls, attr) or (name, field) in KEEP_EMPTY
            ):
                # Marked "!": an empty value is kept (no omitempty in the Go type).
                kind = "!" + kind
            if (name, field) in ZERO_OMITTED:
                kind = "?" + kind  # marked "?": dropped when zero
            if (name, field) in MICROTIMES:
                kind = "microtime"
            if (name, field) in QUANTITIES:
                kind = {"str": "quantity", "dict(str, str)": "dict(str, quantity)"}[kind]
            fields[field] = kind
            todo.extend(r for r in refs(kind.lstrip("!?")) if r not in types)
        types[name] = dict(sorted(fields.items()))
    doc = {
        "source": f"kubernetes_asyncio {kubernetes_asyncio.__version__} generated models",
        "kinds": KINDS,
        "types": dict(sorted(types.items())),
    }
    OUT.write_text(json.dumps(doc, indent=0, sort_keys=False, separators=(",", ":")) + "\n")
    print(f"wrote {OUT} ({len(types)} types)")


if __name__ == "__main__":
    main()
