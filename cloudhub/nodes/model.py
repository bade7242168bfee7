"""The Node and Lease objects of an edge node, built from its hello (pure functions).

What kubelet registers, the hub registers for an edge node from the hello's ``node_info``:

- labels: the agent's labels, ``node-role.kubernetes.io/edge=""``, and the well-known
  ``kubernetes.io/hostname``, ``kubernetes.io/os`` and ``kubernetes.io/arch``;
- ``status.capacity`` and ``status.allocatable`` (cpu, memory, pods, ephemeral-storage
  and any extended resource the agent reports; allocatable defaults to capacity);
- ``status.nodeInfo`` (OS, architecture, kernel, container runtime; ``kubeletVersion``
  names the agent release, which is what ``kubectl get nodes`` shows as VERSION);
- ``status.addresses`` (plus a ``Hostname`` address);
- conditions: ``Ready`` and the pressure conditions, as kubelet reports them.

Malformed parts of ``node_info`` (a label that is not a string, a quantity that is a list)
are dropped with a note in the returned list of problems, never raised on: the rest of
the node still registers, and the API's own validation has the last word.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from cloudhub.kube.times import micro_time, parse_time, rfc3339
from protocol.messages import Hello

__all__ = [
    "EDGE_ROLE_LABEL",
    "PRESSURE_CONDITIONS",
    "NodeFacts",
    "build_lease",
    "build_node",
    "is_edge_node",
    "node_facts",
    "node_metadata",
    "node_status",
    "ready_conditions",
    "set_conditions",
    "slim_node",
    "unknown_conditions",
    "up_to_date",
]

EDGE_ROLE_LABEL = "node-role.kubernetes.io/edge"
AGENT_VERSION_ANNOTATION = "edgefleet.io/agent-version"
TRANSPORT_ANNOTATION = "edgefleet.io/transport"
FACTS_ANNOTATION = "edgefleet.io/node-facts"
"""A digest of what the agent reported last: a reconnect that reports the same facts over
the same transport to a Node that is still Ready needs no write at all."""
PRESSURE_CONDITIONS = ("MemoryPressure", "DiskPressure", "PIDPressure")
_NODE_INFO_KEYS = (
    "machineID",
    "systemUUID",
    "bootID",
    "kernelVersion",
    "osImage",
    "containerRuntimeVersion",
    "kubeletVersion",
    "kubeProxyVersion",
    "operatingSystem",
    "architecture",
)
_ADDRESS_TYPES = frozenset({"Hostname", "InternalIP", "ExternalIP", "InternalDNS", "ExternalDNS"})


def is_edge_node(node: dict) -> bool:
    """Whether a Node carries the edge role label (the hub manages only those)."""
    return EDGE_ROLE_LABEL in ((node.get("metadata") or {}).get("labels") or {})


class NodeFacts:
    """The registrable facts of one hello, checked; ``problems`` says what was dropped."""

    __slots__ = ("addresses", "allocatable", "capacity", "labels", "node_info", "problems")

    def digest(self) -> str:
        """A short stable digest of the facts (for :data:`FACTS_ANNOTATION`)."""
        text = json.dumps(
            [self.labels, self.capacity, self.allocatable, self.node_info, self.addresses],
            sort_keys=True,
        )
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def __init__(self) -> None:
        self.labels: dict[str, str] = {}
        self.capacity: dict[str, str] = {}
        self.allocatable: dict[str, str] = {}
        self.node_info: dict[str, str] = {}
        self.addresses: list[dict[str, str]] = []
        self.problems: list[str] = []


def _quantities(value: Any, what: str, facts: NodeFacts) -> dict[str, str]:
    out: dict[str, str] = {}
    if value is None:
        return out
    if not isinstance(value, dict):
        facts.problems.append(f"{what} is not a map")
        return out
    for name, quantity in value.items():
        if isinstance(quantity, bool) or not isinstance(quantity, (str, int, float)):
            facts.problems.append(f"{what}[{name!r}] is not a quantity")
            continue
        out[name] = str(quantity)
    return out


def node_facts(hello: Hello) -> NodeFacts:
    """Extract and check what a hello says about its node."""
    facts = NodeFacts()
    info = hello.node_info
    labels = info.get("labels")
    if isinstance(labels, dict):
        for key, value in labels.items():
            if isinstance(value, str):
                facts.labels[key] = value
            else:
                facts.problems.append(f"label {key!r} is not a string")
    elif labels is not None:
        facts.problems.append("labels is not a map")
    facts.capacity = _quantities(info.get("capacity"), "capacity", facts)
    facts.allocatable = _quantities(info.get("allocatable"), "allocatable", facts)
    if not facts.allocatable:
        facts.allocatable = dict(facts.capacity)
    raw_info = info.get("nodeInfo")
    node_info = {key: "" for key in _NODE_INFO_KEYS}
    if isinstance(raw_info, dict):
        for key, value in raw_info.items():
            if key in node_info and isinstance(value, str):
                node_info[key] = value
            elif key in node_info:
                facts.problems.append(f"nodeInfo.{key} is not a string")
    elif raw_info is not None:
        facts.problems.append("nodeInfo is not a map")
    if not node_info["kubeletVersion"]:
        node_info["kubeletVersion"] = f"edgeagent-{hello.agent_version}"
    facts.node_info = node_info
    addresses = info.get("addresses")
    if isinstance(addresses, list):
        for entry in addresses:
            if (
                isinstance(entry, dict)
                and entry.get("type") in _ADDRESS_TYPES
                and isinstance(entry.get("address"), str)
                and entry["address"]
            ):
                facts.addresses.append({"type": entry["type"], "address": entry["address"]})
            else:
                facts.problems.append(f"address {entry!r} is not {{type, address}}")
    elif addresses is not None:
        facts.problems.append("addresses is not a list")
    if not any(a["type"] == "Hostname" for a in facts.addresses):
        facts.addresses.append({"type": "Hostname", "address": hello.node_name})
    facts.labels[EDGE_ROLE_LABEL] = ""
    facts.labels["kubernetes.io/hostname"] = hello.node_name
    if node_info["operatingSystem"]:
        facts.labels["kubernetes.io/os"] = node_info["operatingSystem"]
    if node_info["architecture"]:
        facts.labels["kubernetes.io/arch"] = node_info["architecture"]
    return facts


def _condition(type_: str, status: str, reason: str, message: str, now: float) -> dict:
    stamp = rfc3339(now)
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": stamp,
    }


def set_conditions(current: list | None, wanted: list[dict]) -> list[dict]:
    """Replace conditions by type, keeping ``lastTransitionTime`` when the status did not
    change (as kubelet does) and every condition of another type as it was."""
    by_type = {c.get("type"): c for c in current or () if isinstance(c, dict)}
    out = []
    replaced = {c["type"] for c in wanted}
    for condition in current or ():
        if isinstance(condition, dict) and condition.get("type") not in replaced:
            out.append(condition)
    for condition in wanted:
        old = by_type.get(condition["type"])
        if old is not None and old.get("status") == condition["status"]:
            condition = {**condition, "lastTransitionTime": old.get("lastTransitionTime")}
        out.append(condition)
    return out


def ready_conditions(now: float, transport: str, extra: Sequence[dict] = ()) -> list[dict]:
    """Ready=True and no pressure: what a connected edge node reports.

    Args:
        now: the heartbeat time (s since the epoch).
        transport: the session's transport (named in Ready's message).
        extra: conditions that replace the defaults of the same type (the metrics
            extension's MemoryPressure and DiskPressure from the edge's figures).
    """
    wanted = [
        _condition(
            "Ready", "True", "EdgeAgentReady", f"edge agent connected over {transport}", now
        ),
        *(
            _condition(t, "False", f"EdgeAgentHasNo{t}", f"no {t} reported", now)
            for t in PRESSURE_CONDITIONS
        ),
    ]
    if not extra:
        return wanted
    replacing = {c["type"]: c for c in extra}
    return [replacing.pop(c["type"], c) for c in wanted] + list(replacing.values())


def unknown_conditions(current: list | None, now: float) -> list[dict]:
    """Every kubelet condition set to Unknown, heartbeats left as they were: what the node
    lifecycle controller writes once a node's lease has gone stale."""
    out = []
    stamp = rfc3339(now)
    seen = set()
    for condition in current or ():
        if not isinstance(condition, dict):
            continue
        type_ = condition.get("type")
        if type_ in ("Ready", *PRESSURE_CONDITIONS):
            seen.add(type_)
            if condition.get("status") != "Unknown":
                condition = {
                    **condition,
                    "status": "Unknown",
                    "reason": "NodeStatusUnknown",
                    "message": "Edge agent stopped posting node status.",
                    "lastTransitionTime": stamp,
                }
        out.append(condition)
    for type_ in ("Ready", *PRESSURE_CONDITIONS):
        if type_ not in seen:
            out.append(
                {
                    "type": type_,
                    "status": "Unknown",
                    "reason": "NodeStatusNeverUpdated",
                    "message": "Edge agent never posted node status.",
                    "lastHeartbeatTime": stamp,
                    "lastTransitionTime": stamp,
                }
            )
    return out


