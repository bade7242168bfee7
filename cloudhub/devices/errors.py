"""Errors of the hub's device tools.

``DevicesError`` is the root, under the hub's :class:`cloudhub.errors.HubError`. Schema
and value errors come from ``protocol.devices`` (``InvalidDocument``, ``InvalidValue``)
and are not re-wrapped.
"""

from __future__ import annotations

from cloudhub.errors import HubError


class DevicesError(HubError):
    """Root of the hub's device-tool errors."""


class ManifestError(DevicesError):
    """A manifest file cannot be read as YAML: I/O error, encoding, syntax, duplicate key.

    Attributes:
        path: the file.
        problem: what is wrong.
        line: 1-based line of the problem, or ``None``.
        column: 1-based column of the problem, or ``None``.
    """

    def __init__(
        self, path: str, problem: str, *, line: int | None = None, column: int | None = None
    ) -> None:
        self.path = path
        self.problem = problem
        self.line = line
        self.column = column
        where = path
        if line is not None:
            where += f":{line}"
            if column is not None:
                where += f":{column}"
        super().__init__(f"{where}: {problem}")


class ConversionError(DevicesError):
    """A document cannot be converted to ``devices.kubeedge.io/v1beta1``.

    Attributes:
        reason: what is wrong with the document as a whole (not a device document,
            unknown apiVersion, a v1alpha2 structure we cannot read).
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)
