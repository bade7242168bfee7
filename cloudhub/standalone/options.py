"""Parsed request options: list/watch parameters, DeleteOptions, write options,
and the opaque ``continue`` tokens of paged lists."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from cloudhub.standalone import decode, errors
from cloudhub.standalone.encoding import loads
from cloudhub.standalone.resources import ResourceType
from cloudhub.standalone.selectors import (
    FieldSelector,
    LabelSelector,
    parse_field_selector,
    parse_label_selector,
)
from cloudhub.standalone.store import Entry

__all__ = [
    "DeleteOptions",
    "ListParams",
    "ListResult",
    "WriteOptions",
    "decode_continue",
    "encode_continue",
    "parse_resource_version",
]


@dataclasses.dataclass(frozen=True, slots=True)
class ListParams:
    """Query parameters of list and watch (already parsed)."""

    label_selector: LabelSelector = dataclasses.field(default_factory=LabelSelector)
    field_selector: FieldSelector = dataclasses.field(default_factory=FieldSelector)
    limit: int = 0
    continue_token: str = ""
    resource_version: str = ""
    resource_version_match: str = ""
    timeout_s: float | None = None
    allow_bookmarks: bool = False

    @classmethod
    def parse(cls, rtype: ResourceType, query: Mapping[str, str]) -> ListParams:
        """Parse list/watch query parameters for ``rtype``.

        Raises:
            StatusError: 400 for malformed selectors, limits or timeouts, or a
                field selector on a field the resource does not support.
        """
        labels = parse_label_selector(query.get("labelSelector"))
        fields = parse_field_selector(query.get("fieldSelector"))
        for name in fields.fields:
            if not rtype.selectable(name):
                if rtype.custom:
                    raise errors.bad_request(
                        f'"{name}" is not a known field selector: only "metadata.name", '
                        f'"metadata.namespace"'
                    )
                raise errors.bad_request(f"field label not supported: {name}")
        limit = _int_param(query, "limit", 0)
        if limit < 0:
            limit = 0
        timeout = query.get("timeoutSeconds")
        timeout_s = float(_int_param(query, "timeoutSeconds", 0)) if timeout else None
        return cls(
            label_selector=labels,
            field_selector=fields,
            limit=limit,
            continue_token=query.get("continue", ""),
            resource_version=query.get("resourceVersion", ""),
            resource_version_match=query.get("resourceVersionMatch", ""),
            timeout_s=timeout_s,
            allow_bookmarks=query.get("allowWatchBookmarks", "") in ("true", "1", "True"),
        )

    def matches(self, namespace: str, name: str, entry: Entry) -> bool:
        if self.label_selector.requirements and not self.label_selector.matches(entry.labels):
            return False
        if self.field_selector.terms:
            values = dict(entry.fields)
            values["metadata.name"] = name
            values["metadata.namespace"] = namespace
            if not self.field_selector.matches(values):
                return False
        return True

    @property
    def filtered(self) -> bool:
        return bool(self.label_selector.requirements or self.field_selector.terms)


def _int_param(query: Mapping[str, str], name: str, default: int) -> int:
    raw = query.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise errors.bad_request(f"invalid value for {name}: {raw!r} is not an integer") from None


@dataclasses.dataclass(frozen=True, slots=True)
class DeleteOptions:
    """DeleteOptions from the body or query (gracePeriodSeconds, preconditions...)."""

    grace_period_s: int | None = None
    precondition_uid: str | None = None
    precondition_rv: str | None = None
    propagation: str | None = None
    dry_run: bool = False

    @classmethod
    def parse(cls, body: Any, query: Mapping[str, str]) -> DeleteOptions:
        """Merge DeleteOptions from a JSON body and query parameters.

        Raises:
            StatusError: 400 for a body that is not a DeleteOptions object or
                an unknown propagationPolicy.
        """
        if body is None:
            body = {}
        if not isinstance(body, dict):
            raise errors.bad_request("DeleteOptions must be a JSON object")
        grace = body.get("gracePeriodSeconds")
        if "gracePeriodSeconds" in query:
            grace = _int_param(query, "gracePeriodSeconds", 0)
        if grace is not None and (not isinstance(grace, int) or isinstance(grace, bool)):
            raise errors.bad_request("gracePeriodSeconds must be an integer")
        pre = body.get("preconditions") or {}
        propagation = query.get("propagationPolicy") or body.get("propagationPolicy")
        orphan = body.get("orphanDependents")
        if "orphanDependents" in query:
            orphan = query["orphanDependents"] in ("true", "1")
        if propagation is None and orphan is not None:
            propagation = "Orphan" if orphan else "Background"
        if propagation not in (None, "Orphan", "Background", "Foreground"):
            raise errors.bad_request(
                f'propagationPolicy: Unsupported value: "{propagation}": supported values: '
                '"Foreground", "Background", "Orphan"'
            )
        dry = body.get("dryRun") or query.get("dryRun")
        return cls(
            grace_period_s=grace,
            precondition_uid=pre.get("uid") if isinstance(pre, dict) else None,
            precondition_rv=pre.get("resourceVersion") if isinstance(pre, dict) else None,
            propagation=propagation,
            dry_run=bool(dry),
        )


@dataclasses.dataclass(slots=True)
class WriteOptions:
    """Options of one write request.

    Attributes:
        dry_run: ``dryRun=All``: check and answer, store nothing.
        field_validation: ``fieldValidation``: ``Strict`` refuses unknown fields
            (400), ``Warn`` drops them with a warning, ``Ignore`` or empty drops them.
        warnings: Filled with the warnings to send as ``Warning`` headers.
    """

    dry_run: bool = False
    field_validation: str = ""
    warnings: list[str] = dataclasses.field(default_factory=list)

    @classmethod
    def parse(cls, query: Mapping[str, str], dry_run: bool) -> WriteOptions:
        """Raises StatusError 400 for an unknown fieldValidation value."""
        value = query.get("fieldValidation", "")
        if value not in decode.FIELD_VALIDATION:
            raise errors.bad_request(
                f'fieldValidation: Unsupported value: "{value}": supported values: "Ignore", '
                '"Strict", "Warn"'
            )
        return cls(dry_run=dry_run, field_validation=value)

    def unknown_fields(self, rtype: ResourceType, paths: list[str]) -> None:
        if not paths:
            return
        if self.field_validation == "Strict":
            raise decode.strict_error(rtype.kind, rtype.version, paths)
        if self.field_validation == "Warn":
            self.warnings.extend(f'unknown field "{p}"' for p in paths)


@dataclasses.dataclass(slots=True)
class ListResult:
    """One page of a list: entries at ``revision`` and the paging metadata."""

    revision: int
    entries: list[Entry]
    continue_token: str = ""
    remaining: int | None = None


def encode_continue(revision: int, start: str) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": revision, "start": start})
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, str]:
    """The (revision, last key) of a ``continue`` token from :func:`encode_continue`.

    Raises:
        StatusError: 400 when the token is not one of ours (any client can send
            anything here: a token that decodes to JSON of another shape too).
    """
    try:
        padded = token + "=" * (-len(token) % 4)
        data = loads(base64.urlsafe_b64decode(padded.encode()))
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        if data.get("v") != "meta.k8s.io/v1":
            raise ValueError("unknown version")
        revision, start = data.get("rv"), data.get("start")
        if isinstance(revision, bool) or not isinstance(revision, int):
            raise ValueError(f"rv must be an integer, got {revision!r}")
        if not isinstance(start, str):
            raise ValueError(f"start must be a string, got {start!r}")
        return revision, start
    except (ValueError, binascii.Error) as exc:
        raise errors.bad_request(f"continue key is not valid: {exc}") from None


def parse_resource_version(value: str) -> int:
    """A ``resourceVersion`` query parameter as a revision.

    kube-apiserver parses it as an unsigned decimal integer (Go's
    ``strconv.ParseUint``): a sign, spaces, underscores or anything else are
    refused, never read as some other revision, and so is a number of more than
    20 digits (past 2**64).

    Raises:
        StatusError: 400 when ``value`` is not a plain decimal number.
    """
    if not value.isascii() or not value.isdigit() or len(value) > 20:
        shown = value if len(value) <= 40 else value[:37] + "..."
        raise errors.bad_request(
            f'resourceVersion: Invalid value: "{shown}": must be a 64-bit unsigned decimal integer'
        )
    return int(value)
