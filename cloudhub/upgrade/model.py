"""The EdgeUpgrade resource as typed, validated, frozen data.

An EdgeUpgrade (``apps.edgefleet.io/v1alpha1``, cluster-scoped, with a status
subresource; the CRD is ``deploy/crds/edgeupgrades.apps.edgefleet.io.yaml``) rolls an
agent version out over the selected Nodes in batches::

    spec:
      version: 0.5.0
      artifact: {sha256: <64 hex>, name: edgefleet-0.5.0-py3-none-any.whl}  # or url:
      nodeSelector: {matchLabels: {...}, matchExpressions: [...]}
      maxUnavailable: 10%        # a batch: a count or a percentage (rounded down, >= 1)
      healthGate: {podsReady: true, soakSeconds: 30, timeoutSeconds: 600}
      failurePolicy: Pause       # or RollbackBatch
      maxFailures: 0
      offlinePolicy: Wait        # or Skip
      paused: false
      allowDowngrade: false

:func:`parse_upgrade` turns the raw JSON object into an :class:`Upgrade` or raises
:class:`~cloudhub.upgrade.errors.InvalidUpgrade` naming the field. The version, digest
and artifact name are checked with :mod:`protocol.upgrade`, the rules the agent applies
again when the order reaches it.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cloudhub.placement.errors import InvalidSpec
from cloudhub.placement.selectors import LabelSelector, parse_label_selector
from cloudhub.upgrade.errors import InvalidUpgrade
from protocol.upgrade import (
    AgentVersion,
    ArtifactError,
    check_artifact_name,
    check_sha256,
    parse_version,
)

__all__ = [
    "API_GROUP",
    "API_VERSION",
    "HOSTNAME_LABEL",
    "KIND",
    "MAX_REPORT_MESSAGE",
    "MAX_REPORT_REASON",
    "PLURAL",
    "Artifact",
    "Batching",
    "FailurePolicy",
    "HealthGate",
    "OfflinePolicy",
    "Upgrade",
    "UpgradeSpec",
    "parse_spec",
    "parse_upgrade",
    "selection_labels",
]

API_GROUP = "apps.edgefleet.io"
API_VERSION = f"{API_GROUP}/v1alpha1"
KIND = "EdgeUpgrade"
PLURAL = "edgeupgrades"
HOSTNAME_LABEL = "kubernetes.io/hostname"
"""The label that bounds a selection by name: the hub sets it to the Node's name, and
:func:`selection_labels` reads it as that name."""


def selection_labels(node: Mapping[str, Any]) -> Mapping[str, str]:
    """The labels an EdgeUpgrade's or EdgeImagePrePull's ``spec.nodeSelector`` is matched
    against for ``node`` (a Node, slim or whole): its own, with :data:`HOSTNAME_LABEL` read
    as the Node's name whatever the label says.

    The admission webhook (:mod:`cloudhub.upgrade.admission`) admits a selector bounded by
    that label once the creator may ``get`` each node so named; the hub sets the label at
    registration but does not repair it (a reconnect with the same facts writes nothing),
    so a Node relabelled to another node's name would otherwise be selected, unchecked,
    under that name. Copies the labels only when they differ.
    """
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    name = meta.get("name", "")
    if labels.get(HOSTNAME_LABEL) == name:
        return labels
    return {**labels, HOSTNAME_LABEL: name}


#: Characters of a node report's ``reason`` and ``message`` the hub copies into a status
#: (EdgeUpgrade and EdgeImagePrePull): a node's report is bounded only by the frame size
#: (4 MiB), and one entry that large would make the status of every node unwritable.
MAX_REPORT_REASON = 128
MAX_REPORT_MESSAGE = 1000

_SPEC_FIELDS = {
    "version",
    "artifact",
    "nodeSelector",
    "maxUnavailable",
    "healthGate",
    "failurePolicy",
    "maxFailures",
    "offlinePolicy",
    "paused",
    "allowDowngrade",
}


class FailurePolicy(str, enum.Enum):
    """What more than ``maxFailures`` failed nodes do to the rollout."""

    PAUSE = "Pause"
    """No new batch starts; nodes already upgrading finish."""
    ROLLBACK_BATCH = "RollbackBatch"
    """As Pause, and the failed node's batch is rolled back to its previous version."""


class OfflinePolicy(str, enum.Enum):
    """What happens to a node that is offline when its batch comes."""

    WAIT = "Wait"
    """It stays Pending and is upgraded when it returns (it does not hold its batch)."""
    SKIP = "Skip"
    """It is marked Skipped (reason NodeOffline)."""


