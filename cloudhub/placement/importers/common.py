"""What every source system's translation shares: the documents, the result, the
EdgePlacement it produces, and the overriders (image, args) Karmada and KubeEdge both have."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from cloudhub.placement.errors import InvalidSpec, TranslationError
from cloudhub.placement.model import API_VERSION, KIND, parse_placement

__all__ = [
    "GROUP_LABEL",
    "PASSIVE_KINDS",
    "SHAPE_ERRORS",
    "Context",
    "Doc",
    "ImportResult",
    "args_overrides",
    "finish",
    "image_overriders",
    "image_overrides",
    "load_documents",
    "ref",
]

GROUP_LABEL = "apps.edgefleet.io/group"
"""Node label naming a node's group when a source system has none (Karmada clusters)."""


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
class Doc:
    """One source document: where it came from (``file#index``) and its object."""

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


#: What reading a field of an unexpected type raises in the handlers below.
SHAPE_ERRORS = (AttributeError, TypeError, KeyError, IndexError, ValueError)

# Workloads and plain resources are inputs to the translation, not documents to translate.
PASSIVE_KINDS = {
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
class Context:
    """What one translation run knows besides the document being translated: every
    document given (workloads, NodeGroups, NodePools, override policies), the group
    label, the Karmada clusters' labels and the default namespace."""

    docs: list[Doc]
    group_label: str
    cluster_labels: dict[str, Mapping[str, str]]
    namespace: str

    def workloads(self) -> list[Doc]:
        return [d for d in self.docs if d.kind in ("Deployment", "DaemonSet")]


def ref(doc: Doc, ctx: Context) -> str:
    return f"{doc.namespace or ctx.namespace}/{doc.name}" if doc.namespace or doc.name else "?"


def finish(
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


def image_overriders(
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


def image_overrides(group: str, images: Mapping[str, str]) -> list[dict[str, Any]]:
    return [{"group": group, "container": c, "image": img} for c, img in sorted(images.items())]


def args_overrides(
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
