"""How a pod's containers are described to the runtime: names, labels, configs.

Pure functions of the pod JSON; the worker decides when to create what. Names follow
dockershim's ``k8s_<container>_<pod>_<namespace>_<uid>_<attempt>`` (``POD`` for the
sandbox), labels are :class:`edgeagent.runtime.Labels`.
"""

from __future__ import annotations

import pathlib
from typing import Any

from edgeagent.pods.spec import container_hash, parse_cpu_millicores, parse_memory_bytes
from edgeagent.runtime.base import (
    ContainerConfig,
    ContainerInfo,
    Labels,
    Mount,
    PortMapping,
    PullPolicy,
    SandboxConfig,
)

__all__ = [
    "attempt_of",
    "container_config",
    "container_labels",
    "default_pull_policy",
    "sandbox_config",
]


def attempt_of(info: ContainerInfo) -> int:
    """The restart count a container was created with (its label; 0 if unreadable)."""
    try:
        return int(info.labels.get(Labels.RESTART_COUNT, "0"))
    except ValueError:
        return 0


def default_pull_policy(image: str) -> PullPolicy:
    """The API server's default: ``Always`` for ``:latest`` or untagged images, else
    ``IfNotPresent`` (a digest counts as a tag)."""
    if "@" in image:
        return PullPolicy.IF_NOT_PRESENT
    last = image.rsplit("/", 1)[-1]
    if ":" not in last or last.endswith(":latest"):
        return PullPolicy.ALWAYS
    return PullPolicy.IF_NOT_PRESENT


def container_labels(
    pod: dict[str, Any], name: str, ctype: str, attempt: int, spec_hash: str = ""
) -> dict[str, str]:
    """The managed labels of one container (``ctype``: ``init``, ``app`` or ``sandbox``)."""
    meta = pod["metadata"]
    labels = {
        Labels.MANAGED: "true",
        Labels.POD_UID: meta["uid"],
        Labels.POD_NAME: meta["name"],
        Labels.POD_NAMESPACE: meta["namespace"],
        Labels.CONTAINER_NAME: name,
        Labels.CONTAINER_TYPE: ctype,
        Labels.RESTART_COUNT: str(attempt),
    }
    if spec_hash:
        labels[Labels.SPEC_HASH] = spec_hash
    return labels


def _ports(ports: list[dict[str, Any]]) -> tuple[PortMapping, ...]:
    return tuple(
        PortMapping(
            container_port=p["containerPort"],
            protocol=p.get("protocol", "TCP"),
            host_port=p.get("hostPort"),
            host_ip=p.get("hostIP", ""),
        )
        for p in ports
    )


def sandbox_config(pod: dict[str, Any], attempt: int) -> SandboxConfig:
    """The sandbox of a pod: its hostname and every container's ports (they belong to
    the sandbox's network namespace)."""
    meta, spec = pod["metadata"], pod.get("spec") or {}
    return SandboxConfig(
        name=f"k8s_POD_{meta['name']}_{meta['namespace']}_{meta['uid']}_{attempt}",
        hostname=spec.get("hostname") or meta["name"],
        labels=container_labels(pod, "POD", "sandbox", attempt),
        ports=_ports([p for c in spec.get("containers") or [] for p in c.get("ports") or []]),
    )


def container_config(
    pod: dict[str, Any],
    c: dict[str, Any],
    *,
    ctype: str,
    attempt: int,
    sandbox_id: str | None,
    env: list[tuple[str, str]],
    command: tuple[str, ...],
    args: tuple[str, ...],
    mounts: tuple[Mount, ...],
    host_network: bool,
    logs_dir: pathlib.Path,
) -> ContainerConfig:
    """Everything the runtime needs to create attempt ``attempt`` of container ``c``.

    Args:
        pod: the Pod JSON.
        c: the container JSON.
        ctype: ``init`` or ``app``.
        attempt: its restart count.
        sandbox_id: the pod sandbox to join, if any.
        env: resolved environment.
        command: resolved ``command`` (entrypoint).
        args: resolved ``args``.
        mounts: host-path mounts of its volumes.
        host_network: use the host network (hostNetwork, or a runtime with no sandboxes).
        logs_dir: ``<state_dir>/logs``; the process runtime writes
            ``<ns>_<pod>_<uid>/<container>/<attempt>.log`` below it.
    """
    meta = pod["metadata"]
    spec = pod.get("spec") or {}
    limits = (c.get("resources") or {}).get("limits") or {}
    name = c["name"]
    return ContainerConfig(
        name=f"k8s_{name}_{meta['name']}_{meta['namespace']}_{meta['uid']}_{attempt}",
        image=c["image"],
        command=command,
        args=args,
        env=tuple(env),
        working_dir=c.get("workingDir", ""),
        mounts=mounts,
        ports=_ports(c.get("ports") or []),
        labels=container_labels(pod, name, ctype, attempt, container_hash(c, spec)),
        host_network=host_network,
        sandbox_id=sandbox_id,
        hostname=spec.get("hostname") or meta["name"],
        cpu_millicores=parse_cpu_millicores(limits["cpu"]) if "cpu" in limits else None,
        memory_bytes=parse_memory_bytes(limits["memory"]) if "memory" in limits else None,
        log_path=str(
            logs_dir / f"{meta['namespace']}_{meta['name']}_{meta['uid']}" / name / f"{attempt}.log"
        ),
    )