@dataclass(frozen=True, slots=True)
class Artifact:
    """The wheel to install.

    Attributes:
        sha256: its digest (64 lowercase hex digits); the agent installs nothing else.
        name: a bare wheel file name the hub serves from ``upgrade.artifact_dir`` over
            the node's session, or "" when ``url`` is given.
        url: an ``https://`` URL the agent fetches itself, or "".
        size: its size in bytes, or 0 when unknown.
    """

    sha256: str
    name: str = ""
    url: str = ""
    size: int = 0


@dataclass(frozen=True, slots=True)
class Batching:
    """``maxUnavailable``: a count, or a percentage of the selected nodes.

    Attributes:
        value: the count or the percentage (0..100).
        percent: whether ``value`` is a percentage.
    """

    value: int = 10
    percent: bool = True

    def size(self, total: int) -> int:
        """Nodes per batch for ``total`` selected nodes: rounded down, at least 1."""
        size = self.value * total // 100 if self.percent else self.value
        return max(1, size)

    def to_json(self) -> int | str:
        """The API form: an int, or a string like ``"10%"``."""
        return f"{self.value}%" if self.percent else self.value


@dataclass(frozen=True, slots=True)
class HealthGate:
    """When an upgraded node counts as Healthy.

    Attributes:
        pods_ready: its pods must be Running and Ready again.
        soak_s: seconds it must stay healthy (connected, new version, pods ready).
        timeout_s: seconds from the order to Healthy before it counts as Failed.
    """

    pods_ready: bool = True
    soak_s: float = 0.0
    timeout_s: float = 600.0


@dataclass(frozen=True, slots=True)
class UpgradeSpec:
    """A validated ``spec`` (fields as in the module docstring)."""

    version: AgentVersion
    artifact: Artifact
    node_selector: LabelSelector = field(default_factory=LabelSelector)
    batching: Batching = field(default_factory=Batching)
    gate: HealthGate = field(default_factory=HealthGate)
    failure_policy: FailurePolicy = FailurePolicy.PAUSE
    max_failures: int = 0
    offline_policy: OfflinePolicy = OfflinePolicy.WAIT
    paused: bool = False
    allow_downgrade: bool = False


@dataclass(frozen=True, slots=True)
class Upgrade:
    """An EdgeUpgrade read from the API.

    Attributes:
        name: ``metadata.name`` (cluster-scoped: no namespace).
        uid: ``metadata.uid``; orders carry it so that a recreated resource is new.
        generation: ``metadata.generation``.
        spec: the validated spec.
        status: the raw ``status`` (``{}`` when none was written yet).
    """

    name: str
    uid: str
    generation: int
    spec: UpgradeSpec
    status: Mapping[str, Any] = field(default_factory=dict)


def _bool(raw: Mapping[str, Any], key: str, path: str, default: bool) -> bool:
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise InvalidUpgrade(f"{path}.{key}", f"must be true or false, got {value!r}")
    return value


def _count(raw: Mapping[str, Any], key: str, path: str, default: int, minimum: int) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidUpgrade(f"{path}.{key}", f"must be an integer >= {minimum}, got {value!r}")
    return value


def _enum(raw: Mapping[str, Any], key: str, path: str, kind: type[enum.Enum], default: Any):
    value = raw.get(key, default.value)
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(member.value for member in kind)
        raise InvalidUpgrade(f"{path}.{key}", f"must be one of {allowed}, got {value!r}") from None


def _artifact(raw: object) -> Artifact:
    path = "spec.artifact"
    if not isinstance(raw, Mapping):
        raise InvalidUpgrade(path, "must be an object with sha256 and name or url")
    unknown = set(raw) - {"sha256", "name", "url", "size"}
    if unknown:
        raise InvalidUpgrade(path, f"unknown field(s): {', '.join(sorted(unknown))}")
    try:
        sha256 = check_sha256(raw.get("sha256"))
    except ArtifactError as exc:
        raise InvalidUpgrade(f"{path}.sha256", exc.reason) from exc
    name, url = raw.get("name", ""), raw.get("url", "")
    if bool(name) == bool(url):
        raise InvalidUpgrade(path, "needs exactly one of name (served by the hub) or url")
    if name:
        try:
            check_artifact_name(name)
        except ArtifactError as exc:
            raise InvalidUpgrade(f"{path}.name", exc.reason) from exc
    elif (
        not isinstance(url, str)
        or not url.startswith("https://")
        or any(ch.isspace() or ord(ch) < 32 for ch in url)
    ):
        raise InvalidUpgrade(f"{path}.url", f"must be an https:// URL, got {url!r}")
    else:  # the agents refuse one (URLNotSupported): every node would fail
        raise InvalidUpgrade(
            f"{path}.url",
            "is not supported yet: put the wheel in the hub's upgrade.artifact_dir and give "
            "its file name as artifact.name",
        )
    size = _count(raw, "size", path, 0, 0)
    return Artifact(sha256=sha256, name=name, url=url, size=size)


