"""KubeEdge ``EdgeApplication`` and ``NodeGroup`` (``apps.kubeedge.io``): each target node
group runs the template's replicas (or its override), grouped by the label KubeEdge puts
on members, ``apps.kubeedge.io/belonging-to``. A NodeGroup is node membership, not a
placement: its import says how to label the nodes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
from cloudhub.placement.workloads import workload_spec

__all__ = ["HANDLERS", "KUBEEDGE_GROUP_LABEL"]

KUBEEDGE_GROUP_LABEL = "apps.kubeedge.io/belonging-to"
"""The label KubeEdge's NodeGroup controller puts on member nodes."""


def edge_application(ctx: Context, doc: Doc) -> ImportResult:
    result = ImportResult(doc.source, doc.kind, ref(doc, ctx))
    spec = doc.obj.get("spec") or {}
    scope = spec.get("workloadScope") or {}
    spath = "spec.workloadScope"
    # (group, its overriders, their JSON path)
    targets = [
        (t["name"], t.get("overriders") or {}, f"{spath}.targetNodeGroups[{j}].overriders")
        for j, t in enumerate(scope.get("targetNodeGroups") or [])
    ]
    for i, selector in enumerate(scope.get("targetNodeGroupSelectors") or []):
        groups = [
            d
            for d in ctx.docs
            if d.kind == "NodeGroup"
            and all(d.labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())
        ]
        if not groups:
            result.drop(
                f"{spath}.targetNodeGroupSelectors[{i}]",
                f"targetNodeGroupSelectors[{i}]: no NodeGroup among the documents "
                "has these labels; pass the NodeGroups to resolve them",
            )
        opath = f"{spath}.targetNodeGroupSelectors[{i}].overriders"
        targets.extend((g.name, selector.get("overriders") or {}, opath) for g in groups)
    if scope.get("targetNodeLabels"):
        result.drop(
            f"{spath}.targetNodeLabels",
            "workloadScope.targetNodeLabels not translated: use the placement's nodeSelector",
        )
    if not targets:
        result.drop(f"{spath}.targetNodeGroups", "no target node group: nothing to place")
    manifests = (spec.get("workloadTemplate") or {}).get("manifests") or []
    for i, manifest in enumerate(manifests):
        if not isinstance(manifest, Mapping) or manifest.get("kind") != "Deployment":
            kind = manifest.get("kind") if isinstance(manifest, Mapping) else type(manifest)
            result.drop(
                f"spec.workloadTemplate.manifests[{i}]",
                f"workloadTemplate.manifests[{i}] ({kind}): EdgeFleet places pods "
                "only; apply it to the cluster as it is (KubeEdge scopes Services "
                "per node group, EdgeFleet does not)",
                changes_meaning=kind in POD_WORKLOADS,
            )
            continue
        base = workload_spec(manifest)
        name = (manifest.get("metadata") or {}).get("name") or doc.name
        out: dict[str, Any] = {
            "template": base["template"],
            "updateStrategy": base["updateStrategy"],
            "replicasPerGroup": base["replicas"],
            "groups": {
                "byLabel": KUBEEDGE_GROUP_LABEL,
                "members": [{"value": group} for group, _, _ in targets],
            },
        }
        for group, overriders, opath in targets:
            _overriders(out, group, overriders, result, opath)
        result.notes.append(
            f"node groups are the nodes labelled {KUBEEDGE_GROUP_LABEL}=<group>"
            " (as KubeEdge labels NodeGroup members)"
        )
        finish(
            result,
            name,
            (manifest.get("metadata") or {}).get("namespace") or doc.namespace or ctx.namespace,
            out,
            doc.source,
        )
    return result


def _overriders(
    out: dict[str, Any],
    group: str,
    overriders: Mapping[str, Any],
    result: ImportResult,
    path: str,
) -> None:
    """A node group's overriders as its overrides (``path``: the overriders' JSON path)."""
    what = f"node group {group}"
    overrides = out.setdefault("overrides", [])
    if overriders.get("replicas") is not None:
        overrides.append({"group": group, "replicas": overriders["replicas"]})
    images = image_overriders(
        out["template"],
        overriders.get("imageOverriders") or [],
        result,
        f"{path}.imageOverriders",
        what,
    )
    overrides.extend(image_overrides(group, images))
    for k, rule in enumerate(overriders.get("envOverriders") or []):
        if rule.get("operator") in ("add", "replace"):
            overrides.append(
                {
                    "group": group,
                    "container": rule.get("containerName"),
                    "env": list(rule.get("value") or []),
                }
            )
        else:
            result.drop(
                f"{path}.envOverriders[{k}]",
                f"{what}: env operator {rule.get('operator')!r} (removing variables) "
                "not translated",
            )
    args = args_overrides(
        out["template"],
        overriders.get("argsOverriders") or [],
        result,
        f"{path}.argsOverriders",
        what,
    )
    overrides.extend({"group": group, "container": c, "args": a} for c, a in args.items())
    if overriders.get("commandOverriders"):
        result.drop(
            f"{path}.commandOverriders",
            f"{what}: commandOverriders not translated (overrides change args, not the command)",
        )
    for rule in overriders.get("resourcesOverriders") or []:
        value = rule.get("value") or {}
        overrides.append(
            {
                "group": group,
                "container": rule.get("containerName"),
                "resources": {k: v for k, v in value.items() if k in ("requests", "limits")},
            }
        )


def node_group(ctx: Context, doc: Doc) -> ImportResult:
    result = ImportResult(doc.source, doc.kind, doc.name)
    spec = doc.obj.get("spec") or {}
    members = []
    if spec.get("nodes"):
        members.append(f"nodes {', '.join(spec['nodes'])}")
    if spec.get("matchLabels"):
        members.append(f"nodes with labels {spec['matchLabels']}")
    # How to label the nodes: nothing runs from a NodeGroup itself.
    result.drop(
        "spec",
        "a NodeGroup is node membership, not a placement: EdgeFleet reads groups from node "
        f"labels; label {' and '.join(members) or 'its members'} "
        f"{KUBEEDGE_GROUP_LABEL}={doc.name}",
        changes_meaning=False,
    )
    return result


HANDLERS = {
    ("apps.kubeedge.io", "EdgeApplication"): edge_application,
    ("apps.kubeedge.io", "NodeGroup"): node_group,
}
