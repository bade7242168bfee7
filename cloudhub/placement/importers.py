"""Translate other systems' placement documents into EdgePlacements.

Supported (each document says what it could not translate):

- Karmada ``PropagationPolicy``/``ClusterPropagationPolicy`` (``policy.karmada.io``),
  with ``OverridePolicy``/``ClusterOverridePolicy`` where present. A member
  cluster becomes a group: nodes labelled ``apps.edgefleet.io/group=<cluster>``
  (``group_label``). ``Duplicated`` (Karmada's default) becomes
  ``replicasPerGroup``; ``Divided`` becomes a total spread Even, or Weighted by
  ``staticWeightList``. Cluster label selectors are resolved with
  ``cluster_labels`` when given.
- KubeEdge ``EdgeApplication`` and ``NodeGroup`` (``apps.kubeedge.io``): each
  target node group runs the template's replicas (or its override), grouped by
  the label KubeEdge puts on members, ``apps.kubeedge.io/belonging-to``.
- OpenYurt ``NodePool``, ``UnitedDeployment`` and ``YurtAppSet``
  (``apps.openyurt.io``): pools are groups by ``apps.openyurt.io/nodepool``
  (or by the single label their ``nodeSelectorTerm`` tests).
- SuperEdge ``DeploymentGrid`` (``superedge.io``): ``gridUniqKey`` is the
  group label and every group runs the template's replicas.

The workloads a Karmada policy selects must be among the documents given
(pass the Deployment's file too). Node groups themselves (NodeGroup,
NodePool) are node labels in EdgeFleet: their import says how to label nodes.
"""

from __future__ import annotations

import copy
import pathlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from cloudhub.placement.errors import InvalidSpec, TranslationError
from cloudhub.placement.model import API_VERSION, KIND, parse_placement
from cloudhub.placement.selectors import parse_label_selector
from cloudhub.placement.workloads import deployment_strategy, workload_spec

__all__ = [
    "GROUP_LABEL",
    "KUBEEDGE_GROUP_LABEL",
    "OPENYURT_POOL_LABEL",
    "ImportResult",
    "import_documents",
    "import_files",
    "load_documents",
]

GROUP_LABEL = "apps.edgefleet.io/group"
"""Node label naming a node's group when a source system has none (Karmada clusters)."""
KUBEEDGE_GROUP_LABEL = "apps.kubeedge.io/belonging-to"
"""The label KubeEdge's NodeGroup controller puts on member nodes."""
OPENYURT_POOL_LABEL = "apps.openyurt.io/nodepool"
"""The label OpenYurt puts on the nodes of a NodePool."""


@dataclass
class ImportResult:
    """The translation of one source document.

    Attributes:
        source: where it came from (``file#index``).
        kind: the document's kind.
        name: its ``namespace/name``.
        placements: EdgePlacement objects (API JSON), each validated.
        untranslated: what could not be translated, one sentence each.
        notes: how things were mapped (group labels, defaults taken).
    """

    source: str
    kind: str
    name: str
    placements: list[dict[str, Any]] = field(default_factory=list)
    untranslated: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class _Doc:
    source: str
    obj: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.obj.get("kind") or "")

    @property
    def group(self) -> str:
        return str(self.obj.get("apiVersion") or "").split("/")[0]

    @property
    def metadata(self) -> Mapping[str, Any]:
        meta = self.obj.get("metadata")
        return meta if isinstance(meta, Mapping) else {}

    @property
    def name(self) -> str:
        return str(self.metadata.get("name") or "")

    @property
    def namespace(self) -> str:
        return str(self.metadata.get("namespace") or "")

    @property
    def labels(self) -> dict[str, str]:
        labels = self.metadata.get("labels")
        return dict(labels) if isinstance(labels, Mapping) else {}


def load_documents(text: str, source: str) -> list[tuple[str, dict[str, Any]]]:
    """Split a (multi-document) YAML or JSON text into objects.

    Args:
        text: the file content.
        source: a name for messages (the path).

    Returns:
        ``(source#index, object)`` for every non-empty document.

    Raises:
        TranslationError: the text is not YAML, or a document is not a mapping.
    """
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise TranslationError(source, f"not valid YAML: {exc}") from exc
    except RecursionError:
        raise TranslationError(source, "not valid YAML: nested too deeply") from None
    out = []
    for i, doc in enumerate(docs):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise TranslationError(f"{source}#{i}", "a document must be a mapping")
        out.append((f"{source}#{i}", doc))
    return out


