"""Errors of ``cloudhub demo`` (a branch of the hub's tree)."""

from __future__ import annotations

from cloudhub.errors import HubError

__all__ = ["DemoError"]


class DemoError(HubError):
    """The demo cannot run or could not set something up (the message says what)."""
