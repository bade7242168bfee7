"""The EdgePlacement resource as typed, validated, frozen data.

An EdgePlacement (``apps.edgefleet.io/v1alpha1``, namespaced, with a status
subresource; the CRD is ``deploy/crds/edgeplacements.apps.edgefleet.io.yaml``)
says what to run on the fleet, where, and how much::

    spec:
      template: {metadata: {...}, spec: {containers: [...]}}   # a PodTemplateSpec
      nodeSelector: {matchLabels: {...}, matchExpressions: [...]}
      mode: Replicas            # or PerNode (one per eligible node, like a DaemonSet)
      replicas: 6               # Replicas mode: the total, spread over groups
      replicasPerGroup: 2       # ...or this many in every group (not both)
      groups:
        byLabel: topology.kubernetes.io/zone
        spread: Even            # or Weighted (members carry weights)
        maxSkew: 1              # optional hard limit, see Groups
        members: [{value: a, weight: 2}, {value: b}]   # optional: only these groups
      overrides:                # per group; never touch the template's nodeSelector
        - {group: a, replicas: 3, container: app, image: ..., env: [...], args: [...],
           resources: {requests: {...}, limits: {...}}, tolerations: [...]}
      priority: 100             # higher wins scarce capacity; ties go to the older
      offlineTolerationSeconds: 300
      updateStrategy: {maxUnavailable: 25%, maxSurge: 25%, prePull: false}   # per group

:func:`parse_placement` turns the raw JSON object into a :class:`Placement`
or raises :class:`~cloudhub.placement.errors.InvalidSpec` naming the field.
"""

from __future__ import annotations

import copy
import enum
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, NamedTuple

from cloudhub.placement.errors import InvalidSpec
from cloudhub.placement.quantity import resource_units
from cloudhub.placement.selectors import (
    LabelSelector,
    check_label_key,
    check_label_value,
    parse_label_selector,
    parse_tolerations,
)
from cloudhub.placement.shape import PodShape, pod_shape
from protocol.errors import InvalidMessage
from protocol.prepull import MAX_IMAGES, check_image

__all__ = [
    "ANNOTATION_REBALANCE",
    "API_GROUP",
    "API_VERSION",
    "DEFAULT_OFFLINE_TOLERATION_S",
    "KIND",
    "LABEL_GROUP",
    "LABEL_PLACEMENT",
    "LABEL_TEMPLATE_HASH",
    "PLURAL",
    "GroupMember",
    "GroupOverride",
    "GroupTemplate",
    "Groups",
    "IntOrPercent",
    "Mode",
    "OwnerRef",
    "Placement",
    "PlacementKey",
    "PlacementSpec",
    "Spread",
    "UpdateStrategy",
    "parse_placement",
    "parse_spec",
    "parse_timestamp",
    "template_images",
]

API_GROUP = "apps.edgefleet.io"
API_VERSION = f"{API_GROUP}/v1alpha1"
KIND = "EdgePlacement"
PLURAL = "edgeplacements"

LABEL_PLACEMENT = f"{API_GROUP}/placement"
"""Pod label: the name of the placement (or workload) that owns the pod."""
LABEL_GROUP = f"{API_GROUP}/group"
"""Pod label: the group (value of ``groups.byLabel``) the pod was placed in."""
LABEL_TEMPLATE_HASH = f"{API_GROUP}/template-hash"
"""Pod label: hash of the group's effective pod template (rolling updates)."""
ANNOTATION_REBALANCE = f"{API_GROUP}/rebalance"
"""Placement annotation: change its value to ask for an explicit rebalance."""

DEFAULT_OFFLINE_TOLERATION_S = 300
"""Seconds a node may be disconnected before its replicas fail over (the
default of Kubernetes' ``node.kubernetes.io/unreachable`` toleration)."""

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_PERCENT = re.compile(r"^(\d{1,3})%$")
_INT32_MAX = 2**31 - 1


class PlacementKey(NamedTuple):
    """Identity of a placement: the kind that defines it, its namespace and name."""

    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"


