"""Defaulting and admission, as kube-apiserver 1.20 applies them on write.

kube-apiserver fills in omitted fields from the ``SetDefaults_*`` functions of
each API version, and its default admission plugins add more on create
(``DefaultTolerationSeconds`` gives pods 300 s tolerations for the
``not-ready``/``unreachable`` taints, ``Priority`` sets ``priority: 0``). Clients
— the hub, the edge agent, kubectl — read these fields, so the embedded server
fills them the same way. Only the fields of the kinds this server serves are
covered.
"""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Iterable
from typing import Any

__all__ = ["apply_create_admission", "apply_defaults", "fold_string_data", "pod_qos_class"]

DEFAULT_TOLERATION_SECONDS = 300  # DefaultTolerationSeconds admission plugin's default
SERVICE_CIDR = ipaddress.ip_network("10.96.0.0/12")  # kubeadm's default service range


def _container(c: dict[str, Any]) -> None:
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    if "imagePullPolicy" not in c and isinstance(c.get("image"), str):
        image = c["image"]
        tag = image.rsplit("/", 1)[-1]
        if "@" in image:
            c["imagePullPolicy"] = "IfNotPresent"
        elif ":" not in tag or tag.endswith(":latest"):
            c["imagePullPolicy"] = "Always"
        else:
            c["imagePullPolicy"] = "IfNotPresent"
    resources = c.setdefault("resources", {})
    if isinstance(resources, dict) and isinstance(resources.get("limits"), dict):
        # Requests default to the limits for the resources that set only a limit.
        requests = resources.setdefault("requests", {})
        if isinstance(requests, dict):
            for name, quantity in resources["limits"].items():
                requests.setdefault(name, quantity)
    for port in c.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
    for env in c.get("env") or []:
        if isinstance(env, dict):
            ref = (env.get("valueFrom") or {}).get("fieldRef")
            if isinstance(ref, dict):
                ref.setdefault("apiVersion", "v1")
    for probe_name in ("livenessProbe", "readinessProbe", "startupProbe"):
        probe = c.get(probe_name)
        if isinstance(probe, dict):
            probe.setdefault("timeoutSeconds", 1)
            probe.setdefault("periodSeconds", 10)
            probe.setdefault("successThreshold", 1)
            probe.setdefault("failureThreshold", 3)
            http = probe.get("httpGet")
            if isinstance(http, dict):
                http.setdefault("path", "/")
                http.setdefault("scheme", "HTTP")


def _pod_spec(spec: dict[str, Any]) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    for field in ("containers", "initContainers"):
        for c in spec.get(field) or []:
            if isinstance(c, dict):
                _container(c)
    for vol in spec.get("volumes") or []:
        if not isinstance(vol, dict):
            continue
        for source in ("configMap", "secret"):
            if isinstance(vol.get(source), dict):
                vol[source].setdefault("defaultMode", 0o644)
        if isinstance(vol.get("hostPath"), dict):
            vol["hostPath"].setdefault("type", "")


def _template(spec: dict[str, Any]) -> None:
    template = spec.get("template")
    if isinstance(template, dict) and isinstance(template.get("spec"), dict):
        _pod_spec(template["spec"])


def _service(obj: dict[str, Any], used_ips: Iterable[str]) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    for port in spec.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
            if "port" in port:
                port.setdefault("targetPort", port["port"])
    if spec["type"] in ("NodePort", "LoadBalancer"):
        spec.setdefault("externalTrafficPolicy", "Cluster")
    if spec["type"] == "ExternalName":
        return
    if not spec.get("clusterIP"):
        used = set(used_ips)
        for host in SERVICE_CIDR.hosts():
            if str(host) not in used and host != SERVICE_CIDR.network_address + 1:
                spec["clusterIP"] = str(host)
                break
    if spec["clusterIP"] != "None":
        spec.setdefault("clusterIPs", [spec["clusterIP"]])


