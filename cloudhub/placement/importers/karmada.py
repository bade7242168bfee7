"""Karmada ``PropagationPolicy``/``ClusterPropagationPolicy`` (``policy.karmada.io``),
with ``OverridePolicy``/``ClusterOverridePolicy`` where present.

Rules:

- A member cluster becomes a group: nodes labelled ``apps.edgefleet.io/group=<cluster>``
  (``group_label``). ``clusterAffinity.clusterNames`` (and a ``labelSelector`` resolved
  with ``cluster_labels``) become the group members; ``exclude`` without names becomes a
  node selector ``<group_label> NotIn [...]``.
- ``clusterAffinity.fieldSelector`` (Karmada: keys ``provider``, ``region``, ``zone``;
  operators ``In``, ``NotIn``) becomes the placement's node selector on the labels of
  :data:`FIELD_LABELS`: ``topology.kubernetes.io/region`` and
  ``topology.kubernetes.io/zone`` (the well-known node labels) and
  ``apps.edgefleet.io/provider`` (Kubernetes has no node label for the provider: label
  the nodes of each cluster with it). A field selector elsewhere (override rules,
  static weights) picks clusters, which EdgeFleet does not have: it is dropped.
- ``Duplicated`` (Karmada's default) becomes ``replicasPerGroup``; ``Divided`` becomes a
  total spread Even, or Weighted by ``staticWeightList``.
- Override rules become per-group overrides, applied in Karmada's order (image, args,
  then plaintext). A plaintext rule that ``add``s or ``replace``s a container's
  ``image`` or ``args`` (``/spec/template/spec/containers/<i>/image``) or, with
  ``Duplicated``, ``/spec/replicas``, is translated; any other plaintext path is dropped.
- The workloads a policy selects must be among the documents given (pass the
  Deployment's file too).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from cloudhub.placement.errors import InvalidSpec
from cloudhub.placement.importers.common import (
    POD_WORKLOADS,
    Context,
    Doc,
    ImportResult,
    args_overrides,
    finish,
    image_overriders,
    image_overrides,
    ref,
)
from cloudhub.placement.importers.plaintext import plaintext_overrides
from cloudhub.placement.selectors import parse_label_selector
from cloudhub.placement.workloads import workload_spec

__all__ = ["FIELD_LABELS", "HANDLERS", "PROVIDER_LABEL"]

PROVIDER_LABEL = "apps.edgefleet.io/provider"
"""Node label naming a node's provider, which a Karmada cluster's ``spec.provider`` says
(Kubernetes has no well-known label for it)."""

FIELD_LABELS = {
    "provider": PROVIDER_LABEL,
    "region": "topology.kubernetes.io/region",
    "zone": "topology.kubernetes.io/zone",
}
"""The node label each Karmada cluster field of a ``fieldSelector`` corresponds to."""

_FIELD_OPERATORS = ("In", "NotIn")

#: Spec fields with no EdgeFleet counterpart, and whether leaving them out changes where
#: or what runs (the policy-versus-policy fields matter only when several policies select
#: one workload; ``association``/``propagateDeps``: the hub sends every ConfigMap and
#: Secret a pod references anyway).
_SPEC_FIELDS = {
    "schedulerName": True,
    "association": False,
    "propagateDeps": False,
    "failover": True,
    "conflictResolution": False,
    "priority": False,
    "preemption": False,
    "suspension": True,
    "activationPreference": False,
    "dependentOverrides": False,
}

_DEFAULT_SCHEDULER = "default-scheduler"


def _selected(selector: Mapping[str, Any], doc: Doc, policy_ns: str | None) -> bool:
    api = selector.get("apiVersion")
    if api and api != doc.obj.get("apiVersion"):
        return False
    if selector.get("kind") and selector["kind"] != doc.kind:
        return False
    if selector.get("name") and selector["name"] != doc.name:
        return False
    ns = selector.get("namespace") or policy_ns
    if ns and (doc.namespace or "default") != ns:
        return False
    if selector.get("labelSelector"):
        try:
            sel = parse_label_selector(selector["labelSelector"], "labelSelector")
        except InvalidSpec:
            return False
        if not sel.matches(doc.labels):
            return False
    return True


def _clusters_matching(
    target: Mapping[str, Any],
    ctx: Context,
    result: ImportResult,
    path: str,
    what: str,
    universe: list[str] | None,
    document: str = "",
) -> list[str] | None:
    """Cluster names a Karmada ClusterAffinity/targetCluster designates, or None if unknown.

    Args:
        target: the ClusterAffinity.
        result: where what cannot be resolved is recorded.
        path: the affinity's JSON path; ``what`` names it in messages; ``document`` is its
            document when it is not the result's.
        universe: the clusters it chooses among when it names none (the placement's
            member clusters), or None when they are unknown.
    """
    names = list(target.get("clusterNames") or []) or None
    if target.get("labelSelector"):
        if not ctx.cluster_labels:
            result.drop(
                f"{path}.labelSelector",
                f"{what}: selects clusters by labels {target['labelSelector']}; EdgeFleet has "
                "no cluster objects (pass cluster_labels to resolve them to group names)",
                document=document,
            )
            return None
        sel = parse_label_selector(target["labelSelector"], "labelSelector")
        matched = sorted(c for c, labels in ctx.cluster_labels.items() if sel.matches(labels))
        names = [n for n in names if n in matched] if names is not None else matched
    if target.get("fieldSelector"):
        result.drop(
            f"{path}.fieldSelector",
            f"{what}: clusters selected by fields (provider/region/zone) not translated",
            document=document,
        )
    excluded = set(target.get("exclude") or [])
    if names is None:
        if universe is None and excluded:
            result.drop(
                f"{path}.exclude",
                f"{what}: every cluster but {', '.join(sorted(excluded))}, and the placement "
                "lists no clusters to take them from",
                document=document,
            )
            return None
        names = list(universe or [])
    return [n for n in names if n not in excluded]


def _field_selector(raw: object, result: ImportResult, path: str) -> list[dict[str, Any]]:
    """A Karmada field selector as node selector expressions on :data:`FIELD_LABELS`
    (what cannot be translated is recorded: leaving it out widens the placement)."""
    if not raw:
        return []
    exprs = raw.get("matchExpressions") if isinstance(raw, Mapping) else None
    if not isinstance(exprs, list):
        result.drop(f"{path}.matchExpressions", "a field selector needs a list of matchExpressions")
        return []
    out = []
    for j, expr in enumerate(exprs):
        epath = f"{path}.matchExpressions[{j}]"
        key = expr.get("key") if isinstance(expr, Mapping) else None
        operator = expr.get("operator") if isinstance(expr, Mapping) else None
        values = expr.get("values") if isinstance(expr, Mapping) else None
        if key not in FIELD_LABELS or operator not in _FIELD_OPERATORS:
            result.drop(
                epath,
                f"field selector {expr!r} not translated: Karmada selects clusters by "
                f"{', '.join(FIELD_LABELS)} with In or NotIn only",
            )
        elif (
            not isinstance(values, list)
            or not values
            or not all(isinstance(v, str) and v for v in values)
        ):
            result.drop(epath, f"field selector on {key}: values must be a non-empty string list")
        else:
            out.append({"key": FIELD_LABELS[key], "operator": operator, "values": list(values)})
    if out:
        result.notes.append(
            "clusters selected by fields are the nodes with the labels "
            + ", ".join(f"{FIELD_LABELS[k]} ({k})" for k in FIELD_LABELS)
        )
    return out


def _selected_workloads(
    ctx: Context, spec: Mapping[str, Any], policy_ns: str | None, result: ImportResult
) -> list[Doc]:
    workloads: list[Doc] = []
    for i, selector in enumerate(spec.get("resourceSelectors") or []):
        kind = selector.get("kind")
        if kind not in ("Deployment", "DaemonSet"):
            result.drop(
                f"spec.resourceSelectors[{i}]",
                f"resourceSelectors[{i}] selects {kind} {selector.get('name', '')}".rstrip()
                + ": EdgeFleet places pods only; apply it to the cluster as it is",
                changes_meaning=kind in POD_WORKLOADS,
            )
            continue
        found = [w for w in ctx.workloads() if _selected(selector, w, policy_ns)]
        if not found:
            name = selector.get("name") or "(any name)"
            result.drop(
                f"spec.resourceSelectors[{i}]",
                f"resourceSelectors[{i}]: {kind} {policy_ns or ''}/{name} is not among the "
                "documents given; pass its manifest too to translate it",
            )
        workloads.extend(w for w in found if w not in workloads)
    return workloads


def _without_equivalent(spec: Mapping[str, Any], result: ImportResult) -> None:
    placement = spec.get("placement") or {}
    for key in ("clusterAffinities", "clusterTolerations", "spreadConstraints"):
        if placement.get(key):
            result.drop(f"spec.placement.{key}", f"placement.{key} not translated: {_why_not(key)}")
    for key, changes_meaning in _SPEC_FIELDS.items():
        if key in spec:
            if key == "schedulerName" and spec[key] == _DEFAULT_SCHEDULER:
                changes_meaning = False
            result.drop(
                f"spec.{key}",
                f"spec.{key} ({spec[key]!r}) has no EdgeFleet equivalent; ignored",
                changes_meaning=changes_meaning,
            )


def _placement_groups(
    ctx: Context, affinity: Mapping[str, Any], result: ImportResult
) -> tuple[list[str], list[dict[str, Any]]] | None:
    """The member clusters (``[]``: every group) and the node selector expressions a
    policy's clusterAffinity comes to; None when it selects no known cluster."""
    path = "spec.placement.clusterAffinity"
    exprs = _field_selector(affinity.get("fieldSelector"), result, f"{path}.fieldSelector")
    target = {k: v for k, v in affinity.items() if k != "fieldSelector"}
    named = bool(target.get("clusterNames") or target.get("labelSelector"))
    if not named and target.get("exclude"):
        excluded = sorted(str(c) for c in target["exclude"])
        exprs.append({"key": ctx.group_label, "operator": "NotIn", "values": excluded})
        result.notes.append(f"excluded clusters: nodes labelled {ctx.group_label} NotIn {excluded}")
        return [], exprs
    clusters = _clusters_matching(target, ctx, result, path, "placement.clusterAffinity", [])
    if clusters is None:
        return [], exprs
    if named and not clusters:
        result.drop(
            path,
            "placement.clusterAffinity selects none of the clusters known "
            f"({', '.join(sorted(ctx.cluster_labels)) or 'none'}): no placement made",
        )
        return None
    if not affinity:
        result.notes.append(
            "placement.clusterAffinity is empty: Karmada uses every cluster; placed over every "
            "group"
        )
    return clusters, exprs


