"""Validation of objects before they are stored (422 Invalid with causes).

The rules are those of kube-apiserver 1.20 for what this server serves: object
metadata (names, labels, annotations, finalizers, owner references) and the
parts of each built-in kind a client most often gets wrong. Causes carry the
field path and reason (``FieldValueRequired``, ``FieldValueInvalid``,
``FieldValueNotSupported``, ``FieldValueDuplicate``, ``FieldValueForbidden``,
``FieldValueTooLong``) as kube-apiserver reports them.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping
from typing import Any

from cloudhub.standalone.errors import StatusCause
from cloudhub.standalone.resources import ResourceType
from cloudhub.standalone.selectors import validate_label_key, validate_label_value

__all__ = ["Errors", "validate_object", "validate_update"]

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_IANA_SVC_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")

SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
    "regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
LABEL1035_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with "
    "an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or "
    "'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)
STANDARD_FINALIZERS = frozenset({"kubernetes", "orphan", "foregroundDeletion"})
MAX_ANNOTATIONS_BYTES = 256 * 1024
MAX_CONFIG_BYTES = 1024 * 1024


def _render(value: Any) -> str:
    """A value as Go's ``%#v`` shows it in field errors (``"x"``, ``5``,
    ``map[string]string{"a":"b"}``, ``[]string{"a", "b"}``); other shapes as JSON."""
    if isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
        inner = ", ".join(f"{json.dumps(k)}:{json.dumps(v)}" for k, v in sorted(value.items()))
        return f"map[string]string{{{inner}}}"
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "[]string{" + ", ".join(json.dumps(v) for v in value) + "}"
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


class Errors:
    """Collects validation causes; ``bool(errors)`` is True when any was added."""

    def __init__(self) -> None:
        self.causes: list[StatusCause] = []

    def __bool__(self) -> bool:
        return bool(self.causes)

    def required(self, field: str, detail: str = "") -> None:
        msg = "Required value" + (f": {detail}" if detail else "")
        self.causes.append(StatusCause("FieldValueRequired", msg, field))

    def invalid(self, field: str, value: Any, detail: str) -> None:
        self.causes.append(
            StatusCause("FieldValueInvalid", f"Invalid value: {_render(value)}: {detail}", field)
        )

    def not_supported(self, field: str, value: Any, supported: list[str]) -> None:
        listed = ", ".join(_render(s) for s in supported)
        self.causes.append(
            StatusCause(
                "FieldValueNotSupported",
                f"Unsupported value: {_render(value)}: supported values: {listed}",
                field,
            )
        )

    def duplicate(self, field: str, value: Any) -> None:
        self.causes.append(
            StatusCause("FieldValueDuplicate", f"Duplicate value: {_render(value)}", field)
        )

    def forbidden(self, field: str, detail: str) -> None:
        self.causes.append(StatusCause("FieldValueForbidden", f"Forbidden: {detail}", field))

    def too_long(self, field: str, limit: int) -> None:
        self.causes.append(
            StatusCause("FieldValueTooLong", f"Too long: must have at most {limit} bytes", field)
        )


def name_error(name: str, rule: str) -> str | None:
    """Why ``name`` breaks the name rule of its kind, or None."""
    if rule == "path":
        if name in (".", ".."):
            return f"may not be '{name}'"
        for bad in ("/", "%"):
            if bad in name:
                return f"may not contain '{bad}'"
        return None
    if rule == "label":
        if len(name) > 63:
            return "must be no more than 63 characters"
        return None if _LABEL.match(name) else LABEL_MSG
    if rule == "label1035":
        if len(name) > 63:
            return "must be no more than 63 characters"
        return None if _LABEL1035.match(name) else LABEL1035_MSG
    if len(name) > 253:
        return "must be no more than 253 characters"
    return None if _SUBDOMAIN.match(name) else SUBDOMAIN_MSG


def is_subdomain(value: str) -> bool:
    return len(value) <= 253 and bool(_SUBDOMAIN.match(value))


def is_label(value: str) -> bool:
    return len(value) <= 63 and bool(_LABEL.match(value))


# -- metadata --------------------------------------------------------------------


def _string_map(errs: Errors, meta: Mapping[str, Any], field: str) -> dict[str, Any]:
    value = meta.get(field)
    if value is None:
        return {}
    if not isinstance(value, dict):
        errs.invalid(f"metadata.{field}", value, "must be a map of string keys to string values")
        return {}
    for val in value.values():
        if not isinstance(val, str):
            errs.invalid(f"metadata.{field}", val, "values must be strings")
    return value


def _core_meta(rtype: ResourceType) -> bool:
    """Kinds validated by kube-apiserver's core ObjectMeta rules (not CRDs or CRs),
    which also refuse finalizer names that are neither standard nor qualified."""
    return not rtype.custom and rtype.group != "apiextensions.k8s.io"


def validate_metadata(errs: Errors, rtype: ResourceType, meta: Mapping[str, Any]) -> None:
    """Object metadata rules common to every kind (ValidateObjectMeta)."""
    name = meta.get("name")
    if not name:
        errs.required("metadata.name", "name or generateName is required")
    elif not isinstance(name, str):
        errs.invalid("metadata.name", name, "must be a string")
    else:
        why = name_error(name, rtype.name_rule)
        if why:
            errs.invalid("metadata.name", name, why)
    labels = _string_map(errs, meta, "labels")
    for key, value in labels.items():
        why = validate_label_key(str(key))
        if why:
            errs.invalid("metadata.labels", key, why)
        if isinstance(value, str):
            why = validate_label_value(value)
            if why:
                errs.invalid("metadata.labels", value, why)
    annotations = _string_map(errs, meta, "annotations")
    total = 0
    for key, value in annotations.items():
        why = validate_label_key(str(key).lower())
        if why:
            errs.invalid("metadata.annotations", key, why)
        total += len(str(key)) + (len(value) if isinstance(value, str) else 0)
    if total > MAX_ANNOTATIONS_BYTES:
        errs.too_long("metadata.annotations", MAX_ANNOTATIONS_BYTES)
    finalizers = meta.get("finalizers")
    if finalizers is not None:
        if not isinstance(finalizers, list):
            errs.invalid("metadata.finalizers", finalizers, "must be a list of strings")
        else:
            for i, fin in enumerate(finalizers):
                path = f"metadata.finalizers[{i}]"
                if not isinstance(fin, str):
                    errs.invalid(path, fin, "must be a string")
                    continue
                why = validate_label_key(fin)
                if why:
                    errs.invalid(path, fin, why)
                elif "/" not in fin and fin not in STANDARD_FINALIZERS and _core_meta(rtype):
                    errs.invalid(
                        path,
                        fin,
                        "name is neither a standard finalizer name nor is it fully qualified",
                    )
    owners = meta.get("ownerReferences")
    if owners is not None:
        if not isinstance(owners, list):
            errs.invalid("metadata.ownerReferences", owners, "must be a list")
        else:
            controllers = 0
            for i, ref in enumerate(owners):
                path = f"metadata.ownerReferences[{i}]"
                if not isinstance(ref, dict):
                    errs.invalid(path, ref, "must be an object")
                    continue
                for key in ("apiVersion", "kind", "name", "uid"):
                    if not ref.get(key):
                        errs.required(f"{path}.{key}", f"{key} must not be empty")
                if ref.get("controller") is True:
                    controllers += 1
            if controllers > 1:
                errs.invalid(
                    "metadata.ownerReferences",
                    owners,
                    "Only one reference can have Controller set to true",
                )


# -- pods and pod templates --------------------------------------------------------

_RESTART_POLICIES = ["Always", "Never", "OnFailure"]
_PULL_POLICIES = ["Always", "IfNotPresent", "Never"]
_PROTOCOLS = ["SCTP", "TCP", "UDP"]
_VOLUME_SOURCES = (
    "hostPath",
    "emptyDir",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "secret",
    "nfs",
    "iscsi",
    "glusterfs",
    "persistentVolumeClaim",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "downwardAPI",
    "fc",
    "azureFile",
    "configMap",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "projected",
    "portworxVolume",
    "scaleIO",
    "storageos",
    "csi",
    "ephemeral",
)


def _containers(
    errs: Errors, spec: Mapping[str, Any], field: str, path: str, required: bool, volumes: set[str]
) -> set[str]:
    containers = spec.get(field)
    names: set[str] = set()
    if containers is None or containers == []:
        if required:
            errs.required(f"{path}.{field}")
        return names
    if not isinstance(containers, list):
        errs.invalid(f"{path}.{field}", containers, "must be a list")
        return names
    for i, c in enumerate(containers):
        cpath = f"{path}.{field}[{i}]"
        if not isinstance(c, dict):
            errs.invalid(cpath, c, "must be an object")
            continue
        name = c.get("name")
        if not name:
            errs.required(f"{cpath}.name")
        elif not isinstance(name, str) or not is_label(name):
            errs.invalid(f"{cpath}.name", name, LABEL_MSG)
        elif name in names:
            errs.duplicate(f"{cpath}.name", name)
        else:
            names.add(name)
        if not c.get("image"):
            errs.required(f"{cpath}.image")
        policy = c.get("imagePullPolicy")
        if policy is not None and policy not in _PULL_POLICIES:
            errs.not_supported(f"{cpath}.imagePullPolicy", policy, _PULL_POLICIES)
        port_names: set[str] = set()
        for j, port in enumerate(c.get("ports") or []):
            ppath = f"{cpath}.ports[{j}]"
            if not isinstance(port, dict):
                errs.invalid(ppath, port, "must be an object")
                continue
            number = port.get("containerPort")
            if not isinstance(number, int) or isinstance(number, bool) or not 0 < number < 65536:
                errs.invalid(
                    f"{ppath}.containerPort", number, "must be between 1 and 65535, inclusive"
                )
            proto = port.get("protocol")
            if proto is not None and proto not in _PROTOCOLS:
                errs.not_supported(f"{ppath}.protocol", proto, _PROTOCOLS)
            pname = port.get("name")
            if pname:
                if pname in port_names:
                    errs.duplicate(f"{ppath}.name", pname)
                port_names.add(pname)
        for j, env in enumerate(c.get("env") or []):
            epath = f"{cpath}.env[{j}]"
            if not isinstance(env, dict):
                errs.invalid(epath, env, "must be an object")
                continue
            ename = env.get("name")
            if not ename:
                errs.required(f"{epath}.name")
            elif not isinstance(ename, str) or not _ENV_NAME.match(ename):
                errs.invalid(
                    f"{epath}.name",
                    ename,
                    "a valid environment variable name must consist of alphabetic characters, "
                    "digits, '_', '-', or '.', and must not start with a digit",
                )
            if "value" in env and "valueFrom" in env and env["value"]:
                errs.invalid(
                    f"{epath}.valueFrom",
                    env["valueFrom"],
                    "may not be specified when `value` is not empty",
                )
        for j, mount in enumerate(c.get("volumeMounts") or []):
            mpath = f"{cpath}.volumeMounts[{j}]"
            if not isinstance(mount, dict):
                errs.invalid(mpath, mount, "must be an object")
                continue
            if not mount.get("name"):
                errs.required(f"{mpath}.name")
            elif mount["name"] not in volumes:
                errs.not_supported(f"{mpath}.name", mount["name"], sorted(volumes))
            if not mount.get("mountPath"):
                errs.required(f"{mpath}.mountPath")
        resources = c.get("resources")
        if isinstance(resources, dict):
            for part in ("limits", "requests"):
                for res, value in (resources.get(part) or {}).items():
                    if _negative_quantity(value):
                        errs.invalid(
                            f"{cpath}.resources.{part}[{res}]",
                            value,
                            "must be greater than or equal to 0",
                        )
    return names


def _negative_quantity(value: Any) -> bool:
    """A quantity below zero (its syntax was checked when the body was decoded)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value < 0
    text = str(value).strip()
    number = re.split(r"[eEinumkKMGTP]", text, maxsplit=1)[0]
    return number.startswith("-") and any(ch in "123456789" for ch in number)