def build_node(
    name: str,
    facts: NodeFacts,
    hello: Hello,
    transport: str,
    now: float,
    extra: Sequence[dict] = (),
    kubelet: tuple[str, int] | None = None,
) -> dict:
    """The Node to create for a node's first session (``extra``: see
    :func:`ready_conditions`; ``kubelet``: see :func:`node_status`)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": dict(facts.labels),
            "annotations": {
                AGENT_VERSION_ANNOTATION: hello.agent_version,
                TRANSPORT_ANNOTATION: transport,
                FACTS_ANNOTATION: facts.digest(),
            },
        },
        "spec": {},
        "status": node_status({}, facts, transport, now, extra, kubelet),
    }


def node_metadata(node: dict, facts: NodeFacts, hello: Hello, transport: str) -> dict | None:
    """The Node with the session's labels and annotations applied, or ``None`` if nothing
    changes (labels the agent reports are added or updated; others are left alone)."""
    meta = node.get("metadata") or {}
    labels = dict(meta.get("labels") or {})
    annotations = dict(meta.get("annotations") or {})
    new_labels = {**labels, **facts.labels}
    new_annotations = {
        **annotations,
        AGENT_VERSION_ANNOTATION: hello.agent_version,
        TRANSPORT_ANNOTATION: transport,
        FACTS_ANNOTATION: facts.digest(),
    }
    if new_labels == labels and new_annotations == annotations:
        return None
    return {**node, "metadata": {**meta, "labels": new_labels, "annotations": new_annotations}}


def node_status(
    status: dict,
    facts: NodeFacts,
    transport: str,
    now: float,
    extra: Sequence[dict] = (),
    kubelet: tuple[str, int] | None = None,
) -> dict:
    """``status`` with the session's capacity, nodeInfo, addresses and Ready=True
    (``extra``: see :func:`ready_conditions`). ``kubelet``: the hub's kubelet API
    ``(address, port)``, published first as an ``InternalDNS`` address and as the kubelet
    port, so that the API server's logs/exec reach the hub (docs/streams.md)."""
    addresses = list(facts.addresses)
    endpoints = status.get("daemonEndpoints") or {"kubeletEndpoint": {"Port": 0}}
    if kubelet is not None:
        addresses = [
            {"type": "InternalDNS", "address": kubelet[0]},
            *(a for a in addresses if a["type"] != "InternalDNS"),
        ]
        endpoints = {"kubeletEndpoint": {"Port": kubelet[1]}}
    return {
        **status,
        "capacity": dict(facts.capacity),
        "allocatable": dict(facts.allocatable),
        "nodeInfo": dict(facts.node_info),
        "addresses": addresses,
        "conditions": set_conditions(
            status.get("conditions"), ready_conditions(now, transport, extra)
        ),
        "daemonEndpoints": endpoints,
    }


