"""MemoryPressure / DiskPressure from thresholds, as kubelet writes the conditions."""

from __future__ import annotations

import pytest

from cloudhub.metrics import (
    EdgeMetricsStore,
    NodeUsage,
    PressureThresholds,
    evaluate_pressure,
    node_usage,
)
from protocol.metrics_codec import Metric
from tests.cloudhub.metrics.helpers import body, sample

MI = 1024 * 1024
GI = 1024 * MI
NOW = 1_700_000_000.0
T = PressureThresholds
KEYS = {"type", "status", "lastHeartbeatTime", "lastTransitionTime", "reason", "message"}


def usage(mem_avail=2 * GI, mem_cap=4 * GI, state=(50 * GI, 100 * GI), root=(50 * GI, 100 * GI)):
    return NodeUsage(mem_avail, mem_cap, {"state": state, "root": root})


def by_type(state) -> dict[str, dict]:
    return {c["type"]: c for c in state.conditions}


def test_healthy_node() -> None:
    state = evaluate_pressure(usage(), PressureThresholds(), NOW)
    conditions = by_type(state)
    assert [c["type"] for c in state.conditions] == ["MemoryPressure", "DiskPressure"]
    for c in state.conditions:
        assert set(c) == KEYS
        assert c["status"] == "False"
        assert c["lastHeartbeatTime"] == "2023-11-14T22:13:20Z"
    assert conditions["MemoryPressure"]["reason"] == "KubeletHasSufficientMemory"
    assert conditions["DiskPressure"]["reason"] == "KubeletHasNoDiskPressure"


@pytest.mark.parametrize(
    ("node", "thresholds", "memory", "disk"),
    [
        (usage(mem_avail=99 * MI), PressureThresholds(), "True", "False"),  # kubelet: 100Mi
        (usage(mem_avail=101 * MI), PressureThresholds(), "False", "False"),
        (
            usage(mem_avail=300 * MI),
            PressureThresholds(memory_available_ratio=0.1),
            "True",
            "False",
        ),
        (
            usage(mem_avail=500 * MI),
            PressureThresholds(memory_available_bytes=600 * MI),
            "True",
            "False",
        ),
        (usage(state=(9 * GI, 100 * GI)), PressureThresholds(), "False", "True"),  # nodefs < 10 %
        (usage(state=(11 * GI, 100 * GI)), PressureThresholds(), "False", "False"),
        (usage(root=(14 * GI, 100 * GI)), PressureThresholds(), "False", "True"),  # imagefs < 15 %
        (
            usage(root=(14 * GI, 100 * GI)),
            PressureThresholds(imagefs_available_ratio=0.1),
            "False",
            "False",
        ),
        (NodeUsage(GI, 2 * GI, {}), PressureThresholds(), "False", "False"),  # no filesystem data
    ],
)
def test_thresholds(node: NodeUsage, thresholds, memory: str, disk: str) -> None:
    conditions = by_type(evaluate_pressure(node, thresholds, NOW))
    assert conditions["MemoryPressure"]["status"] == memory
    assert conditions["DiskPressure"]["status"] == disk
    if memory == "True":
        assert conditions["MemoryPressure"]["reason"] == "KubeletHasInsufficientMemory"
    if disk == "True":
        assert conditions["DiskPressure"]["reason"] == "KubeletHasDiskPressure"
        assert "free" in conditions["DiskPressure"]["message"]


def test_transition_period_and_transition_times() -> None:
    thresholds = PressureThresholds(transition_period_s=300)
    low, ok = usage(mem_avail=50 * MI), usage()
    s1 = evaluate_pressure(ok, thresholds, NOW)
    s2 = evaluate_pressure(low, thresholds, NOW + 60, s1)
    assert by_type(s2)["MemoryPressure"]["status"] == "True"
    assert by_type(s2)["MemoryPressure"]["lastTransitionTime"] == "2023-11-14T22:14:20Z"
    # Recovered, but within the transition period: still True, same transition time.
    s3 = evaluate_pressure(ok, thresholds, NOW + 200, s2)
    mem = by_type(s3)["MemoryPressure"]
    assert mem["status"] == "True" and "transition period" in mem["message"]
    assert mem["lastTransitionTime"] == "2023-11-14T22:14:20Z"
    assert mem["lastHeartbeatTime"] == "2023-11-14T22:16:40Z"
    # Disk never changed: its transition time is the first evaluation's.
    assert by_type(s3)["DiskPressure"]["lastTransitionTime"] == "2023-11-14T22:13:20Z"
    s4 = evaluate_pressure(ok, thresholds, NOW + 60 + 300, s3)
    assert by_type(s4)["MemoryPressure"]["status"] == "False"
    assert by_type(s4)["MemoryPressure"]["lastTransitionTime"] == "2023-11-14T22:19:20Z"


def test_no_metrics_is_unknown() -> None:
    state = evaluate_pressure(None, PressureThresholds(), NOW)
    for c in state.conditions:
        assert c["status"] == "Unknown" and c["reason"] == "NodeStatusUnknown"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"memory_available_ratio": 1.0},
        {"nodefs_available_ratio": -0.1},
        {"memory_available_bytes": -1},
        {"transition_period_s": -5},
    ],
)
def test_invalid_thresholds(kwargs) -> None:
    with pytest.raises(ValueError):
        PressureThresholds(**kwargs)


def test_usage_from_the_store() -> None:
    store = EdgeMetricsStore()
    assert node_usage(store.node("n1")) is None
    store.ingest(
        "n1",
        body(
            1,
            sample(
                0,
                available_kib=80 * 1024,
                extra={
                    (Metric.NODE_FS_STATE_CAPACITY_KIB, None): 1000,
                    (Metric.NODE_FS_STATE_AVAILABLE_KIB, None): 50,
                },
            ),
        ),
        now=0.0,
    )
    u = node_usage(store.node("n1"))
    assert u.memory_available_bytes == 80 * MI
    assert u.filesystems == {"root": (500_000 * 1024, 1_000_000 * 1024), "state": (51200, 1024000)}
    conditions = by_type(evaluate_pressure(u, PressureThresholds(), NOW))
    assert conditions["MemoryPressure"]["status"] == "True"
    assert conditions["DiskPressure"]["status"] == "True"
