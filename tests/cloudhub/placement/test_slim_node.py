"""The placement controller's Node cache keeps only what placement reads (slim_node)."""

from __future__ import annotations

import copy
import json

import pytest

from cloudhub.placement.errors import InvalidObject
from cloudhub.placement.nodes import offline_since, parse_node, slim_node

NOW = 1_800_000_000.0


def _stamp(t: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def full_node(ready: str = "True", beat: float = NOW - 5, **status: object) -> dict:
    """A Node as the API serves an edge node: five conditions, nodeInfo, images, ..."""
    conditions = [
        {
            "type": t,
            "status": "False",
            "reason": f"Kubelet{t}",
            "message": f"kubelet has no {t}",
            "lastHeartbeatTime": _stamp(beat),
            "lastTransitionTime": _stamp(beat - 3600),
        }
        for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")
    ]
    conditions.append(
        {
            "type": "Ready",
            "status": ready,
            "reason": "EdgeSessionUp",
            "message": "the node's session to the hub is up",
            "lastHeartbeatTime": _stamp(beat),
            "lastTransitionTime": _stamp(beat - 60),
        }
    )
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "edge-1",
            "uid": "0b7c",
            "resourceVersion": "42",
            "creationTimestamp": _stamp(NOW - 86400),
            "labels": {"node-role.kubernetes.io/edge": "", "site": "a", "zone": "z1"},
            "annotations": {"edgefleet.io/facts": "d" * 64, "edgefleet.io/transport": "quic"},
            "managedFields": [{"manager": "cloudhub", "fieldsV1": {"f:status": {}}}],
        },
        "spec": {
            "taints": [{"key": "dedicated", "value": "cam", "effect": "NoSchedule"}],
            "unschedulable": True,
            "podCIDR": "10.0.0.0/24",
        },
        "status": {
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "allocatable": {"cpu": "3800m", "memory": "7Gi", "pods": "100", "x.io/gpu": "1"},
            "conditions": conditions,
            "addresses": [{"type": "InternalIP", "address": "10.1.2.3"}],
            "nodeInfo": {"kernelVersion": "6.1", "osImage": "Debian 12", "machineID": "m" * 32},
            "images": [{"names": [f"img{i}:1"], "sizeBytes": i} for i in range(20)],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            **status,
        },
    }


@pytest.mark.parametrize(
    ("ready", "beat"),
    [("True", NOW - 5), ("True", NOW - 300), ("Unknown", NOW - 60), ("False", NOW - 10)],
)
def test_placement_reads_the_same_of_a_slim_node(ready: str, beat: float) -> None:
    node = full_node(ready, beat)
    slim = slim_node(copy.deepcopy(node))
    assert parse_node(slim) == parse_node(node)
    for now in (NOW, NOW + 30, NOW + 3600):
        assert offline_since(slim, now) == offline_since(node, now)


def test_slim_node_drops_what_placement_does_not_read() -> None:
    node = full_node()
    slim = slim_node(copy.deepcopy(node))
    assert set(slim["metadata"]) == {
        "name",
        "uid",
        "resourceVersion",
        "labels",
        "creationTimestamp",
    }
    assert set(slim["spec"]) == {"taints", "unschedulable"}
    assert set(slim["status"]) == {"allocatable", "conditions"}
    assert [c["type"] for c in slim["status"]["conditions"]] == ["Ready"]
    assert set(slim["status"]["conditions"][0]) == {
        "type",
        "status",
        "lastHeartbeatTime",
        "lastTransitionTime",
    }
    assert len(json.dumps(slim)) * 4 < len(json.dumps(node))


def test_capacity_is_kept_when_there_is_no_allocatable() -> None:
    node = full_node()
    del node["status"]["allocatable"]
    slim = slim_node(copy.deepcopy(node))
    assert slim["status"]["capacity"] == node["status"]["capacity"]
    assert parse_node(slim) == parse_node(node)


def test_a_node_without_ready_is_offline_since_creation_either_way() -> None:
    node = full_node()
    node["status"]["conditions"] = [c for c in node["status"]["conditions"] if c["type"] != "Ready"]
    slim = slim_node(copy.deepcopy(node))
    assert offline_since(slim, NOW) == offline_since(node, NOW) == NOW - 86400


def test_a_malformed_node_is_still_refused_with_its_reason() -> None:
    node = full_node()
    node["metadata"]["labels"] = ["not", "a", "map"]
    with pytest.raises(InvalidObject, match=r"metadata\.labels is not a map"):
        parse_node(slim_node(node))
    nameless = full_node()
    del nameless["metadata"]["name"]
    with pytest.raises(InvalidObject, match=r"metadata\.name is missing"):
        parse_node(slim_node(nameless))
