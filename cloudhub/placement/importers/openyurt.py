"""OpenYurt ``NodePool``, ``UnitedDeployment`` and ``YurtAppSet`` (``apps.openyurt.io``):
pools are groups by ``apps.openyurt.io/nodepool`` (or by the single label their
``nodeSelectorTerm`` tests). A NodePool is node membership, not a placement: its import
says how to label the nodes."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from cloudhub.placement.errors import InvalidSpec
from cloudhub.placement.importers.common import Context, Doc, ImportResult, finish, ref
from cloudhub.placement.selectors import parse_label_selector
from cloudhub.placement.workloads import workload_spec

__all__ = ["HANDLERS", "OPENYURT_POOL_LABEL"]

OPENYURT_POOL_LABEL = "apps.openyurt.io/nodepool"
"""The label OpenYurt puts on the nodes of a NodePool."""


def node_pool(ctx: Context, doc: Doc) -> ImportResult:
    result = ImportResult(doc.source, doc.kind, doc.name.strip())
    spec = doc.obj.get("spec") or {}
    result.notes.append(
        f"the pool's nodes are those labelled {OPENYURT_POOL_LABEL}="
        f"{doc.name.strip()}, usable as groups.byLabel"
    )
    for key in ("labels", "annotations", "taints"):
        if spec.get(key):
            # How to configure the nodes: nothing runs from a NodePool itself.
            result.drop(
                f"spec.{key}",
                f"spec.{key}: EdgeFleet does not stamp {key} on a pool's nodes; set them on "
                "the nodes themselves",
                changes_meaning=False,
            )
    if spec.get("type"):
        result.drop(
            "spec.type",
            f"spec.type {spec['type']}: every EdgeFleet node is an edge node; ignored",
            changes_meaning=False,
        )
    return result


def _single_label(term: Mapping[str, Any]) -> tuple[str, str] | None:
    exprs = term.get("matchExpressions") or []
    if len(exprs) != 1 or term.get("matchFields"):
        return None
    expr = exprs[0]
    values = [str(v).strip() for v in expr.get("values") or []]
    if expr.get("operator") != "In" or len(values) != 1:
        return None
    return str(expr.get("key")), values[0]


def united_deployment(ctx: Context, doc: Doc) -> ImportResult:
    """UnitedDeployment, and YurtAppSet v1alpha1 (topology.pools)."""
    result = ImportResult(doc.source, doc.kind, ref(doc, ctx))
    spec = doc.obj.get("spec") or {}
    template_spec = _deployment_template(
        spec.get("workloadTemplate") or {}, result, "spec.workloadTemplate"
    )
    if template_spec is None:
        return result
    pools = (spec.get("topology") or {}).get("pools") or []
    if spec.get("revisionHistoryLimit") is not None:
        result.notes.append("revisionHistoryLimit ignored (placements keep no revisions)")
    name = doc.name.strip()
    namespace = doc.namespace or ctx.namespace
    labels = [_single_label(p.get("nodeSelectorTerm") or {}) for p in pools]
    keys = {lab[0] for lab in labels if lab}
    if pools and all(labels) and len(keys) == 1:
        key = keys.pop()
        out: dict[str, Any] = {
            "template": template_spec["template"],
            "updateStrategy": template_spec["updateStrategy"],
            "groups": {"byLabel": key, "members": [{"value": lab[1]} for lab in labels]},
            "replicas": 0,
            "overrides": [],
        }
        for i, (pool, (_, value)) in enumerate(zip(pools, labels, strict=True)):
            replicas = pool.get("replicas")
            replicas = 1 if replicas is None else replicas
            out["replicas"] += replicas
            out["overrides"].append({"group": value, "replicas": replicas})
            _pool_extras(out, value, pool, result, f"spec.topology.pools[{i}]")
        result.notes.append(f"pools are groups by node label {key}")
        finish(result, name, namespace, out, doc.source)
        return result
    # Pools select nodes in different ways: one placement per pool keeps the semantics.
    for i, pool in enumerate(pools):
        pool_name = str(pool.get("name") or "").strip()
        ppath = f"spec.topology.pools[{i}]"
        term = pool.get("nodeSelectorTerm") or {}
        if term.get("matchFields"):
            result.drop(
                f"{ppath}.nodeSelectorTerm.matchFields",
                f"pool {pool_name}: matchFields not translated",
            )
        selector = {
            "matchExpressions": [
                {k: ([str(x).strip() for x in v] if k == "values" else v) for k, v in e.items()}
                for e in term.get("matchExpressions") or []
                if e.get("operator") in ("In", "NotIn", "Exists", "DoesNotExist")
            ]
        }
        for j, e in enumerate(term.get("matchExpressions") or []):
            if e.get("operator") not in ("In", "NotIn", "Exists", "DoesNotExist"):
                result.drop(
                    f"{ppath}.nodeSelectorTerm.matchExpressions[{j}]",
                    f"pool {pool_name}: operator {e.get('operator')} not translated",
                )
        out = {
            "template": copy.deepcopy(template_spec["template"]),
            "updateStrategy": template_spec["updateStrategy"],
            "replicas": 1 if pool.get("replicas") is None else pool["replicas"],
            "nodeSelector": selector,
        }
        if pool.get("tolerations"):
            tolerations = out["template"]["spec"].setdefault("tolerations", [])
            tolerations.extend(copy.deepcopy(pool["tolerations"]))
        if pool.get("patch"):
            result.drop(f"{ppath}.patch", f"pool {pool_name}: patch not translated")
        finish(result, f"{name}-{pool_name}", namespace, out, doc.source)
    if pools:
        result.notes.append("pools select nodes differently: one placement per pool")
    return result


def _pool_extras(
    out: dict[str, Any], group: str, pool: Mapping[str, Any], result: ImportResult, path: str
) -> None:
    """A pool's tolerations, and the images its patch sets, as overrides of its group."""
    if pool.get("tolerations"):
        out["overrides"].append({"group": group, "tolerations": copy.deepcopy(pool["tolerations"])})
    patch = pool.get("patch")
    if not patch:
        return
    containers = (((patch.get("spec") or {}).get("template") or {}).get("spec") or {}).get(
        "containers"
    )
    rest = copy.deepcopy(patch)
    if containers and all(set(c) <= {"name", "image"} for c in containers):
        for c in containers:
            if c.get("image"):
                out["overrides"].append(
                    {"group": group, "container": c["name"], "image": c["image"]}
                )
        del rest["spec"]["template"]["spec"]["containers"]
    if _non_empty(rest):
        result.drop(
            f"{path}.patch",
            f"pool {group}: patch {rest} not translated (overrides change image, "
            "env, args, resources and tolerations)",
        )