def propagation_policy(ctx: Context, doc: Doc) -> ImportResult:
    result = ImportResult(doc.source, doc.kind, ref(doc, ctx))
    spec = doc.obj.get("spec") or {}
    policy_ns = None if doc.kind.startswith("Cluster") else (doc.namespace or ctx.namespace)
    placement = spec.get("placement") or {}
    workloads = _selected_workloads(ctx, spec, policy_ns, result)
    _without_equivalent(spec, result)
    chosen = _placement_groups(ctx, placement.get("clusterAffinity") or {}, result)
    if chosen is None:
        return result
    clusters, exprs = chosen
    groups: dict[str, Any] = {"byLabel": ctx.group_label}
    if clusters:
        groups["members"] = [{"value": c} for c in clusters]
        result.notes.append(
            f"member clusters {', '.join(clusters)} are the node groups "
            f"{ctx.group_label}={{{','.join(clusters)}}}"
        )
    for workload in workloads:
        base = workload_spec(workload.obj)
        spec_out: dict[str, Any] = {
            "template": base["template"],
            "updateStrategy": base["updateStrategy"],
            "groups": copy.deepcopy(groups),
        }
        if exprs:
            spec_out["nodeSelector"] = {"matchExpressions": copy.deepcopy(exprs)}
        if workload.kind == "DaemonSet":
            spec_out["mode"] = "PerNode"
        else:
            _replicas(ctx, placement, base["replicas"], spec_out, clusters, result)
        _apply_overrides(ctx, workload, spec_out, result, clusters)
        finish(
            result,
            workload.name,
            workload.namespace or policy_ns or ctx.namespace,
            spec_out,
            doc.source,
        )
    return result


