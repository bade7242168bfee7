"""Read YAML manifest files strictly: syntax errors and duplicate keys are errors.

PyYAML keeps the last of two equal keys silently; the API server's strict decoding
(and YAML 1.2) rejects them, and a silently dropped ``nodeSelector`` is exactly the kind
of surprise we refuse (shared data: ``kubeedge-pi-counter-app.yaml``). Timestamps are
left as strings, as the API server's YAML-to-JSON conversion leaves them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode

from cloudhub.devices.errors import ManifestError


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys and does not build dates."""

    yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:
                continue  # unhashable key: the base class raises its own clear error
            if first is not None:
                raise ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"duplicate key {key!r} (first at line {first.line + 1})",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


@dataclass(frozen=True, slots=True)
class LoadedDocument:
    """One YAML document of a file.

    Attributes:
        path: the file it came from.
        index: 0-based position among the file's non-empty documents.
        line: 1-based line where it starts.
        content: the parsed document (usually a dict).
    """

    path: str
    index: int
    line: int
    content: Any


def load_text(text: str, path: str = "<string>") -> list[LoadedDocument]:
    """Parse every document of a YAML text; empty documents are skipped.

    Raises:
        ManifestError: a syntax error or a duplicate key, with line and column, or
            nesting too deep to parse.
    """
    loader = _StrictLoader(text)
    docs: list[LoadedDocument] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            content = loader.construct_document(node)
            if content is not None:
                docs.append(LoadedDocument(path, len(docs), node.start_mark.line + 1, content))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        if exc.context and exc.problem and "duplicate key" not in exc.problem:
            problem = f"{exc.problem} ({exc.context})"
        raise ManifestError(
            path,
            f"invalid YAML: {problem}",
            line=mark.line + 1 if mark else None,
            column=mark.column + 1 if mark else None,
        ) from exc
    except yaml.YAMLError as exc:
        raise ManifestError(path, f"invalid YAML: {exc}") from exc
    except RecursionError:
        # PyYAML composes nested collections recursively.
        raise ManifestError(path, "invalid YAML: nested too deeply") from None
    finally:
        loader.dispose()
    return docs


def load_file(path: str | os.PathLike[str]) -> list[LoadedDocument]:
    """Read and parse a YAML manifest file (UTF-8; CRLF and a missing final newline are fine).

    Raises:
        ManifestError: the file cannot be read, is not UTF-8, or is not valid YAML.
    """
    name = os.fspath(path)
    try:
        with open(name, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise ManifestError(name, f"cannot read: {exc.strerror or exc}") from exc
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ManifestError(name, f"not UTF-8 text (byte {exc.start})") from exc
    return load_text(text, name)
