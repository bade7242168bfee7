"""SuperEdge ``DeploymentGrid`` (``superedge.io``): ``gridUniqKey`` is the group label and
every group runs the template's replicas."""

from __future__ import annotations

from cloudhub.placement.importers.common import Context, Doc, ImportResult, finish, ref
from cloudhub.placement.workloads import deployment_strategy, workload_spec

__all__ = ["HANDLERS"]


def deployment_grid(ctx: Context, doc: Doc) -> ImportResult:
    result = ImportResult(doc.source, doc.kind, ref(doc, ctx))
    spec = doc.obj.get("spec") or {}
    key = spec.get("gridUniqKey")
    if not key:
        result.drop("spec.gridUniqKey", "spec.gridUniqKey is missing: nothing to group by")
        return result
    template = spec.get("template") or {}
    base = workload_spec({"kind": "Deployment", "spec": template, "metadata": {}})
    out = {
        "template": base["template"],
        "updateStrategy": deployment_strategy(template.get("strategy")),
        "replicasPerGroup": base["replicas"],
        "groups": {"byLabel": key},
    }
    for extra in ("templatePool", "templates", "defaultTemplateName", "autoDeleteUnusedTemplate"):
        if spec.get(extra):
            result.drop(f"spec.{extra}", f"spec.{extra} (per-grid templates) not translated")
    result.notes.append(
        f"every value of node label {key} is a grid and runs {base['replicas']} replicas"
    )
    finish(result, doc.name, doc.namespace or ctx.namespace, out, doc.source)
    return result


HANDLERS = {("superedge.io", "DeploymentGrid"): deployment_grid}