def validate_pod_spec(errs: Errors, spec: Any, path: str) -> None:
    """PodSpec rules: containers, volumes, restartPolicy (ValidatePodSpec)."""
    if not isinstance(spec, dict):
        errs.required(path)
        return
    volumes: set[str] = set()
    for i, vol in enumerate(spec.get("volumes") or []):
        vpath = f"{path}.volumes[{i}]"
        if not isinstance(vol, dict):
            errs.invalid(vpath, vol, "must be an object")
            continue
        name = vol.get("name")
        if not name:
            errs.required(f"{vpath}.name")
        elif not isinstance(name, str) or not is_label(name):
            errs.invalid(f"{vpath}.name", name, LABEL_MSG)
        elif name in volumes:
            errs.duplicate(f"{vpath}.name", name)
        else:
            volumes.add(name)
        sources = [k for k in _VOLUME_SOURCES if k in vol]
        if len(sources) > 1:
            errs.forbidden(f"{vpath}.{sources[1]}", "may not specify more than 1 volume type")
    names = _containers(errs, spec, "containers", path, True, volumes)
    init_names = _containers(errs, spec, "initContainers", path, False, volumes)
    for dup in sorted(names & init_names):
        errs.duplicate(f"{path}.initContainers", dup)
    policy = spec.get("restartPolicy")
    if policy is not None and policy not in _RESTART_POLICIES:
        errs.not_supported(f"{path}.restartPolicy", policy, _RESTART_POLICIES)
    node = spec.get("nodeName")
    if node and (not isinstance(node, str) or not is_subdomain(node)):
        errs.invalid(f"{path}.nodeName", node, SUBDOMAIN_MSG)
    selector = spec.get("nodeSelector")
    if selector is not None:
        if not isinstance(selector, dict):
            errs.invalid(f"{path}.nodeSelector", selector, "must be a map")
        else:
            for key, value in selector.items():
                why = validate_label_key(str(key))
                if why:
                    errs.invalid(f"{path}.nodeSelector", key, why)
                if not isinstance(value, str) or validate_label_value(value):
                    errs.invalid(f"{path}.nodeSelector", value, "must be a valid label value")
    grace = spec.get("terminationGracePeriodSeconds")
    if grace is not None and (not isinstance(grace, int) or grace < 0):
        errs.invalid(
            f"{path}.terminationGracePeriodSeconds", grace, "must be greater than or equal to 0"
        )


