"""PATCH bodies: JSON patch (RFC 6902), JSON merge patch (RFC 7386) and
Kubernetes strategic merge patch for built-in kinds.

Strategic merge patch differs from merge patch on lists: a list whose field is
tagged ``patchStrategy: merge`` in the Kubernetes API types is merged element by
element, matching elements by their ``patchMergeKey`` (containers by ``name``,
container ports by ``containerPort``, ...), or as a set for lists of scalars
(``finalizers``). Other lists are replaced. Directives: ``$patch: replace|delete``
in maps and list elements, ``$retainKeys``, ``$deleteFromPrimitiveList/<field>``
and ``$setElementOrder/<field>``, as kubectl apply sends them.

The table of merge keys below restates the ``patchStrategy``/``patchMergeKey``
tags of the Kubernetes 1.20 API types for the kinds this server serves.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import jsonpatch

from cloudhub.standalone.errors import StatusError, bad_request

__all__ = [
    "JSON_PATCH",
    "MERGE_PATCH",
    "PATCH_TYPES",
    "STRATEGIC_MERGE_PATCH",
    "apply_json_patch",
    "apply_merge_patch",
    "apply_strategic_merge_patch",
    "strategic_rules",
]

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
PATCH_TYPES = (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH)

#: ``(strategy, merge key)``: strategy is "merge" or "merge,retainKeys" or
#: "retainKeys"; the key is None for a set of scalars.
Rule = tuple[str, str | None]

_META: dict[str, Rule] = {
    "finalizers": ("merge", None),
    "ownerReferences": ("merge", "uid"),
}
_CONTAINER: dict[str, Rule] = {
    "ports": ("merge", "containerPort"),
    "env": ("merge", "name"),
    "volumeMounts": ("merge", "mountPath"),
    "volumeDevices": ("merge", "devicePath"),
}
_POD_SPEC: dict[str, Rule] = {
    "volumes": ("merge,retainKeys", "name"),
    "initContainers": ("merge", "name"),
    "containers": ("merge", "name"),
    "ephemeralContainers": ("merge", "name"),
    "imagePullSecrets": ("merge", "name"),
    "hostAliases": ("merge", "ip"),
    "topologySpreadConstraints": ("merge", "topologyKey"),
}
_CONDITIONS: dict[str, Rule] = {"conditions": ("merge", "type")}


def _prefixed(prefix: str, rules: Mapping[str, Rule]) -> dict[str, Rule]:
    return {f"{prefix}.{k}" if prefix else k: v for k, v in rules.items()}


def _pod_spec(prefix: str) -> dict[str, Rule]:
    out = _prefixed(prefix, _POD_SPEC)
    for field in ("containers", "initContainers", "ephemeralContainers"):
        out.update(_prefixed(f"{prefix}.{field}[]", _CONTAINER))
    return out


def _template(prefix: str) -> dict[str, Rule]:
    return {**_prefixed(f"{prefix}.metadata", _META), **_pod_spec(f"{prefix}.spec")}


_RULES: dict[str, dict[str, Rule]] = {
    "Pod": {
        **_pod_spec("spec"),
        "status.conditions": ("merge", "type"),
        "status.podIPs": ("merge", "ip"),
    },
    "Node": {
        "spec.podCIDRs": ("merge", None),
        "status.conditions": ("merge", "type"),
        "status.addresses": ("merge", "type"),
    },
    "Namespace": _prefixed("status", _CONDITIONS),
    "Service": {"spec.ports": ("merge", "port")},
    "Deployment": {
        **_template("spec.template"),
        "spec.strategy": ("retainKeys", None),
        "status.conditions": ("merge", "type"),
    },
    "DaemonSet": {**_template("spec.template"), "status.conditions": ("merge", "type")},
    "ReplicaSet": {**_template("spec.template"), "status.conditions": ("merge", "type")},
    "StatefulSet": {**_template("spec.template"), "status.conditions": ("merge", "type")},
    "PodDisruptionBudget": {"status.conditions": ("merge", "type")},
}


def strategic_rules(kind: str) -> dict[str, Rule]:
    """Patch rules of a built-in kind, keyed by field path (``[]`` marks list items)."""
    return {**_prefixed("metadata", _META), **_RULES.get(kind, {})}


# -- JSON patch and merge patch ------------------------------------------------


def apply_json_patch(obj: dict[str, Any], patch: Any) -> dict[str, Any]:
    """Apply an RFC 6902 JSON patch.

    Raises:
        StatusError: 400 when the patch is not a list of operations; 422 when an
            operation cannot be applied (missing path, failed ``test``), as
            kube-apiserver answers.
    """
    if not isinstance(patch, list):
        raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    try:
        result = jsonpatch.JsonPatch(patch).apply(obj)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
        raise StatusError(
            422, "Invalid", f"the server rejected our request due to an error in our request: {exc}"
        ) from exc
    except (TypeError, KeyError, AttributeError, ValueError) as exc:
        raise bad_request(f"invalid JSON patch: {exc}") from exc
    if not isinstance(result, dict):
        raise StatusError(422, "Invalid", "the patched document is not a JSON object")
    return result


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """Apply an RFC 7386 JSON merge patch (``null`` deletes a key; lists replace)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result


# -- strategic merge patch -------------------------------------------------------


