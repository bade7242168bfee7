"""The node liveness profiles the hub benchmarks can run with (docs/hub.md, "Node liveness").

``EDGEFLEET_BENCH_NODE_PROFILE`` picks one (default ``default``):

- ``default``: the hub's defaults, kubelet's own intervals (node Lease renewed every 10 s,
  Ready heartbeat every 5 min, 40 s grace);
- ``edge``: the edge profile (Leases every 32 s ± 5 %, Ready every 10 min, 40 s grace);
- ``edge60``: for clusters run with ``--node-monitor-grace-period=60s`` (Leases every
  40 s with a 60 s duration and grace).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

__all__ = ["PROFILES", "NodeProfile", "node_profile"]


@dataclass(frozen=True)
class NodeProfile:
    """One liveness profile: the hub flags, the Lease renew interval (s) and the grace (s)
    after which a node's placements fail over."""

    name: str
    flags: tuple[str, ...]
    lease_interval: float
    grace: float

    def window(self, at_least: float) -> float:
        """A measuring window of whole renew intervals (at least two) covering
        ``at_least`` seconds: every node's renewals fall in it as often as the profile
        says."""
        return self.lease_interval * max(2, math.ceil(at_least / self.lease_interval))


PROFILES = {
    "default": NodeProfile("default", (), 10.0, 40.0),
    "edge": NodeProfile(
        "edge",
        ("--nodes-lease-interval", "32", "--nodes-status-report-interval", "600"),
        32.0,
        40.0,
    ),
    "edge60": NodeProfile(
        "edge60",
        (
            "--nodes-lease-interval",
            "40",
            "--nodes-lease-duration",
            "60",
            "--nodes-status-report-interval",
            "600",
            "--nodes-not-ready-grace",
            "60",
        ),
        40.0,
        60.0,
    ),
}


def node_profile() -> NodeProfile:
    """The profile ``EDGEFLEET_BENCH_NODE_PROFILE`` names.

    Raises:
        SystemExit: an unknown name (the known ones are listed).
    """
    name = os.environ.get("EDGEFLEET_BENCH_NODE_PROFILE", "default")
    try:
        return PROFILES[name]
    except KeyError:
        raise SystemExit(
            f"EDGEFLEET_BENCH_NODE_PROFILE={name!r}: not a profile (one of {', '.join(PROFILES)})"
        ) from None
