"""Custom resources: CustomResourceDefinition checks, and the structural
schema of a CRD version applied to its objects (validation, pruning, defaults).

As apiextensions-apiserver does for ``apiextensions.k8s.io/v1``: fields the
schema does not declare are dropped (pruned) unless
``x-kubernetes-preserve-unknown-fields: true`` says to keep them; ``default``
values fill omitted fields; then the object is validated against ``type``,
``required``, ``enum``, bounds, lengths, ``pattern`` and item counts. A failure
is a 422 whose causes name the field.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

from cloudhub.standalone.errors import StatusCause
from cloudhub.standalone.resources import ResourceType
from cloudhub.standalone.validation import Errors, is_label, is_subdomain

__all__ = ["apply_schema", "crd_defaults", "crd_types", "validate_crd"]

_TYPES = {"object", "array", "string", "integer", "number", "boolean"}
_VERSION_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def _type_ok(kind: str, value: Any) -> bool:
    if kind == "object":
        return isinstance(value, dict)
    if kind == "array":
        return isinstance(value, list)
    if kind == "string":
        return isinstance(value, str)
    if kind == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer()
        )
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "boolean":
        return isinstance(value, bool)
    return True


def _render(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "map[string]interface {}{...}"
    if isinstance(value, list):
        return "[]interface {}{...}"
    return str(value)


def _walk(
    schema: Mapping[str, Any], value: Any, path: str, errs: Errors, root: bool, pruned: list[str]
) -> Any:
    """Prune and default ``value`` in place, record validation errors; return it."""
    if value is None:
        if not schema.get("nullable"):
            errs.causes.append(
                StatusCause(
                    "FieldValueInvalid",
                    f'Invalid value: "null": {path} in body must be of type '
                    f'{schema.get("type", "object")}: "null"',
                    path,
                )
            )
        return value
    kind = schema.get("type")
    if schema.get("x-kubernetes-int-or-string"):
        if not (isinstance(value, (int, str)) and not isinstance(value, bool)):
            errs.invalid(path, value, f"{path} in body must be of type integer-or-string")
            return value
    elif kind and not _type_ok(kind, value):
        got = type(value).__name__
        got = {
            "str": "string",
            "int": "integer",
            "float": "number",
            "bool": "boolean",
            "dict": "object",
            "list": "array",
        }.get(got, got)
        errs.causes.append(
            StatusCause(
                "FieldValueInvalid",
                f'Invalid value: {_render(value)}: {path} in body must be of type {kind}: "{got}"',
                path,
            )
        )
        return value
    if isinstance(value, dict):
        props: Mapping[str, Any] = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        keep = schema.get("x-kubernetes-preserve-unknown-fields") is True
        for key in list(value):
            if root and key in ("apiVersion", "kind", "metadata"):
                continue
            sub = f"{path}.{key}" if path else key
            if key in props:
                value[key] = _walk(props[key], value[key], sub, errs, False, pruned)
            elif isinstance(extra, dict):
                value[key] = _walk(extra, value[key], sub, errs, False, pruned)
            elif extra is True or keep:
                continue
            else:
                pruned.append(sub)
                del value[key]
        for key, prop in props.items():
            if key not in value and isinstance(prop, dict) and "default" in prop:
                value[key] = copy.deepcopy(prop["default"])
                value[key] = _walk(
                    prop, value[key], f"{path}.{key}" if path else key, errs, False, pruned
                )
        for key in schema.get("required") or []:
            if key not in value:
                errs.required(f"{path}.{key}" if path else key)
        _bounds(schema, len(value), "minProperties", "maxProperties", path, errs, "properties")
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                value[i] = _walk(items, item, f"{path}[{i}]", errs, False, pruned)
        _bounds(schema, len(value), "minItems", "maxItems", path, errs, "items")
        if schema.get("uniqueItems"):
            seen: list[Any] = []
            for item in value:
                if item in seen:
                    errs.duplicate(path, item)
                    break
                seen.append(item)
    elif isinstance(value, str):
        _bounds(schema, len(value), "minLength", "maxLength", path, errs, "chars")
        pattern = schema.get("pattern")
        if isinstance(pattern, str):
            try:
                if not re.search(pattern, value):
                    errs.invalid(path, value, f"{path} in body should match '{pattern}'")
            except re.error:
                pass
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        _numeric(schema, value, path, errs)
    enum = schema.get("enum")
    if isinstance(enum, list) and value not in enum:
        errs.not_supported(path, value, [str(e) for e in enum])
    return value


def _bounds(
    schema: Mapping[str, Any], size: int, low: str, high: str, path: str, errs: Errors, unit: str
) -> None:
    lo, hi = schema.get(low), schema.get(high)
    if isinstance(lo, int) and size < lo:
        errs.invalid(path, size, f"{path} in body should have at least {lo} {unit}")
    if isinstance(hi, int) and size > hi:
        errs.causes.append(
            StatusCause(
                "FieldValueTooMany" if unit in ("items", "properties") else "FieldValueTooLong",
                f"Too long: may have at most {hi} {unit}",
                path,
            )
        )


def _numeric(schema: Mapping[str, Any], value: float, path: str, errs: Errors) -> None:
    low, high = schema.get("minimum"), schema.get("maximum")
    if isinstance(low, (int, float)):
        if schema.get("exclusiveMinimum") and value <= low:
            errs.invalid(path, value, f"{path} in body should be greater than {low}")
        elif value < low:
            errs.invalid(path, value, f"{path} in body should be greater than or equal to {low}")
    if isinstance(high, (int, float)):
        if schema.get("exclusiveMaximum") and value >= high:
            errs.invalid(path, value, f"{path} in body should be less than {high}")
        elif value > high:
            errs.invalid(path, value, f"{path} in body should be less than or equal to {high}")
    multiple = schema.get("multipleOf")
    if isinstance(multiple, (int, float)) and multiple and value % multiple:
        errs.invalid(path, value, f"{path} in body should be a multiple of {multiple}")


def apply_schema(rtype: ResourceType, obj: dict[str, Any]) -> tuple[list[StatusCause], list[str]]:
    """Prune unknown fields, fill defaults and validate a custom resource in place.

    Returns:
        The validation causes (empty when the object is valid) and the paths of
        the fields pruned because the schema does not declare them.
    """
    schema = rtype.schema
    if not isinstance(schema, dict):
        return [], []
    errs = Errors()
    pruned: list[str] = []
    _walk(schema, obj, "", errs, True, pruned)
    return errs.causes, pruned


# -- CustomResourceDefinition --------------------------------------------------------


def crd_defaults(crd: dict[str, Any]) -> None:
    """SetDefaults for a CRD: names.singular/listKind, conversion strategy."""
    spec = crd.get("spec")
    if not isinstance(spec, dict):
        return
    names = spec.get("names")
    if isinstance(names, dict) and isinstance(names.get("kind"), str):
        names.setdefault("singular", names["kind"].lower())
        names.setdefault("listKind", names["kind"] + "List")
    spec.setdefault("conversion", {"strategy": "None"})


def _structural(schema: Any, path: str, errs: Errors, root: bool) -> None:
    if not isinstance(schema, dict):
        errs.invalid(path, schema, "must be an object")
        return
    kind = schema.get("type")
    special = schema.get("x-kubernetes-int-or-string") or schema.get(
        "x-kubernetes-preserve-unknown-fields"
    )
    if kind is None and not special:
        errs.required(f"{path}.type", "must not be empty for specified object fields")
    elif kind is not None and kind not in _TYPES:
        errs.not_supported(f"{path}.type", kind, sorted(_TYPES))
    if root and kind not in (None, "object"):
        errs.invalid(f"{path}.type", kind, 'must be "object" at the root')
    for key, sub in (schema.get("properties") or {}).items():
        _structural(sub, f"{path}.properties[{key}]", errs, False)
    if isinstance(schema.get("items"), dict):
        _structural(schema["items"], f"{path}.items", errs, False)
    if isinstance(schema.get("additionalProperties"), dict):
        _structural(schema["additionalProperties"], f"{path}.additionalProperties", errs, False)
    if kind == "array" and "items" not in schema:
        errs.required(f"{path}.items", "must be specified")


def validate_crd(crd: Mapping[str, Any]) -> list[StatusCause]:
    """CustomResourceDefinition rules (apiextensions v1 validation, main parts)."""
    errs = Errors()
    spec = crd.get("spec")
    name = (crd.get("metadata") or {}).get("name", "")
    if not isinstance(spec, dict):
        errs.required("spec")
        return errs.causes
    group = spec.get("group")
    names = spec.get("names") if isinstance(spec.get("names"), dict) else {}
    plural = names.get("plural")
    if not group:
        errs.required("spec.group")
    elif not isinstance(group, str) or not is_subdomain(group) or "." not in group:
        errs.invalid("spec.group", group, "should be a domain with at least one dot")
    if not plural:
        errs.required("spec.names.plural")
    elif not isinstance(plural, str) or not is_label(plural):
        errs.invalid("spec.names.plural", plural, "a lowercase RFC 1123 label is required")
    if not names.get("kind"):
        errs.required("spec.names.kind")
    elif not re.match(r"^[A-Za-z][A-Za-z0-9]*$", str(names["kind"])):
        errs.invalid("spec.names.kind", names["kind"], "must be a valid Go identifier")
    singular = names.get("singular")
    if singular and (not isinstance(singular, str) or not is_label(singular)):
        errs.invalid("spec.names.singular", singular, "a lowercase RFC 1123 label is required")
    if group and plural and name != f"{plural}.{group}":
        errs.invalid("metadata.name", name, 'must be spec.names.plural+"."+spec.group')
    scope = spec.get("scope")
    if scope not in ("Namespaced", "Cluster"):
        if scope is None:
            errs.required("spec.scope")
        else:
            errs.not_supported("spec.scope", scope, ["Cluster", "Namespaced"])
    if spec.get("preserveUnknownFields") is True:
        errs.invalid(
            "spec.preserveUnknownFields",
            True,
            "cannot set to true, set x-kubernetes-preserve-unknown-fields to true in "
            "spec.versions[*].schema instead",
        )
    versions = spec.get("versions")
    if not isinstance(versions, list) or not versions:
        errs.required("spec.versions", "must have exactly one version marked as storage version")
        return errs.causes
    seen: set[str] = set()
    storage = 0
    for i, version in enumerate(versions):
        path = f"spec.versions[{i}]"
        if not isinstance(version, dict):
            errs.invalid(path, version, "must be an object")
            continue
        vname = version.get("name")
        if not vname:
            errs.required(f"{path}.name")
        elif not isinstance(vname, str) or not _VERSION_RE.match(vname):
            errs.invalid(f"{path}.name", vname, "a DNS-1035 label is required")
        elif vname in seen:
            errs.invalid("spec.versions", versions, "must contain unique version names")
        else:
            seen.add(vname)
        if version.get("storage") is True:
            storage += 1
        if not isinstance(version.get("served"), bool):
            errs.required(f"{path}.served")
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        if schema is None:
            errs.required(f"{path}.schema.openAPIV3Schema", "schemas are required")
        else:
            _structural(schema, f"{path}.schema.openAPIV3Schema", errs, True)
        subresources = version.get("subresources")
        if subresources is not None and not isinstance(subresources, dict):
            errs.invalid(f"{path}.subresources", subresources, "must be an object")
    if storage != 1:
        errs.invalid(
            "spec.versions", storage, "must have exactly one version marked as storage version"
        )
    # Objects are stored at every version in storedVersions: dropping one from
    # spec.versions would strand them (kube-apiserver refuses it the same way).
    stored = (crd.get("status") or {}).get("storedVersions") or []
    for i, version in enumerate(stored if isinstance(stored, list) else []):
        if version not in seen:
            errs.invalid(f"status.storedVersions[{i}]", version, "must appear in spec.versions")
    return errs.causes


def crd_types(crd: Mapping[str, Any]) -> list[ResourceType]:
    """The resource types a (valid) CRD serves, one per served version."""
    spec = crd["spec"]
    names = spec["names"]
    storage = next(v["name"] for v in spec["versions"] if v.get("storage"))
    out = []
    for version in spec["versions"]:
        if not version.get("served"):
            continue
        subresources = version.get("subresources") or {}
        out.append(
            ResourceType(
                group=spec["group"],
                version=version["name"],
                kind=names["kind"],
                plural=names["plural"],
                singular=names.get("singular") or names["kind"].lower(),
                namespaced=spec["scope"] == "Namespaced",
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                status_subresource="status" in subresources,
                has_generation=True,
                strategic_merge=False,
                reset_status_on_create="status" in subresources,
                return_deleted_object=True,
                custom=True,
                schema=(version.get("schema") or {}).get("openAPIV3Schema"),
                printer_columns=tuple(version.get("additionalPrinterColumns") or ()),
                storage_version=storage,
                scale=_scale_paths(subresources.get("scale")),
            )
        )
    return out


def _scale_paths(scale: Any) -> tuple[str, str, str] | None:
    """(spec, status, selector) paths of a CRD's ``subresources.scale``, without the
    leading dot of the JSON paths (``.spec.replicas`` -> ``spec.replicas``)."""
    if not isinstance(scale, dict) or not scale.get("specReplicasPath"):
        return None
    return (
        str(scale["specReplicasPath"]).lstrip("."),
        str(scale.get("statusReplicasPath", "")).lstrip("."),
        str(scale.get("labelSelectorPath", "")).lstrip("."),
    )