def apply_defaults(kind: str, obj: dict[str, Any], used_ips: Iterable[str] = ()) -> None:
    """Fill omitted fields of a built-in object in place (SetDefaults_<Kind>)."""
    spec = obj.get("spec")
    if kind == "Pod" and isinstance(spec, dict):
        _pod_spec(spec)
        spec.setdefault("enableServiceLinks", True)  # SetDefaults_Pod, not templates
    elif kind == "Deployment" and isinstance(spec, dict):
        spec.setdefault("replicas", 1)
        spec.setdefault(
            "strategy",
            {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"},
            },
        )
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
        _template(spec)
    elif kind == "DaemonSet" and isinstance(spec, dict):
        spec.setdefault(
            "updateStrategy", {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}
        )
        spec.setdefault("revisionHistoryLimit", 10)
        _template(spec)
    elif kind == "ReplicaSet" and isinstance(spec, dict):
        spec.setdefault("replicas", 1)
        _template(spec)
    elif kind == "StatefulSet" and isinstance(spec, dict):
        spec.setdefault("replicas", 1)
        spec.setdefault("podManagementPolicy", "OrderedReady")
        spec.setdefault(
            "updateStrategy", {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}
        )
        spec.setdefault("revisionHistoryLimit", 10)
        _template(spec)
    elif kind == "Service":
        _service(obj, used_ips)
    elif kind == "Secret":
        if not obj.get("type"):
            obj["type"] = "Opaque"
    elif kind == "Node":
        status = obj.get("status")
        if isinstance(status, dict) and "capacity" in status and "allocatable" not in status:
            status["allocatable"] = dict(status["capacity"])  # SetDefaults_NodeStatus
    elif kind == "Namespace":
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        status = obj.setdefault("status", {})
        status.setdefault("phase", "Active")


def _tolerates(tolerations: list[Any], key: str) -> bool:
    for t in tolerations:
        if not isinstance(t, dict):
            continue
        effect = t.get("effect", "")
        if effect not in ("", "NoExecute"):
            continue
        if t.get("key") == key or (not t.get("key") and t.get("operator") == "Exists"):
            return True
    return False


def pod_qos_class(spec: dict[str, Any]) -> str:
    """Guaranteed, Burstable or BestEffort from the containers' requests and limits."""
    containers = [c for c in spec.get("containers") or [] if isinstance(c, dict)]
    any_set = False
    guaranteed = bool(containers)
    for c in containers:
        res = c.get("resources") or {}
        requests, limits = res.get("requests") or {}, res.get("limits") or {}
        if requests or limits:
            any_set = True
        for name in ("cpu", "memory"):
            if name not in limits:
                guaranteed = False
            elif name in requests and str(requests[name]) != str(limits[name]):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


#: Status of a new object as kube-apiserver returns it: Go writes the fields of an
#: empty status that have no omitempty.
INITIAL_STATUS: dict[str, dict[str, Any]] = {
    "Deployment": {},
    "DaemonSet": {
        "currentNumberScheduled": 0,
        "numberMisscheduled": 0,
        "desiredNumberScheduled": 0,
        "numberReady": 0,
    },
    "ReplicaSet": {"replicas": 0},
    "StatefulSet": {"replicas": 0},
    "PodDisruptionBudget": {
        "disruptionsAllowed": 0,
        "currentHealthy": 0,
        "desiredHealthy": 0,
        "expectedPods": 0,
    },
    "Ingress": {"loadBalancer": {}},
}
NOT_READY_TAINT = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}


def apply_create_admission(kind: str, obj: dict[str, Any]) -> None:
    """What the default admission plugins add to a new object, in place:
    ``TaintNodesByCondition`` (a new Node is tainted not-ready until the node
    lifecycle controller sees it Ready), ``DefaultTolerationSeconds`` and ``Priority``
    (pods)."""
    if kind == "Node":
        spec = obj.setdefault("spec", {})
        if isinstance(spec, dict):
            taints = spec.setdefault("taints", [])
            if isinstance(taints, list) and not any(
                isinstance(t, dict)
                and t.get("key") == NOT_READY_TAINT["key"]
                and t.get("effect") == "NoSchedule"
                for t in taints
            ):
                taints.append(dict(NOT_READY_TAINT))
        return
    if kind != "Pod":
        return
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    tolerations = spec.setdefault("tolerations", [])
    if isinstance(tolerations, list):
        for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
            if not _tolerates(tolerations, key):
                tolerations.append(
                    {
                        "key": key,
                        "operator": "Exists",
                        "effect": "NoExecute",
                        "tolerationSeconds": DEFAULT_TOLERATION_SECONDS,
                    }
                )
    spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")


def fold_string_data(kind: str, obj: dict[str, Any]) -> None:
    """Secret ``stringData`` is write-only: merged into ``data`` base64-encoded."""
    if kind != "Secret":
        return
    string_data = obj.pop("stringData", None)
    if isinstance(string_data, dict):
        data = obj.setdefault("data", {})
        if isinstance(data, dict):
            for key, value in string_data.items():
                data[key] = base64.b64encode(str(value).encode()).decode()