def _replicas(
    ctx: Context,
    placement: Mapping[str, Any],
    replicas: int,
    spec_out: dict[str, Any],
    clusters: list[str],
    result: ImportResult,
) -> None:
    """Karmada's replicaScheduling as replicasPerGroup (Duplicated) or a spread total."""
    scheduling = placement.get("replicaScheduling") or {}
    path = "spec.placement.replicaScheduling"
    if (scheduling.get("replicaSchedulingType") or "Duplicated") == "Duplicated":
        spec_out["replicasPerGroup"] = replicas
        result.notes.append(f"Duplicated: every cluster (group) runs {replicas} replicas")
        return
    spec_out["replicas"] = replicas
    preference = scheduling.get("replicaDivisionPreference") or "Weighted"
    weights = scheduling.get("weightPreference") or {}
    if preference == "Aggregated":
        result.drop(
            f"{path}.replicaDivisionPreference",
            "replicaDivisionPreference Aggregated (fill as few clusters as "
            "possible) not translated: spread Even instead",
        )
    elif weights.get("dynamicWeight"):
        result.drop(
            f"{path}.weightPreference.dynamicWeight",
            f"dynamicWeight {weights['dynamicWeight']} not translated: "
            "spread Even, capacity-aware, instead",
        )
    elif weights.get("staticWeightList"):
        members = {}
        for j, entry in enumerate(weights["staticWeightList"]):
            names = _clusters_matching(
                entry.get("targetCluster") or {},
                ctx,
                result,
                f"{path}.weightPreference.staticWeightList[{j}].targetCluster",
                f"staticWeightList[{j}]",
                clusters or None,
            )
            for name in names or []:
                members[name] = int(entry.get("weight") or 0)
        if members:
            order = clusters or sorted(members)
            spec_out["groups"]["spread"] = "Weighted"
            spec_out["groups"]["members"] = [
                {"value": c, "weight": members.get(c, 0)} for c in order
            ]


