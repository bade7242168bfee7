"""The Node and Lease built from a hello."""

from __future__ import annotations

from cloudhub.kube import parse_time
from cloudhub.nodes import model
from protocol.messages import Hello


def hello(node_info: dict) -> Hello:
    return Hello(1, 1, "edge-1", "0.3.0", node_info=node_info)


def test_facts_from_a_full_hello() -> None:
    facts = model.node_facts(
        hello(
            {
                "labels": {"site": "plant-a"},
                "capacity": {"cpu": "4", "memory": "8Gi", "pods": 110, "example.com/gpu": "1"},
                "nodeInfo": {
                    "operatingSystem": "linux",
                    "architecture": "arm64",
                    "kernelVersion": "6.1",
                },
                "addresses": [{"type": "InternalIP", "address": "10.0.0.7"}],
            }
        )
    )
    assert facts.problems == []
    assert facts.labels == {
        "site": "plant-a",
        model.EDGE_ROLE_LABEL: "",
        "kubernetes.io/hostname": "edge-1",
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "arm64",
    }
    assert facts.capacity["pods"] == "110" and facts.capacity["example.com/gpu"] == "1"
    assert facts.allocatable == facts.capacity  # defaults to capacity
    assert facts.node_info["kubeletVersion"] == "edgeagent-0.3.0"
    assert facts.node_info["machineID"] == ""  # every NodeSystemInfo key present
    assert facts.addresses == [
        {"type": "InternalIP", "address": "10.0.0.7"},
        {"type": "Hostname", "address": "edge-1"},
    ]


def test_malformed_parts_are_dropped_and_named() -> None:
    facts = model.node_facts(
        hello(
            {
                "labels": {"ok": "yes", "bad": 3},
                "capacity": {"cpu": ["4"], "memory": True},
                "nodeInfo": "linux",
                "addresses": [{"type": "Telepathy", "address": "x"}, "junk"],
            }
        )
    )
    assert facts.labels["ok"] == "yes" and "bad" not in facts.labels
    assert facts.capacity == {}
    assert len(facts.problems) == 6
    assert any("nodeInfo is not a map" in p for p in facts.problems)


def test_conditions_keep_transition_times_and_others() -> None:
    first = model.ready_conditions(1000.0, "quic")
    others = [{"type": "NetworkUnavailable", "status": "False"}]
    later = model.set_conditions(first + others, model.ready_conditions(2000.0, "quic"))
    ready = next(c for c in later if c["type"] == "Ready")
    assert parse_time(ready["lastHeartbeatTime"]) == 2000.0
    assert parse_time(ready["lastTransitionTime"]) == 1000.0  # still True: no transition
    assert any(c["type"] == "NetworkUnavailable" for c in later)
    unknown = model.unknown_conditions(later, 3000.0)
    ready = next(c for c in unknown if c["type"] == "Ready")
    assert ready["status"] == "Unknown" and ready["reason"] == "NodeStatusUnknown"
    assert parse_time(ready["lastHeartbeatTime"]) == 2000.0  # heartbeat left as it was
    assert parse_time(ready["lastTransitionTime"]) == 3000.0
    assert next(c for c in unknown if c["type"] == "NetworkUnavailable")["status"] == "False"


def test_lease_is_held_by_the_node_and_owned_by_its_node_object() -> None:
    lease = model.build_lease("edge-1", "kube-node-lease", node_uid="u-1", duration=40, now=5.5)
    assert lease["spec"]["holderIdentity"] == "edge-1"
    assert lease["spec"]["leaseDurationSeconds"] == 40
    assert lease["spec"]["renewTime"] == "1970-01-01T00:00:05.500000Z"
    assert lease["metadata"]["ownerReferences"][0] == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": "edge-1",
        "uid": "u-1",
    }


def test_metadata_update_only_when_something_changes() -> None:
    h = hello({"labels": {"site": "a"}})
    facts = model.node_facts(h)
    node = model.build_node("edge-1", facts, h, "quic", 0.0)
    assert model.node_metadata(node, facts, h, "quic") is None
    changed = model.node_metadata(node, facts, h, "websocket")
    assert changed["metadata"]["annotations"]["edgefleet.io/transport"] == "websocket"
    node["metadata"]["labels"]["set-by-admin"] = "x"
    kept = model.node_metadata(node, facts, h, "websocket")
    assert kept["metadata"]["labels"]["set-by-admin"] == "x"


def _full_node(now: float, transport: str = "quic") -> dict:
    info = {
        "labels": {"site": "plant-a"},
        "capacity": {"cpu": "4", "memory": "8Gi"},
        "nodeInfo": {"operatingSystem": "linux", "architecture": "arm64"},
        "addresses": [{"type": "InternalIP", "address": "10.0.0.7"}],
    }
    node = model.build_node("edge-1", model.node_facts(hello(info)), hello(info), transport, now)
    node["metadata"].update(uid="u-1", resourceVersion="7")
    node["metadata"]["annotations"]["example.com/other"] = "x" * 1000
    node["status"]["conditions"] = model.ready_conditions(now, transport)
    return node


def test_the_slim_cached_node_keeps_what_the_hub_reads_and_drops_the_rest() -> None:
    now = 1_700_000_000.0
    full = _full_node(now)
    slim = model.slim_node(full)
    assert slim["metadata"]["name"] == "edge-1" and slim["metadata"]["uid"] == "u-1"
    assert slim["metadata"]["labels"] == full["metadata"]["labels"]
    assert "example.com/other" not in slim["metadata"]["annotations"]
    assert model.FACTS_ANNOTATION in slim["metadata"]["annotations"]
    # only the Ready condition, and of it only what up_to_date reads
    assert [c["type"] for c in slim["status"]["conditions"]] == ["Ready"]
    assert set(slim["status"]["conditions"][0]) == {"type", "status", "lastHeartbeatTime"}
    assert "nodeInfo" not in slim["status"] and "capacity" not in slim["status"]


def test_up_to_date_says_the_same_of_the_slim_and_the_full_node() -> None:
    now = 1_700_000_000.0
    info = {
        "labels": {"site": "plant-a"},
        "capacity": {"cpu": "4", "memory": "8Gi"},
        "nodeInfo": {"operatingSystem": "linux", "architecture": "arm64"},
        "addresses": [{"type": "InternalIP", "address": "10.0.0.7"}],
    }
    facts = model.node_facts(hello(info))
    fresh, stale = _full_node(now), _full_node(now - 600)
    unknown = _full_node(now)
    unknown["status"]["conditions"] = model.unknown_conditions(unknown["status"]["conditions"], now)
    cases = [
        (fresh, "quic", True),
        (fresh, "websocket", False),  # another transport: rewrite the annotation
        (stale, "quic", False),  # heartbeat older than max_age
        (unknown, "quic", False),  # Ready is not True
    ]
    for node, transport, expected in cases:
        full_verdict = model.up_to_date(node, facts, transport, now, 300)
        assert full_verdict is expected
        assert model.up_to_date(model.slim_node(node), facts, transport, now, 300) is expected