def apply_strategic_merge_patch(
    obj: dict[str, Any], patch: Any, rules: Mapping[str, Rule]
) -> dict[str, Any]:
    """Apply a strategic merge patch to ``obj`` with ``rules`` from :func:`strategic_rules`.

    Raises:
        StatusError: 400 for a patch that is not an object or uses a directive wrongly.
    """
    if not isinstance(patch, dict):
        raise bad_request("strategic merge patch must be a JSON object")
    result = _merge_map(obj, patch, "", rules)
    if not isinstance(result, dict):
        raise bad_request("strategic merge patch deleted the whole object")
    return result


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _merge_map(original: Any, patch: dict[str, Any], path: str, rules: Mapping[str, Rule]) -> Any:
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive is not None:
        raise bad_request(f"unknown patch type {directive!r} in map at {path or '<root>'}")
    result = dict(original) if isinstance(original, dict) else {}
    orders: dict[str, list[Any]] = {}
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys"):
            continue
        if key.startswith("$setElementOrder/"):
            if not isinstance(value, list):
                raise bad_request(f"{key} must be a list")
            orders[key.split("/", 1)[1]] = value
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            if not isinstance(value, list):
                raise bad_request(f"{key} must be a list")
            current = result.get(field)
            if isinstance(current, list):
                result[field] = [v for v in current if v not in value]
            continue
        if value is None:
            result.pop(key, None)
            continue
        sub = _join(path, key)
        rule = rules.get(sub)
        if isinstance(value, dict):
            merged = _merge_map(result.get(key), value, sub, rules)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            if rule is not None and "merge" in rule[0]:
                result[key] = _merge_list(result.get(key), value, sub, rule[1], rules)
            else:
                result[key] = [_strip(v) for v in value]
        else:
            result[key] = value
    for field, order in orders.items():
        if isinstance(result.get(field), list):
            rule = rules.get(_join(path, field))
            before = original.get(field) if isinstance(original, dict) else None
            result[field] = _normalize_order(
                result[field],
                order,
                before if isinstance(before, list) else [],
                rule[1] if rule else None,
            )
    if retain is not None:
        if not isinstance(retain, list):
            raise bad_request("$retainKeys must be a list")
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _merge_list(
    original: Any, patch: list[Any], path: str, merge_key: str | None, rules: Mapping[str, Rule]
) -> list[Any]:
    """Merge a patch list into a list with merge strategy, in the order
    kube-apiserver gives the result (see :func:`_normalize_order`)."""
    current = list(original) if isinstance(original, list) else []
    if merge_key is None:
        merged = list(current)
        for value in patch:
            if value not in merged:
                merged.append(value)
        return _normalize_order(merged, patch, current, None)
    item_path = path + "[]"
    plain: list[dict[str, Any]] = []
    replace = False
    for item in patch:
        if not isinstance(item, dict):
            raise bad_request(f"{path}: list items must be objects with the key {merge_key!r}")
        directive = item.get("$patch")
        if directive == "replace":
            replace = True
            continue
        if directive is not None and directive != "delete":
            raise bad_request(f"{path}: unknown patch type {directive!r} in list")
        if merge_key not in item:
            raise bad_request(
                f"{path}: map: {item} does not contain declared merge key: {merge_key}"
            )
        if directive == "delete":
            current = [
                v
                for v in current
                if not (isinstance(v, dict) and v.get(merge_key) == item[merge_key])
            ]
        else:
            plain.append(item)
    if replace:
        return [_strip(p) for p in plain]
    merged = list(current)
    for item in plain:
        key = item[merge_key]
        index = next(
            (i for i, v in enumerate(merged) if isinstance(v, dict) and v.get(merge_key) == key),
            None,
        )
        if index is None:
            merged.append(_merge_map({}, item, item_path, rules))
        else:
            merged[index] = _merge_map(merged[index], item, item_path, rules)
    return _normalize_order(merged, plain, current, merge_key)


def _normalize_order(
    merged: list[Any], patch_order: list[Any], server_order: list[Any], merge_key: str | None
) -> list[Any]:
    """Order a merged list as apimachinery's strategic merge does: the items the
    patch names, in the patch's order, interleaved with the items only the server
    had, in the server's order; an item the server did not have goes before the
    server-only items not yet placed (a new container comes first unless
    ``$setElementOrder`` says otherwise)."""

    def key_of(v: Any) -> Any:
        if merge_key is not None and isinstance(v, dict):
            return v.get(merge_key)
        return v if not isinstance(v, (dict, list)) else repr(v)

    patch_keys = [key_of(v) for v in patch_order]
    server_keys = [key_of(v) for v in server_order]
    patch_pos = {k: i for i, k in reversed(list(enumerate(patch_keys)))}
    server_pos = {k: i for i, k in reversed(list(enumerate(server_keys)))}
    named = sorted(
        (v for v in merged if key_of(v) in patch_pos), key=lambda v: patch_pos[key_of(v)]
    )
    server_only = sorted(
        (v for v in merged if key_of(v) not in patch_pos),
        key=lambda v: server_pos.get(key_of(v), len(server_pos)),
    )
    out: list[Any] = []
    i = j = 0
    while i < len(server_only) or j < len(named):
        if j >= len(named):
            out.append(server_only[i])
            i += 1
        elif i >= len(server_only):
            out.append(named[j])
            j += 1
        else:
            left = server_pos.get(key_of(server_only[i]))
            right = server_pos.get(key_of(named[j]))
            if left is not None and right is not None and left < right:
                out.append(server_only[i])
                i += 1
            else:
                out.append(named[j])
                j += 1
    return out
