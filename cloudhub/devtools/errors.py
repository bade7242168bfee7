"""Errors of the development tools, a branch of the hub's tree (``cloudhub.errors``)."""

from __future__ import annotations

from cloudhub.errors import HubError

__all__ = ["DevtoolsError"]


class DevtoolsError(HubError):
    """Root of the errors of ``cloudhub.devtools`` (a tool could not be set up here)."""