def _why_not(key: str) -> str:
    return {
        "clusterAffinities": "ordered fallback cluster groups have no equivalent; only "
        "clusterAffinity is used",
        "clusterTolerations": "cluster taints have no equivalent (node taints are honoured "
        "through the pod template's tolerations)",
        "spreadConstraints": "min/max number of groups has no equivalent; replicas spread "
        "over every member group",
    }[key]


#: Overriders with no per-group EdgePlacement override, and whether leaving them out
#: changes what runs (labels and annotations of the workload object itself do not).
_OVERRIDERS_DROPPED = {
    "commandOverrider": True,
    "labelsOverrider": False,
    "annotationsOverrider": False,
}


def _override_rules(policy: Doc) -> list[tuple[str, Mapping[str, Any]]]:
    """``(JSON path, rule)`` of an override policy's rules, with the legacy top-level
    ``targetCluster``/``overriders`` pair as one more rule."""
    pspec = policy.obj.get("spec") or {}
    rules = [
        (f"spec.overrideRules[{i}]", r) for i, r in enumerate(pspec.get("overrideRules") or [])
    ]
    if pspec.get("overriders"):
        legacy = {
            "targetCluster": pspec.get("targetCluster") or {},
            "overriders": pspec["overriders"],
        }
        rules.append(("spec", legacy))
    return rules


def _apply_overrides(
    ctx: Context,
    workload: Doc,
    spec_out: dict[str, Any],
    result: ImportResult,
    clusters: list[str],
) -> None:
    for policy in ctx.docs:
        if policy.group != "policy.karmada.io" or policy.kind not in (
            "OverridePolicy",
            "ClusterOverridePolicy",
        ):
            continue
        pspec = policy.obj.get("spec") or {}
        ns = None if policy.kind.startswith("Cluster") else (policy.namespace or ctx.namespace)
        selectors = pspec.get("resourceSelectors") or [{}]
        if not any(_selected(s, workload, ns) for s in selectors):
            continue
        what = f"{policy.kind} {ref(policy, ctx)}"
        for i, (path, rule) in enumerate(_override_rules(policy)):
            _apply_rule(ctx, policy, path, rule, f"{what} rule {i}", spec_out, result, clusters)