def _validate_template(errs: Errors, spec: Mapping[str, Any], require_always: bool) -> None:
    selector = spec.get("selector")
    template = spec.get("template")
    if not isinstance(selector, dict) or not (
        selector.get("matchLabels") or selector.get("matchExpressions")
    ):
        errs.required("spec.selector")
        selector = None
    if not isinstance(template, dict):
        errs.required("spec.template")
        return
    meta = template.get("metadata") or {}
    labels = meta.get("labels") if isinstance(meta, dict) else None
    labels = labels if isinstance(labels, dict) else {}
    if selector is not None and not _selector_matches(selector, labels):
        errs.invalid(
            "spec.template.metadata.labels", labels, "`selector` does not match template `labels`"
        )
    pod_spec = template.get("spec")
    validate_pod_spec(errs, pod_spec, "spec.template.spec")
    if require_always and isinstance(pod_spec, dict):
        policy = pod_spec.get("restartPolicy", "Always")
        if policy != "Always":
            errs.not_supported("spec.template.spec.restartPolicy", policy, ["Always"])


def _selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        if not isinstance(expr, dict):
            return False
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _replicas(errs: Errors, spec: Mapping[str, Any]) -> None:
    replicas = spec.get("replicas")
    if replicas is not None and (not isinstance(replicas, int) or replicas < 0):
        errs.invalid("spec.replicas", replicas, "must be greater than or equal to 0")


