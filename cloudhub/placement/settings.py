"""Settings of placement in the hub: the ``placement`` group of the hub's root settings.

Loaded with the rest (``protocol.settings.load_settings``): YAML ``placement: {...}``, the
environment (``CLOUDHUB_PLACEMENT__ENABLED``) and flags (``--placement-enabled``).
Durations are in seconds, rates per second. Nothing here reads the environment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from protocol.errors import SettingsError

__all__ = ["PlacementSettings"]

_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _h(text: str, unit: str = "") -> dict[str, str]:
    return {"help": text, "unit": unit} if unit else {"help": text}


@dataclass(frozen=True, slots=True)
class PlacementSettings:
    """The placement controller run by ``cloudhub serve`` (docs/placement.md)."""

    enabled: bool = field(
        default=True,
        metadata=_h(
            "run the placement controller in the hub: EdgePlacements (and, on the embedded "
            "API, edge Deployments and DaemonSets) become Pods bound to edge nodes"
        ),
    )
    namespace: str = field(
        default="",
        metadata=_h("only place the EdgePlacements of this namespace; empty: every namespace"),
    )
    place_workloads: Literal["auto", "on", "off"] = field(
        default="auto",
        metadata=_h(
            "also place apps/v1 Deployments and DaemonSets; auto: only on the embedded "
            "API, every one (nothing else runs them there); on: also on a real cluster, "
            "those whose template targets edge nodes (it has its own controllers)"
        ),
    )
    writes_per_second: float = field(
        default=100.0,
        metadata=_h(
            "sustained pod creates, deletes and status writes of the controller; 100/s "
            "places a 100,000-pod fleet in under 20 minutes without starving other clients",
            "1/s",
        ),
    )
    write_burst: int = field(
        default=200, metadata=_h("controller writes allowed at once before the rate applies")
    )
    write_concurrency: int = field(default=8, metadata=_h("controller requests in flight at once"))
    settle: float = field(
        default=0.05,
        metadata=_h(
            "pause after a change before planning, so that a burst of events (a relist, "
            "a node with many pods) makes one plan",
            "s",
        ),
    )
    resync: float = field(
        default=5.0,
        metadata=_h(
            "how often nodes the hub holds no word on (no edge role) are re-read from their "
            "Ready heartbeat",
            "s",
        ),
    )

    def __post_init__(self) -> None:
        if self.namespace and (not _K8S_NAME.match(self.namespace) or len(self.namespace) > 63):
            raise SettingsError("namespace", "a namespace name (RFC 1123 label)", self.namespace)
        for key in ("writes_per_second", "write_burst", "write_concurrency", "resync"):
            if not getattr(self, key) > 0:
                raise SettingsError(key, "> 0", getattr(self, key))
        if self.settle < 0:
            raise SettingsError("settle", ">= 0 seconds", self.settle)

    def places_workloads(self, embedded_api: bool) -> bool:
        """Whether Deployments and DaemonSets are placed, given the kind of API."""
        if self.place_workloads == "auto":
            return embedded_api
        return self.place_workloads == "on"
