"""What of a Pod spec the agent runs, and the checks that refuse the rest.

A pod that uses a field the agent does not implement is not run at all (not
half-run): :func:`check_pod` returns every offending JSON path, and the reconciler
reports them in the pod status (phase ``Failed``, reason ``UnsupportedPodSpec``, like
kubelet's admission rejections) and in an Event.

Fields come in three groups:

- supported (they change what runs): listed in ``_CONTAINER_KEYS`` etc. below;
- ignored on purpose: scheduling-only fields (the cloud side places pods) and fields
  the API server fills with defaults (``terminationMessagePath``, ``dnsPolicy``, …);
- everything else: unsupported, unless it holds its "off" value (``hostPID: false``,
  ``securityContext: {}``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import re
from collections.abc import Iterator
from typing import Any

__all__ = [
    "check_pod",
    "container_hash",
    "parse_cpu_millicores",
    "parse_memory_bytes",
    "qos_class",
]

# pod.spec keys that change what runs and are implemented
_SPEC_SUPPORTED = {
    "containers",
    "initContainers",
    "volumes",
    "restartPolicy",
    "terminationGracePeriodSeconds",
    "hostNetwork",
    "hostname",
}
# pod.spec keys that only steer scheduling or carry API-server defaults: ignored
_SPEC_IGNORED = {
    "nodeName",
    "nodeSelector",
    "affinity",
    "tolerations",
    "topologySpreadConstraints",
    "schedulerName",
    "priority",
    "priorityClassName",
    "preemptionPolicy",
    "serviceAccount",
    "serviceAccountName",
    "enableServiceLinks",
    "subdomain",
    "os",
    "schedulingGates",
    "setHostnameAsFQDN",
}
# pod.spec keys fine only with their "off" value
_SPEC_OFF_VALUES: dict[str, tuple[Any, ...]] = {
    "hostPID": (False,),
    "hostIPC": (False,),
    "shareProcessNamespace": (False,),
    "securityContext": ({},),
    "imagePullSecrets": ([],),
    # only matters with a serviceAccountToken projection, which is refused
    "automountServiceAccountToken": (False, True),
    "dnsPolicy": ("ClusterFirst", "Default", "ClusterFirstWithHostNet"),
    "hostAliases": ([],),
    "readinessGates": ([],),
    "ephemeralContainers": ([],),
    "overhead": ({},),
}

_CONTAINER_SUPPORTED = {
    "name",
    "image",
    "command",
    "args",
    "env",
    "envFrom",
    "workingDir",
    "ports",
    "resources",
    "volumeMounts",
    "livenessProbe",
    "readinessProbe",
    "imagePullPolicy",
}
_CONTAINER_IGNORED = {"terminationMessagePath", "terminationMessagePolicy"}
_CONTAINER_OFF_VALUES: dict[str, tuple[Any, ...]] = {
    "securityContext": ({},),
    "stdin": (False,),
    "stdinOnce": (False,),
    "tty": (False,),
    "lifecycle": ({},),
    "volumeDevices": ([],),
}
_PROBE_KEYS = {
    "exec",
    "httpGet",
    "tcpSocket",
    "initialDelaySeconds",
    "periodSeconds",
    "timeoutSeconds",
    "successThreshold",
    "failureThreshold",
}
_FIELD_PATHS = {
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.podIP",
    "status.podIPs",
    "status.hostIP",
    "status.hostIPs",
}
_FIELD_PATH_MAPS = re.compile(r"^metadata\.(labels|annotations)\['[^']+'\]$")
_HOSTPATH_TYPES = {
    "",
    "DirectoryOrCreate",
    "Directory",
    "FileOrCreate",
    "File",
    "Socket",
    "CharDevice",
    "BlockDevice",
}
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


def check_pod(pod: dict[str, Any], runtime_kind: str) -> list[str]:
    """Every reason the agent cannot run this pod as specified.

    Args:
        pod: the Pod JSON.
        runtime_kind: ``"docker"`` or ``"process"`` (the process runtime needs a
            ``command`` and cannot remap host ports).

    Returns:
        Problems as ``"<json path>"`` (unsupported field) or ``"<json path>: <why>"``;
        empty if the pod can run.
    """
    problems: list[str] = []
    meta = pod.get("metadata") or {}
    for key in ("name", "namespace", "uid"):
        if not isinstance(meta.get(key), str) or not meta.get(key):
            problems.append(f"metadata.{key}: required")
    for key in ("name", "namespace"):
        value = meta.get(key)
        if isinstance(value, str) and value and not _valid_ref_name(value):
            problems.append(f"metadata.{key}: {value!r} is not a valid object name")
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return [*problems, "spec: required"]
    for key, value in spec.items():
        if key in _SPEC_SUPPORTED or key in _SPEC_IGNORED:
            continue
        if key in _SPEC_OFF_VALUES and value in _SPEC_OFF_VALUES[key]:
            continue
        problems.append(f"spec.{key}")
    policy = spec.get("restartPolicy", "Always")
    if policy not in ("Always", "OnFailure", "Never"):
        problems.append(f"spec.restartPolicy: must be Always, OnFailure or Never, not {policy!r}")
    grace = spec.get("terminationGracePeriodSeconds", 0)
    if not isinstance(grace, int) or isinstance(grace, bool) or grace < 0:
        problems.append("spec.terminationGracePeriodSeconds: must be a non-negative integer")
    volumes: set[str] = set()
    with _malformed("spec.volumes", problems):
        volumes = _check_volumes(spec.get("volumes") or [], problems)
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        problems.append("spec.containers: at least one container is required")
        containers = []
    names: set[str] = set()
    for group in ("initContainers", "containers"):
        items = spec.get(group) or []
        if not isinstance(items, list):
            problems.append(f"spec.{group}: must be a list")
            continue
        for i, c in enumerate(items):
            path = f"spec.{group}[{i}]"
            if not isinstance(c, dict):
                problems.append(f"{path}: must be an object")
                continue
            name = c.get("name")
            if not isinstance(name, str) or not _NAME.match(name):
                problems.append(f"{path}.name: must be a DNS label")
            elif name in names:
                problems.append(f"{path}.name: duplicate container name {name!r}")
            else:
                names.add(name)
            _check_container(
                c, path, volumes, runtime_kind, problems, init=group == "initContainers"
            )
    return problems


def _check_volumes(volumes: Any, problems: list[str]) -> set[str]:
    names: set[str] = set()
    if not isinstance(volumes, list):
        problems.append("spec.volumes: must be a list")
        return names
    for i, vol in enumerate(volumes):
        path = f"spec.volumes[{i}]"
        if not isinstance(vol, dict) or not isinstance(vol.get("name"), str):
            problems.append(f"{path}.name: required")
            continue
        names.add(vol["name"])
        kinds = [k for k in vol if k != "name"]
        if len(kinds) != 1:
            problems.append(f"{path}: exactly one volume source is required")
            continue
        kind = kinds[0]
        src = vol[kind]
        if kind == "configMap":
            _only(src, {"name", "items", "defaultMode", "optional"}, f"{path}.configMap", problems)
            if not _valid_ref_name(src.get("name")):
                problems.append(f"{path}.configMap.name: not a valid object name")
            _check_items(src, f"{path}.configMap", problems)
        elif kind == "secret":
            _only(
                src, {"secretName", "items", "defaultMode", "optional"}, f"{path}.secret", problems
            )
            if not _valid_ref_name(src.get("secretName")):
                problems.append(f"{path}.secret.secretName: not a valid object name")
            _check_items(src, f"{path}.secret", problems)
        elif kind == "projected":
            _check_projected(src, f"{path}.projected", problems)
        elif kind == "emptyDir":
            _only(src or {}, {"medium", "sizeLimit"}, f"{path}.emptyDir", problems)
            if (src or {}).get("medium", "") not in ("", "Memory"):
                problems.append(f"{path}.emptyDir.medium")
            if (src or {}).get("sizeLimit") is not None:
                try:
                    parse_memory_bytes((src or {})["sizeLimit"])
                except ValueError:
                    problems.append(f"{path}.emptyDir.sizeLimit: not a quantity")
        elif kind == "hostPath":
            _only(src, {"path", "type"}, f"{path}.hostPath", problems)
            if not str(src.get("path", "")).startswith("/"):
                problems.append(f"{path}.hostPath.path: must be absolute")
            if src.get("type", "") not in _HOSTPATH_TYPES:
                problems.append(f"{path}.hostPath.type: unknown type {src.get('type')!r}")
        else:
            problems.append(f"{path}.{kind}")
    return names


def _check_projected(src: Any, path: str, problems: list[str]) -> None:
    """``projected`` volumes: the ``configMap`` and ``secret`` sources are run (both name
    their object ``name``); ``downwardAPI``, ``serviceAccountToken`` and
    ``clusterTrustBundle`` sources are not."""
    if not isinstance(src, dict):
        problems.append(f"{path}: must be an object")
        return
    _only(src, {"sources", "defaultMode"}, path, problems)
    for j, source in enumerate(src.get("sources") or []):
        spath = f"{path}.sources[{j}]"
        kinds = list(source) if isinstance(source, dict) else []
        if len(kinds) != 1:
            problems.append(f"{spath}: exactly one projection source is required")
            continue
        kind = kinds[0]
        if kind not in ("configMap", "secret"):
            problems.append(f"{spath}.{kind}")
            continue
        ref = source[kind]
        _only(ref, {"name", "items", "optional"}, f"{spath}.{kind}", problems)
        if not isinstance(ref, dict):
            continue
        if not _valid_ref_name(ref.get("name")):
            problems.append(f"{spath}.{kind}.name: not a valid object name")
        _check_items(ref, f"{spath}.{kind}", problems)


def _check_items(src: dict, path: str, problems: list[str]) -> None:
    for j, item in enumerate(src.get("items") or []):
        rel = str(item.get("path", ""))
        if not item.get("key") or not rel or rel.startswith("/") or ".." in rel.split("/"):
            problems.append(f"{path}.items[{j}]: needs a key and a relative path without '..'")
        _only(item, {"key", "path", "mode"}, f"{path}.items[{j}]", problems)


def _check_container(
    c: dict, path: str, volumes: set[str], runtime_kind: str, problems: list[str], *, init: bool
) -> None:
    for key, value in c.items():
        if key in _CONTAINER_SUPPORTED or key in _CONTAINER_IGNORED:
            if init and key in ("livenessProbe", "readinessProbe"):
                problems.append(f"{path}.{key}: init containers have no probes")
            continue
        if key in _CONTAINER_OFF_VALUES and value in _CONTAINER_OFF_VALUES[key]:
            continue
        problems.append(f"{path}.{key}")
    if not isinstance(c.get("image"), str) or not c.get("image"):
        problems.append(f"{path}.image: required")
    for key in ("command", "args"):
        value = c.get(key)
        if value is not None and (
            not isinstance(value, list) or not all(isinstance(v, str) for v in value)
        ):
            problems.append(f"{path}.{key}: must be a list of strings")
    if runtime_kind == "process" and not c.get("command"):
        problems.append(f"{path}.command: required by the process runtime (it runs no images)")
    policy = c.get("imagePullPolicy", "IfNotPresent")
    if policy not in ("Always", "IfNotPresent", "Never"):
        problems.append(f"{path}.imagePullPolicy: unknown policy {policy!r}")
    wd = c.get("workingDir")
    if wd is not None and not str(wd).startswith("/"):
        problems.append(f"{path}.workingDir: must be absolute")
    with _malformed(f"{path}.env", problems):
        _check_env(c, path, problems)
    with _malformed(f"{path}.resources", problems):
        _check_resources(c.get("resources") or {}, f"{path}.resources", problems)
    with _malformed(f"{path}.ports", problems):
        _check_ports(c, path, runtime_kind, problems)
    with _malformed(f"{path}.volumeMounts", problems):
        _check_mounts(c, path, volumes, problems)
    for kind in ("livenessProbe", "readinessProbe"):
        probe = c.get(kind)
        if probe is None or init:
            continue
        with _malformed(f"{path}.{kind}", problems):
            _check_probe(probe, f"{path}.{kind}", problems)


def _check_ports(c: dict, path: str, runtime_kind: str, problems: list[str]) -> None:
    for j, port in enumerate(c.get("ports") or []):
        ppath = f"{path}.ports[{j}]"
        _only(port, {"containerPort", "hostPort", "protocol", "name", "hostIP"}, ppath, problems)
        if not isinstance(port.get("containerPort"), int) or not 0 < port["containerPort"] < 65536:
            problems.append(f"{ppath}.containerPort: must be 1-65535")
        if port.get("protocol", "TCP") not in ("TCP", "UDP", "SCTP"):
            problems.append(f"{ppath}.protocol: must be TCP, UDP or SCTP")
        host_port = port.get("hostPort")
        if runtime_kind == "process" and host_port and host_port != port.get("containerPort"):
            problems.append(
                f"{ppath}.hostPort: the process runtime cannot map a host port to another port"
            )


def _check_mounts(c: dict, path: str, volumes: set[str], problems: list[str]) -> None:
    for j, mount in enumerate(c.get("volumeMounts") or []):
        mpath = f"{path}.volumeMounts[{j}]"
        allowed = {"name", "mountPath", "readOnly", "subPath"}
        if mount.get("mountPropagation", "None") == "None":
            allowed.add("mountPropagation")
        _only(mount, allowed, mpath, problems)
        if mount.get("name") not in volumes:
            problems.append(f"{mpath}.name: no volume named {mount.get('name')!r}")
        if not str(mount.get("mountPath", "")).startswith("/"):
            problems.append(f"{mpath}.mountPath: must be absolute")
        sub = mount.get("subPath")
        if sub is not None and (str(sub).startswith("/") or ".." in str(sub).split("/")):
            problems.append(f"{mpath}.subPath: must be relative without '..'")


def _check_probe(probe: Any, ppath: str, problems: list[str]) -> None:
    if not isinstance(probe, dict):
        problems.append(f"{ppath}: must be an object")
        return
    _only(probe, _PROBE_KEYS, ppath, problems)
    handlers = [h for h in ("exec", "httpGet", "tcpSocket") if h in probe]
    if len(handlers) != 1:
        problems.append(f"{ppath}: exactly one of exec, httpGet, tcpSocket is required")
    if "httpGet" in probe:
        _only(
            probe["httpGet"],
            {"path", "port", "host", "scheme", "httpHeaders"},
            f"{ppath}.httpGet",
            problems,
        )
        if probe["httpGet"].get("scheme", "HTTP") not in ("HTTP", "HTTPS"):
            problems.append(f"{ppath}.httpGet.scheme: must be HTTP or HTTPS")
    if "tcpSocket" in probe:
        _only(probe["tcpSocket"], {"port", "host"}, f"{ppath}.tcpSocket", problems)
    if "exec" in probe and not (probe["exec"] or {}).get("command"):
        problems.append(f"{ppath}.exec.command: required")


def _check_env(c: dict, path: str, problems: list[str]) -> None:
    for j, env in enumerate(c.get("env") or []):
        epath = f"{path}.env[{j}]"
        if not isinstance(env, dict) or not _ENV_NAME.match(str(env.get("name", ""))):
            problems.append(f"{epath}.name: not a valid environment variable name")
            continue
        source = env.get("valueFrom")
        if source is None:
            continue
        kinds = list(source)
        if len(kinds) != 1:
            problems.append(f"{epath}.valueFrom: exactly one source is required")
            continue
        kind = kinds[0]
        if kind == "fieldRef":
            fp = str(source[kind].get("fieldPath", ""))
            if fp not in _FIELD_PATHS and not _FIELD_PATH_MAPS.match(fp):
                problems.append(f"{epath}.valueFrom.fieldRef.fieldPath: {fp!r} is not supported")
        elif kind in ("configMapKeyRef", "secretKeyRef"):
            ref = source[kind]
            if not _valid_ref_name(ref.get("name")) or not ref.get("key"):
                problems.append(f"{epath}.valueFrom.{kind}: needs a valid name and a key")
        else:
            problems.append(f"{epath}.valueFrom.{kind}")
    with _malformed(f"{path}.envFrom", problems):
        _check_env_from(c, path, problems)


def _check_env_from(c: dict, path: str, problems: list[str]) -> None:
    for j, src in enumerate(c.get("envFrom") or []):
        epath = f"{path}.envFrom[{j}]"
        kinds = [k for k in src if k != "prefix"]
        if len(kinds) != 1 or kinds[0] not in ("configMapRef", "secretRef"):
            problems.append(f"{epath}: one of configMapRef, secretRef is required")
        elif not _valid_ref_name(src[kinds[0]].get("name")):
            problems.append(f"{epath}.{kinds[0]}.name: not a valid object name")


def _check_resources(res: dict, path: str, problems: list[str]) -> None:
    for key in res:
        if key not in ("limits", "requests"):
            problems.append(f"{path}.{key}")
    for key, value in (res.get("limits") or {}).items():
        if key not in ("cpu", "memory"):
            problems.append(f"{path}.limits.{key}")
            continue
        try:
            (parse_cpu_millicores if key == "cpu" else parse_memory_bytes)(value)
        except ValueError:
            problems.append(f"{path}.limits.{key}: not a quantity: {value!r}")


@contextlib.contextmanager
def _malformed(path: str, problems: list[str]) -> Iterator[None]:
    """Turn a structure the checks cannot even walk (a string where a list of objects
    belongs, as a broken or hostile hub may send) into a problem at ``path``."""
    try:
        yield
    except (AttributeError, TypeError, ValueError, KeyError, OverflowError) as exc:
        problems.append(f"{path}: malformed ({type(exc).__name__}: {exc})")


def _only(obj: Any, allowed: set[str], path: str, problems: list[str]) -> None:
    if not isinstance(obj, dict):
        problems.append(f"{path}: must be an object")
        return
    for key in obj:
        if key not in allowed:
            problems.append(f"{path}.{key}")


def _valid_ref_name(name: Any) -> bool:
    return isinstance(name, str) and bool(re.match(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", name))


# --- quantities -------------------------------------------------------------------------

_SUFFIX = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
_QUANTITY = re.compile(r"^([+]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(m|[kMGTPE]i?|)$")


def _quantity(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError("a boolean is not a quantity")
    if isinstance(value, (int, float)):
        number = float(value)
        if not math.isfinite(number):
            raise ValueError(f"not a finite quantity: {value!r}")
        return number
    m = _QUANTITY.match(str(value).strip())
    if not m:
        raise ValueError(f"not a quantity: {value!r}")
    number, suffix = m.groups()
    value = float(number) / 1000 if suffix == "m" else float(number) * _SUFFIX[suffix]
    if not math.isfinite(value):
        raise ValueError(f"not a finite quantity: {value!r}")
    return value


def parse_cpu_millicores(value: Any) -> int:
    """A Kubernetes CPU quantity in millicores (``"250m"`` → 250, ``"2"`` → 2000).

    Raises:
        ValueError: not a quantity.
    """
    return round(_quantity(value) * 1000)


def parse_memory_bytes(value: Any) -> int:
    """A Kubernetes memory quantity in bytes (``"64Mi"`` → 67108864, ``"1G"`` → 10**9).

    Raises:
        ValueError: not a quantity.
    """
    return round(_quantity(value))


def qos_class(spec: dict[str, Any]) -> str:
    """The pod's QoS class (Guaranteed, Burstable or BestEffort), as the API computes it.

    A spec too malformed to walk (a refused pod's status still names a class) is
    ``BestEffort``.
    """
    try:
        return _qos_class(spec)
    except (AttributeError, TypeError):
        return "BestEffort"


def _qos_class(spec: dict[str, Any]) -> str:
    containers = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
    any_set = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        limits = res.get("limits") or {}
        requests = {**limits, **(res.get("requests") or {})}
        if limits or requests:
            any_set = True
        for key in ("cpu", "memory"):
            if key not in limits or str(requests.get(key)) != str(limits.get(key)):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def container_hash(container: dict[str, Any], spec: dict[str, Any]) -> str:
    """Hash of what a container was created from; a change means recreate it (as kubelet)."""
    relevant = {"c": container, "hostNetwork": bool(spec.get("hostNetwork"))}
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()[:16]