# -- per kind ----------------------------------------------------------------------


def _config_data(errs: Errors, obj: Mapping[str, Any], check_base64: bool) -> None:
    total = 0
    seen: set[str] = set()
    for field in ("data", "binaryData", "stringData"):
        data = obj.get(field)
        if data is None:
            continue
        if not isinstance(data, dict):
            errs.invalid(field, data, "must be a map of string keys to string values")
            continue
        for key, value in data.items():
            if not _CONFIG_KEY.match(key) or len(key) > 253:
                errs.invalid(
                    f"{field}[{key}]",
                    key,
                    "a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
                )
            if field == "binaryData" and key in seen:
                errs.invalid(f"{field}[{key}]", key, "duplicate of key present in data")
            seen.add(key)
            if not isinstance(value, str):
                errs.invalid(f"{field}[{key}]", value, "must be a string")
                continue
            total += len(value)
    if total > MAX_CONFIG_BYTES:
        errs.too_long("data", MAX_CONFIG_BYTES)


def _validate_service(errs: Errors, obj: Mapping[str, Any]) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        errs.required("spec")
        return
    stype = spec.get("type", "ClusterIP")
    types = ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"]
    if stype not in types:
        errs.not_supported("spec.type", stype, types)
    ports = spec.get("ports") or []
    if not ports and stype != "ExternalName" and spec.get("clusterIP") != "None":
        errs.required("spec.ports")
    names: set[str] = set()
    for i, port in enumerate(ports):
        path = f"spec.ports[{i}]"
        if not isinstance(port, dict):
            errs.invalid(path, port, "must be an object")
            continue
        number = port.get("port")
        if not isinstance(number, int) or isinstance(number, bool) or not 0 < number < 65536:
            errs.invalid(f"{path}.port", number, "must be between 1 and 65535, inclusive")
        proto = port.get("protocol", "TCP")
        if proto not in _PROTOCOLS:
            errs.not_supported(f"{path}.protocol", proto, _PROTOCOLS)
        name = port.get("name", "")
        if len(ports) > 1 and not name:
            errs.required(f"{path}.name")
        if name:
            if name in names:
                errs.duplicate(f"{path}.name", name)
            names.add(name)
            if not _IANA_SVC_NAME.match(name) or len(name) > 63:
                errs.invalid(f"{path}.name", name, LABEL_MSG)


