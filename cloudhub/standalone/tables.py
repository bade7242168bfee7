"""Server-side printing: objects as ``meta.k8s.io/v1`` Tables for ``kubectl get``.

kubectl asks for ``application/json;as=Table;g=meta.k8s.io;v=v1`` and prints
the columns the server chooses. The columns of the built-in kinds follow
kube-apiserver's printers (NAME/READY/STATUS/RESTARTS/AGE for pods and so on);
custom resources use their CRD's ``additionalPrinterColumns`` (simple JSONPath)
plus AGE; anything else gets NAME and CREATED AT.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Callable, Mapping
from typing import Any

from cloudhub.standalone.resources import ResourceType

__all__ = ["human_duration", "table"]

Column = tuple[str, str, int, Callable[[Mapping[str, Any]], Any]]  # name, type, priority, getter


def human_duration(seconds: float) -> str:
    """A short age such as ``42s``, ``5m``, ``3h10m``, ``4d`` (as kubectl prints ages)."""
    s = int(seconds)
    if s < 0:
        return "<invalid>"
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = m // 60
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    d = h // 24
    if h < 24 * 8:
        return f"{d}d{h % 24}h" if h % 24 else f"{d}d"
    if d < 365 * 2:
        return f"{d}d"
    y = d // 365
    if y < 8:
        return f"{y}y{d % 365}d" if d % 365 else f"{y}y"
    return f"{y}y"


def _age_of(stamp: Any) -> str:
    if not isinstance(stamp, str) or not stamp:
        return "<unknown>"
    try:
        then = calendar.timegm(
            time.strptime(stamp.replace("Z", "").split(".")[0], "%Y-%m-%dT%H:%M:%S")
        )
    except ValueError:
        return "<invalid>"
    return human_duration(time.time() - then)


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _get(obj: Any, *path: str, default: Any = None) -> Any:
    for part in path:
        if not isinstance(obj, Mapping):
            return default
        obj = obj.get(part)
        if obj is None:
            return default
    return obj


def _name(obj: Mapping[str, Any]) -> str:
    return _meta(obj).get("name", "")


def _age(obj: Mapping[str, Any]) -> str:
    return _age_of(_meta(obj).get("creationTimestamp"))


def _pod_status(obj: Mapping[str, Any]) -> str:
    status = obj.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Unknown"
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        if "waiting" in state and state["waiting"].get("reason"):
            reason = state["waiting"]["reason"]
        elif "terminated" in state and state["terminated"].get("reason"):
            reason = state["terminated"]["reason"]
    if _meta(obj).get("deletionTimestamp"):
        reason = "Terminating"
    return reason


def _pod_ready(obj: Mapping[str, Any]) -> str:
    total = len(_get(obj, "spec", "containers", default=[]))
    ready = sum(1 for cs in _get(obj, "status", "containerStatuses", default=[]) if cs.get("ready"))
    return f"{ready}/{total}"


def _pod_restarts(obj: Mapping[str, Any]) -> int:
    return sum(
        int(cs.get("restartCount") or 0)
        for cs in _get(obj, "status", "containerStatuses", default=[])
    )


def _node_status(obj: Mapping[str, Any]) -> str:
    ready = "Unknown"
    for cond in _get(obj, "status", "conditions", default=[]):
        if cond.get("type") == "Ready":
            ready = "Ready" if cond.get("status") == "True" else "NotReady"
    if _get(obj, "spec", "unschedulable"):
        ready += ",SchedulingDisabled"
    return ready


def _node_roles(obj: Mapping[str, Any]) -> str:
    roles = sorted(
        key.split("/", 1)[1]
        for key in (_meta(obj).get("labels") or {})
        if key.startswith("node-role.kubernetes.io/")
    )
    return ",".join(roles) or "<none>"


def _address(obj: Mapping[str, Any], kind: str) -> str:
    for addr in _get(obj, "status", "addresses", default=[]):
        if addr.get("type") == kind:
            return addr.get("address", "")
    return "<none>"


def _ports(obj: Mapping[str, Any]) -> str:
    out = []
    for p in _get(obj, "spec", "ports", default=[]):
        text = f"{p.get('port')}"
        if p.get("nodePort"):
            text += f":{p['nodePort']}"
        out.append(f"{text}/{p.get('protocol', 'TCP')}")
    return ",".join(out) or "<none>"


def _selector(obj: Mapping[str, Any], *path: str) -> str:
    sel = _get(obj, *path, default={}) or {}
    if "matchLabels" in sel or "matchExpressions" in sel:
        sel = sel.get("matchLabels") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(sel.items())) or "<none>"


def _containers(obj: Mapping[str, Any], field: str) -> str:
    return ",".join(
        str(c.get(field, ""))
        for c in _get(obj, "spec", "template", "spec", "containers", default=[])
    )


def _count(obj: Mapping[str, Any], *fields: str) -> int:
    return sum(len(obj.get(f) or {}) for f in fields)


def _status_int(field: str) -> Callable[[Mapping[str, Any]], int]:
    return lambda o: int(_get(o, "status", field, default=0) or 0)


_NAME: Column = ("Name", "string", 0, _name)
_AGE: Column = ("Age", "string", 0, _age)

_COLUMNS: dict[str, list[Column]] = {
    "Pod": [
        _NAME,
        ("Ready", "string", 0, _pod_ready),
        ("Status", "string", 0, _pod_status),
        ("Restarts", "integer", 0, _pod_restarts),
        _AGE,
        ("IP", "string", 1, lambda o: _get(o, "status", "podIP", default="<none>")),
        ("Node", "string", 1, lambda o: _get(o, "spec", "nodeName", default="<none>")),
        (
            "Nominated Node",
            "string",
            1,
            lambda o: _get(o, "status", "nominatedNodeName", default="<none>"),
        ),
        ("Readiness Gates", "string", 1, lambda o: "<none>"),
    ],
    "Node": [
        _NAME,
        ("Status", "string", 0, _node_status),
        ("Roles", "string", 0, _node_roles),
        _AGE,
        (
            "Version",
            "string",
            0,
            lambda o: _get(o, "status", "nodeInfo", "kubeletVersion", default=""),
        ),
        ("Internal-IP", "string", 1, lambda o: _address(o, "InternalIP")),
        ("External-IP", "string", 1, lambda o: _address(o, "ExternalIP")),
        ("OS-Image", "string", 1, lambda o: _get(o, "status", "nodeInfo", "osImage", default="")),
        (
            "Kernel-Version",
            "string",
            1,
            lambda o: _get(o, "status", "nodeInfo", "kernelVersion", default=""),
        ),
        (
            "Container-Runtime",
            "string",
            1,
            lambda o: _get(o, "status", "nodeInfo", "containerRuntimeVersion", default=""),
        ),
    ],
    "Namespace": [
        _NAME,
        ("Status", "string", 0, lambda o: _get(o, "status", "phase", default="")),
        _AGE,
    ],
    "ConfigMap": [_NAME, ("Data", "integer", 0, lambda o: _count(o, "data", "binaryData")), _AGE],
    "Secret": [
        _NAME,
        ("Type", "string", 0, lambda o: o.get("type", "")),
        ("Data", "integer", 0, lambda o: _count(o, "data")),
        _AGE,
    ],
    "Service": [
        _NAME,
        ("Type", "string", 0, lambda o: _get(o, "spec", "type", default="")),
        ("Cluster-IP", "string", 0, lambda o: _get(o, "spec", "clusterIP", default="<none>")),
        (
            "External-IP",
            "string",
            0,
            lambda o: ",".join(_get(o, "spec", "externalIPs", default=[])) or "<none>",
        ),
        ("Port(s)", "string", 0, _ports),
        _AGE,
        ("Selector", "string", 1, lambda o: _selector(o, "spec", "selector")),
    ],
    "ServiceAccount": [
        _NAME,
        ("Secrets", "string", 0, lambda o: len(o.get("secrets") or [])),
        _AGE,
    ],
    "Endpoints": [
        _NAME,
        (
            "Endpoints",
            "string",
            0,
            lambda o: (
                ",".join(
                    f"{a.get('ip')}:{p.get('port')}"
                    for s in o.get("subsets") or []
                    for a in s.get("addresses") or []
                    for p in s.get("ports") or [{}]
                )
                or "<none>"
            ),
        ),
        _AGE,
    ],
    "Deployment": [
        _NAME,
        (
            "Ready",
            "string",
            0,
            lambda o: f"{_status_int('readyReplicas')(o)}/{_get(o, 'spec', 'replicas', default=0)}",
        ),
        ("Up-to-date", "integer", 0, _status_int("updatedReplicas")),
        ("Available", "integer", 0, _status_int("availableReplicas")),
        _AGE,
        ("Containers", "string", 1, lambda o: _containers(o, "name")),
        ("Images", "string", 1, lambda o: _containers(o, "image")),
        ("Selector", "string", 1, lambda o: _selector(o, "spec", "selector")),
    ],
    "DaemonSet": [
        _NAME,
        ("Desired", "integer", 0, _status_int("desiredNumberScheduled")),
        ("Current", "integer", 0, _status_int("currentNumberScheduled")),
        ("Ready", "integer", 0, _status_int("numberReady")),
        ("Up-to-date", "integer", 0, _status_int("updatedNumberScheduled")),
        ("Available", "integer", 0, _status_int("numberAvailable")),
        (
            "Node Selector",
            "string",
            0,
            lambda o: _selector(o, "spec", "template", "spec", "nodeSelector"),
        ),
        _AGE,
        ("Containers", "string", 1, lambda o: _containers(o, "name")),
        ("Images", "string", 1, lambda o: _containers(o, "image")),
    ],
    "ReplicaSet": [
        _NAME,
        ("Desired", "integer", 0, lambda o: _get(o, "spec", "replicas", default=0)),
        ("Current", "integer", 0, _status_int("replicas")),
        ("Ready", "integer", 0, _status_int("readyReplicas")),
        _AGE,
    ],
    "StatefulSet": [
        _NAME,
        (
            "Ready",
            "string",
            0,
            lambda o: f"{_status_int('readyReplicas')(o)}/{_get(o, 'spec', 'replicas', default=0)}",
        ),
        _AGE,
    ],
    "Lease": [
        _NAME,
        ("Holder", "string", 0, lambda o: _get(o, "spec", "holderIdentity", default="")),
        _AGE,
    ],
    "Event": [
        (
            "Last Seen",
            "string",
            0,
            lambda o: _age_of(
                o.get("lastTimestamp") or o.get("eventTime") or _meta(o).get("creationTimestamp")
            ),
        ),
        ("Type", "string", 0, lambda o: o.get("type", "")),
        ("Reason", "string", 0, lambda o: o.get("reason", "")),
        (
            "Object",
            "string",
            0,
            lambda o: "{}/{}".format(
                str(_get(o, "involvedObject", "kind", default="")).lower(),
                _get(o, "involvedObject", "name", default=""),
            ),
        ),
        ("Message", "string", 0, lambda o: str(o.get("message", "")).strip()),
    ],
}


def _jsonpath(obj: Any, path: str) -> Any:
    """The simple JSONPath of printer columns (``.spec.replicas``, ``.status.items[0].type``)."""
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1]
    path = path.lstrip("$")
    cur = obj
    for part in [p for p in path.split(".") if p]:
        index = None
        if "[" in part and part.endswith("]"):
            part, _, rest = part.partition("[")
            try:
                index = int(rest[:-1])
            except ValueError:
                return None
        if part:
            if not isinstance(cur, Mapping):
                return None
            cur = cur.get(part)
        if index is not None:
            if not isinstance(cur, list) or not -len(cur) <= index < len(cur):
                return None
            cur = cur[index]
    return cur


def _custom_columns(rtype: ResourceType) -> list[Column]:
    columns: list[Column] = [_NAME]
    printer = list(rtype.printer_columns)
    if not printer:
        printer = [{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]
    for col in printer:
        path = str(col.get("jsonPath", ""))
        kind = str(col.get("type", "string"))

        def getter(o: Mapping[str, Any], path: str = path, kind: str = kind) -> Any:
            value = _jsonpath(o, path)
            if kind == "date":
                return _age_of(value)
            if value is None:
                return None
            if isinstance(value, (dict, list)):
                import json

                return json.dumps(value, separators=(",", ":"))
            return value

        columns.append(
            (
                str(col.get("name", path)),
                "string" if kind == "date" else kind,
                int(col.get("priority", 0) or 0),
                getter,
            )
        )
    return columns


def columns_for(rtype: ResourceType) -> list[Column]:
    """The table columns of ``rtype``."""
    if rtype.custom:
        return _custom_columns(rtype)
    found = _COLUMNS.get(rtype.kind)
    if found:
        return found
    if rtype.kind == "CustomResourceDefinition":
        return [_NAME, ("Created At", "date", 0, lambda o: _meta(o).get("creationTimestamp"))]
    return [_NAME, ("Created At", "date", 0, lambda o: _meta(o).get("creationTimestamp"))]


def table(
    rtype: ResourceType,
    objects: list[Mapping[str, Any]],
    *,
    resource_version: str,
    include_object: str = "Metadata",
    headers: bool = True,
    continue_token: str = "",
    remaining: int | None = None,
) -> dict[str, Any]:
    """A ``meta.k8s.io/v1`` Table of ``objects``.

    Args:
        include_object: ``None``, ``Metadata`` (PartialObjectMetadata, the default)
            or ``Object``, as the ``includeObject`` query parameter says.
        headers: False for watch events after the first (no columnDefinitions).
    """
    columns = columns_for(rtype)
    rows = []
    for obj in objects:
        row: dict[str, Any] = {"cells": [getter(obj) for _, _, _, getter in columns]}
        if include_object == "Object":
            row["object"] = obj
        elif include_object != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj.get("metadata") or {},
            }
        rows.append(row)
    meta: dict[str, Any] = {"resourceVersion": resource_version}
    if continue_token:
        meta["continue"] = continue_token
    if remaining is not None:
        meta["remainingItemCount"] = remaining
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": [
            {
                "name": name,
                "type": kind,
                "format": "name" if name == "Name" else "",
                "description": "",
                "priority": priority,
            }
            for name, kind, priority, _ in columns
        ]
        if headers
        else [],
        "rows": rows,
    }
