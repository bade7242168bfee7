"""Label and field selectors, parsed from their query-string form.

Label selector grammar (as ``k8s.io/apimachinery/pkg/labels``): comma-separated
requirements, each one of ``key``, ``!key``, ``key=value``, ``key==value``,
``key!=value``, ``key in (v1,v2)``, ``key notin (v1,v2)``, ``key>N``, ``key<N``.
Keys are qualified names (``[prefix/]name``), values label values. ``!=`` and
``notin`` also match objects that do not have the key.

Field selectors are comma-separated ``field=value``, ``field==value`` or
``field!=value`` terms over the fields a resource allows
(:attr:`ResourceType.fields`); any other field is a 400, as in kube-apiserver.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from cloudhub.standalone.errors import StatusError, bad_request

__all__ = [
    "FieldSelector",
    "LabelSelector",
    "parse_field_selector",
    "parse_label_selector",
    "validate_label_key",
    "validate_label_value",
]

_NAME_RE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_DNS1123_SUBDOMAIN_RE = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)


def validate_label_key(key: str) -> str | None:
    """Why ``key`` is not a valid label key (qualified name), or None when it is."""
    prefix, _, name = key.rpartition("/")
    if "/" in key and not prefix:
        return "prefix part must be non-empty"
    if prefix and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN_RE.match(prefix)):
        return (
            "prefix part a lowercase RFC 1123 subdomain must consist of lower case "
            "alphanumeric characters, '-' or '.', and must start and end with an "
            "alphanumeric character"
        )
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    if not _NAME_RE.match(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must "
            "start and end with an alphanumeric character"
        )
    return None


def validate_label_value(value: str) -> str | None:
    """Why ``value`` is not a valid label value, or None when it is."""
    if value == "":
        return None
    if len(value) > 63:
        return "must be no more than 63 characters"
    if not _NAME_RE.match(value):
        return (
            "a valid label must be an empty string or consist of alphanumeric characters, "
            "'-', '_' or '.', and must start and end with an alphanumeric character"
        )
    return None


@dataclasses.dataclass(frozen=True, slots=True)
class _Requirement:
    key: str
    op: str  # "exists", "!exists", "=", "!=", "in", "notin", ">", "<"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        op = self.op
        if op == "exists":
            return present
        if op == "!exists":
            return not present
        if op in ("=", "in"):
            return present and labels[self.key] in self.values
        if op in ("!=", "notin"):
            return not present or labels[self.key] not in self.values
        if not present:
            return False
        try:
            have = int(labels[self.key])
        except ValueError:
            return False
        (bound,) = self.values
        return have > int(bound) if op == ">" else have < int(bound)


@dataclasses.dataclass(frozen=True, slots=True)
class LabelSelector:
    """A parsed label selector; the empty selector matches everything."""

    requirements: tuple[_Requirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        """True when every requirement holds for ``labels``."""
        return all(r.matches(labels) for r in self.requirements)


_TOKEN_RE = re.compile(r"\s*(==|!=|=|\(|\)|,|!|>|<|[^\s=!(),<>]+)")


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN_RE.match(text, pos)
        if match is None:
            break
        out.append(match.group(1))
        pos = match.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return out


def parse_label_selector(text: str | None) -> LabelSelector:
    """Parse a ``labelSelector`` query parameter.

    Raises:
        StatusError: 400 BadRequest naming the requirement that does not parse.
    """
    if not text or not text.strip():
        return LabelSelector()
    toks = _tokens(text)
    reqs: list[_Requirement] = []
    i = 0

    def fail(why: str) -> StatusError:
        return bad_request(f"unable to parse requirement: {why}")

    while i < len(toks):
        negate = toks[i] == "!"
        if negate:
            i += 1
        if i >= len(toks) or toks[i] in ("=", "==", "!=", "(", ")", ",", "!", ">", "<"):
            raise fail(f"found '{toks[i] if i < len(toks) else ''}', expected: identifier")
        key = toks[i]
        i += 1
        why = validate_label_key(key)
        if why:
            raise fail(f'invalid label key "{key}": {why}')
        if negate:
            reqs.append(_Requirement(key, "!exists"))
        elif i >= len(toks) or toks[i] == ",":
            reqs.append(_Requirement(key, "exists"))
        elif toks[i] in ("=", "==", "!="):
            op = "!=" if toks[i] == "!=" else "="
            i += 1
            value = ""
            if i < len(toks) and toks[i] != ",":
                value = toks[i]
                i += 1
            why = validate_label_value(value)
            if why:
                raise fail(f'invalid label value: "{value}": {why}')
            reqs.append(_Requirement(key, op, frozenset([value])))
        elif toks[i] in (">", "<"):
            op = toks[i]
            i += 1
            if i >= len(toks) or not re.fullmatch(r"-?\d+", toks[i]):
                raise fail("for 'Gt', 'Lt' operators, the value must be an integer")
            reqs.append(_Requirement(key, op, frozenset([toks[i]])))
            i += 1
        elif toks[i] in ("in", "notin"):
            op = toks[i]
            i += 1
            if i >= len(toks) or toks[i] != "(":
                raise fail("found '" + (toks[i] if i < len(toks) else "") + "', expected: '('")
            i += 1
            values: list[str] = []
            expect_value = True
            while i < len(toks) and toks[i] != ")":
                if toks[i] == ",":
                    if expect_value:
                        values.append("")
                    expect_value = True
                else:
                    if not expect_value:
                        raise fail(f"found '{toks[i]}', expected: ',' or ')'")
                    why = validate_label_value(toks[i])
                    if why:
                        raise fail(f'invalid label value: "{toks[i]}": {why}')
                    values.append(toks[i])
                    expect_value = False
                i += 1
            if i >= len(toks):
                raise fail("found '', expected: ')'")
            i += 1
            if not values:
                raise fail(f"for '{op}', 'notin' operators, values set can't be empty")
            reqs.append(_Requirement(key, op, frozenset(values)))
        else:
            raise fail(f"found '{toks[i]}', expected: '=', '!=', '==', 'in', notin'")
        if i < len(toks):
            if toks[i] != ",":
                raise fail(f"found '{toks[i]}', expected: ',' or 'end of string'")
            i += 1
            if i >= len(toks):
                raise fail("found '', expected: identifier after ','")
    return LabelSelector(tuple(reqs))


@dataclasses.dataclass(frozen=True, slots=True)
class FieldSelector:
    """A parsed field selector: (field, negated, value) terms, all of which must hold."""

    terms: tuple[tuple[str, bool, str], ...] = ()

    @property
    def empty(self) -> bool:
        return not self.terms

    @property
    def fields(self) -> frozenset[str]:
        return frozenset(t[0] for t in self.terms)

    def matches(self, values: Mapping[str, str]) -> bool:
        """True when every term holds for ``values`` (field name -> value as text)."""
        for field, negated, want in self.terms:
            have = values.get(field, "")
            if (have == want) == negated:
                return False
        return True

    def exact(self, field: str) -> str | None:
        """The value ``field`` must equal, when the selector pins it with ``=``."""
        for name, negated, want in self.terms:
            if name == field and not negated:
                return want
        return None


def _unescape_field_value(value: str) -> str:
    out = []
    i = 0
    while i < len(value):
        ch = value[i]
        if ch == "\\" and i + 1 < len(value) and value[i + 1] in "\\,=":
            out.append(value[i + 1])
            i += 2
            continue
        if ch in ",=" or ch == "\\":
            raise bad_request(f"invalid field selector value: {value!r} has an unescaped {ch!r}")
        out.append(ch)
        i += 1
    return "".join(out)


def parse_field_selector(text: str | None) -> FieldSelector:
    """Parse a ``fieldSelector`` query parameter.

    Which fields a resource supports is checked by the caller
    (:meth:`ResourceType.selectable`).

    Args:
        text: The parameter, e.g. ``spec.nodeName=edge-1,status.phase!=Failed``.

    Raises:
        StatusError: 400 BadRequest for a malformed term.
    """
    if not text or not text.strip():
        return FieldSelector()
    terms: list[tuple[str, bool, str]] = []
    parts: list[str] = []
    current = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            current.append(text[i : i + 2])
            i += 2
            continue
        if ch == ",":
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    parts.append("".join(current))
    for part in parts:
        part = part.strip()
        if not part:
            continue  # empty terms ("a=b,") are skipped, as fields.ParseSelector does
        for op in ("!=", "==", "="):
            idx = part.find(op)
            if idx > 0:
                field = part[:idx].strip()
                value = _unescape_field_value(part[idx + len(op) :].strip())
                terms.append((field, op == "!=", value))
                break
        else:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
    return FieldSelector(tuple(terms))