def _validate_lease(errs: Errors, obj: Mapping[str, Any]) -> None:
    spec = obj.get("spec") or {}
    for field in ("leaseDurationSeconds", "leaseTransitions"):
        value = spec.get(field)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            errs.invalid(f"spec.{field}", value, "must be an integer")
        elif field == "leaseDurationSeconds" and value <= 0:
            errs.invalid(f"spec.{field}", value, "must be greater than 0")
        elif value < 0:
            errs.invalid(f"spec.{field}", value, "must be greater than or equal to 0")


def _validate_secret(errs: Errors, obj: Mapping[str, Any]) -> None:
    _config_data(errs, obj, check_base64=True)
    stype = obj.get("type")
    if stype is not None and not isinstance(stype, str):
        errs.invalid("type", stype, "must be a string")


def _pod_ips(errs: Errors, status: Any) -> None:
    """``status.podIPs`` (``podIP`` when only that is given): each a valid IP, at most one
    per family (kube-apiserver's validatePodIPs; an edge reporting a bad address gets the
    same 422 from either API)."""
    if not isinstance(status, Mapping):
        return
    ips = [p.get("ip") if isinstance(p, Mapping) else p for p in status.get("podIPs") or []]
    if not ips and status.get("podIP"):
        ips = [status["podIP"]]
    families = []
    for i, ip in enumerate(ips):
        try:
            families.append(ipaddress.ip_address(str(ip)).version)
        except ValueError:
            errs.invalid(
                f"status.podIPs[{i}]",
                ip,
                "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
            )
    if len(families) == len(ips) > 1 and (len(ips) > 2 or families[0] == families[1]):
        errs.invalid("status.podIPs", ips, "may specify no more than one IP for each IP family")


def validate_object(rtype: ResourceType, obj: Mapping[str, Any]) -> list[StatusCause]:
    """All the causes that make ``obj`` invalid for ``rtype`` (empty when valid)."""
    errs = Errors()
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        errs.required("metadata")
        return errs.causes
    validate_metadata(errs, rtype, meta)
    kind = rtype.kind if not rtype.custom else ""
    spec = obj.get("spec")
    if kind == "Pod":
        validate_pod_spec(errs, spec, "spec")
        _pod_ips(errs, obj.get("status"))
    elif kind in ("Deployment", "ReplicaSet", "StatefulSet"):
        if not isinstance(spec, dict):
            errs.required("spec")
        else:
            _replicas(errs, spec)
            _validate_template(errs, spec, require_always=kind != "ReplicaSet")
    elif kind == "DaemonSet":
        if not isinstance(spec, dict):
            errs.required("spec")
        else:
            _validate_template(errs, spec, require_always=True)
    elif kind == "ConfigMap":
        _config_data(errs, obj, check_base64=False)
    elif kind == "Secret":
        _validate_secret(errs, obj)
    elif kind == "Service":
        _validate_service(errs, obj)
    elif kind == "Lease":
        _validate_lease(errs, obj)
    return errs.causes


