"""How an edge's pod status becomes the API's, as kubelet's status manager writes it.

The edge owns these PodStatus fields, kubelet's set: ``phase``, ``conditions`` (by type:
conditions other writers own, such as ``PodScheduled`` or readiness gates, are kept),
``message``, ``reason``, ``hostIP``, ``podIP``, ``podIPs``, ``startTime``,
``containerStatuses``, ``initContainerStatuses``, ``ephemeralContainerStatuses``,
``qosClass``. Everything else in the status is left as the API has it. A pod whose phase is
terminal (``Succeeded``, ``Failed``) never goes back, as kubelet never moves it back.
"""

from __future__ import annotations

from typing import Any

__all__ = ["EDGE_OWNED_FIELDS", "TERMINAL_PHASES", "condition_problem", "merge_status"]

EDGE_OWNED_FIELDS = (
    "phase",
    "message",
    "reason",
    "hostIP",
    "podIP",
    "podIPs",
    "startTime",
    "containerStatuses",
    "initContainerStatuses",
    "ephemeralContainerStatuses",
    "qosClass",
)
"""PodStatus fields the edge's report replaces (``conditions`` merge by type)."""

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def condition_problem(reported: dict[str, Any]) -> str | None:
    """What is wrong with the conditions of a reported PodStatus, or ``None``.

    Conditions merge by ``type`` (a string, as in PodCondition), so a report whose
    ``conditions`` is a list with an entry that is not an object with a string ``type`` is
    refused here, naming the entry; everything else is for the API's validation.
    """
    conditions = reported.get("conditions")
    if not isinstance(conditions, list):
        return None
    for i, condition in enumerate(conditions):
        if not isinstance(condition, dict) or not isinstance(condition.get("type"), str):
            return f"status.conditions[{i}].type must be a string"
    return None


def merge_status(current: dict[str, Any] | None, reported: dict[str, Any]) -> dict[str, Any]:
    """The status to write: ``current`` (the API's) with the edge-owned parts of ``reported``.

    Args:
        current: the pod's ``status`` in the API (``None`` or ``{}`` for none yet).
        reported: the edge's PodStatus JSON.

    Returns:
        A new dict; neither argument is modified.
    """
    merged = dict(current or {})
    for key in EDGE_OWNED_FIELDS:
        if key in reported:
            merged[key] = reported[key]
    conditions = reported.get("conditions")
    if isinstance(conditions, list):
        mine = {c.get("type") for c in conditions if isinstance(c, dict)}
        kept = [
            c
            for c in merged.get("conditions") or ()
            if isinstance(c, dict) and c.get("type") not in mine
        ]
        merged["conditions"] = kept + [c for c in conditions if isinstance(c, dict)]
    old_phase = (current or {}).get("phase")
    if old_phase in TERMINAL_PHASES and merged.get("phase") != old_phase:
        merged["phase"] = old_phase
    return merged
