"""Kubernetes objects and API reads for the end-to-end tests."""

from __future__ import annotations

from typing import Any

from cloudhub.errors import KubeNotFound
from cloudhub.kube import NODES, PODS, KubeClient

BUSYBOX = "localhost/busybox:latest"


def pod(
    name: str,
    namespace: str,
    node: str,
    script: str,
    *,
    grace: int | None = None,
    container: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A pod bound to ``node`` running one busybox shell script."""
    c: dict[str, Any] = {
        "name": "app",
        "image": BUSYBOX,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", script],
        **(container or {}),
    }
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"nodeName": node, "containers": [c], **spec},
    }
    if grace is not None:
        body["spec"]["terminationGracePeriodSeconds"] = grace
    return body


def configmap(name: str, namespace: str, data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": data,
    }


def secret(name: str, namespace: str, data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": "Opaque",
        "stringData": data,
    }


async def get_pod(kube: KubeClient, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return await kube.get(PODS, name, namespace)
    except KubeNotFound:
        return None


async def get_node(kube: KubeClient, name: str) -> dict[str, Any] | None:
    try:
        return await kube.get(NODES, name)
    except KubeNotFound:
        return None


def condition(obj: dict[str, Any] | None, kind: str) -> str | None:
    """The status (``"True"``…) of condition ``kind`` of a Pod or Node, or ``None``."""
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return c.get("status")
    return None


def container_status(obj: dict[str, Any] | None, name: str = "app") -> dict[str, Any]:
    for cs in ((obj or {}).get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == name:
            return cs
    return {}


def is_running(obj: dict[str, Any] | None) -> bool:
    """Phase Running with every container running (as ``kubectl get pods`` shows it)."""
    status = (obj or {}).get("status") or {}
    statuses = status.get("containerStatuses") or []
    return (
        status.get("phase") == "Running"
        and bool(statuses)
        and all("running" in (cs.get("state") or {}) for cs in statuses)
    )