def validate_update(
    rtype: ResourceType, new: Mapping[str, Any], old: Mapping[str, Any]
) -> list[StatusCause]:
    """Rules that compare an update with the stored object (immutable fields)."""
    errs = Errors()
    kind = rtype.kind if not rtype.custom else ""
    new_meta, old_meta = new.get("metadata") or {}, old.get("metadata") or {}
    if old_meta.get("deletionTimestamp"):
        added = set(new_meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
        if added:
            errs.forbidden(
                "metadata.finalizers",
                f"no new finalizers can be added if the object is being deleted, found new "
                f"finalizers {sorted(added)}",
            )
    if kind == "Pod":
        _pod_update(errs, new.get("spec") or {}, old.get("spec") or {})
    elif kind in ("Deployment", "DaemonSet", "ReplicaSet", "StatefulSet"):
        if (new.get("spec") or {}).get("selector") != (old.get("spec") or {}).get("selector"):
            errs.invalid(
                "spec.selector", (new.get("spec") or {}).get("selector"), "field is immutable"
            )
    elif kind in ("ConfigMap", "Secret"):
        if old.get("immutable") is True:
            for field in ("data", "binaryData"):
                if new.get(field) != old.get(field):
                    errs.forbidden(field, "field is immutable when `immutable` is set")
            if new.get("immutable") is not True:
                errs.forbidden("immutable", "field is immutable when `immutable` is set")
        if kind == "Secret" and new.get("type") != old.get("type"):
            errs.invalid("type", new.get("type"), "field is immutable")
    elif kind == "CustomResourceDefinition":
        # What decides where and how its objects are stored cannot change once it is
        # established (here: from its creation), as kube-apiserver's CRD validation.
        new_spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
        for field in ("group", "scope"):
            if new_spec.get(field) != old_spec.get(field):
                errs.invalid(f"spec.{field}", new_spec.get(field), "field is immutable")
        new_names, old_names = new_spec.get("names") or {}, old_spec.get("names") or {}
        for field in ("plural", "kind"):
            if new_names.get(field) != old_names.get(field):
                errs.invalid(f"spec.names.{field}", new_names.get(field), "field is immutable")
    elif kind == "Service":
        new_ip = (new.get("spec") or {}).get("clusterIP")
        old_ip = (old.get("spec") or {}).get("clusterIP")
        if old_ip and new_ip != old_ip:
            errs.invalid("spec.clusterIP", new_ip, "field is immutable")
    return errs.causes


def _pod_update(errs: Errors, new: Mapping[str, Any], old: Mapping[str, Any]) -> None:
    """A pod's spec may change only in images, activeDeadlineSeconds and added
    tolerations (ValidatePodUpdate)."""

    def mutable_cleared(spec: Mapping[str, Any]) -> dict[str, Any]:
        out = json.loads(json.dumps(spec))
        for field in ("containers", "initContainers"):
            for c in out.get(field) or []:
                if isinstance(c, dict):
                    c.pop("image", None)
        out.pop("activeDeadlineSeconds", None)
        out.pop("tolerations", None)
        return out

    if mutable_cleared(new) != mutable_cleared(old):
        errs.forbidden(
            "spec",
            "pod updates may not change fields other than `spec.containers[*].image`, "
            "`spec.initContainers[*].image`, `spec.activeDeadlineSeconds` or "
            "`spec.tolerations` (only additions to existing tolerations)",
        )
    old_tol = old.get("tolerations") or []
    new_tol = new.get("tolerations") or []
    if any(t not in new_tol for t in old_tol):
        errs.forbidden(
            "spec.tolerations",
            "existing toleration can not be modified except its tolerationSeconds",
        )
