"""Hub-side twin rules as pure functions: Device -> desired state, reports -> Device status.

The hub calls these from its Device informer and its session handlers; they read no
clock and do no I/O, so a status write that loses an optimistic-concurrency race (409)
is retried by reading the Device again and calling the same function.

Rules (docs/devices.md):

- Desired: the cloud wins. ``evaluate_desired`` turns a Device's spec into the full
  ``DesiredState`` sent in ``twin_desired`` and lists the desired values that break the
  model; those are left out of the state and shown in ``status.twins[].rejectedDesired``
  (``status_with_rejections``), never dropped silently. Its version
  (:func:`desired_version`) grows with the Device's ``metadata.generation`` and, for one
  generation, with its DeviceModel's ``resourceVersion``: what is sent depends on both, and
  the edge keeps only a newer version, so a model that comes after its Device, or changes,
  must give a newer one.
- Reported: the device wins, latest-wins per property. ``merge_reported`` writes a report
  to ``status.twins[].reported`` only when its version is higher than the one there;
  a report for another uid (a deleted and recreated Device) is stale.

Status layout (KubeEdge's ``Twin`` plus ``rejectedDesired``; values are text)::

    status:
      twins:
      - propertyName: setpoint
        reported:
          value: "21.5"
          metadata: {timestamp: "<ms since epoch>", version: "<edge version>", type: double}
        rejectedDesired: {value: "99", reason: OutOfRange, message: "...", generation: 7}
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from protocol.devices import (
    DesiredState,
    Device,
    DeviceModel,
    InvalidValue,
    ModelProperty,
    Reason,
    ReportedValue,
    Value,
    check_desired,
    check_reported,
    to_text,
)


@dataclass(frozen=True, slots=True)
class Rejection:
    """A desired value the hub refused.

    Attributes:
        property: the property name.
        value: the desired value as written in the spec (text).
        reason: a ``Reason`` value (``TypeMismatch``, ``OutOfRange``, ``ReadOnly``,
            ``UnknownProperty``, ``NotATwinProperty``, ``TooLarge``, ``ModelNotFound``).
        message: for people.
    """

    property: str
    value: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class DesiredEvaluation:
    """The outcome of ``evaluate_desired``.

    Attributes:
        state: what to send to the edge (valid desired values only).
        rejections: the refused desired values, in spec order.
    """

    state: DesiredState
    rejections: tuple[Rejection, ...]


@dataclass(frozen=True, slots=True)
class StatusMerge:
    """The outcome of merging edge reports into a Device status.

    Attributes:
        status: the new ``status`` (a new dict; write it only if ``changed``).
        changed: whether ``status`` differs from the Device's current status.
        applied: the reports written, in the order applied.
        stale: reports not written because a newer or equal version is there or the uid
            is another Device's.
        invalid: reports refused by the model, with the error (the edge checks values
            too, so these mean the edge had another model version).
    """

    status: dict[str, Any]
    changed: bool
    applied: tuple[ReportedValue, ...] = ()
    stale: tuple[ReportedValue, ...] = ()
    invalid: tuple[tuple[ReportedValue, InvalidValue], ...] = ()


MODEL_REVISIONS = 10**12
"""Model revisions per Device generation in a desired version (etcd revisions stay far
below 10^12; a generation may then reach 1.8e7 within an unsigned 64-bit version)."""


def desired_version(generation: int, model_revision: int) -> int:
    """The version of the desired state of a Device at ``generation`` evaluated with a
    DeviceModel at ``model_revision`` (its ``metadata.resourceVersion`` as a number).

    ``generation * 10^12 + model_revision``: a spec change (generation + 1) outranks any
    model revision, and for one generation a newer model (a later revision: a change, or a
    model deleted and created again) outranks an older one. The edge applies a desired
    state only when its version is higher than the one it holds, so both must count.
    """
    return generation * MODEL_REVISIONS + model_revision % MODEL_REVISIONS


def model_revision(obj: Mapping[str, Any] | None) -> int:
    """A DeviceModel's ``metadata.resourceVersion`` as a number (0 when absent or not a
    number: then model changes within one generation do not reach the edge)."""
    rv = ((obj or {}).get("metadata") or {}).get("resourceVersion")
    try:
        return max(int(str(rv)), 0)
    except ValueError:
        return 0


def evaluate_desired(
    device: Device, model: DeviceModel | None, *, model_revision: int = 0
) -> DesiredEvaluation:
    """Compute the desired state to send for a Device, and the values to reject.

    Args:
        device: the Device (from the API: ``uid`` and ``generation`` set).
        model: its DeviceModel, or ``None`` if it does not exist (then every desired
            value is rejected with ``ModelNotFound``).
        model_revision: the model's ``resourceVersion`` as a number
            (:func:`model_revision`).

    Returns:
        The evaluation; ``state.version`` is :func:`desired_version`.
    """
    values: dict[str, Value] = {}
    rejections: list[Rejection] = []
    for prop in device.properties:
        if prop.desired is None:
            continue
        try:
            values[prop.name] = _check_desired(device, model, prop.name, prop.desired)
        except InvalidValue as exc:
            rejections.append(Rejection(prop.name, prop.desired, exc.reason, exc.message))
    state = DesiredState(
        namespace=device.namespace,
        name=device.name,
        uid=device.uid,
        version=desired_version(device.generation, model_revision),
        properties=values,
    )
    return DesiredEvaluation(state, tuple(rejections))


def _check_desired(device: Device, model: DeviceModel | None, name: str, text: str) -> Value:
    if model is None:
        raise InvalidValue(
            name,
            Reason.MODEL_NOT_FOUND.value,
            f"property {name!r}: DeviceModel {device.model_name!r} not found in namespace "
            f"{device.namespace or 'default'!r}; desired value {text!r} not sent",
        )
    prop = model.property(name)
    if prop is None:
        raise InvalidValue(
            name,
            Reason.UNKNOWN_PROPERTY.value,
            f"property {name!r} is not defined in DeviceModel {model.name!r}",
        )
    return check_desired(prop, text)


def status_with_rejections(device: Device, evaluation: DesiredEvaluation) -> StatusMerge:
    """Set ``rejectedDesired`` on the properties ``evaluation`` rejects; clear it elsewhere.

    Args:
        device: the Device the evaluation was made from.
        evaluation: ``evaluate_desired(device, model)``.

    Returns:
        The new status; ``changed`` is False when the rejections shown are already right
        (so an informer event caused by our own status write does not write again).
    """
    status = _copy_status(device.status)
    twins = status["twins"]
    wanted = {r.property: r for r in evaluation.rejections}
    for twin in twins:
        rejection = wanted.pop(twin.get("propertyName"), None)
        if rejection is None:
            twin.pop("rejectedDesired", None)
        else:
            twin["rejectedDesired"] = _rejection_entry(rejection, device.generation)
    for rejection in wanted.values():
        twins.append(
            {
                "propertyName": rejection.property,
                "rejectedDesired": _rejection_entry(rejection, device.generation),
            }
        )
    return _finish(device, status)


def _rejection_entry(rejection: Rejection, generation: int) -> dict[str, Any]:
    return {
        "value": rejection.value,
        "reason": rejection.reason,
        "message": rejection.message,
        "generation": generation,
    }


def merge_reported(
    device: Device, model: DeviceModel | None, reports: Iterable[ReportedValue]
) -> StatusMerge:
    """Merge reported values into a Device status, latest version wins per property.

    Args:
        device: the current Device (its status is not modified).
        model: its DeviceModel; ``None`` refuses every report with ``ModelNotFound``.
        reports: in any order; several for one property are fine (``twin_history``).

    Returns:
        The new status and what was applied, stale or invalid.
    """
    status = _copy_status(device.status)
    applied: list[ReportedValue] = []
    stale: list[ReportedValue] = []
    invalid: list[tuple[ReportedValue, InvalidValue]] = []
    for report in sorted(reports, key=lambda r: r.version):
        if report.uid != device.uid:
            stale.append(report)
            continue
        try:
            prop = _model_property(device, model, report.property)
            value = check_reported(prop, report.value)
        except InvalidValue as exc:
            invalid.append((report, exc))
            continue
        twin = _twin(status, report.property)
        if _version(twin.get("reported")) >= report.version:
            stale.append(report)
            continue
        twin["reported"] = {
            "value": to_text(prop, value),
            "metadata": {
                "timestamp": str(round(report.timestamp * 1000)),
                "version": str(report.version),
                "type": prop.type.value,
            },
        }
        applied.append(report)
    merge = _finish(device, status)
    return StatusMerge(merge.status, merge.changed, tuple(applied), tuple(stale), tuple(invalid))


def _model_property(device: Device, model: DeviceModel | None, name: str) -> ModelProperty:
    if model is None:
        raise InvalidValue(
            name, Reason.MODEL_NOT_FOUND.value, f"DeviceModel {device.model_name!r} not found"
        )
    prop = model.property(name)
    if prop is None:
        raise InvalidValue(
            name,
            Reason.UNKNOWN_PROPERTY.value,
            f"property {name!r} is not defined in DeviceModel {model.name!r}",
        )
    return prop


def _copy_status(status: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(status))
    twins = out.get("twins")
    out["twins"] = [t for t in twins if isinstance(t, dict)] if isinstance(twins, list) else []
    return out


def _twin(status: dict[str, Any], name: str) -> dict[str, Any]:
    for twin in status["twins"]:
        if twin.get("propertyName") == name:
            return twin
    twin = {"propertyName": name}
    status["twins"].append(twin)
    return twin


def _version(entry: Any) -> int:
    """The ``metadata.version`` of a status entry; 0 when absent or unreadable."""
    if not isinstance(entry, Mapping):
        return 0
    meta = entry.get("metadata")
    if not isinstance(meta, Mapping):
        return 0
    try:
        return int(meta.get("version", 0))
    except (TypeError, ValueError):
        return 0


def _tidy(status: dict[str, Any]) -> dict[str, Any]:
    """Drop twin entries left with only a name, and an empty twins list."""
    status["twins"] = [t for t in status["twins"] if len(t) > 1]
    if not status["twins"]:
        del status["twins"]
    return status


def _finish(device: Device, status: dict[str, Any]) -> StatusMerge:
    status = _tidy(status)
    return StatusMerge(status, status != _tidy(_copy_status(device.status)))