class Mode(str, enum.Enum):
    """How many replicas a placement runs."""

    REPLICAS = "Replicas"
    """A number of replicas spread over the eligible nodes."""
    PER_NODE = "PerNode"
    """One replica on every eligible node (like a DaemonSet); never fails over."""


class Spread(str, enum.Enum):
    """How replicas are divided between groups."""

    EVEN = "Even"
    WEIGHTED = "Weighted"


@dataclass(frozen=True, slots=True)
class IntOrPercent:
    """An absolute number or a percentage of a total (``intstr`` in the API)."""

    value: int
    percent: bool = False

    def resolve(self, total: int, *, round_up: bool) -> int:
        """The absolute value against ``total`` (percentages rounded as Deployments do)."""
        if not self.percent:
            return self.value
        scaled = self.value * total
        return -(-scaled // 100) if round_up else scaled // 100

    def to_json(self) -> int | str:
        """The API form: an int, or a string like ``"25%"``."""
        return f"{self.value}%" if self.percent else self.value


@dataclass(frozen=True, slots=True)
class UpdateStrategy:
    """Rolling update budget, applied per group.

    Attributes:
        max_unavailable: how many of a group's desired replicas may be not Ready
            during an update (percentages round down).
        max_surge: how many replicas above desired a group may have during an
            update (percentages round up).
        pre_pull: ``prePull``: the update replaces a pod on a node only once that node
            pulled the new template's images (an EdgeImagePrePull of the placement's
            name, kept by the hub; docs/upgrade.md).
    """

    max_unavailable: IntOrPercent = IntOrPercent(25, True)
    max_surge: IntOrPercent = IntOrPercent(25, True)
    pre_pull: bool = False

    def budgets(self, desired: int) -> tuple[int, int]:
        """``(max_unavailable, max_surge)`` in replicas for a group of ``desired``.

        When both round to zero, max_unavailable becomes 1 (as Deployments do),
        so that an update can always make progress.
        """
        unavailable = self.max_unavailable.resolve(desired, round_up=False)
        surge = self.max_surge.resolve(desired, round_up=True)
        if unavailable == 0 and surge == 0:
            unavailable = 1
        return unavailable, surge


@dataclass(frozen=True, slots=True)
class GroupMember:
    """A group that takes part in the spread, with its weight."""

    value: str
    weight: int = 1


@dataclass(frozen=True, slots=True)
class Groups:
    """Groups of nodes defined by one node label (site, zone, pool, ...).

    Attributes:
        by_label: the node label whose values name the groups. Nodes without
            the label belong to no group and get no replica.
        spread: Even (every group weighs 1) or Weighted (members' weights).
        max_skew: optional hard limit. When a group cannot take its share
            (capacity, taints), the others may take the rest only up to
            ``max_skew`` replicas above the weighted level of the most
            constrained group; the remainder stays pending (like a topology
            spread constraint with DoNotSchedule). Groups with no online node
            do not count as constrained, so a site outage still fails over.
            None: place every replica somewhere, as evenly as capacity allows.
        members: the groups that take part, or None for every value the label
            has among eligible nodes.
    """

    by_label: str
    spread: Spread = Spread.EVEN
    max_skew: int | None = None
    members: tuple[GroupMember, ...] | None = None

    def weight(self, value: str) -> int:
        """The weight of group ``value`` (0 if it does not take part)."""
        if self.members is None:
            return 1
        for member in self.members:
            if member.value == value:
                return member.weight if self.spread is Spread.WEIGHTED else 1
        return 0


@dataclass(frozen=True, slots=True)
class GroupOverride:
    """Changes to the pod template (and replica count) for one group.

    An override never touches the template's ``nodeSelector`` or affinity:
    the group already decides where the pods go, and the template's own
    constraints (architecture, hardware) still hold inside it.

    Attributes:
        group: the group's label value.
        replicas: fixed replica count for the group (Replicas mode only).
        container: the container the image/env/args/resources apply to;
            None for every container.
        image: replacement image.
        env: env entries (API JSON), merged by name over the container's.
        args: replacement args.
        resources: requests/limits (API JSON), merged per resource.
        tolerations: extra tolerations (API JSON) for pods in this group.
    """

    group: str
    replicas: int | None = None
    container: str | None = None
    image: str | None = None
    env: tuple[Mapping[str, Any], ...] | None = None
    args: tuple[str, ...] | None = None
    resources: Mapping[str, Any] | None = None
    tolerations: tuple[Mapping[str, Any], ...] | None = None

    @property
    def changes_template(self) -> bool:
        """Whether this override changes the pod template (not only replicas)."""
        return any(
            v is not None
            for v in (self.image, self.env, self.args, self.resources, self.tolerations)
        )


@dataclass(frozen=True, slots=True)
class GroupTemplate:
    """The effective pod template of one group (overrides applied).

    Attributes:
        template: the PodTemplateSpec JSON (do not mutate: shared).
        hash: 10 hex digits identifying the template (the template-hash label).
        shape: requests, selectors and tolerations derived from it.
    """

    template: Mapping[str, Any]
    hash: str
    shape: PodShape


@dataclass(frozen=True, slots=True)
class PlacementSpec:
    """The validated ``spec`` of an EdgePlacement. See the module docstring."""

    template: Mapping[str, Any]
    mode: Mode = Mode.REPLICAS
    replicas: int | None = None
    replicas_per_group: int | None = None
    node_selector: LabelSelector = field(default_factory=LabelSelector)
    groups: Groups | None = None
    overrides: tuple[GroupOverride, ...] = ()
    priority: int = 0
    offline_toleration_seconds: int = DEFAULT_OFFLINE_TOLERATION_S
    update_strategy: UpdateStrategy = UpdateStrategy()

    def overrides_for(self, group: str) -> tuple[GroupOverride, ...]:
        """The overrides that apply to ``group``, in document order."""
        return tuple(o for o in self.overrides if o.group == group)

    def fixed_replicas(self) -> dict[str, int]:
        """Groups whose replica count an override fixes."""
        return {o.group: o.replicas for o in self.overrides if o.replicas is not None}

    def total_replicas(self) -> int:
        """The total replica count in Replicas mode without replicasPerGroup.

        ``replicas`` when given; otherwise the sum of the groups' fixed counts
        when overrides fix any; otherwise 1 (as a Deployment defaults).
        """
        if self.replicas is not None:
            return self.replicas
        fixed = self.fixed_replicas()
        return sum(fixed.values()) if fixed else 1


@dataclass(frozen=True, slots=True)
class OwnerRef:
    """The object pods are owned by (the placement, or a Deployment/DaemonSet)."""

    api_version: str
    kind: str
    name: str
    uid: str

    def to_json(self) -> dict[str, Any]:
        """An ownerReferences entry marking the controller."""
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


@dataclass(frozen=True, slots=True)
class Placement:
    """A parsed placement: identity, age, spec, owner.

    Attributes:
        key: kind, namespace and name.
        uid: the object's uid (owner reference of its pods).
        generation: ``metadata.generation`` (status' observedGeneration).
        created: ``metadata.creationTimestamp`` in seconds since the epoch
            (ties in priority go to the smaller).
        spec: the validated spec.
        owner: the owner written on pods.
        rebalance: the value of the rebalance annotation ("" if absent).
    """

    key: PlacementKey
    uid: str
    generation: int
    created: float
    spec: PlacementSpec
    owner: OwnerRef
    rebalance: str = ""
    _templates: dict[str, GroupTemplate] = field(default_factory=dict, compare=False, repr=False)

    @property
    def namespace(self) -> str:
        return self.key.namespace

    @property
    def name(self) -> str:
        return self.key.name

    def rank(self) -> tuple[int, float, PlacementKey]:
        """Sort key: higher priority first, then older, then by key."""
        return (-self.spec.priority, self.created, self.key)

    def group_template(self, group: str) -> GroupTemplate:
        """The effective template for ``group`` ("" for the ungrouped case).

        Computed once per group and cached; groups without template overrides
        share the base template.
        """
        overrides = tuple(o for o in self.spec.overrides_for(group) if o.changes_template)
        cache_key = group if overrides else ""
        cached = self._templates.get(cache_key)
        if cached is None:
            template = (
                apply_overrides(self.spec.template, overrides)
                if overrides
                else (self.spec.template)
            )
            shape = pod_shape(template, "spec.template")
            cached = GroupTemplate(template, template_hash(template), shape)
            self._templates[cache_key] = cached
        return cached


def template_hash(template: Mapping[str, Any]) -> str:
    """10 hex digits of BLAKE2b over the canonical JSON of a pod template."""
    data = json.dumps(template, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.blake2b(data, digest_size=5).hexdigest()


def apply_overrides(
    template: Mapping[str, Any], overrides: tuple[GroupOverride, ...]
) -> dict[str, Any]:
    """Apply group overrides to a pod template and return the new template.

    The template's ``nodeSelector`` and ``affinity`` are never changed.
    """
    out = copy.deepcopy(dict(template))
    spec = out.setdefault("spec", {})
    for override in overrides:
        for container in spec.get("containers", []):
            if override.container is not None and container.get("name") != override.container:
                continue
            if override.image is not None:
                container["image"] = override.image
            if override.args is not None:
                container["args"] = list(override.args)
            if override.env is not None:
                merged = {e["name"]: e for e in container.get("env") or []}
                for entry in override.env:
                    merged[entry["name"]] = copy.deepcopy(dict(entry))
                container["env"] = list(merged.values())
            if override.resources is not None:
                resources = container.setdefault("resources", {})
                for part in ("requests", "limits"):
                    if part in override.resources:
                        resources[part] = {
                            **(resources.get(part) or {}),
                            **override.resources[part],
                        }
        if override.tolerations is not None:
            spec["tolerations"] = list(spec.get("tolerations") or []) + [
                copy.deepcopy(dict(t)) for t in override.tolerations
            ]
    return out


# --- parsing -------------------------------------------------------------------------


def parse_timestamp(value: object, path: str) -> float:
    """Parse an RFC 3339 timestamp (``2024-05-01T12:00:00Z``) into epoch seconds.

    Raises:
        InvalidSpec: the value is not an RFC 3339 timestamp.
    """
    if not isinstance(value, str):
        raise InvalidSpec(path, f"must be an RFC 3339 timestamp, got {value!r}")
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidSpec(path, f"must be an RFC 3339 timestamp, got {value!r}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.timestamp()


def _int(raw: object, path: str, *, minimum: int | None = None) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise InvalidSpec(path, f"must be an integer, got {raw!r}")
    if minimum is not None and raw < minimum:
        raise InvalidSpec(path, f"must be at least {minimum}, got {raw}")
    if abs(raw) > _INT32_MAX:
        raise InvalidSpec(path, f"must fit in 32 bits, got {raw}")
    return raw


def _int_or_percent(raw: object, path: str) -> IntOrPercent:
    if isinstance(raw, str):
        match = _PERCENT.match(raw)
        if match is None or int(match[1]) > 100:
            raise InvalidSpec(path, f"must be an integer or a percentage 0%-100%, got {raw!r}")
        return IntOrPercent(int(match[1]), True)
    return IntOrPercent(_int(raw, path, minimum=0))


def _object(raw: object, path: str, allowed: set[str]) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise InvalidSpec(path, "must be an object")
    unknown = set(raw) - allowed
    if unknown:
        raise InvalidSpec(path, f"unknown field(s): {', '.join(sorted(unknown))}")
    return raw


def _groups(raw: object, path: str) -> Groups:
    raw = _object(raw, path, {"byLabel", "spread", "maxSkew", "members"})
    by_label = check_label_key(raw.get("byLabel"), f"{path}.byLabel")
    spread_raw = raw.get("spread", "Even")
    try:
        spread = Spread(spread_raw)
    except ValueError:
        raise InvalidSpec(f"{path}.spread", f"{spread_raw!r} is not Even or Weighted") from None
    max_skew = None
    if raw.get("maxSkew") is not None:
        max_skew = _int(raw["maxSkew"], f"{path}.maxSkew", minimum=1)
    members = None
    if raw.get("members") is not None:
        if not isinstance(raw["members"], list) or not raw["members"]:
            raise InvalidSpec(f"{path}.members", "must be a non-empty list")
        parsed = []
        seen = set()
        for i, entry in enumerate(raw["members"]):
            mpath = f"{path}.members[{i}]"
            entry = _object(entry, mpath, {"value", "weight"})
            value = check_label_value(entry.get("value"), f"{mpath}.value")
            if value in seen:
                raise InvalidSpec(f"{mpath}.value", f"duplicate group {value!r}")
            seen.add(value)
            weight = 1
            if entry.get("weight") is not None:
                weight = _int(entry["weight"], f"{mpath}.weight", minimum=0)
                if spread is Spread.EVEN and weight != 1:
                    raise InvalidSpec(f"{mpath}.weight", "weights need spread: Weighted")
            parsed.append(GroupMember(value, weight))
        members = tuple(parsed)
        if spread is Spread.WEIGHTED and not any(m.weight for m in members):
            raise InvalidSpec(f"{path}.members", "at least one weight must be positive")
    elif spread is Spread.WEIGHTED:
        raise InvalidSpec(f"{path}.members", "spread: Weighted needs members with weights")
    return Groups(by_label, spread, max_skew, members)


def _override(raw: object, path: str, template: Mapping[str, Any]) -> GroupOverride:
    raw = _object(
        raw,
        path,
        {"group", "replicas", "container", "image", "env", "args", "resources", "tolerations"},
    )
    group = check_label_value(raw.get("group"), f"{path}.group")
    replicas = None
    if raw.get("replicas") is not None:
        replicas = _int(raw["replicas"], f"{path}.replicas", minimum=0)
    container = raw.get("container")
    names = [c.get("name") for c in template["spec"]["containers"]]
    if container is not None and container not in names:
        raise InvalidSpec(
            f"{path}.container", f"{container!r} is not a container of the template ({names})"
        )
    image = raw.get("image")
    if image is not None and (not isinstance(image, str) or not image.strip()):
        raise InvalidSpec(f"{path}.image", "must be a non-empty string")
    env = raw.get("env")
    if env is not None:
        if not isinstance(env, list):
            raise InvalidSpec(f"{path}.env", "must be a list of env entries")
        for i, entry in enumerate(env):
            if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
                raise InvalidSpec(f"{path}.env[{i}]", "must be an object with a name")
        env = tuple(copy.deepcopy(dict(e)) for e in env)
    args = raw.get("args")
    if args is not None:
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise InvalidSpec(f"{path}.args", "must be a list of strings")
        args = tuple(args)
    resources = raw.get("resources")
    if resources is not None:
        resources = _object(resources, f"{path}.resources", {"requests", "limits"})
        for part in ("requests", "limits"):
            resource_units(resources.get(part), f"{path}.resources.{part}")
        resources = copy.deepcopy(dict(resources))
    tolerations = raw.get("tolerations")
    if tolerations is not None:
        parse_tolerations(tolerations, f"{path}.tolerations")
        tolerations = tuple(copy.deepcopy(dict(t)) for t in tolerations)
    return GroupOverride(group, replicas, container, image, env, args, resources, tolerations)


_SPEC_FIELDS = {
    "template",
    "mode",
    "replicas",
    "replicasPerGroup",
    "nodeSelector",
    "groups",
    "overrides",
    "priority",
    "offlineTolerationSeconds",
    "updateStrategy",
}


def template_images(template: Mapping[str, Any]) -> tuple[str, ...]:
    """The images of a PodTemplateSpec's init containers and containers, first seen
    first, each once."""
    spec = template.get("spec") or {}
    images: list[str] = []
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or ():
            image = container.get("image") if isinstance(container, Mapping) else None
            if isinstance(image, str) and image and image not in images:
                images.append(image)
    return tuple(images)


def _check_prepullable(template: Mapping[str, Any], path: str) -> None:
    """The EdgeImagePrePull the template asks for could not exist (the update would wait
    for it forever): too many images, or one outside the reference grammar."""
    images = template_images(template)
    if len(images) > MAX_IMAGES:
        raise InvalidSpec(path, f"{len(images)} images cannot be pre-pulled (at most {MAX_IMAGES})")
    for image in images:
        try:
            check_image(image)
        except InvalidMessage:
            raise InvalidSpec(path, f"image {image[:80]!r} cannot be pre-pulled") from None


def parse_spec(raw: object, path: str = "spec") -> PlacementSpec:
    """Parse and validate the ``spec`` of an EdgePlacement.

    Args:
        raw: the spec JSON object.
        path: its JSON path, for errors.

    Returns:
        The validated spec.

    Raises:
        InvalidSpec: naming the first invalid field, e.g.
            ``spec.overrides[1].container: 'web' is not a container of the template``.
    """
    raw = _object(raw, path, _SPEC_FIELDS)
    if "template" not in raw:
        raise InvalidSpec(f"{path}.template", "is required")
    template = copy.deepcopy(raw["template"])
    pod_shape(template, f"{path}.template")
    mode_raw = raw.get("mode", "Replicas")
    try:
        mode = Mode(mode_raw)
    except ValueError:
        raise InvalidSpec(f"{path}.mode", f"{mode_raw!r} is not Replicas or PerNode") from None
    replicas = None
    if raw.get("replicas") is not None:
        replicas = _int(raw["replicas"], f"{path}.replicas", minimum=0)
    per_group = None
    if raw.get("replicasPerGroup") is not None:
        per_group = _int(raw["replicasPerGroup"], f"{path}.replicasPerGroup", minimum=0)
    node_selector = parse_label_selector(raw.get("nodeSelector"), f"{path}.nodeSelector")
    groups = _groups(raw["groups"], f"{path}.groups") if raw.get("groups") is not None else None
    overrides_raw = raw.get("overrides") or []
    if not isinstance(overrides_raw, list):
        raise InvalidSpec(f"{path}.overrides", "must be a list")
    overrides = tuple(
        _override(o, f"{path}.overrides[{i}]", template) for i, o in enumerate(overrides_raw)
    )
    if overrides and groups is None:
        raise InvalidSpec(f"{path}.overrides", "overrides apply to groups: set spec.groups")
    fixed: dict[str, int] = {}
    for i, override in enumerate(overrides):
        if override.replicas is None:
            continue
        if override.group in fixed and fixed[override.group] != override.replicas:
            raise InvalidSpec(
                f"{path}.overrides[{i}].replicas",
                f"group {override.group!r} already has replicas {fixed[override.group]}",
            )
        fixed[override.group] = override.replicas
    if groups is not None and groups.members is not None:
        members = {m.value for m in groups.members}
        for i, override in enumerate(overrides):
            if override.group not in members:
                raise InvalidSpec(
                    f"{path}.overrides[{i}].group",
                    f"{override.group!r} is not one of spec.groups.members",
                )
    if mode is Mode.PER_NODE:
        for name, value in (("replicas", replicas), ("replicasPerGroup", per_group)):
            if value is not None:
                raise InvalidSpec(f"{path}.{name}", "must not be set with mode: PerNode")
        if fixed:
            raise InvalidSpec(f"{path}.overrides", "replicas overrides need mode: Replicas")
        if groups is not None and (groups.max_skew is not None or groups.spread is Spread.WEIGHTED):
            raise InvalidSpec(
                f"{path}.groups", "PerNode uses groups for overrides only: no spread or maxSkew"
            )
    else:
        if replicas is not None and per_group is not None:
            raise InvalidSpec(
                f"{path}.replicasPerGroup", "set replicas or replicasPerGroup, not both"
            )
        if per_group is not None and groups is None:
            raise InvalidSpec(f"{path}.replicasPerGroup", "needs spec.groups")
        if replicas is not None and sum(fixed.values()) > replicas:
            raise InvalidSpec(
                f"{path}.overrides",
                f"group replicas add up to {sum(fixed.values())}, more than spec.replicas "
                f"({replicas})",
            )
    priority = _int(raw.get("priority", 0), f"{path}.priority")
    tolerance = _int(
        raw.get("offlineTolerationSeconds", DEFAULT_OFFLINE_TOLERATION_S),
        f"{path}.offlineTolerationSeconds",
        minimum=0,
    )
    strategy = UpdateStrategy()
    if raw.get("updateStrategy") is not None:
        spath = f"{path}.updateStrategy"
        sraw = _object(raw["updateStrategy"], spath, {"maxUnavailable", "maxSurge", "prePull"})
        pre_pull = sraw.get("prePull", False)
        if not isinstance(pre_pull, bool):
            raise InvalidSpec(f"{spath}.prePull", "must be true or false")
        strategy = UpdateStrategy(
            _int_or_percent(sraw.get("maxUnavailable", "25%"), f"{spath}.maxUnavailable"),
            _int_or_percent(sraw.get("maxSurge", "25%"), f"{spath}.maxSurge"),
            pre_pull,
        )
        if strategy.max_unavailable.value == 0 and strategy.max_surge.value == 0:
            raise InvalidSpec(spath, "maxUnavailable and maxSurge must not both be 0")
        if pre_pull:
            _check_prepullable(template, f"{spath}.prePull")
    return PlacementSpec(
        template=template,
        mode=mode,
        replicas=replicas,
        replicas_per_group=per_group,
        node_selector=node_selector,
        groups=groups,
        overrides=overrides,
        priority=priority,
        offline_toleration_seconds=tolerance,
        update_strategy=strategy,
    )


def parse_metadata(obj: Mapping[str, Any], kind: str) -> tuple[str, str, str, int, float, dict]:
    """Validate an object's metadata: ``(namespace, name, uid, generation, created, annotations)``.

    Raises:
        InvalidSpec: the name is missing or not a DNS subdomain, or a field
            has the wrong type.
    """
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        raise InvalidSpec("metadata", "is required")
    name = metadata.get("name")
    if not isinstance(name, str) or not name or len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        raise InvalidSpec("metadata.name", f"{name!r} is not a valid {kind} name")
    namespace = metadata.get("namespace") or "default"
    if not isinstance(namespace, str):
        raise InvalidSpec("metadata.namespace", "must be a string")
    uid = metadata.get("uid") or ""
    generation = metadata.get("generation") or 0
    if isinstance(generation, bool) or not isinstance(generation, int):
        raise InvalidSpec("metadata.generation", "must be an integer")
    created_raw = metadata.get("creationTimestamp")
    created = parse_timestamp(created_raw, "metadata.creationTimestamp") if created_raw else 0.0
    annotations = metadata.get("annotations") or {}
    if not isinstance(annotations, Mapping):
        raise InvalidSpec("metadata.annotations", "must be a map")
    return namespace, name, str(uid), generation, created, dict(annotations)


def parse_placement(obj: Mapping[str, Any]) -> Placement:
    """Parse an EdgePlacement JSON object (as the API returns it).

    Args:
        obj: the whole object: apiVersion, kind, metadata, spec.

    Returns:
        The placement; its pods are owned by the EdgePlacement itself.

    Raises:
        InvalidSpec: wrong apiVersion/kind, bad metadata, or an invalid spec
            (the error's ``path`` names the field).
    """
    if not isinstance(obj, Mapping):
        raise InvalidSpec("", "an EdgePlacement must be a JSON object")
    if obj.get("apiVersion", API_VERSION) != API_VERSION:
        raise InvalidSpec("apiVersion", f"must be {API_VERSION}, got {obj.get('apiVersion')!r}")
    if obj.get("kind", KIND) != KIND:
        raise InvalidSpec("kind", f"must be {KIND}, got {obj.get('kind')!r}")
    namespace, name, uid, generation, created, annotations = parse_metadata(obj, KIND)
    spec = parse_spec(obj.get("spec"))
    return Placement(
        key=PlacementKey(KIND, namespace, name),
        uid=uid,
        generation=generation,
        created=created,
        spec=spec,
        owner=OwnerRef(API_VERSION, KIND, name, uid),
        rebalance=str(annotations.get(ANNOTATION_REBALANCE, "")),
    )
