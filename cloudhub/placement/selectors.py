"""Label selectors, node selector terms, taints and tolerations.

The matching rules are Kubernetes' own:

- A label selector ANDs its ``matchLabels`` and ``matchExpressions``; ``In``
  needs the key present with one of the values, ``NotIn`` matches when the
  key is absent or has none of the values, ``Exists``/``DoesNotExist`` test
  the key only (``metav1.LabelSelector``).
- Node affinity's ``nodeSelectorTerms`` are ORed; the expressions inside one
  term are ANDed; ``Gt``/``Lt`` compare the label value as an integer;
  ``matchFields`` supports ``metadata.name`` only (``v1.NodeSelector``).
- A toleration matches a taint when the effects agree (an empty toleration
  effect matches every effect), the keys agree (an empty key with ``Exists``
  matches every key) and, for ``Equal``, the values agree (``v1.Toleration``).
  Only ``NoSchedule`` and ``NoExecute`` taints repel; ``PreferNoSchedule`` is
  a preference that placement does not enforce, as the scheduler treats it.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cloudhub.placement.errors import InvalidSpec

__all__ = [
    "LabelSelector",
    "NodeSelectorTerm",
    "Operator",
    "Requirement",
    "Taint",
    "TaintEffect",
    "Toleration",
    "check_label_key",
    "check_label_value",
    "parse_label_selector",
    "parse_node_affinity",
    "parse_taints",
    "parse_tolerations",
    "tolerates_all",
]

_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def check_label_key(key: object, path: str) -> str:
    """Validate a label key (``[prefix/]name``) as the API does.

    Raises:
        InvalidSpec: ``key`` is not a valid label key.
    """
    if not isinstance(key, str) or not key:
        raise InvalidSpec(path, f"label key must be a non-empty string, got {key!r}")
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        raise InvalidSpec(path, f"label key prefix {prefix!r} is not a DNS subdomain")
    if not _NAME.match(name):
        raise InvalidSpec(path, f"label key name {name!r} is not a valid label name")
    return key


def check_label_value(value: object, path: str) -> str:
    """Validate a label value (empty, or up to 63 alphanumerics, ``-_.`` inside).

    Raises:
        InvalidSpec: ``value`` is not a valid label value.
    """
    if not isinstance(value, str):
        raise InvalidSpec(path, f"label value must be a string, got {value!r}")
    if value and not _NAME.match(value):
        raise InvalidSpec(path, f"{value!r} is not a valid label value")
    return value


class Operator(str, enum.Enum):
    """Set-based selector operators."""

    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"
    GT = "Gt"
    LT = "Lt"


@dataclass(frozen=True, slots=True)
class Requirement:
    """One ``matchExpressions`` entry.

    Attributes:
        key: the label key.
        operator: how the key's value is tested.
        values: the values for In/NotIn (one integer string for Gt/Lt; empty
            for Exists/DoesNotExist).
    """

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a node with ``labels`` satisfies this requirement."""
        op = self.operator
        if op is Operator.IN:
            return labels.get(self.key) in self.values
        if op is Operator.NOT_IN:
            return labels.get(self.key) not in self.values
        if op is Operator.EXISTS:
            return self.key in labels
        if op is Operator.DOES_NOT_EXIST:
            return self.key not in labels
        value = labels.get(self.key)
        if value is None:
            return False
        try:
            number = int(value)
        except ValueError:
            return False
        bound = int(self.values[0])
        return number > bound if op is Operator.GT else number < bound

    def describe(self) -> str:
        """Human-readable form, e.g. ``zone In [a, b]``."""
        if self.operator in (Operator.EXISTS, Operator.DOES_NOT_EXIST):
            return f"{self.key} {self.operator.value}"
        return f"{self.key} {self.operator.value} [{', '.join(self.values)}]"


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A ``metav1.LabelSelector``. The empty selector matches every node.

    Attributes:
        match_labels: ``(key, value)`` pairs, sorted by key.
        match_expressions: requirements, in document order.
    """

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()

    @property
    def empty(self) -> bool:
        """True when the selector has no terms (matches everything)."""
        return not self.match_labels and not self.match_expressions

    def requirements(self) -> tuple[Requirement, ...]:
        """All terms as requirements (``matchLabels`` become ``In`` with one value)."""
        return tuple(Requirement(k, Operator.IN, (v,)) for k, v in self.match_labels) + (
            self.match_expressions
        )

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` satisfy every term."""
        for key, value in self.match_labels:
            if labels.get(key) != value:
                return False
        return all(req.matches(labels) for req in self.match_expressions)

    def to_json(self) -> dict[str, Any]:
        """The selector as API JSON."""
        out: dict[str, Any] = {}
        if self.match_labels:
            out["matchLabels"] = dict(self.match_labels)
        if self.match_expressions:
            out["matchExpressions"] = [
                {"key": r.key, "operator": r.operator.value, "values": list(r.values)}
                if r.values
                else {"key": r.key, "operator": r.operator.value}
                for r in self.match_expressions
            ]
        return out


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """One term of node affinity's ``nodeSelectorTerms`` (its parts are ANDed).

    Attributes:
        expressions: requirements on node labels.
        node_names: from ``matchFields`` on ``metadata.name``: each entry is
            the allowed names of one field requirement (all must hold);
            ``None`` for a NotIn entry is expressed as ``excluded_names``.
        excluded_names: names excluded by a ``metadata.name NotIn`` field.
    """

    expressions: tuple[Requirement, ...] = ()
    node_names: tuple[tuple[str, ...], ...] = ()
    excluded_names: tuple[str, ...] = ()

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        """Whether the node ``name`` with ``labels`` satisfies this term."""
        if name in self.excluded_names:
            return False
        if any(name not in allowed for allowed in self.node_names):
            return False
        return all(req.matches(labels) for req in self.expressions)