def _batching(raw: object) -> Batching:
    path = "spec.maxUnavailable"
    if raw is None:
        return Batching()
    if isinstance(raw, int) and not isinstance(raw, bool):
        if raw < 1:
            raise InvalidUpgrade(path, f"must be at least 1, got {raw}")
        return Batching(raw, percent=False)
    if isinstance(raw, str) and re.fullmatch(r"[0-9]{1,3}%", raw):  # ASCII: "²".isdigit()
        value = int(raw[:-1])
        if not 0 < value <= 100:
            raise InvalidUpgrade(path, f"a percentage must be 1%..100%, got {raw!r}")
        return Batching(value, percent=True)
    raise InvalidUpgrade(path, f"must be a count or a percentage like '10%', got {raw!r}")


def _gate(raw: object) -> HealthGate:
    path = "spec.healthGate"
    if raw is None:
        return HealthGate()
    if not isinstance(raw, Mapping):
        raise InvalidUpgrade(path, "must be an object")
    unknown = set(raw) - {"podsReady", "soakSeconds", "timeoutSeconds"}
    if unknown:
        raise InvalidUpgrade(path, f"unknown field(s): {', '.join(sorted(unknown))}")
    soak = _count(raw, "soakSeconds", path, 0, 0)
    timeout = _count(raw, "timeoutSeconds", path, 600, 1)
    if soak >= timeout:
        raise InvalidUpgrade(f"{path}.soakSeconds", "must be below timeoutSeconds")
    return HealthGate(_bool(raw, "podsReady", path, True), float(soak), float(timeout))


def parse_spec(raw: object) -> UpgradeSpec:
    """Validate an EdgeUpgrade's ``spec``.

    Raises:
        InvalidUpgrade: a field is missing, unknown, or has a bad type or value.
    """
    if not isinstance(raw, Mapping):
        raise InvalidUpgrade("spec", "must be an object")
    unknown = set(raw) - _SPEC_FIELDS
    if unknown:
        raise InvalidUpgrade("spec", f"unknown field(s): {', '.join(sorted(unknown))}")
    try:
        version = parse_version(raw.get("version"))
    except ArtifactError as exc:
        raise InvalidUpgrade("spec.version", exc.reason) from exc
    try:
        selector = parse_label_selector(raw.get("nodeSelector"), "spec.nodeSelector")
    except InvalidSpec as exc:
        raise InvalidUpgrade(exc.path, exc.reason) from exc
    return UpgradeSpec(
        version=version,
        artifact=_artifact(raw.get("artifact")),
        node_selector=selector,
        batching=_batching(raw.get("maxUnavailable")),
        gate=_gate(raw.get("healthGate")),
        failure_policy=_enum(raw, "failurePolicy", "spec", FailurePolicy, FailurePolicy.PAUSE),
        max_failures=_count(raw, "maxFailures", "spec", 0, 0),
        offline_policy=_enum(raw, "offlinePolicy", "spec", OfflinePolicy, OfflinePolicy.WAIT),
        paused=_bool(raw, "paused", "spec", False),
        allow_downgrade=_bool(raw, "allowDowngrade", "spec", False),
    )


def parse_upgrade(obj: Mapping[str, Any]) -> Upgrade:
    """Validate a whole EdgeUpgrade object as the API returns it.

    Raises:
        InvalidUpgrade: the object is not an EdgeUpgrade or its spec is invalid.
    """
    if obj.get("kind", KIND) != KIND:
        raise InvalidUpgrade("kind", f"must be {KIND}, got {obj.get('kind')!r}")
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str):
        raise InvalidUpgrade("metadata.name", "is required")
    status = obj.get("status") or {}
    if not isinstance(status, Mapping):
        raise InvalidUpgrade("status", "must be an object")
    return Upgrade(
        name=meta["name"],
        uid=str(meta.get("uid", "")),
        generation=int(meta.get("generation", 1)),
        spec=parse_spec(obj.get("spec")),
        status=status,
    )