def _apply_rule(
    ctx: Context,
    policy: Doc,
    path: str,
    rule: Mapping[str, Any],
    what: str,
    spec_out: dict[str, Any],
    result: ImportResult,
    clusters: list[str],
) -> None:
    """One override rule as per-group overrides of the groups it targets."""
    document = policy.describe(ctx)
    target = rule.get("targetCluster") or {}
    targets = _clusters_matching(
        target,
        ctx,
        result,
        f"{path}.targetCluster",
        what,
        clusters or None,
        document,
    )
    overriders = rule.get("overriders") or {}
    if targets is None:
        return
    if clusters:
        # Karmada overrides what it propagates: clusters outside the placement get nothing.
        targets = [c for c in targets if c in clusters]
    if not targets:
        if target.get("clusterNames") or target.get("labelSelector"):
            result.notes.append(f"{what} applies to none of the placement's clusters")
        elif overriders:
            result.drop(
                f"{path}.overriders",
                f"{what}: applies to every cluster, and the placement lists none (its "
                "clusterAffinity names no clusters): not applied",
                document=document,
            )
        return
    template = spec_out["template"]
    opath = f"{path}.overriders"
    for key in overriders:
        if key not in ("imageOverrider", "argsOverrider", "plaintext"):
            result.drop(
                f"{opath}.{key}",
                f"{what}: {key} not translated (overrides change image, env, args and "
                "resources only)",
                changes_meaning=_OVERRIDERS_DROPPED.get(key, True),
                document=document,
            )
    images = image_overriders(
        template,
        overriders.get("imageOverrider") or [],
        result,
        f"{opath}.imageOverrider",
        what,
        document,
    )
    args = args_overrides(
        template,
        overriders.get("argsOverrider") or [],
        result,
        f"{opath}.argsOverrider",
        what,
        document,
    )
    plain = plaintext_overrides(
        template,
        overriders.get("plaintext") or [],
        result,
        f"{opath}.plaintext",
        what,
        document,
        replicas="replicasPerGroup" in spec_out,
    )
    overrides = spec_out.setdefault("overrides", [])
    for group in targets:
        overrides.extend(image_overrides(group, images))
        overrides.extend(
            {"group": group, "container": c, "args": a} for c, a in sorted(args.items())
        )
        overrides.extend({"group": group, **o} for o in plain)
    if images or args or plain:
        result.notes.append(f"{what} applied to groups {', '.join(targets)}")


def override_policy(ctx: Context, doc: Doc) -> ImportResult:
    result = ImportResult(doc.source, doc.kind, ref(doc, ctx))
    spec = doc.obj.get("spec") or {}
    ns = None if doc.kind.startswith("Cluster") else (doc.namespace or ctx.namespace)
    selected = [
        w
        for w in ctx.workloads()
        if any(_selected(s, w, ns) for s in spec.get("resourceSelectors") or [{}])
    ]
    propagated = []
    for policy in ctx.docs:
        if policy.group == "policy.karmada.io" and policy.kind.endswith("PropagationPolicy"):
            pns = None if policy.kind.startswith("Cluster") else (policy.namespace or ctx.namespace)
            for w in selected:
                if any(
                    _selected(s, w, pns)
                    for s in (policy.obj.get("spec") or {}).get("resourceSelectors") or []
                ):
                    propagated.append(w.name)
    if propagated:
        result.notes.append(
            "override rules considered for the placements of " + ", ".join(sorted(set(propagated)))
        )
    else:
        # Nothing it overrides is placed from these documents: nothing runs otherwise.
        result.drop(
            "spec.resourceSelectors",
            "selects no workload that a PropagationPolicy among the "
            "documents propagates: nothing to apply the rules to",
            changes_meaning=False,
        )
    return result


HANDLERS = {
    ("policy.karmada.io", "PropagationPolicy"): propagation_policy,
    ("policy.karmada.io", "ClusterPropagationPolicy"): propagation_policy,
    ("policy.karmada.io", "OverridePolicy"): override_policy,
    ("policy.karmada.io", "ClusterOverridePolicy"): override_policy,
}