def slim_node(node: dict) -> dict:
    """What the hub's nodes informer keeps of a Node: identity, labels, our annotations,
    deletion, and the Ready condition's status and heartbeat (all that
    :func:`up_to_date` and the lifecycle read; every status write reads the Node afresh).

    The whole Node (five conditions, nodeInfo, capacity, images...) for 10,000 nodes
    would cost the hub more memory than their sessions.
    """
    meta = node.get("metadata") or {}
    slim = {
        k: meta[k]
        for k in ("name", "uid", "resourceVersion", "labels", "deletionTimestamp")
        if k in meta
    }
    slim["annotations"] = {
        k: v for k, v in (meta.get("annotations") or {}).items() if k.startswith("edgefleet.io/")
    }
    ready = [
        {k: c[k] for k in ("type", "status", "lastHeartbeatTime") if k in c}
        for c in (node.get("status") or {}).get("conditions") or ()
        if c.get("type") == "Ready"
    ]
    return {"apiVersion": "v1", "kind": "Node", "metadata": slim, "status": {"conditions": ready}}


def up_to_date(
    node: dict | None, facts: NodeFacts, transport: str, now: float, max_age: float
) -> bool:
    """Whether a (cached) Node already says what this session would write: same facts,
    same transport, an edge node, Ready=True with a heartbeat younger than ``max_age``
    seconds. Then a reconnect writes nothing (a fleet rejoining a restarted hub)."""
    if node is None or not is_edge_node(node):
        return False
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    if annotations.get(FACTS_ANNOTATION) != facts.digest():
        return False
    if annotations.get(TRANSPORT_ANNOTATION) != transport:
        return False
    for condition in (node.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Ready":
            beat = parse_time(condition.get("lastHeartbeatTime"))
            return condition.get("status") == "True" and beat is not None and now - beat < max_age
    return False


def build_lease(name: str, namespace: str, *, node_uid: str, duration: int, now: float) -> dict:
    """A node Lease as kubelet creates it: held by the node, owned by its Node (so that
    deleting the Node deletes the Lease)."""
    stamp = micro_time(now)
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if node_uid:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node_uid}
        ]
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": meta,
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": duration,
            "acquireTime": stamp,
            "renewTime": stamp,
        },
    }
