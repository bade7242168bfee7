"""Karmada ``PropagationPolicy``/``ClusterPropagationPolicy`` (``policy.karmada.io``),
with ``OverridePolicy``/``ClusterOverridePolicy`` where present.

A member cluster becomes a group: nodes labelled ``apps.edgefleet.io/group=<cluster>``
(``group_label``). ``Duplicated`` (Karmada's default) becomes ``replicasPerGroup``;
``Divided`` becomes a total spread Even, or Weighted by ``staticWeightList``. Cluster
label selectors are resolved with ``cluster_labels`` when given. The workloads a policy
selects must be among the documents given (pass the Deployment's file too).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from cloudhub.placement.errors import InvalidSpec
from cloudhub.placement.importers.common import (
    Context,
    Doc,
    ImportResult,
    args_overrides,
    finish,
    image_overriders,
    image_overrides,
    ref,
)
from cloudhub.placement.selectors import parse_label_selector
from cloudhub.placement.workloads import workload_spec

__all__ = ["HANDLERS"]


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
    target: Mapping[str, Any], ctx: Context, problems: list[str], what: str
) -> list[str] | None:
    """Cluster names a Karmada ClusterAffinity/targetCluster designates, or None if unknown."""
    names = list(target.get("clusterNames") or [])
    if target.get("labelSelector"):
        if not ctx.cluster_labels:
            problems.append(
                f"{what}: selects clusters by labels {target['labelSelector']}; EdgeFleet has "
                "no cluster objects (pass cluster_labels to resolve them to group names)"
            )
            return None
        sel = parse_label_selector(target["labelSelector"], "labelSelector")
        matched = sorted(c for c, labels in ctx.cluster_labels.items() if sel.matches(labels))
        names = [n for n in names if n in matched] if names else matched
    if target.get("fieldSelector"):
        problems.append(
            f"{what}: clusters selected by fields (provider/region/zone) not translated"
        )
    excluded = set(target.get("exclude") or [])
    return [n for n in names if n not in excluded]


def propagation_policy(ctx: Context, doc: Doc) -> ImportResult:
    result = ImportResult(doc.source, doc.kind, ref(doc, ctx))
    spec = doc.obj.get("spec") or {}
    policy_ns = None if doc.kind.startswith("Cluster") else (doc.namespace or ctx.namespace)
    placement = spec.get("placement") or {}
    problems = result.untranslated
    workloads = []
    for i, selector in enumerate(spec.get("resourceSelectors") or []):
        kind = selector.get("kind")
        if kind not in ("Deployment", "DaemonSet"):
            problems.append(
                f"resourceSelectors[{i}] selects {kind} {selector.get('name', '')}".rstrip()
                + ": EdgeFleet places pods only; apply it to the cluster as it is"
            )
            continue
        found = [w for w in ctx.workloads() if _selected(selector, w, policy_ns)]
        if not found:
            name = selector.get("name") or "(any name)"
            problems.append(
                f"resourceSelectors[{i}]: {kind} {policy_ns or ''}/{name} is not among the "
                "documents given; pass its manifest too to translate it"
            )
        workloads.extend(w for w in found if w not in workloads)
    for key in ("clusterAffinities", "clusterTolerations", "spreadConstraints"):
        if placement.get(key):
            problems.append(f"placement.{key} not translated: {_why_not(key)}")
    for key in (
        "schedulerName",
        "association",
        "propagateDeps",
        "failover",
        "conflictResolution",
        "priority",
        "preemption",
        "suspension",
        "activationPreference",
        "dependentOverrides",
    ):
        if key in spec:
            problems.append(f"spec.{key} ({spec[key]!r}) has no EdgeFleet equivalent; ignored")
    affinity = placement.get("clusterAffinity") or {}
    clusters = _clusters_matching(affinity, ctx, problems, "placement.clusterAffinity")
    if clusters is None or not affinity:
        if not affinity:
            problems.append(
                "placement.clusterAffinity is empty: Karmada would use every "
                "cluster; placed over every group instead"
            )
        clusters = []
    scheduling = placement.get("replicaScheduling") or {}
    sched_type = scheduling.get("replicaSchedulingType") or "Duplicated"
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
        if workload.kind == "DaemonSet":
            spec_out["mode"] = "PerNode"
        elif sched_type == "Duplicated":
            spec_out["replicasPerGroup"] = base["replicas"]
            result.notes.append(
                f"Duplicated: every cluster (group) runs {base['replicas']} replicas"
            )
        else:
            spec_out["replicas"] = base["replicas"]
            preference = scheduling.get("replicaDivisionPreference") or "Weighted"
            weights = scheduling.get("weightPreference") or {}
            if preference == "Aggregated":
                problems.append(
                    "replicaDivisionPreference Aggregated (fill as few clusters as "
                    "possible) not translated: spread Even instead"
                )
            elif weights.get("dynamicWeight"):
                problems.append(
                    f"dynamicWeight {weights['dynamicWeight']} not translated: "
                    "spread Even, capacity-aware, instead"
                )
            elif weights.get("staticWeightList"):
                members = {}
                for j, entry in enumerate(weights["staticWeightList"]):
                    names = _clusters_matching(
                        entry.get("targetCluster") or {}, ctx, problems, f"staticWeightList[{j}]"
                    )
                    for name in names or []:
                        members[name] = int(entry.get("weight") or 0)
                if members:
                    order = clusters or sorted(members)
                    spec_out["groups"]["spread"] = "Weighted"
                    spec_out["groups"]["members"] = [
                        {"value": c, "weight": members.get(c, 0)} for c in order
                    ]
        _apply_overrides(ctx, workload, spec_out, result, clusters)
        finish(
            result,
            workload.name,
            workload.namespace or policy_ns or ctx.namespace,
            spec_out,
            doc.source,
        )
    return result


def _why_not(key: str) -> str:
    return {
        "clusterAffinities": "ordered fallback cluster groups have no equivalent; only "
        "clusterAffinity is used",
        "clusterTolerations": "cluster taints have no equivalent (node taints are honoured "
        "through the pod template's tolerations)",
        "spreadConstraints": "min/max number of groups has no equivalent; replicas spread "
        "over every member group",
    }[key]


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
        rules = list(pspec.get("overrideRules") or [])
        if pspec.get("overriders"):
            rules.append(
                {
                    "targetCluster": pspec.get("targetCluster") or {},
                    "overriders": pspec["overriders"],
                }
            )
        what = f"{policy.kind} {ref(policy, ctx)}"
        for i, rule in enumerate(rules):
            rwhat = f"{what} rule {i}"
            targets = _clusters_matching(
                rule.get("targetCluster") or {}, ctx, result.untranslated, rwhat
            )
            if targets is None:
                continue
            if not rule.get("targetCluster"):
                targets = clusters
            overriders = rule.get("overriders") or {}
            for key in overriders:
                if key not in ("imageOverrider", "argsOverrider"):
                    result.untranslated.append(
                        f"{rwhat}: {key} not translated (overrides "
                        "change image, env, args and resources only)"
                    )
            images = image_overriders(
                spec_out["template"],
                overriders.get("imageOverrider") or [],
                result.untranslated,
                rwhat,
            )
            args = args_overrides(
                spec_out["template"],
                overriders.get("argsOverrider") or [],
                result.untranslated,
                rwhat,
            )
            for group in targets:
                spec_out.setdefault("overrides", []).extend(image_overrides(group, images))
                spec_out["overrides"].extend(
                    {"group": group, "container": c, "args": a} for c, a in sorted(args.items())
                )
            if images or args:
                result.notes.append(f"{rwhat} applied to groups {', '.join(targets)}")


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
        result.untranslated.append(
            "selects no workload that a PropagationPolicy among the "
            "documents propagates: nothing to apply the rules to"
        )
    return result


HANDLERS = {
    ("policy.karmada.io", "PropagationPolicy"): propagation_policy,
    ("policy.karmada.io", "ClusterPropagationPolicy"): propagation_policy,
    ("policy.karmada.io", "OverridePolicy"): override_policy,
    ("policy.karmada.io", "ClusterOverridePolicy"): override_policy,
}
