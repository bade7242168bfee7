"""Limits on the shape of request bodies: YAML aliases and nesting depth.

A request body is bounded in bytes (``max_request_body_bytes``), but bytes do not
bound what it expands to:

- **YAML aliases.** ``*alias`` refers back to an ``&anchor``: nine aliases of nine
  aliases of ... (the "billion laughs") expand a few hundred bytes into gigabytes
  once the document is walked, copied or encoded; an anchor whose value contains
  its own alias is a cycle. kube-apiserver's YAML decoder (go-yaml v2, since the fix
  for CVE-2019-11253) refuses both: "document contains excessive aliasing" once more
  than a share of the decoded nodes come from aliases (99 % of up to 400,000 nodes,
  falling to 10 % at 4,000,000), and "anchor ... value contains itself". The same
  rule is applied here on the composed node graph, before anything is expanded.
- **Nesting depth.** Objects are encoded with orjson, which refuses more than 255
  levels, and walked by recursive code (decoding, schemas, patches). Objects
  nested deeper than :data:`MAX_DEPTH` levels are refused with a 400 (a difference
  from kube-apiserver 1.20, which accepts up to 10,000 levels in custom resources;
  no Kubernetes object comes near 100).
"""

from __future__ import annotations

from typing import Any

import yaml

from cloudhub.standalone.errors import StandaloneError

__all__ = ["MAX_DEPTH", "BodyError", "check_depth", "load_yaml"]

#: Deepest nesting of maps and lists an object may have (the object itself is level 1).
MAX_DEPTH = 200

#: go-yaml v2's alias budget: ratios of alias-decoded to all decoded nodes allowed.
_ALIAS_RATIO_LOW_NODES = 400_000
_ALIAS_RATIO_HIGH_NODES = 4_000_000


class BodyError(StandaloneError, ValueError):
    """A body that parses but breaks a limit (its message says which); a ``ValueError``
    too, as it was before it joined the hub's tree."""


def _allowed_alias_ratio(decoded: int) -> float:
    if decoded <= _ALIAS_RATIO_LOW_NODES:
        return 0.99
    if decoded >= _ALIAS_RATIO_HIGH_NODES:
        return 0.10
    span = _ALIAS_RATIO_HIGH_NODES - _ALIAS_RATIO_LOW_NODES
    return 0.99 - 0.89 * (decoded - _ALIAS_RATIO_LOW_NODES) / span


def _too_deep() -> BodyError:
    return BodyError(f"the object is nested more than {MAX_DEPTH} levels deep")


class _Loader(yaml.SafeLoader):
    """SafeLoader that stops at the first flow collection nested too deep: PyYAML's
    scanner does work proportional to the flow depth for every token."""

    def fetch_flow_sequence_start(self) -> None:
        if self.flow_level >= MAX_DEPTH:
            raise _too_deep()
        super().fetch_flow_sequence_start()

    def fetch_flow_mapping_start(self) -> None:
        if self.flow_level >= MAX_DEPTH:
            raise _too_deep()
        super().fetch_flow_mapping_start()


def _is_collection(node: yaml.Node) -> bool:
    return isinstance(node, (yaml.MappingNode, yaml.SequenceNode))


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_graph(root: yaml.Node) -> None:
    """Count nodes as a decoder expanding every alias would, without expanding.

    Each node's expanded size and height (in nested maps and lists, as
    :func:`check_depth` counts) are computed once, iteratively since the depth is
    what is being checked; a node met again is an alias and counts its whole
    expanded size.

    Raises:
        BodyError: a cycle, excessive aliasing, or nesting deeper than MAX_DEPTH.
    """
    size: dict[int, int] = {}
    height: dict[int, int] = {}
    open_: set[int] = set()
    decoded = aliased = 0
    stack: list[tuple[yaml.Node, list[yaml.Node]]] = [(root, _children(root))]
    open_.add(id(root))
    decoded += 1
    while stack:
        node, todo = stack[-1]
        if todo:
            child = todo.pop()
            key = id(child)
            if key in open_:
                raise BodyError("yaml: an anchor's value contains itself")
            if key in size:  # met before: an alias, expanded in full by a decoder
                decoded += size[key]
                aliased += size[key]
                continue
            if _is_collection(child) and len(stack) >= MAX_DEPTH:
                raise _too_deep()
            open_.add(key)
            decoded += 1
            stack.append((child, _children(child)))
            continue
        stack.pop()
        key = id(node)
        open_.discard(key)
        kids = _children(node)
        size[key] = 1 + sum(size[id(k)] for k in kids)
        height[key] = _is_collection(node) + max((height[id(k)] for k in kids), default=0)
    if aliased > 100 and decoded > 1000 and aliased / decoded > _allowed_alias_ratio(decoded):
        raise BodyError("yaml: document contains excessive aliasing")
    if height[id(root)] > MAX_DEPTH:
        raise _too_deep()


def load_yaml(data: bytes) -> Any:
    """Parse one YAML document (safe tags only) under the limits above.

    Raises:
        BodyError: too many aliases, a cyclic anchor, or too deep.
        yaml.YAMLError: not YAML, or more than one document.
    """
    # PyYAML composes nodes recursively: find the depth on the (iterative) event
    # stream first, so that deep input is refused at once, not at the recursion limit.
    depth = 0
    for event in yaml.parse(data, Loader=_Loader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise _too_deep()
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
    loader = _Loader(data)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_graph(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def check_depth(obj: Any, limit: int = MAX_DEPTH) -> None:
    """Refuse an object nested more than ``limit`` levels deep (maps and lists).

    Iterative, so that it is safe on any input; stops at the first branch too deep.

    Raises:
        BodyError: naming the limit.
    """
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        value, level = stack.pop()
        if isinstance(value, dict):
            items: Any = value.values()
        elif isinstance(value, list):
            items = value
        else:
            continue
        if level > limit:
            raise BodyError(f"the object is nested more than {limit} levels deep")
        stack.extend((item, level + 1) for item in items if isinstance(item, (dict, list)))