class TaintEffect(str, enum.Enum):
    """Taint effects."""

    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


@dataclass(frozen=True, slots=True)
class Taint:
    """A node taint."""

    key: str
    value: str
    effect: TaintEffect

    def describe(self) -> str:
        """``key=value:Effect`` as kubectl prints it."""
        return (
            f"{self.key}={self.value}:{self.effect.value}"
            if self.value
            else (f"{self.key}:{self.effect.value}")
        )


@dataclass(frozen=True, slots=True)
class Toleration:
    """A pod toleration.

    Attributes:
        key: the taint key ("" with Exists tolerates every key).
        operator: ``"Equal"`` or ``"Exists"``.
        value: the taint value for Equal.
        effect: the effect tolerated, or None for all effects.
        toleration_seconds: for NoExecute, how long the pod stays after the
            taint appears (None: forever). Placement only reads it to write it
            back; pods it writes never carry it for the unreachable/not-ready taints.
    """

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: TaintEffect | None = None
    toleration_seconds: int | None = None

    def tolerates(self, taint: Taint) -> bool:
        """Whether this toleration matches ``taint`` (Kubernetes' ToleratesTaint)."""
        if self.effect is not None and self.effect is not taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.value == taint.value


def tolerates_all(
    tolerations: tuple[Toleration, ...], taints: tuple[Taint, ...], effects: frozenset[TaintEffect]
) -> Taint | None:
    """Return the first taint with an effect in ``effects`` not tolerated, or None."""
    for taint in taints:
        if taint.effect in effects and not any(t.tolerates(taint) for t in tolerations):
            return taint
    return None


def _requirement(raw: object, path: str, *, node_affinity: bool) -> Requirement:
    if not isinstance(raw, Mapping):
        raise InvalidSpec(path, "must be an object with key, operator and values")
    key = check_label_key(raw.get("key"), f"{path}.key")
    op_raw = raw.get("operator")
    try:
        op = Operator(op_raw)
    except ValueError:
        allowed = "In, NotIn, Exists, DoesNotExist" + (", Gt, Lt" if node_affinity else "")
        raise InvalidSpec(f"{path}.operator", f"{op_raw!r} is not one of {allowed}") from None
    if op in (Operator.GT, Operator.LT) and not node_affinity:
        raise InvalidSpec(f"{path}.operator", f"{op.value} is only valid in node affinity")
    values = raw.get("values") or []
    if not isinstance(values, list):
        raise InvalidSpec(f"{path}.values", "must be a list of strings")
    for i, value in enumerate(values):
        check_label_value(value, f"{path}.values[{i}]")
    if op in (Operator.IN, Operator.NOT_IN) and not values:
        raise InvalidSpec(f"{path}.values", f"must not be empty for {op.value}")
    if op in (Operator.EXISTS, Operator.DOES_NOT_EXIST) and values:
        raise InvalidSpec(f"{path}.values", f"must be empty for {op.value}")
    if op in (Operator.GT, Operator.LT):
        if len(values) != 1 or not re.fullmatch(r"-?\d+", values[0]):
            raise InvalidSpec(f"{path}.values", f"{op.value} needs exactly one integer value")
    return Requirement(key, op, tuple(values))


def parse_label_selector(raw: object, path: str) -> LabelSelector:
    """Parse a ``metav1.LabelSelector`` JSON object.

    Args:
        raw: the JSON object (None means the empty selector).
        path: its JSON path, for errors.

    Raises:
        InvalidSpec: a field has the wrong type, a key or value is not a valid
            label, an operator is unknown, or values disagree with the operator.
    """
    if raw is None:
        return LabelSelector()
    if not isinstance(raw, Mapping):
        raise InvalidSpec(path, "must be an object with matchLabels and/or matchExpressions")
    unknown = set(raw) - {"matchLabels", "matchExpressions"}
    if unknown:
        raise InvalidSpec(path, f"unknown field(s): {', '.join(sorted(unknown))}")
    labels = raw.get("matchLabels") or {}
    if not isinstance(labels, Mapping):
        raise InvalidSpec(f"{path}.matchLabels", "must be a map of label key to value")
    pairs = []
    for key, value in labels.items():
        check_label_key(key, f"{path}.matchLabels")
        check_label_value(value, f"{path}.matchLabels[{key}]")
        pairs.append((key, value))
    exprs = raw.get("matchExpressions") or []
    if not isinstance(exprs, list):
        raise InvalidSpec(f"{path}.matchExpressions", "must be a list")
    reqs = tuple(
        _requirement(e, f"{path}.matchExpressions[{i}]", node_affinity=False)
        for i, e in enumerate(exprs)
    )
    return LabelSelector(tuple(sorted(pairs)), reqs)


