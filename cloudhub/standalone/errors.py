"""Exceptions of the embedded API server, a branch of the hub's tree (``cloudhub.errors``).

``StandaloneError`` (a ``HubError``) is the root here. ``ConfigurationError`` (also
a ``ConfigError``) means the caller misused the server (bad settings);
``StorageError`` means the durable store failed (an ``sqlite3`` or file error,
chained with ``from``); ``StatusError`` is a request the API refuses, carried to
the client as a Kubernetes ``Status`` object with the same code, reason, message
and details kube-apiserver would send.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from cloudhub.errors import ConfigError, HubError

__all__ = [
    "ConfigurationError",
    "StandaloneError",
    "StatusCause",
    "StatusError",
    "StorageError",
    "already_exists",
    "bad_request",
    "conflict",
    "expired",
    "forbidden",
    "gone",
    "internal_error",
    "invalid",
    "method_not_allowed",
    "not_acceptable",
    "not_found",
    "storage_refused",
    "too_large_resource_version",
    "unauthorized",
    "unsupported_media_type",
]


class StandaloneError(HubError):
    """Root of every error the embedded API server raises."""


class ConfigurationError(StandaloneError, ConfigError, ValueError):
    """The server was configured or called wrongly (bad settings, bad arguments)."""


class StorageError(StandaloneError):
    """The durable store failed: SQLite could not read or commit, or a file was unusable."""


@dataclasses.dataclass(frozen=True, slots=True)
class StatusCause:
    """One entry of ``Status.details.causes`` (a field that failed validation).

    Attributes:
        reason: A ``CauseType`` such as ``FieldValueInvalid``, ``FieldValueRequired``,
            ``FieldValueNotSupported``, ``FieldValueForbidden``, ``FieldValueDuplicate``.
        message: Human-readable text, e.g. ``Required value``.
        field: The JSON path of the field, e.g. ``spec.containers[0].image``.
    """

    reason: str
    message: str
    field: str

    def to_dict(self) -> dict[str, str]:
        return {"reason": self.reason, "message": self.message, "field": self.field}

    def describe(self) -> str:
        """``field: message`` as kube-apiserver joins causes into the Status message."""
        return f"{self.field}: {self.message}"


class StatusError(StandaloneError):
    """A request the API refuses; rendered as a ``Status`` (``kind: Status``) body.

    Attributes:
        code: HTTP status code (404, 409, 422, ...).
        reason: ``StatusReason`` (``NotFound``, ``AlreadyExists``, ``Conflict``, ``Invalid``...).
        message: The Status message.
        details: The Status ``details`` map, or ``None``.
    """

    def __init__(
        self, code: int, reason: str, message: str, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def to_status(self) -> dict[str, Any]:
        """The ``Status`` object, key order as kube-apiserver writes it."""
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
        }
        if self.reason:
            body["reason"] = self.reason
        if self.details is not None:
            body["details"] = self.details
        body["code"] = self.code
        return body


def _details(resource: str, group: str, name: str | None) -> dict[str, Any]:
    details: dict[str, Any] = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    details["kind"] = resource
    return details


def _qualified(resource: str, group: str) -> str:
    return f"{resource}.{group}" if group else resource


def not_found(resource: str, group: str, name: str) -> StatusError:
    """404 for a missing object: ``pods "x" not found`` (``details.kind`` is the resource)."""
    return StatusError(
        404,
        "NotFound",
        f'{_qualified(resource, group)} "{name}" not found',
        _details(resource, group, name),
    )


def already_exists(resource: str, group: str, name: str) -> StatusError:
    """409 AlreadyExists on create of a name in use."""
    return StatusError(
        409,
        "AlreadyExists",
        f'{_qualified(resource, group)} "{name}" already exists',
        _details(resource, group, name),
    )


def conflict(resource: str, group: str, name: str, why: str | None = None) -> StatusError:
    """409 Conflict: a stale resourceVersion or failed precondition (optimistic locking)."""
    why = why or (
        "the object has been modified; please apply your changes to the latest version "
        "and try again"
    )
    return StatusError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {_qualified(resource, group)} "{name}": {why}',
        _details(resource, group, name),
    )


def invalid(kind: str, group: str, name: str, causes: list[StatusCause]) -> StatusError:
    """422 Invalid with one cause per field, message as ``Kind.group "name" is invalid: ...``."""
    if len(causes) == 1:
        summary = causes[0].describe()
    else:
        summary = "[" + ", ".join(c.describe() for c in causes) + "]"
    details: dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = kind
    details["causes"] = [c.to_dict() for c in causes]
    qualified = f"{kind}.{group}" if group else kind
    return StatusError(422, "Invalid", f'{qualified} "{name}" is invalid: {summary}', details)


def bad_request(message: str) -> StatusError:
    """400 BadRequest: an unparsable body, selector or parameter."""
    return StatusError(400, "BadRequest", message)


def forbidden(resource: str, group: str, name: str, why: str) -> StatusError:
    """403 Forbidden, e.g. creating content in a namespace being terminated."""
    qualified = _qualified(resource, group)
    return StatusError(
        403,
        "Forbidden",
        f'{qualified} "{name}" is forbidden: {why}' if name else f"{qualified} is forbidden: {why}",
        _details(resource, group, name),
    )


def unauthorized() -> StatusError:
    """401 for a request with no bearer token or the wrong one."""
    return StatusError(401, "Unauthorized", "Unauthorized")


def gone(message: str) -> StatusError:
    """410 Gone (reason ``Gone``), e.g. a ``continue`` token older than the kept history."""
    return StatusError(410, "Gone", message)


def expired(asked: int, oldest: int) -> StatusError:
    """410 Expired for a watch from a revision older than the kept history."""
    return StatusError(410, "Expired", f"too old resource version: {asked} ({oldest})")


def too_large_resource_version(asked: int, current: int) -> StatusError:
    """504 Timeout for a resourceVersion the server has not reached (as kube-apiserver)."""
    return StatusError(
        504,
        "Timeout",
        f"Too large resource version: {asked}, current: {current}",
        {
            "causes": [
                {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
            ],
            "retryAfterSeconds": 1,
        },
    )


def method_not_allowed(verb: str, resource: str) -> StatusError:
    """405 for a verb the resource does not support (``verb``/``resource`` for logs only:
    kube-apiserver's message does not name them)."""
    return StatusError(
        405,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource",
        {},
    )


def unsupported_media_type(content_type: str, allowed: list[str]) -> StatusError:
    """415 for a request body in a content type the endpoint does not take."""
    return StatusError(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        + ", ".join(allowed),
    )


def not_acceptable(accept: str) -> StatusError:
    """406 when none of the Accept media types can be produced."""
    return StatusError(
        406,
        "NotAcceptable",
        f"only the following media types are accepted: application/json, got {accept}",
    )


def storage_refused(message: str) -> StatusError:
    """500 with no reason, as the storage layer's own refusals come out of
    kube-apiserver (e.g. a resourceVersion set on create)."""
    return StatusError(500, "", message)


def internal_error(message: str) -> StatusError:
    """500 InternalError: the server failed (e.g. a commit to SQLite)."""
    return StatusError(
        500,
        "InternalError",
        f"Internal error occurred: {message}",
        {"causes": [{"message": message}]},
    )
