"""Container environment: env, envFrom, downward-API fieldRef and ``$(VAR)`` expansion."""

from __future__ import annotations

import logging
import re
from typing import Any

from edgeagent.errors import PodConfigError
from edgeagent.pods.objects import Lookup, config_data

__all__ = ["expand", "resolve_command", "resolve_env"]

log = logging.getLogger(__name__)

_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_REF = re.compile(r"\$\$|\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)")


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes variable expansion: ``$(NAME)`` becomes its value if defined (left as
    is otherwise) and ``$$`` becomes ``$``."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)

    return _REF.sub(sub, text)


def _field(pod: dict[str, Any], path: str, pod_ip: str, host_ip: str) -> str:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
        "status.hostIP": host_ip,
        "status.hostIPs": host_ip,
    }
    if path in simple:
        return str(simple[path] or "")
    m = re.match(r"^metadata\.(labels|annotations)\['([^']+)'\]$", path)
    if m:
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    raise PodConfigError(f"unsupported fieldPath {path!r}")


def resolve_env(
    container: dict[str, Any],
    pod: dict[str, Any],
    lookup: Lookup,
    *,
    pod_ip: str,
    host_ip: str,
) -> list[tuple[str, str]]:
    """The container's environment, in order: ``envFrom`` sources, then ``env`` (which
    overrides them), each value expanded against the variables defined before it.

    Args:
        container: the container JSON.
        pod: the Pod JSON (``metadata`` and ``spec`` for fieldRef).
        lookup: store lookup for ConfigMaps and Secrets.
        pod_ip: value of ``status.podIP``.
        host_ip: value of ``status.hostIP``.

    Returns:
        (name, value) pairs, each name once.

    Raises:
        PodConfigError: a referenced ConfigMap, Secret or key is missing and not optional
            (kubelet's ``CreateContainerConfigError``).
    """
    namespace = (pod.get("metadata") or {}).get("namespace", "")
    env: dict[str, str] = {}
    for src in container.get("envFrom") or []:
        prefix = src.get("prefix", "")
        kind, ref = (
            ("ConfigMap", src["configMapRef"])
            if "configMapRef" in src
            else ("Secret", src["secretRef"])
        )
        data = config_data(lookup, kind, namespace, ref["name"], optional=bool(ref.get("optional")))
        for key, value in (data or {}).items():
            name = prefix + key
            if _ENV_NAME.match(name):
                env[name] = value.decode(errors="replace")
            else:
                log.info("skipping %s key %r: not a valid environment variable name", kind, key)
    for item in container.get("env") or []:
        name = item["name"]
        source = item.get("valueFrom")
        if source is None:
            env[name] = expand(str(item.get("value", "")), env)
        elif "fieldRef" in source:
            env[name] = _field(pod, source["fieldRef"]["fieldPath"], pod_ip, host_ip)
        else:
            kind, ref = (
                ("ConfigMap", source["configMapKeyRef"])
                if "configMapKeyRef" in source
                else ("Secret", source["secretKeyRef"])
            )
            optional = bool(ref.get("optional"))
            data = config_data(lookup, kind, namespace, ref["name"], optional=optional)
            if data is None:
                continue
            if ref["key"] not in data:
                if optional:
                    continue
                raise PodConfigError(
                    f"couldn't find key {ref['key']} in {kind} {namespace}/{ref['name']}"
                )
            env[name] = data[ref["key"]].decode(errors="replace")
    return list(env.items())


def resolve_command(
    container: dict[str, Any], env: list[tuple[str, str]]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``command`` and ``args`` with ``$(VAR)`` references expanded from ``env``."""
    values = dict(env)
    command = tuple(expand(str(a), values) for a in container.get("command") or ())
    args = tuple(expand(str(a), values) for a in container.get("args") or ())
    return command, args