def parse_node_affinity(raw: object, path: str) -> tuple[NodeSelectorTerm, ...] | None:
    """Parse a pod's required node affinity into its ORed terms.

    Args:
        raw: ``spec.affinity`` of a pod template (None or without
            ``nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution``
            means no constraint).
        path: its JSON path.

    Returns:
        The terms, or None when there is no required node affinity.

    Raises:
        InvalidSpec: the affinity is malformed (an empty term list, a bad
            expression, a field other than ``metadata.name``).
    """
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise InvalidSpec(path, "must be an object")
    node_affinity = raw.get("nodeAffinity")
    if node_affinity is None:
        return None
    if not isinstance(node_affinity, Mapping):
        raise InvalidSpec(f"{path}.nodeAffinity", "must be an object")
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return None
    rpath = f"{path}.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    if not isinstance(required, Mapping) or not isinstance(required.get("nodeSelectorTerms"), list):
        raise InvalidSpec(rpath, "must have a nodeSelectorTerms list")
    terms = []
    for i, term in enumerate(required["nodeSelectorTerms"]):
        tpath = f"{rpath}.nodeSelectorTerms[{i}]"
        if not isinstance(term, Mapping):
            raise InvalidSpec(tpath, "must be an object")
        exprs = term.get("matchExpressions") or []
        fields = term.get("matchFields") or []
        if not isinstance(exprs, list) or not isinstance(fields, list):
            raise InvalidSpec(tpath, "matchExpressions and matchFields must be lists")
        reqs = tuple(
            _requirement(e, f"{tpath}.matchExpressions[{j}]", node_affinity=True)
            for j, e in enumerate(exprs)
        )
        names: list[tuple[str, ...]] = []
        excluded: list[str] = []
        for j, field in enumerate(fields):
            fpath = f"{tpath}.matchFields[{j}]"
            if not isinstance(field, Mapping) or field.get("key") != "metadata.name":
                raise InvalidSpec(fpath, "only the field metadata.name is supported")
            op = field.get("operator")
            values = field.get("values") or []
            if op == "In" and values:
                names.append(tuple(str(v) for v in values))
            elif op == "NotIn" and values:
                excluded.extend(str(v) for v in values)
            else:
                raise InvalidSpec(fpath, "metadata.name needs In or NotIn with values")
        terms.append(NodeSelectorTerm(reqs, tuple(names), tuple(excluded)))
    if not terms:
        raise InvalidSpec(f"{rpath}.nodeSelectorTerms", "must not be empty")
    return tuple(terms)


def parse_tolerations(raw: object, path: str) -> tuple[Toleration, ...]:
    """Parse a pod's ``tolerations`` list.

    Raises:
        InvalidSpec: an entry is malformed (unknown operator or effect,
            a value with Exists, an empty key with Equal).
    """
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise InvalidSpec(path, "must be a list")
    out = []
    for i, entry in enumerate(raw):
        epath = f"{path}[{i}]"
        if not isinstance(entry, Mapping):
            raise InvalidSpec(epath, "must be an object")
        key = entry.get("key") or ""
        if key:
            check_label_key(key, f"{epath}.key")
        op = entry.get("operator") or "Equal"
        if op not in ("Equal", "Exists"):
            raise InvalidSpec(f"{epath}.operator", f"{op!r} is not Equal or Exists")
        value = entry.get("value") or ""
        if not isinstance(value, str):
            raise InvalidSpec(f"{epath}.value", "must be a string")
        if op == "Exists" and value:
            raise InvalidSpec(f"{epath}.value", "must be empty when operator is Exists")
        if op == "Equal" and not key:
            raise InvalidSpec(f"{epath}.key", "must be set when operator is Equal")
        effect_raw = entry.get("effect") or None
        try:
            effect = TaintEffect(effect_raw) if effect_raw else None
        except ValueError:
            raise InvalidSpec(
                f"{epath}.effect",
                f"{effect_raw!r} is not NoSchedule, PreferNoSchedule or NoExecute",
            ) from None
        seconds = entry.get("tolerationSeconds")
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int)):
            raise InvalidSpec(f"{epath}.tolerationSeconds", "must be an integer")
        out.append(Toleration(key, op, value, effect, seconds))
    return tuple(out)


def parse_taints(raw: object) -> tuple[Taint, ...]:
    """Parse a Node's ``spec.taints``; entries with an unknown effect are skipped.

    A node is the API's object, not the user's: a taint this code does not know
    is ignored rather than failing the whole node (forward compatible).
    """
    if not isinstance(raw, list):
        return ()
    out = []
    for entry in raw:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("key"), str):
            continue
        try:
            effect = TaintEffect(entry.get("effect"))
        except ValueError:
            continue
        value = entry.get("value")
        out.append(Taint(entry["key"], value if isinstance(value, str) else "", effect))
    return tuple(out)
