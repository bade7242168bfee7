"""The failing-replica back-off on its own, with a clock and a draw the test controls."""

from __future__ import annotations

from cloudhub.placement.failures import FailureBackoff, failure_of, owner_key
from cloudhub.placement.model import LABEL_TEMPLATE_HASH, PlacementKey

OWNER = PlacementKey("DaemonSet", "kubeedge", "edgemesh-agent")


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def pod(uid: str, *, phase: str = "Failed", node: str = "edge-0", template: str = "h1") -> dict:
    return {
        "metadata": {
            "uid": uid,
            "name": f"p-{uid}",
            "namespace": "kubeedge",
            "labels": {LABEL_TEMPLATE_HASH: template},
            "ownerReferences": [
                {"kind": "DaemonSet", "name": "edgemesh-agent", "uid": "d1", "controller": True}
            ],
        },
        "spec": {"nodeName": node},
        "status": {
            "phase": phase,
            "reason": "UnsupportedPodSpec",
            "message": "securityContext",
            "conditions": [{"type": "Ready", "status": "True"}] if phase == "Running" else [],
        },
    }


def test_each_failure_doubles_the_wait_up_to_the_cap_with_equal_jitter() -> None:
    clock = Clock()
    backoff = FailureBackoff(base_s=1.0, cap_s=8.0, uniform=lambda a, b: a, clock=clock)
    waits = []
    for n in range(6):
        assert backoff.failed(pod(f"u{n}")) is not None
        waits.append(backoff.wait(OWNER, "edge-0", "h1"))
    assert waits == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]  # half the ceiling: 1, 2, 4, 8, 8, 8
    assert backoff.failed(pod("u5")) is None  # the same pod again: counted once
    clock.now += 4.0
    assert backoff.wait(OWNER, "edge-0", "h1") == 0.0
    (failure,) = backoff.failing(OWNER)
    assert (failure.node, failure.count, failure.reason) == ("edge-0", 6, "UnsupportedPodSpec")


def test_other_nodes_templates_recovery_and_unmanaged_pods() -> None:
    backoff = FailureBackoff(uniform=lambda a, b: b, clock=Clock())
    backoff.failed(pod("a"))
    assert backoff.wait(OWNER, "edge-1", "h1") == 0.0  # another node is tried at once
    assert backoff.wait(OWNER, "edge-0", "h2") == 0.0  # a new template is a new try
    assert backoff.recovered(pod("b", phase="Running"))  # a Ready replica resets it
    assert backoff.wait(OWNER, "edge-0", "h1") == 0.0 and backoff.failing(OWNER) == []
    unmanaged = pod("c")
    unmanaged["metadata"]["ownerReferences"] = []
    assert owner_key(unmanaged) is None and backoff.failed(unmanaged) is None
    assert failure_of(pod("d", phase="Running")) is None
    backoff.failed(pod("e", template="h1"))
    backoff.failed(pod("f", template="h2"))
    backoff.forget(OWNER, keep_template="h2")
    assert [f.count for f in backoff.failing(OWNER)] == [1]


def test_a_crash_without_a_pod_reason_names_the_container() -> None:
    crashed = pod("g")
    crashed["status"] = {
        "phase": "Failed",
        "containerStatuses": [
            {"name": "app", "state": {"terminated": {"reason": "Error", "exitCode": 3}}}
        ],
    }
    assert failure_of(crashed) == ("Error", "container app exited 3")
