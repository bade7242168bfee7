"""What every source system's translation shares: the documents, the result, the
EdgePlacement it produces, and the overriders (image, args) Karmada and KubeEdge both have.

A translation never changes what a policy means in silence: whatever a document says that
its EdgePlacements do not is recorded as :class:`Dropped`, with its path, and marked
``changes_meaning`` when leaving it out changes where or what runs (a placement wider or
narrower than the source's, other replicas, another image, a workload not placed). The
``cloudhub placement import`` command refuses to write placements with such drops unless
told ``--lossy``. Drops that change neither (a Service a policy also propagates, how a
node group is labelled) are reported and allowed.
"""

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
    "POD_WORKLOADS",
    "SHAPE_ERRORS",
    "Context",
    "Doc",
    "Dropped",
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


@dataclass(frozen=True, slots=True)
class Dropped:
    """Something a source document says that its EdgePlacements do not.

    Attributes:
        path: the field, as a JSON path in its document (``spec.placement.spreadConstraints``;
            "" for the whole document).
        message: what was left out and why, one sentence.
        changes_meaning: leaving it out changes where or what runs (a wider or narrower
            placement, other replicas, another image or command, a workload not placed).
        document: the document holding the field when it is not the result's own (an
            OverridePolicy rule applied to a PropagationPolicy's placement):
            ``file#index Kind namespace/name``.
    """

    path: str
    message: str
    changes_meaning: bool = True
    document: str = ""


@dataclass
class ImportResult:
    """The translation of one source document.

    Attributes:
        source: where it came from (``file#index``).
        kind: the document's kind.
        name: its ``namespace/name``.
        placements: EdgePlacement objects (API JSON), each validated.
        dropped: what could not be translated (see :class:`Dropped`).
        notes: how things were mapped (group labels, defaults taken).
    """

    source: str
    kind: str
    name: str
    placements: list[dict[str, Any]] = field(default_factory=list)
    dropped: list[Dropped] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def drop(
        self, path: str, message: str, *, changes_meaning: bool = True, document: str = ""
    ) -> None:
        """Record a field left out (by default one whose absence changes the meaning)."""
        self.dropped.append(Dropped(path, message, changes_meaning, document))

    @property
    def untranslated(self) -> tuple[str, ...]:
        """What could not be translated, one sentence each (every drop's message; record
        more with :meth:`drop`)."""
        return tuple(d.message for d in self.dropped)

    @property
    def lossy(self) -> list[Dropped]:
        """The drops that change where or what runs."""
        return [d for d in self.dropped if d.changes_meaning]


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

    def describe(self, ctx: Context) -> str:
        """``file#index Kind namespace/name``, for drops recorded on another result."""
        return f"{self.source} {self.kind} {ref(self, ctx)}"


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

#: Kinds that run pods: a selector or manifest of one of these that is not placed changes
#: what runs; any other kind (Service, Ingress, ConfigMap...) does not.
POD_WORKLOADS = frozenset(
    {"Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job", "CronJob", "Pod"}
)

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
    """Validate and add one EdgePlacement to a result (an empty ``overrides`` left out)."""
    if not spec.get("overrides", True):
        del spec["overrides"]
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
        result.drop("", f"the translated placement {name} is invalid: {exc}")
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
    template: Mapping[str, Any],
    rules: Iterable[Mapping[str, Any]],
    result: ImportResult,
    path: str,
    what: str,
    document: str = "",
) -> dict[str, str]:
    """Apply image overriders to a template's containers: ``{container: image}``.

    Args:
        template: the PodTemplateSpec.
        rules: the overriders (``component``, ``operator``, ``value``, ``predicate``).
        result: where a rule that cannot be applied is recorded (it changes the image).
        path: the rules' JSON path in their document; ``what`` names them in messages;
            ``document`` is their document when it is not the result's.
    """
    containers = template["spec"].get("containers") or []
    images = {c["name"]: c.get("image", "") for c in containers}
    for k, rule in enumerate(rules):
        component = rule.get("component")
        operator = rule.get("operator")
        if component not in ("Registry", "Repository", "Tag") or operator not in (
            "add",
            "remove",
            "replace",
        ):
            result.drop(
                f"{path}[{k}]",
                f"{what}: image overrider {dict(rule)} is malformed",
                document=document,
            )
            continue
        targets = list(images)
        predicate = (rule.get("predicate") or {}).get("path")
        if predicate:
            match = re.fullmatch(r"/spec/template/spec/containers/(\d+)/image", predicate)
            if match is None or int(match[1]) >= len(containers):
                result.drop(
                    f"{path}[{k}].predicate.path",
                    f"{what}: image predicate path {predicate} not translated",
                    document=document,
                )
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
    template: Mapping[str, Any],
    rules: Iterable[Mapping[str, Any]],
    result: ImportResult,
    path: str,
    what: str,
    document: str = "",
) -> dict[str, list[str]]:
    """Apply args overriders (``add``/``remove`` values) to a template's containers:
    ``{container: args}``; arguments as :func:`image_overriders`."""
    out: dict[str, list[str]] = {}
    containers = {c["name"]: list(c.get("args") or []) for c in template["spec"]["containers"]}
    for k, rule in enumerate(rules):
        name = rule.get("containerName")
        if name not in containers:
            result.drop(
                f"{path}[{k}].containerName",
                f"{what}: args overrider for unknown container {name!r}",
                document=document,
            )
            continue
        args = out.get(name, containers[name])
        values = list(rule.get("value") or [])
        if rule.get("operator") == "add":
            args = args + values
        elif rule.get("operator") == "remove":
            args = [a for a in args if a not in values]
        else:
            result.drop(
                f"{path}[{k}].operator",
                f"{what}: args operator {rule.get('operator')!r} not translated",
                document=document,
            )
            continue
        out[name] = args
    return out
