"""What a pod template asks of a node: its requests, node selector, required node
affinity, tolerations and nodeName pin, validated.

Placement reads the same shape from an EdgePlacement's template (and each group's
overridden template) and from the pods it observes, so that what it charges a node is
what the scheduler would: the sum of the containers' requests, or the largest init
container's when bigger, plus the pod overhead; a limit without a request counts as
the request (API defaulting).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cloudhub.placement.errors import InvalidSpec
from cloudhub.placement.quantity import CPU, MEMORY, PODS, resource_units
from cloudhub.placement.selectors import (
    NodeSelectorTerm,
    Toleration,
    check_label_key,
    check_label_value,
    parse_node_affinity,
    parse_tolerations,
)

__all__ = ["PodShape", "Resources", "pod_shape"]


@dataclass(frozen=True, slots=True)
class Resources:
    """Resource requests in placement's integer units.

    Attributes:
        cpu: millicores.
        memory: bytes.
        extended: ``(name, units)`` pairs for every other resource (bytes for
            ephemeral-storage and hugepages, units for ``nvidia.com/gpu``), sorted.
    """

    cpu: int = 0
    memory: int = 0
    extended: tuple[tuple[str, int], ...] = ()

    def describe(self) -> str:
        """E.g. ``cpu=250m memory=64Mi nvidia.com/gpu=1``."""
        parts = []
        if self.cpu:
            parts.append(f"cpu={self.cpu}m")
        if self.memory:
            parts.append(f"memory={_bytes(self.memory)}")
        parts.extend(f"{k}={v}" for k, v in self.extended)
        return " ".join(parts) or "nothing"


def _bytes(n: int) -> str:
    for unit, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


@dataclass(frozen=True, slots=True)
class PodShape:
    """What placement needs to know about a pod template to place it.

    Attributes:
        requests: the pod's effective requests (sum of containers, or the
            largest init container if bigger, plus overhead, as the scheduler
            computes them).
        node_selector: the template's own ``nodeSelector`` pairs, sorted.
        affinity: the template's required node affinity terms (ORed), or None.
        tolerations: the template's tolerations.
        node_name: the template's ``nodeName`` pin, or None.
    """

    requests: Resources
    node_selector: tuple[tuple[str, str], ...] = ()
    affinity: tuple[NodeSelectorTerm, ...] | None = None
    tolerations: tuple[Toleration, ...] = ()
    node_name: str | None = None


def pod_shape(template: Mapping[str, Any], path: str) -> PodShape:
    """Validate a PodTemplateSpec and derive what placement needs from it.

    Args:
        template: the PodTemplateSpec JSON.
        path: its JSON path, for errors.

    Raises:
        InvalidSpec: no containers, a container without name or image, a
            malformed quantity, selector, affinity or toleration.
    """
    if not isinstance(template, Mapping):
        raise InvalidSpec(path, "must be a PodTemplateSpec object")
    spec = template.get("spec")
    if not isinstance(spec, Mapping):
        raise InvalidSpec(f"{path}.spec", "must be a PodSpec object")
    metadata = template.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise InvalidSpec(f"{path}.metadata", "must be an object")
    labels = metadata.get("labels") or {}
    if not isinstance(labels, Mapping):
        raise InvalidSpec(f"{path}.metadata.labels", "must be a map")
    for key, value in labels.items():
        check_label_key(key, f"{path}.metadata.labels")
        check_label_value(value, f"{path}.metadata.labels[{key}]")
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise InvalidSpec(f"{path}.spec.containers", "must be a non-empty list")
    total: dict[str, int] = {}
    names = set()
    for i, container in enumerate(containers):
        cpath = f"{path}.spec.containers[{i}]"
        if not isinstance(container, Mapping):
            raise InvalidSpec(cpath, "must be an object")
        name = container.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidSpec(f"{cpath}.name", "must be a non-empty string")
        if name in names:
            raise InvalidSpec(f"{cpath}.name", f"duplicate container name {name!r}")
        names.add(name)
        image = container.get("image")
        if not isinstance(image, str) or not image.strip():
            raise InvalidSpec(f"{cpath}.image", "must be a non-empty string")
        for res, units in _container_requests(container, cpath).items():
            total[res] = total.get(res, 0) + units
    init = spec.get("initContainers") or []
    if not isinstance(init, list):
        raise InvalidSpec(f"{path}.spec.initContainers", "must be a list")
    for i, container in enumerate(init):
        cpath = f"{path}.spec.initContainers[{i}]"
        if not isinstance(container, Mapping):
            raise InvalidSpec(cpath, "must be an object")
        for res, units in _container_requests(container, cpath).items():
            total[res] = max(total.get(res, 0), units)
    for res, units in resource_units(spec.get("overhead"), f"{path}.spec.overhead").items():
        total[res] = total.get(res, 0) + units
    selector = spec.get("nodeSelector") or {}
    if not isinstance(selector, Mapping):
        raise InvalidSpec(f"{path}.spec.nodeSelector", "must be a map of label key to value")
    pairs = []
    for key, value in selector.items():
        check_label_key(key, f"{path}.spec.nodeSelector")
        check_label_value(value, f"{path}.spec.nodeSelector[{key}]")
        pairs.append((key, value))
    node_name = spec.get("nodeName") or None
    if node_name is not None and not isinstance(node_name, str):
        raise InvalidSpec(f"{path}.spec.nodeName", "must be a string")
    total.pop(PODS, None)
    requests = Resources(
        cpu=total.pop(CPU, 0),
        memory=total.pop(MEMORY, 0),
        extended=tuple(sorted((k, v) for k, v in total.items() if v)),
    )
    return PodShape(
        requests=requests,
        node_selector=tuple(sorted(pairs)),
        affinity=parse_node_affinity(spec.get("affinity"), f"{path}.spec.affinity"),
        tolerations=parse_tolerations(spec.get("tolerations"), f"{path}.spec.tolerations"),
        node_name=node_name,
    )


def _container_requests(container: Mapping[str, Any], path: str) -> dict[str, int]:
    resources = container.get("resources") or {}
    if not isinstance(resources, Mapping):
        raise InvalidSpec(f"{path}.resources", "must be an object")
    requests = resource_units(resources.get("requests"), f"{path}.resources.requests")
    limits = resource_units(resources.get("limits"), f"{path}.resources.limits")
    # A limit without a request defaults the request to the limit (API defaulting).
    return {**limits, **requests}
