"""Node conditions MemoryPressure and DiskPressure from an edge node's latest metrics.

A pure function, :func:`evaluate_pressure`, turns usage, thresholds, the time and the
previous state into the two condition dicts exactly as kubelet writes them into
``Node.status.conditions`` (``type``, ``status``, ``reason``, ``message``,
``lastHeartbeatTime``, ``lastTransitionTime``). The rules are kubelet's eviction signals:

- MemoryPressure: ``memory.available`` below ``memory_available_bytes`` (kubelet's default
  hard threshold is 100Mi), or below ``memory_available_ratio`` of capacity if set.
- DiskPressure: ``nodefs.available`` (the state directory's filesystem, where the agent
  keeps pods' volumes and logs, as kubelet's root dir) below ``nodefs_available_ratio``
  (kubelet: 10%), or ``imagefs.available`` (``/``, where the container engine keeps
  images on a typical edge install) below ``imagefs_available_ratio`` (kubelet: 15%).
- Once True, a condition stays True until the threshold has not been crossed for
  ``transition_period_s`` (kubelet's ``--eviction-pressure-transition-period``, 5 min),
  so a node hovering at the threshold does not flap.
- Without usage (no metrics yet) both are ``Unknown``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cloudhub.metrics.store import NodeState
from protocol.metrics_codec import Metric

__all__ = [
    "NodeUsage",
    "PressureState",
    "PressureThresholds",
    "evaluate_pressure",
    "node_usage",
    "rfc3339",
]

MEMORY_PRESSURE = "MemoryPressure"
DISK_PRESSURE = "DiskPressure"


@dataclass(frozen=True)
class PressureThresholds:
    """When a node is under memory or disk pressure (kubelet's hard eviction defaults).

    Attributes:
        memory_available_bytes: MemoryPressure below this many bytes available.
        memory_available_ratio: MemoryPressure also below this fraction of capacity
            (0 disables; useful across nodes of very different sizes).
        nodefs_available_ratio: DiskPressure below this fraction free on the state
            directory's filesystem.
        imagefs_available_ratio: DiskPressure below this fraction free on ``/``.
        transition_period_s: how long a condition stays True after its threshold was
            last crossed (seconds).
    """

    memory_available_bytes: int = 100 * 1024 * 1024
    memory_available_ratio: float = 0.0
    nodefs_available_ratio: float = 0.10
    imagefs_available_ratio: float = 0.15
    transition_period_s: float = 300.0

    def __post_init__(self) -> None:
        for name in ("memory_available_ratio", "nodefs_available_ratio", "imagefs_available_ratio"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {value}")
        if self.memory_available_bytes < 0:
            raise ValueError("memory_available_bytes must be >= 0")
        if self.transition_period_s < 0:
            raise ValueError("transition_period_s must be >= 0")


@dataclass(frozen=True)
class NodeUsage:
    """The figures pressure is decided on (bytes).

    Attributes:
        memory_available_bytes: ``MemAvailable``.
        memory_capacity_bytes: ``MemTotal``.
        filesystems: ``"root"`` / ``"state"`` → ``(available, capacity)`` bytes.
    """

    memory_available_bytes: int
    memory_capacity_bytes: int
    filesystems: Mapping[str, tuple[int, int]] = field(default_factory=dict)


def node_usage(state: NodeState | None) -> NodeUsage | None:
    """Extract :class:`NodeUsage` from a node's latest metrics (``None`` if incomplete)."""
    if state is None:
        return None
    available = state.gauge(Metric.NODE_MEMORY_AVAILABLE_KIB)
    capacity = state.gauge(Metric.NODE_MEMORY_CAPACITY_KIB)
    if available is None or capacity is None:
        return None
    filesystems = {}
    for name, avail_m, cap_m in (
        ("root", Metric.NODE_FS_ROOT_AVAILABLE_KIB, Metric.NODE_FS_ROOT_CAPACITY_KIB),
        ("state", Metric.NODE_FS_STATE_AVAILABLE_KIB, Metric.NODE_FS_STATE_CAPACITY_KIB),
    ):
        a, c = state.gauge(avail_m), state.gauge(cap_m)
        if a is not None and c:
            filesystems[name] = (a * 1024, c * 1024)
    return NodeUsage(available * 1024, capacity * 1024, filesystems)


@dataclass(frozen=True)
class PressureState:
    """The conditions and what is needed to evaluate the next ones.

    Attributes:
        conditions: the MemoryPressure and DiskPressure condition dicts, in that order.
        last_crossed: condition type → time (s since the epoch) its threshold was last
            seen crossed.
    """

    conditions: tuple[dict[str, Any], ...]
    last_crossed: Mapping[str, float] = field(default_factory=dict)


def rfc3339(t: float) -> str:
    """Format seconds since the epoch as Kubernetes writes ``metav1.Time``."""
    return dt.datetime.fromtimestamp(int(t), dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _mib(n: float) -> str:
    return f"{n / 1048576:.0f}Mi"


def evaluate_pressure(
    usage: NodeUsage | None,
    thresholds: PressureThresholds,
    now: float,
    previous: PressureState | None = None,
) -> PressureState:
    """Compute the MemoryPressure and DiskPressure conditions.

    Args:
        usage: the node's latest figures, or ``None`` if the hub has none.
        thresholds: the configured thresholds.
        now: current time (s since the epoch): ``lastHeartbeatTime``, and
            ``lastTransitionTime`` when a status changes.
        previous: the state returned by the previous call for this node, if any.

    Returns:
        The new state; write ``state.conditions`` into ``Node.status.conditions``
        (replacing the entries of the same types).
    """
    prev_conditions = {c["type"]: c for c in (previous.conditions if previous else ())}
    last_crossed = dict(previous.last_crossed) if previous else {}
    stamp = rfc3339(now)

    def condition(kind: str, status: str, reason: str, message: str) -> dict[str, Any]:
        old = prev_conditions.get(kind)
        transition = stamp
        if old is not None and old.get("status") == status:
            transition = old.get("lastTransitionTime", stamp)
        return {
            "type": kind,
            "status": status,
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": transition,
            "reason": reason,
            "message": message,
        }

    if usage is None:
        message = "the edge agent has not reported metrics"
        return PressureState(
            (
                condition(MEMORY_PRESSURE, "Unknown", "NodeStatusUnknown", message),
                condition(DISK_PRESSURE, "Unknown", "NodeStatusUnknown", message),
            ),
            last_crossed,
        )

    memory_floor = max(
        thresholds.memory_available_bytes,
        thresholds.memory_available_ratio * usage.memory_capacity_bytes,
    )
    memory_crossed = usage.memory_available_bytes < memory_floor
    memory_detail = (
        f"{_mib(usage.memory_available_bytes)} of {_mib(usage.memory_capacity_bytes)} "
        f"available, threshold {_mib(memory_floor)}"
    )
    disk_crossed_on: list[str] = []
    for name, ratio in (
        ("state", thresholds.nodefs_available_ratio),
        ("root", thresholds.imagefs_available_ratio),
    ):
        fs = usage.filesystems.get(name)
        if fs is not None and fs[1] > 0 and fs[0] < ratio * fs[1]:
            disk_crossed_on.append(f"{name} filesystem {fs[0] / fs[1]:.1%} free < {ratio:.0%}")

    def pressed(kind: str, crossed: bool) -> bool:
        if crossed:
            last_crossed[kind] = now
            return True
        since = last_crossed.get(kind)
        return since is not None and now - since < thresholds.transition_period_s

    if pressed(MEMORY_PRESSURE, memory_crossed):
        memory = condition(
            MEMORY_PRESSURE,
            "True",
            "KubeletHasInsufficientMemory",
            f"edge node has insufficient memory available: {memory_detail}",
        )
    else:
        memory = condition(
            MEMORY_PRESSURE,
            "False",
            "KubeletHasSufficientMemory",
            f"edge node has sufficient memory available: {memory_detail}",
        )
    if pressed(DISK_PRESSURE, bool(disk_crossed_on)):
        detail = "; ".join(disk_crossed_on) or "recovering (transition period)"
        disk = condition(
            DISK_PRESSURE,
            "True",
            "KubeletHasDiskPressure",
            f"edge node has disk pressure: {detail}",
        )
    else:
        disk = condition(
            DISK_PRESSURE, "False", "KubeletHasNoDiskPressure", "edge node has no disk pressure"
        )
    if memory["status"] == "True" and not memory_crossed:
        memory["message"] += " (recovering: transition period)"
    return PressureState((memory, disk), last_crossed)