def _non_empty(value: object) -> bool:
    if isinstance(value, Mapping):
        return any(_non_empty(v) for v in value.values())
    if isinstance(value, list):
        return bool(value)
    return value is not None


def _deployment_template(
    workload_template: Mapping[str, Any], result: ImportResult, path: str
) -> dict[str, Any] | None:
    """The workload spec of a deploymentTemplate (``path``: the workloadTemplate's)."""
    if workload_template.get("statefulSetTemplate"):
        result.drop(
            f"{path}.statefulSetTemplate",
            "statefulSetTemplate not translated: EdgeFleet places stateless "
            "replicas (no stable identity or volume claims)",
        )
    deployment = workload_template.get("deploymentTemplate")
    if not deployment:
        result.drop(f"{path}.deploymentTemplate", "no deploymentTemplate: nothing to place")
        return None
    return workload_spec(
        {
            "kind": "Deployment",
            "spec": deployment.get("spec") or {},
            "metadata": deployment.get("metadata") or {},
        }
    )


def yurt_app_set(ctx: Context, doc: Doc) -> ImportResult:
    spec = doc.obj.get("spec") or {}
    if "topology" in spec or "workloadTemplate" in spec:
        return united_deployment(ctx, doc)  # v1alpha1 shape
    result = ImportResult(doc.source, doc.kind, ref(doc, ctx))
    workload = spec.get("workload") or {}
    base = _deployment_template(
        workload.get("workloadTemplate") or {}, result, "spec.workload.workloadTemplate"
    )
    if base is None:
        return result
    pools = list(spec.get("pools") or [])
    pools.extend(
        _pools_by_selector(ctx, spec.get("nodepoolSelector"), result, "spec.nodepoolSelector")
    )
    out: dict[str, Any] = {
        "template": base["template"],
        "updateStrategy": base["updateStrategy"],
        "replicasPerGroup": base["replicas"],
        "groups": {
            "byLabel": OPENYURT_POOL_LABEL,
            "members": [{"value": p} for p in dict.fromkeys(pools)],
        },
        "overrides": [],
    }
    for i, tweak in enumerate(workload.get("workloadTweaks") or []):
        tpath = f"spec.workload.workloadTweaks[{i}]"
        targets = list(tweak.get("pools") or []) + _pools_by_selector(
            ctx, tweak.get("nodepoolSelector"), result, f"{tpath}.nodepoolSelector"
        )
        tweaks = tweak.get("tweaks") or {}
        for pool in targets:
            if pool not in pools:
                continue
            if tweaks.get("replicas") is not None:
                out["overrides"].append({"group": pool, "replicas": tweaks["replicas"]})
            for image in tweaks.get("containerImages") or []:
                out["overrides"].append(
                    {
                        "group": pool,
                        "container": image.get("name"),
                        "image": image.get("targetImage"),
                    }
                )
        if tweaks.get("patches"):
            result.drop(
                f"{tpath}.tweaks.patches",
                f"workloadTweaks[{i}].patches (JSON patches) not translated",
            )
    result.notes.append(f"pools are the nodes labelled {OPENYURT_POOL_LABEL}=<pool>")
    finish(result, doc.name, doc.namespace or ctx.namespace, out, doc.source)
    return result


def _pools_by_selector(
    ctx: Context, selector: object, result: ImportResult, path: str
) -> list[str]:
    """The NodePools among the documents a label selector (at ``path``) selects."""
    if not selector:
        return []
    try:
        sel = parse_label_selector(selector, path)
    except InvalidSpec as exc:
        result.drop(path, str(exc))
        return []
    pools = [d for d in ctx.docs if d.kind == "NodePool" and d.group == "apps.openyurt.io"]
    if not pools:
        result.drop(
            path,
            f"{path}: selects NodePools by label; none is among the documents, "
            "pass them to resolve it",
        )
    return [d.name.strip() for d in pools if sel.matches(d.labels)]


HANDLERS = {
    ("apps.openyurt.io", "NodePool"): node_pool,
    ("apps.openyurt.io", "UnitedDeployment"): united_deployment,
    ("apps.openyurt.io", "YurtAppSet"): yurt_app_set,
}
