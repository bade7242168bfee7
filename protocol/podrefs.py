"""Which ConfigMaps and Secrets a pod references, as the Kubernetes Node authorizer reads them.

A pod names ConfigMaps and Secrets in volumes (``configMap``, ``secret``, and the
``projected`` sources), in ``env[].valueFrom`` and ``envFrom`` of every container, init
container and ephemeral container, and in ``imagePullSecrets``; all in the pod's own
namespace. The node a pod is bound to may read exactly those (the Node authorizer's graph,
``plugin/pkg/auth/authorizer/node``), and the hub sends exactly those down with the pod.

One rule for both halves: the hub indexes its pod informer by it and sends those objects
down; the agent wakes a pod's worker when one of them changes. A pure function over Pod
JSON, so it is in ``protocol`` (no I/O, no clock).
"""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["CONFIGMAP", "SECRET", "pod_references", "reference_key", "reference_keys"]

CONFIGMAP = "ConfigMap"
SECRET = "Secret"

_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


def _containers(spec: dict) -> Iterator[dict]:
    for key in _CONTAINER_LISTS:
        for container in spec.get(key) or ():
            if isinstance(container, dict):
                yield container


def _name(value: object) -> str | None:
    if isinstance(value, dict):
        name = value.get("name")
        if isinstance(name, str) and name:
            return name
    return None


def _volume_refs(volume: dict) -> Iterator[tuple[str, str]]:
    cm = volume.get("configMap")
    if isinstance(cm, dict) and (name := _name(cm)):
        yield CONFIGMAP, name
    secret = volume.get("secret")
    if isinstance(secret, dict):
        name = secret.get("secretName")
        if isinstance(name, str) and name:
            yield SECRET, name
    projected = volume.get("projected")
    if isinstance(projected, dict):
        for source in projected.get("sources") or ():
            if not isinstance(source, dict):
                continue
            if name := _name(source.get("configMap")):
                yield CONFIGMAP, name
            if name := _name(source.get("secret")):
                yield SECRET, name


def _container_refs(container: dict) -> Iterator[tuple[str, str]]:
    for env in container.get("env") or ():
        value_from = env.get("valueFrom") if isinstance(env, dict) else None
        if isinstance(value_from, dict):
            if name := _name(value_from.get("configMapKeyRef")):
                yield CONFIGMAP, name
            if name := _name(value_from.get("secretKeyRef")):
                yield SECRET, name
    for env_from in container.get("envFrom") or ():
        if isinstance(env_from, dict):
            if name := _name(env_from.get("configMapRef")):
                yield CONFIGMAP, name
            if name := _name(env_from.get("secretRef")):
                yield SECRET, name


def pod_references(pod: dict) -> list[tuple[str, str]]:
    """The ConfigMaps and Secrets a pod references, without duplicates, in first-seen order.

    Args:
        pod: the raw Pod JSON (malformed parts are skipped, not raised on).

    Returns:
        ``[(kind, name), ...]`` with kind ``"ConfigMap"`` or ``"Secret"``; all live in the
        pod's namespace.
    """
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return []
    seen: dict[tuple[str, str], None] = {}
    for volume in spec.get("volumes") or ():
        if isinstance(volume, dict):
            seen.update(dict.fromkeys(_volume_refs(volume)))
    for container in _containers(spec):
        seen.update(dict.fromkeys(_container_refs(container)))
    for secret in spec.get("imagePullSecrets") or ():
        if name := _name(secret):
            seen[(SECRET, name)] = None
    return list(seen)


def reference_key(kind: str, namespace: str, name: str) -> str:
    """The index value of one referenced object: ``"<Kind>/<namespace>/<name>"``
    (``"ConfigMap/default/app-config"``)."""
    return f"{kind}/{namespace}/{name}"


def reference_keys(pod: dict) -> list[str]:
    """Index values for a pod informer: :func:`reference_key` per reference, so that
    "which pods reference this ConfigMap" is one index lookup."""
    namespace = (pod.get("metadata") or {}).get("namespace") or ""
    return [reference_key(kind, namespace, name) for kind, name in pod_references(pod)]
