"""Pod status as kubelet reports it: phase, conditions, container statuses.

Pure functions of what the pod worker observed; no I/O and no clock reads (times come in
as arguments).
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from edgeagent.runtime.base import ContainerInfo, ContainerState

__all__ = [
    "ContainerView",
    "build_conditions",
    "container_status",
    "pod_phase",
    "rfc3339",
]

UNKNOWN_EXIT_CODE = 137
UNKNOWN_REASON = "ContainerStatusUnknown"
UNKNOWN_MESSAGE = "The container could not be located when the pod was terminated"


def rfc3339(ts: float | None) -> str | None:
    """Epoch seconds → ``2024-05-01T10:00:00Z`` (Kubernetes metav1.Time, whole seconds)."""
    if ts is None:
        return None
    return datetime.datetime.fromtimestamp(int(ts), datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )


@dataclasses.dataclass(frozen=True, slots=True)
class ContainerView:
    """What the pod worker knows about one container of the spec.

    Attributes:
        name: container name.
        image: image from the spec.
        runtime_kind: ``docker`` or ``process`` (the containerID scheme).
        latest: the newest runtime container for it, or ``None``.
        previous: the attempt before ``latest`` (for ``lastState``), or ``None``.
        stored: the last reported containerStatus (used when no runtime record exists,
            e.g. after a reboot), or ``None``.
        waiting: (reason, message) to show as ``waiting`` instead of the runtime state
            (CrashLoopBackOff, ErrImagePull …), or ``None``.
        ready: readiness verdict for a running container.
        restart_count: restarts so far.
    """

    name: str
    image: str
    runtime_kind: str
    latest: ContainerInfo | None = None
    previous: ContainerInfo | None = None
    stored: dict[str, Any] | None = None
    waiting: tuple[str, str] | None = None
    ready: bool = False
    restart_count: int = 0


def _terminated(info: ContainerInfo, kind: str) -> dict[str, Any]:
    if info.exit_code is None:
        return {
            "exitCode": UNKNOWN_EXIT_CODE,
            "reason": UNKNOWN_REASON,
            "message": UNKNOWN_MESSAGE,
            "startedAt": rfc3339(info.started_at),
            "finishedAt": rfc3339(info.finished_at or info.started_at),
            "containerID": f"{kind}://{info.id}",
        }
    reason = "Completed" if info.exit_code == 0 else "Error"
    if info.oom_killed:
        reason = "OOMKilled"
    out: dict[str, Any] = {
        "exitCode": info.exit_code,
        "reason": reason,
        "startedAt": rfc3339(info.started_at),
        "finishedAt": rfc3339(info.finished_at),
        "containerID": f"{kind}://{info.id}",
    }
    if info.error:
        out["message"] = info.error
    return out


def container_status(v: ContainerView) -> dict[str, Any]:
    """One entry of ``containerStatuses`` / ``initContainerStatuses``."""
    state: dict[str, Any]
    last: dict[str, Any] = {}
    latest = v.latest
    if latest is None:
        stored_state = (v.stored or {}).get("state") or {}
        if v.waiting is not None:
            state = {"waiting": {"reason": v.waiting[0], "message": v.waiting[1]}}
            if stored_state.get("terminated"):
                last = {"terminated": stored_state["terminated"]}
            elif (v.stored or {}).get("lastState"):
                last = dict(v.stored["lastState"])  # type: ignore[index]
        elif stored_state.get("terminated") or stored_state.get("running"):
            # It ran before and its record is gone (reboot): not restarted per policy.
            term = stored_state.get("terminated") or {
                "exitCode": UNKNOWN_EXIT_CODE,
                "reason": UNKNOWN_REASON,
                "message": UNKNOWN_MESSAGE,
                "startedAt": stored_state["running"].get("startedAt"),
                "finishedAt": stored_state["running"].get("startedAt"),
            }
            state = {"terminated": term}
        else:
            state = {"waiting": {"reason": "ContainerCreating"}}
    elif v.waiting is not None:
        state = {"waiting": {"reason": v.waiting[0], "message": v.waiting[1]}}
        if latest.state is ContainerState.EXITED:
            last = {"terminated": _terminated(latest, v.runtime_kind)}
    elif latest.state is ContainerState.RUNNING:
        state = {"running": {"startedAt": rfc3339(latest.started_at)}}
        if v.previous is not None and v.previous.state is ContainerState.EXITED:
            last = {"terminated": _terminated(v.previous, v.runtime_kind)}
    elif latest.state is ContainerState.EXITED:
        state = {"terminated": _terminated(latest, v.runtime_kind)}
        if v.previous is not None and v.previous.state is ContainerState.EXITED:
            last = {"terminated": _terminated(v.previous, v.runtime_kind)}
    else:
        state = {"waiting": {"reason": "ContainerCreating"}}
    running = "running" in state
    out: dict[str, Any] = {
        "name": v.name,
        "state": state,
        "lastState": last,
        "ready": bool(running and v.ready),
        "started": running,
        "restartCount": v.restart_count,
        "image": v.image,
        "imageID": "",
    }
    if latest is not None:
        out["containerID"] = f"{v.runtime_kind}://{latest.id}"
        if latest.image_id:
            out["imageID"] = f"{v.runtime_kind}://{latest.image_id}"
    elif (v.stored or {}).get("containerID") and "terminated" in state:
        out["containerID"] = v.stored["containerID"]  # type: ignore[index]
    return out


def pod_phase(
    restart_policy: str, init_statuses: list[dict[str, Any]], statuses: list[dict[str, Any]]
) -> str:
    """The pod phase from its container statuses, following kubelet's ``getPhase``."""
    for s in init_statuses:
        term = s["state"].get("terminated")
        if term and term.get("exitCode") == 0:
            continue
        last = (s.get("lastState") or {}).get("terminated")
        if restart_policy == "Never" and (term or last):
            return "Failed"
        return "Pending"
    running = waiting = stopped = succeeded = 0
    for s in statuses:
        st = s["state"]
        if "running" in st:
            running += 1
        elif "terminated" in st:
            stopped += 1
            if st["terminated"].get("exitCode") == 0:
                succeeded += 1
        elif (s.get("lastState") or {}).get("terminated"):
            stopped += 1
        else:
            waiting += 1
    if waiting:
        return "Pending"
    if running:
        return "Running"
    if stopped:
        if restart_policy == "Always":
            return "Running"
        if stopped == succeeded:
            return "Succeeded"
        if restart_policy == "Never":
            return "Failed"
        return "Running"
    return "Pending"


def build_conditions(
    previous: list[dict[str, Any]] | None,
    *,
    initialized: bool,
    containers_ready: bool,
    now: float,
    reasons: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The four standard pod conditions; ``lastTransitionTime`` is kept from
    ``previous`` while a condition's status does not change.

    Args:
        previous: the conditions last reported.
        initialized: all init containers succeeded.
        containers_ready: every container is ready.
        now: wall-clock seconds for new transitions.
        reasons: condition type → reason for a False condition.
    """
    prev = {c.get("type"): c for c in previous or []}
    reasons = reasons or {}
    values = {
        "Initialized": initialized,
        "Ready": containers_ready,
        "ContainersReady": containers_ready,
        "PodScheduled": True,
    }
    out = []
    for ctype, value in values.items():
        status = "True" if value else "False"
        old = prev.get(ctype)
        when = (
            old.get("lastTransitionTime")
            if old is not None and old.get("status") == status
            else rfc3339(now)
        )
        cond: dict[str, Any] = {
            "type": ctype,
            "status": status,
            "lastProbeTime": None,
            "lastTransitionTime": when,
        }
        if not value and ctype in reasons:
            cond["reason"] = reasons[ctype]
        out.append(cond)
    return out
