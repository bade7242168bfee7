"""What the two fleet controllers of this package share (the EdgeUpgrade controller,
:mod:`~cloudhub.upgrade.extension`, and the EdgeImagePrePull one,
:mod:`~cloudhub.upgrade.prepull`): the loop of passes, and the status of a resource whose
spec does not validate. The API calls stay with the callers (each names its resource
type, for the RBAC check)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from cloudhub.errors import KubeAPIError

__all__ = ["MISSING_CRD_SLOWDOWN", "invalid_status", "run_passes"]

#: Passes are this many times further apart while the CRD is not applied: nothing to do
#: until an operator applies it, and each pass would be one more 404.
MISSING_CRD_SLOWDOWN = 15


async def run_passes(
    tick: Callable[[], Awaitable[None]],
    interval: float,
    *,
    kind: str,
    name: str,
    off: str,
    log: logging.Logger,
) -> None:
    """Call ``tick()`` every ``interval`` seconds, forever (a hub task; cancelled at stop).

    A pass that fails with 404 means the CRD is not applied (deploy/crds): said once at
    INFO ("no ``kind`` CRD on this API: ``off`` until it is"), and passes are
    :data:`MISSING_CRD_SLOWDOWN` times further apart until one succeeds. Any other
    ``KubeAPIError`` is logged at WARNING ("``name`` pass failed"); the next pass retries.
    """
    missing = False
    while True:
        try:
            await tick()
            missing = False
        except KubeAPIError as exc:
            if exc.status == 404:
                if not missing:
                    log.info("no %s CRD on this API: %s until it is", kind, off)
                missing = True
            else:
                log.warning("%s pass failed: %s", name, exc)
        await asyncio.sleep(interval * (MISSING_CRD_SLOWDOWN if missing else 1))


def invalid_status(obj: Mapping[str, Any], exc: Any) -> dict[str, Any] | None:
    """The status patch that marks ``obj`` ``Invalid`` for ``exc`` (an ``InvalidSpec`` or
    ``InvalidUpgrade``: ``path`` is the field, ``str(exc)`` the reason), or ``None`` when
    its status says so already (one write per new reason, not one per pass)."""
    status = obj.get("status") or {}
    if status.get("phase") == "Invalid" and status.get("message") == str(exc):
        return None
    return {"status": {"phase": "Invalid", "reason": exc.path, "message": str(exc)}}