def import_files(paths: Iterable[str | pathlib.Path], **options: Any) -> list[ImportResult]:
    """Read files and translate their documents together (see :func:`import_documents`).

    Raises:
        TranslationError: a file cannot be read or parsed.
    """
    docs: list[tuple[str, dict[str, Any]]] = []
    for path in paths:
        path = pathlib.Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise TranslationError(str(path), f"cannot read: {exc.strerror}") from exc
        except UnicodeDecodeError as exc:
            raise TranslationError(str(path), f"not UTF-8 text: {exc.reason}") from exc
        docs.extend(load_documents(text, str(path)))
    return import_documents(docs, **options)


def import_documents(
    documents: Iterable[tuple[str, Mapping[str, Any]]],
    *,
    group_label: str = GROUP_LABEL,
    cluster_labels: Mapping[str, Mapping[str, str]] | None = None,
    namespace: str = "default",
) -> list[ImportResult]:
    """Translate placement documents into EdgePlacements.

    Args:
        documents: ``(source, object)`` pairs, e.g. from :func:`load_documents`.
            Workloads (Deployments, DaemonSets) among them are used as the
            templates Karmada policies select; they yield no result of their own.
        group_label: the node label that names Karmada member clusters as groups.
        cluster_labels: labels of Karmada member clusters (``{cluster: {k: v}}``),
            to resolve cluster label selectors in policies and override rules.
        namespace: the namespace of placements whose source has none.

    Returns:
        One result per placement document (and one per unsupported document
        that is not a plain workload or a resource placement leaves alone).
    """
    docs = [_Doc(src, copy.deepcopy(dict(obj))) for src, obj in documents]
    ctx = _Context(docs, group_label, dict(cluster_labels or {}), namespace)
    results: list[ImportResult] = []
    for doc in docs:
        handler = _HANDLERS.get((doc.group, doc.kind))
        if handler is not None:
            try:
                results.append(handler(ctx, doc))
            except InvalidSpec as exc:
                result = ImportResult(doc.source, doc.kind, _ref(doc, ctx))
                result.untranslated.append(f"{exc}; nothing translated")
                results.append(result)
            except _SHAPE_ERRORS as exc:
                # Foreign documents are read as their authors' schemas say; a field
                # of another type than the schema's (a list where a map belongs...)
                # is this document's fault: say so and go on with the others.
                result = ImportResult(doc.source, doc.kind, _ref(doc, ctx))
                result.untranslated.append(
                    f"the document does not have the shape of a {doc.kind} "
                    f"({type(exc).__name__}: {exc}); nothing translated"
                )
                results.append(result)
        elif doc.kind in _PASSIVE_KINDS:
            continue
        else:
            result = ImportResult(doc.source, doc.kind or "<no kind>", _ref(doc, ctx))
            result.untranslated.append(
                f"{doc.obj.get('apiVersion')}/{doc.kind} is not a placement document this "
                "importer knows"
            )
            results.append(result)
    return results


#: What reading a field of an unexpected type raises in the handlers below.
_SHAPE_ERRORS = (AttributeError, TypeError, KeyError, IndexError, ValueError)

# Workloads and plain resources are inputs to the translation, not documents to translate.
_PASSIVE_KINDS = {
    "Deployment",
    "DaemonSet",
    "StatefulSet",
    "ReplicaSet",
    "Service",
    "Ingress",
    "ConfigMap",
    "Secret",
    "Namespace",
    "ServiceAccount",
    "Role",
    "RoleBinding",
    "ClusterRole",
    "ClusterRoleBinding",
}


@dataclass
class _Context:
    docs: list[_Doc]
    group_label: str
    cluster_labels: dict[str, Mapping[str, str]]
    namespace: str

    def workloads(self) -> list[_Doc]:
        return [d for d in self.docs if d.kind in ("Deployment", "DaemonSet")]


def _ref(doc: _Doc, ctx: _Context) -> str:
    return f"{doc.namespace or ctx.namespace}/{doc.name}" if doc.namespace or doc.name else "?"


