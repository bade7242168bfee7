"""The clock check against the hub's (its welcome carries ``hub_time``)."""

from __future__ import annotations

import logging

__all__ = ["MAX_CLOCK_SKEW", "check_clock_skew"]

log = logging.getLogger(__name__)

MAX_CLOCK_SKEW = 60.0
"""Seconds of difference with the hub's clock beyond which a warning is logged.
Certificates start 5 minutes in the past (``protocol.pki.CLOCK_SKEW``), so a board
without a real-time clock that boots a little behind still connects; beyond a minute,
timestamps in status, events and metrics are visibly off."""


def check_clock_skew(hub_time: float, local_time: float, *, limit: float = MAX_CLOCK_SKEW) -> float:
    """Compare our clock with the hub's and log a warning naming both when they differ.

    Args:
        hub_time: the hub's clock (``Welcome.hub_time``), seconds since the epoch.
        local_time: our clock when the welcome arrived (``time.time()``).
        limit: seconds of skew tolerated silently.

    Returns:
        The skew in seconds, positive when our clock is ahead of the hub's.
    """
    import datetime

    skew = local_time - hub_time
    if abs(skew) > limit:

        def iso(t: float) -> str:
            moment = datetime.datetime.fromtimestamp(t, tz=datetime.timezone.utc)
            return moment.isoformat(timespec="seconds")

        log.warning(
            "clock skew: this node's clock reads %s, the hub's %s (%s by %.0f s); "
            "check NTP (timedatectl status)",
            iso(local_time),
            iso(hub_time),
            "ahead" if skew > 0 else "behind",
            abs(skew),
        )
    return skew
