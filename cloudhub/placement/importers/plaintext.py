"""Karmada's ``plaintext`` overrider (a JSON patch operation on the propagated workload)
as EdgePlacement group overrides.

A plaintext rule is ``{path, operator, value}``: ``path`` a JSON pointer (RFC 6901) into
the workload, ``operator`` one of ``add``, ``remove``, ``replace`` (RFC 6902). Only the
operations an EdgePlacement override can say exactly are translated:

- ``add``/``replace`` of ``/spec/template/spec/containers/<i>/image`` with a non-empty
  string: an image override of container ``<i>``;
- ``add``/``replace`` of ``/spec/template/spec/containers/<i>/args`` with a list of
  strings: an args override of container ``<i>``;
- ``add``/``replace`` of ``/spec/replicas`` with a count, when every group runs the
  workload's replica count (Karmada's ``Duplicated``): the group's replicas. (With
  ``Divided`` Karmada overrides the share it computed, which no override can say.)

Every other path, operator or value is dropped and recorded (it changes what runs).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from cloudhub.placement.importers.common import ImportResult

__all__ = ["plaintext_overrides"]

_INDEX = re.compile(r"0|[1-9][0-9]*")  # an RFC 6901 array index: no sign, no leading zero
_SETTERS = ("add", "replace")
_MAX_REPLICAS = 2**31 - 1


def _tokens(pointer: object) -> list[str] | None:
    """The reference tokens of a JSON pointer (``~1`` is ``/``, ``~0`` is ``~``), or None
    when it is not one."""
    if not isinstance(pointer, str) or not pointer.startswith("/"):
        return None
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


def _translate(
    tokens: list[str], value: object, containers: list[str], replicas: bool
) -> tuple[dict[str, Any] | None, str]:
    """The override one setting operation comes to, or None and why not."""
    if tokens == ["spec", "replicas"]:
        if not replicas:
            return None, "the replica count of one cluster has no equivalent with Divided"
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_REPLICAS:
            return None, f"replicas must be a count, got {value!r}"
        return {"replicas": value}, ""
    if len(tokens) != 6 or tokens[:4] != ["spec", "template", "spec", "containers"]:
        return None, "overrides change a container's image or args, or the replicas, only"
    index, name = tokens[4], tokens[5]
    if not _INDEX.fullmatch(index) or int(index) >= len(containers):
        return None, f"there is no container {index} (the template has {len(containers)})"
    container = containers[int(index)]
    if name == "image":
        if not isinstance(value, str) or not value.strip():
            return None, f"an image must be a non-empty string, got {value!r}"
        return {"container": container, "image": value}, ""
    if name == "args":
        if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
            return None, f"args must be a list of strings, got {value!r}"
        return {"container": container, "args": list(value)}, ""
    return None, f"overrides change a container's image or args, not its {name}"


def plaintext_overrides(
    template: Mapping[str, Any],
    rules: Iterable[Mapping[str, Any]],
    result: ImportResult,
    path: str,
    what: str,
    document: str = "",
    *,
    replicas: bool,
) -> list[dict[str, Any]]:
    """The overrides (without their group) that plaintext ``rules`` come to, in order.

    Args:
        template: the placement's PodTemplateSpec (containers by index).
        rules: the plaintext overriders.
        result: where a rule that cannot be translated is recorded.
        path: the rules' JSON path in their document; ``what`` names them in messages;
            ``document`` is their document when it is not the result's.
        replicas: whether ``/spec/replicas`` is a group's replica count (Duplicated).
    """
    containers = [c["name"] for c in template["spec"]["containers"]]
    out: list[dict[str, Any]] = []
    if not isinstance(rules, list):
        result.drop(path, f"{what}: plaintext must be a list of overriders", document=document)
        return out
    for k, rule in enumerate(rules):
        rpath = f"{path}[{k}]"
        if not isinstance(rule, Mapping):
            result.drop(
                rpath, f"{what}: plaintext overrider {rule!r} is malformed", document=document
            )
            continue
        pointer, operator = rule.get("path"), rule.get("operator")
        tokens = _tokens(pointer)
        if tokens is None:
            why = f"path {pointer!r} is not a JSON pointer"
        elif operator not in _SETTERS:
            why = f"operator {operator!r} (only add and replace set a value)"
        else:
            override, why = _translate(tokens, rule.get("value"), containers, replicas)
            if override is not None:
                out.append(override)
                continue
        result.drop(
            rpath,
            f"{what}: plaintext {operator} {pointer} not translated: {why}",
            document=document,
        )
    return out