def _finish(
    result: ImportResult, name: str, namespace: str, spec: dict[str, Any], source: str
) -> None:
    """Validate and add one EdgePlacement to a result."""
    obj = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {"apps.edgefleet.io/imported-from": source},
        },
        "spec": spec,
    }
    try:
        parse_placement(obj)
    except InvalidSpec as exc:
        result.untranslated.append(f"the translated placement {name} is invalid: {exc}")
        return
    result.placements.append(obj)


# --- images (Karmada/KubeEdge image overriders) -----------------------------------------


def _split_image(image: str) -> tuple[str, str, str]:
    """``(registry, repository, tag)`` as the Docker reference grammar splits them;
    the tag keeps its separator (``:v1`` or ``@sha256:...``)."""
    rest = image
    registry = ""
    first, sep, remainder = rest.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        registry, rest = first, remainder
    tag = ""
    if "@" in rest:
        rest, digest = rest.split("@", 1)
        tag = "@" + digest
    elif ":" in rest.rsplit("/", 1)[-1]:
        rest, version = rest.rsplit(":", 1)
        tag = ":" + version
    return registry, rest, tag


def _override_image(image: str, component: str, operator: str, value: str) -> str:
    registry, repository, tag = _split_image(image)
    if component == "Registry":
        registry = {"add": registry + value, "replace": value, "remove": ""}[operator]
    elif component == "Repository":
        repository = {"add": repository + value, "replace": value, "remove": ""}[operator]
    elif component == "Tag":
        current = tag[1:] if tag.startswith(":") else tag
        new = {"add": current + value, "replace": value, "remove": ""}[operator]
        tag = "" if not new else (new if new.startswith("@") else ":" + new)
    else:
        raise ValueError(component)
    return (f"{registry}/" if registry else "") + repository + tag


def _image_overriders(
    template: Mapping[str, Any], rules: Iterable[Mapping[str, Any]], problems: list[str], what: str
) -> dict[str, str]:
    """Apply image overriders to a template's containers: ``{container: image}``."""
    containers = template["spec"].get("containers") or []
    images = {c["name"]: c.get("image", "") for c in containers}
    for rule in rules:
        component = rule.get("component")
        operator = rule.get("operator")
        if component not in ("Registry", "Repository", "Tag") or operator not in (
            "add",
            "remove",
            "replace",
        ):
            problems.append(f"{what}: image overrider {dict(rule)} is malformed")
            continue
        targets = list(images)
        predicate = (rule.get("predicate") or {}).get("path")
        if predicate:
            match = re.fullmatch(r"/spec/template/spec/containers/(\d+)/image", predicate)
            if match is None or int(match[1]) >= len(containers):
                problems.append(f"{what}: image predicate path {predicate} not translated")
                continue
            targets = [containers[int(match[1])]["name"]]
        for name in targets:
            images[name] = _override_image(
                images[name], component, operator, rule.get("value") or ""
            )
    original = {c["name"]: c.get("image", "") for c in containers}
    return {k: v for k, v in images.items() if v != original[k]}


def _image_overrides(group: str, images: Mapping[str, str]) -> list[dict[str, Any]]:
    return [{"group": group, "container": c, "image": img} for c, img in sorted(images.items())]


# --- Karmada ---------------------------------------------------------------------------


def _selected(selector: Mapping[str, Any], doc: _Doc, policy_ns: str | None) -> bool:
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
    target: Mapping[str, Any], ctx: _Context, problems: list[str], what: str
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


