"""The Device status condition that says whether its DeviceModel is there.

A Device's desired values are typed and checked by its model; without one nothing is sent
to the edge. So that ``kubectl get device -o yaml`` says why (a Device applied before its
model, a model deleted, or one that does not parse), the hub keeps one condition in
``status.conditions`` (``metav1.Condition``'s shape):

====================  =======  =================  =====================================
when                  status   reason             what happens
====================  =======  =================  =====================================
the model is there    True     ModelFound         desired values evaluated and sent
no such model         False    ModelNotFound      the Device waits; sent once it exists
it does not parse     False    ModelInvalid       the Device waits for a valid model
====================  =======  =================  =====================================

``lastTransitionTime`` moves only when ``status`` does, as for every Kubernetes condition.
Pure functions: the clock is an argument.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cloudhub.kube.times import rfc3339
from protocol.devices import Device, DeviceModel

__all__ = ["MODEL_AVAILABLE", "ModelLookup", "model_condition", "with_condition"]

MODEL_AVAILABLE = "ModelAvailable"
"""The condition type."""


@dataclass(frozen=True, slots=True)
class ModelLookup:
    """What the hub knows of a Device's DeviceModel.

    Attributes:
        model: the parsed model, ``None`` when it does not exist or does not parse.
        revision: its ``metadata.resourceVersion`` as a number (0 without a model).
        exists: whether the object exists at all.
        problem: why it does not parse, or ``None``.
    """

    model: DeviceModel | None
    revision: int = 0
    exists: bool = False
    problem: str | None = None


def model_condition(device: Device, found: ModelLookup) -> dict[str, str]:
    """The ``ModelAvailable`` condition of ``device`` (without ``lastTransitionTime``)."""
    exists, problem = found.exists, found.problem
    where = f"DeviceModel {device.namespace or 'default'}/{device.model_name}"
    if not exists:
        return {
            "type": MODEL_AVAILABLE,
            "status": "False",
            "reason": "ModelNotFound",
            "message": f"{where} does not exist: the desired values are sent once it exists",
        }
    if problem is not None:
        return {
            "type": MODEL_AVAILABLE,
            "status": "False",
            "reason": "ModelInvalid",
            "message": f"{where} is not valid ({problem}): the desired values wait for a "
            "valid model",
        }
    return {
        "type": MODEL_AVAILABLE,
        "status": "True",
        "reason": "ModelFound",
        "message": f"desired values are checked against {where} and sent",
    }


def with_condition(
    status: Mapping[str, Any], condition: Mapping[str, str], now: float
) -> tuple[dict[str, Any], bool]:
    """``status`` with ``condition`` set (replacing the one of its type).

    Returns:
        The new status (a copy) and whether the condition changed (type, status, reason or
        message); ``lastTransitionTime`` is ``now`` when ``status`` flipped, else kept.
    """
    out = copy.deepcopy(dict(status))
    conditions = [c for c in out.get("conditions") or [] if isinstance(c, dict)]
    current = next((c for c in conditions if c.get("type") == condition["type"]), None)
    if current is not None and all(current.get(k) == v for k, v in condition.items()):
        return out, False
    stamp = rfc3339(now)
    if current is not None and current.get("status") == condition["status"]:
        stamp = current.get("lastTransitionTime") or stamp
    new = {**condition, "lastTransitionTime": stamp}
    out["conditions"] = [c for c in conditions if c is not current] + [new]
    return out, True
