"""Merging an edge's pod status into the API's, as kubelet's status manager does."""

from __future__ import annotations

from cloudhub.pods.status import merge_status


def test_edge_owned_fields_replace_others_are_kept() -> None:
    current = {
        "phase": "Pending",
        "nominatedNodeName": "kept",
        "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "False"},
            {"type": "example.com/gate", "status": "True"},
        ],
    }
    reported = {
        "phase": "Running",
        "hostIP": "10.0.0.1",
        "podIP": "10.1.0.5",
        "startTime": "2024-01-01T00:00:00Z",
        "containerStatuses": [{"name": "app", "ready": True, "restartCount": 2}],
        "conditions": [{"type": "Ready", "status": "True"}],
        "nominatedNodeName": "ignored",
    }
    merged = merge_status(current, reported)
    assert merged["phase"] == "Running"
    assert merged["hostIP"] == "10.0.0.1" and merged["podIP"] == "10.1.0.5"
    assert merged["containerStatuses"][0]["restartCount"] == 2
    assert merged["nominatedNodeName"] == "kept"
    assert {c["type"]: c["status"] for c in merged["conditions"]} == {
        "PodScheduled": "True",
        "example.com/gate": "True",
        "Ready": "True",
    }
    assert current["phase"] == "Pending"  # inputs untouched


def test_a_terminal_phase_never_goes_back() -> None:
    merged = merge_status({"phase": "Succeeded"}, {"phase": "Running", "message": "late"})
    assert merged["phase"] == "Succeeded" and merged["message"] == "late"
    assert merge_status(None, {"phase": "Failed"})["phase"] == "Failed"