def _karmada_propagation(ctx: _Context, doc: _Doc) -> ImportResult:
    result = ImportResult(doc.source, doc.kind, _ref(doc, ctx))
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
        _apply_karmada_overrides(ctx, workload, spec_out, result, clusters)
        _finish(
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


def _apply_karmada_overrides(
    ctx: _Context,
    workload: _Doc,
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
        what = f"{policy.kind} {_ref(policy, ctx)}"
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
            images = _image_overriders(
                spec_out["template"],
                overriders.get("imageOverrider") or [],
                result.untranslated,
                rwhat,
            )
            args = _args_overrides(
                spec_out["template"],
                overriders.get("argsOverrider") or [],
                result.untranslated,
                rwhat,
            )
            for group in targets:
                spec_out.setdefault("overrides", []).extend(_image_overrides(group, images))
                spec_out["overrides"].extend(
                    {"group": group, "container": c, "args": a} for c, a in sorted(args.items())
                )
            if images or args:
                result.notes.append(f"{rwhat} applied to groups {', '.join(targets)}")


def _args_overrides(
    template: Mapping[str, Any], rules: Iterable[Mapping[str, Any]], problems: list[str], what: str
) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    containers = {c["name"]: list(c.get("args") or []) for c in template["spec"]["containers"]}
    for rule in rules:
        name = rule.get("containerName")
        if name not in containers:
            problems.append(f"{what}: args overrider for unknown container {name!r}")
            continue
        args = out.get(name, containers[name])
        values = list(rule.get("value") or [])
        if rule.get("operator") == "add":
            args = args + values
        elif rule.get("operator") == "remove":
            args = [a for a in args if a not in values]
        else:
            problems.append(f"{what}: args operator {rule.get('operator')!r} not translated")
            continue
        out[name] = args
    return out


# --- KubeEdge --------------------------------------------------------------------------


def _kubeedge_application(ctx: _Context, doc: _Doc) -> ImportResult:
    result = ImportResult(doc.source, doc.kind, _ref(doc, ctx))
    problems = result.untranslated
    spec = doc.obj.get("spec") or {}
    scope = spec.get("workloadScope") or {}
    targets = list(scope.get("targetNodeGroups") or [])
    for i, selector in enumerate(scope.get("targetNodeGroupSelectors") or []):
        groups = [
            d
            for d in ctx.docs
            if d.kind == "NodeGroup"
            and all(d.labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())
        ]
        if not groups:
            problems.append(
                f"targetNodeGroupSelectors[{i}]: no NodeGroup among the documents "
                "has these labels; pass the NodeGroups to resolve them"
            )
        targets.extend(
            {"name": g.name, "overriders": selector.get("overriders") or {}} for g in groups
        )
    if scope.get("targetNodeLabels"):
        problems.append(
            "workloadScope.targetNodeLabels not translated: use the placement's nodeSelector"
        )
    if not targets:
        problems.append("no target node group: nothing to place")
    manifests = (spec.get("workloadTemplate") or {}).get("manifests") or []
    for i, manifest in enumerate(manifests):
        if not isinstance(manifest, Mapping) or manifest.get("kind") != "Deployment":
            kind = manifest.get("kind") if isinstance(manifest, Mapping) else type(manifest)
            problems.append(
                f"workloadTemplate.manifests[{i}] ({kind}): EdgeFleet places pods "
                "only; apply it to the cluster as it is (KubeEdge scopes Services "
                "per node group, EdgeFleet does not)"
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
                "members": [{"value": t["name"]} for t in targets],
            },
        }
        for target in targets:
            _kubeedge_overriders(out, target["name"], target.get("overriders") or {}, problems)
        result.notes.append(
            f"node groups are the nodes labelled {KUBEEDGE_GROUP_LABEL}=<group>"
            " (as KubeEdge labels NodeGroup members)"
        )
        _finish(
            result,
            name,
            (manifest.get("metadata") or {}).get("namespace") or doc.namespace or ctx.namespace,
            out,
            doc.source,
        )
    return result


def _kubeedge_overriders(
    out: dict[str, Any], group: str, overriders: Mapping[str, Any], problems: list[str]
) -> None:
    what = f"node group {group}"
    overrides = out.setdefault("overrides", [])
    if overriders.get("replicas") is not None:
        overrides.append({"group": group, "replicas": overriders["replicas"]})
    images = _image_overriders(
        out["template"], overriders.get("imageOverriders") or [], problems, what
    )
    overrides.extend(_image_overrides(group, images))
    for rule in overriders.get("envOverriders") or []:
        if rule.get("operator") in ("add", "replace"):
            overrides.append(
                {
                    "group": group,
                    "container": rule.get("containerName"),
                    "env": list(rule.get("value") or []),
                }
            )
        else:
            problems.append(
                f"{what}: env operator {rule.get('operator')!r} (removing variables) not translated"
            )
    args = _args_overrides(out["template"], overriders.get("argsOverriders") or [], problems, what)
    overrides.extend({"group": group, "container": c, "args": a} for c, a in args.items())
    if overriders.get("commandOverriders"):
        problems.append(
            f"{what}: commandOverriders not translated (overrides change args, not the command)"
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
    if not overrides:
        out.pop("overrides")


def _kubeedge_nodegroup(ctx: _Context, doc: _Doc) -> ImportResult:
    result = ImportResult(doc.source, doc.kind, doc.name)
    spec = doc.obj.get("spec") or {}
    members = []
    if spec.get("nodes"):
        members.append(f"nodes {', '.join(spec['nodes'])}")
    if spec.get("matchLabels"):
        members.append(f"nodes with labels {spec['matchLabels']}")
    result.untranslated.append(
        "a NodeGroup is node membership, not a placement: EdgeFleet reads groups from node "
        f"labels; label {' and '.join(members) or 'its members'} "
        f"{KUBEEDGE_GROUP_LABEL}={doc.name}"
    )
    return result


# --- OpenYurt --------------------------------------------------------------------------


def _openyurt_nodepool(ctx: _Context, doc: _Doc) -> ImportResult:
    result = ImportResult(doc.source, doc.kind, doc.name.strip())
    spec = doc.obj.get("spec") or {}
    result.notes.append(
        f"the pool's nodes are those labelled {OPENYURT_POOL_LABEL}="
        f"{doc.name.strip()}, usable as groups.byLabel"
    )
    for key in ("labels", "annotations", "taints"):
        if spec.get(key):
            result.untranslated.append(
                f"spec.{key}: EdgeFleet does not stamp {key} on a pool's nodes; set them on "
                "the nodes themselves"
            )
    if spec.get("type"):
        result.untranslated.append(
            f"spec.type {spec['type']}: every EdgeFleet node is an edge node; ignored"
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


def _openyurt_pools(ctx: _Context, doc: _Doc) -> ImportResult:
    """UnitedDeployment, and YurtAppSet v1alpha1 (topology.pools)."""
    result = ImportResult(doc.source, doc.kind, _ref(doc, ctx))
    spec = doc.obj.get("spec") or {}
    problems = result.untranslated
    template_spec = _deployment_template(spec.get("workloadTemplate") or {}, problems)
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
        for pool, (_, value) in zip(pools, labels, strict=True):
            replicas = pool.get("replicas")
            replicas = 1 if replicas is None else replicas
            out["replicas"] += replicas
            out["overrides"].append({"group": value, "replicas": replicas})
            _pool_extras(out, value, pool, problems)
        result.notes.append(f"pools are groups by node label {key}")
        _finish(result, name, namespace, out, doc.source)
        return result
    # Pools select nodes in different ways: one placement per pool keeps the semantics.
    for pool in pools:
        pool_name = str(pool.get("name") or "").strip()
        term = pool.get("nodeSelectorTerm") or {}
        if term.get("matchFields"):
            problems.append(f"pool {pool_name}: matchFields not translated")
        selector = {
            "matchExpressions": [
                {k: ([str(x).strip() for x in v] if k == "values" else v) for k, v in e.items()}
                for e in term.get("matchExpressions") or []
                if e.get("operator") in ("In", "NotIn", "Exists", "DoesNotExist")
            ]
        }
        for e in term.get("matchExpressions") or []:
            if e.get("operator") not in ("In", "NotIn", "Exists", "DoesNotExist"):
                problems.append(f"pool {pool_name}: operator {e.get('operator')} not translated")
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
            problems.append(f"pool {pool_name}: patch not translated")
        _finish(result, f"{name}-{pool_name}", namespace, out, doc.source)
    if pools:
        result.notes.append("pools select nodes differently: one placement per pool")
    return result


def _pool_extras(
    out: dict[str, Any], group: str, pool: Mapping[str, Any], problems: list[str]
) -> None:
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
        problems.append(
            f"pool {group}: patch {rest} not translated (overrides change image, "
            "env, args, resources and tolerations)"
        )


def _non_empty(value: object) -> bool:
    if isinstance(value, Mapping):
        return any(_non_empty(v) for v in value.values())
    if isinstance(value, list):
        return bool(value)
    return value is not None


def _deployment_template(
    workload_template: Mapping[str, Any], problems: list[str]
) -> dict[str, Any] | None:
    if workload_template.get("statefulSetTemplate"):
        problems.append(
            "statefulSetTemplate not translated: EdgeFleet places stateless "
            "replicas (no stable identity or volume claims)"
        )
    deployment = workload_template.get("deploymentTemplate")
    if not deployment:
        problems.append("no deploymentTemplate: nothing to place")
        return None
    return workload_spec(
        {
            "kind": "Deployment",
            "spec": deployment.get("spec") or {},
            "metadata": deployment.get("metadata") or {},
        }
    )


def _openyurt_yurtappset(ctx: _Context, doc: _Doc) -> ImportResult:
    spec = doc.obj.get("spec") or {}
    if "topology" in spec or "workloadTemplate" in spec:
        return _openyurt_pools(ctx, doc)  # v1alpha1 shape
    result = ImportResult(doc.source, doc.kind, _ref(doc, ctx))
    problems = result.untranslated
    workload = spec.get("workload") or {}
    base = _deployment_template(workload.get("workloadTemplate") or {}, problems)
    if base is None:
        return result
    pools = list(spec.get("pools") or [])
    pools.extend(
        _pools_by_selector(ctx, spec.get("nodepoolSelector"), problems, "spec.nodepoolSelector")
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
        targets = list(tweak.get("pools") or []) + _pools_by_selector(
            ctx, tweak.get("nodepoolSelector"), problems, f"workloadTweaks[{i}].nodepoolSelector"
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
            problems.append(f"workloadTweaks[{i}].patches (JSON patches) not translated")
    if not out["overrides"]:
        del out["overrides"]
    result.notes.append(f"pools are the nodes labelled {OPENYURT_POOL_LABEL}=<pool>")
    _finish(result, doc.name, doc.namespace or ctx.namespace, out, doc.source)
    return result


def _pools_by_selector(
    ctx: _Context, selector: object, problems: list[str], what: str
) -> list[str]:
    if not selector:
        return []
    try:
        sel = parse_label_selector(selector, what)
    except InvalidSpec as exc:
        problems.append(f"{what}: {exc}")
        return []
    pools = [d for d in ctx.docs if d.kind == "NodePool" and d.group == "apps.openyurt.io"]
    if not pools:
        problems.append(
            f"{what}: selects NodePools by label; none is among the documents, "
            "pass them to resolve it"
        )
    return [d.name.strip() for d in pools if sel.matches(d.labels)]


# --- SuperEdge -------------------------------------------------------------------------


def _superedge_grid(ctx: _Context, doc: _Doc) -> ImportResult:
    result = ImportResult(doc.source, doc.kind, _ref(doc, ctx))
    spec = doc.obj.get("spec") or {}
    key = spec.get("gridUniqKey")
    if not key:
        result.untranslated.append("spec.gridUniqKey is missing: nothing to group by")
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
            result.untranslated.append(f"spec.{extra} (per-grid templates) not translated")
    result.notes.append(
        f"every value of node label {key} is a grid and runs {base['replicas']} replicas"
    )
    _finish(result, doc.name, doc.namespace or ctx.namespace, out, doc.source)
    return result


def _karmada_override_only(ctx: _Context, doc: _Doc) -> ImportResult:
    result = ImportResult(doc.source, doc.kind, _ref(doc, ctx))
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


_HANDLERS = {
    ("policy.karmada.io", "PropagationPolicy"): _karmada_propagation,
    ("policy.karmada.io", "ClusterPropagationPolicy"): _karmada_propagation,
    ("policy.karmada.io", "OverridePolicy"): _karmada_override_only,
    ("policy.karmada.io", "ClusterOverridePolicy"): _karmada_override_only,
    ("apps.kubeedge.io", "EdgeApplication"): _kubeedge_application,
    ("apps.kubeedge.io", "NodeGroup"): _kubeedge_nodegroup,
    ("apps.openyurt.io", "NodePool"): _openyurt_nodepool,
    ("apps.openyurt.io", "UnitedDeployment"): _openyurt_pools,
    ("apps.openyurt.io", "YurtAppSet"): _openyurt_yurtappset,
    ("superedge.io", "DeploymentGrid"): _superedge_grid,
}
