"""What a stopping hub does so that its nodes reconnect elsewhere without going stale.

Policies only, as pure functions (the hub applies them in ``Hub.aclose``):

- :func:`shutdown_spread`: the window its agents' reconnects are spread over. Every
  session's ``GOING_AWAY`` carries a ``retry_after`` drawn uniformly over it (full jitter,
  as the agents' own back-off): the replicas that stay (or the restarted hub) see about
  ``ha.shutdown_reconnect_rate`` reconnects per second instead of the whole fleet in one
  instant. The agent takes that ``retry_after`` as its delay (``edgeagent.uplink.dialer``).
- :func:`renew_before_stop`: node Leases older than this are renewed before the sessions
  close, so that a node whose Lease is near the end of its renewal interval (32 s by
  default) does not pass the node-monitor grace period (40 s) while its agent waits out the
  spread and claims the node on another replica.
"""

from __future__ import annotations

import random
from collections.abc import Callable

__all__ = ["HANDOVER_MARGIN_S", "full_jitter", "renew_before_stop", "shutdown_spread"]

HANDOVER_MARGIN_S = 5.0
"""Seconds allowed for one reconnect after the wait: TLS, hello, the claim's two API calls
(measured well under 1 s on loopback; the rest is room for a loaded API)."""


def shutdown_spread(sessions: int, rate: float, cap: float) -> float:
    """Seconds over which ``sessions`` reconnects are spread at ``rate`` per second, at
    most ``cap``.

    Raises:
        ValueError: ``sessions`` < 0, ``rate`` <= 0 or ``cap`` < 0.
    """
    if sessions < 0 or rate <= 0 or cap < 0:
        raise ValueError(f"sessions {sessions} >= 0, rate {rate} > 0 and cap {cap} >= 0 needed")
    return min(cap, sessions / rate)


def full_jitter(spread: float, uniform: Callable[[], float] = random.random) -> Callable[[], float]:
    """``() -> seconds`` uniformly over ``[0, spread)`` (``uniform`` draws ``[0, 1)``)."""
    return lambda: uniform() * spread


def renew_before_stop(grace: float, spread: float) -> float:
    """Age in seconds beyond which a node Lease is renewed before a hub stops: one that
    old, plus the longest wait (``spread``) and a reconnect (:data:`HANDOVER_MARGIN_S`),
    would reach the node-monitor ``grace``. ``0``: renew every Lease."""
    return max(0.0, grace - spread - HANDOVER_MARGIN_S)
