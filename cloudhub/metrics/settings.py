"""Settings of the hub's edge metrics: the ``metrics`` group of the hub's root settings
(``protocol.settings.load_settings``: file, environment ``CLOUDHUB_METRICS__…``, flags).
Sizes are in bytes, durations in seconds, ratios in [0, 1). Nothing here reads the
environment.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cloudhub.metrics.conditions import PressureThresholds
from protocol.errors import SettingsError

__all__ = ["HubMetricsSettings"]


def _h(text: str, unit: str = "") -> dict[str, str]:
    return {"help": text, "unit": unit} if unit else {"help": text}


@dataclass(frozen=True, slots=True)
class HubMetricsSettings:
    """Edge metrics on the hub: ingest, Prometheus, node pressure, metrics.k8s.io."""

    enabled: bool = field(
        default=True,
        metadata=_h(
            "take metrics_batch from edges, expose them on /metrics, set MemoryPressure and "
            "DiskPressure from them and serve metrics.k8s.io on the embedded API"
        ),
    )
    max_batch_bytes: int = field(
        default=256 * 1024,
        metadata=_h(
            "largest metrics body accepted; a larger one is refused (INVALID_MESSAGE). "
            "An agent's largest batch (240 samples, node and a dozen containers) is a few "
            "tens of KiB",
            "bytes",
        ),
    )
    pressure_conditions: bool = field(
        default=True,
        metadata=_h("write MemoryPressure and DiskPressure from the edge's figures"),
    )
    memory_available_bytes: int = field(
        default=100 * 1024 * 1024,
        metadata=_h(
            "MemoryPressure below this much memory available (kubelet's hard eviction "
            "default, memory.available<100Mi)",
            "bytes",
        ),
    )
    memory_available_ratio: float = field(
        default=0.0,
        metadata=_h("MemoryPressure also below this fraction of capacity available (0: off)"),
    )
    nodefs_available_ratio: float = field(
        default=0.10,
        metadata=_h(
            "DiskPressure below this fraction free on the agent's state filesystem "
            "(kubelet's nodefs.available<10%)"
        ),
    )
    imagefs_available_ratio: float = field(
        default=0.15,
        metadata=_h(
            "DiskPressure below this fraction free on the edge's / (kubelet's "
            "imagefs.available<15%)"
        ),
    )
    pressure_transition_period: float = field(
        default=300.0,
        metadata=_h(
            "a pressure condition stays True this long after its threshold was last crossed "
            "(kubelet's --eviction-pressure-transition-period)",
            "s",
        ),
    )

    aggregated_api: bool = field(
        default=False,
        metadata=_h(
            "serve metrics.k8s.io/v1beta1 over HTTPS for a real cluster's API server "
            "(APIService v1beta1.metrics.k8s.io, deploy/overlays/metrics-api); the "
            "front-proxy CA is read from kube-system/extension-apiserver-authentication"
        ),
    )
    aggregated_host: str = field(
        default="0.0.0.0", metadata=_h("address of the aggregated API's HTTPS server")
    )
    aggregated_port: int = field(
        default=4443,
        metadata=_h("port of the aggregated API's HTTPS server (0: any free port)"),
    )
    apiservice: str = field(
        default="v1beta1.metrics.k8s.io",
        metadata=_h(
            "APIService whose caBundle the hub sets to the hub CA when it serves the "
            "aggregated API (empty: leave APIServices alone)"
        ),
    )

    def __post_init__(self) -> None:
        if not 0 <= self.aggregated_port <= 65535:
            raise SettingsError("aggregated_port", "a port 0..65535", self.aggregated_port)
        for name in ("memory_available_ratio", "nodefs_available_ratio", "imagefs_available_ratio"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise SettingsError(name, "a ratio in [0, 1)", value)
        if self.memory_available_bytes < 0:
            raise SettingsError("memory_available_bytes", ">= 0", self.memory_available_bytes)
        if self.pressure_transition_period < 0:
            raise SettingsError(
                "pressure_transition_period", ">= 0", self.pressure_transition_period
            )
        if self.max_batch_bytes < 1024:
            raise SettingsError("max_batch_bytes", ">= 1024", self.max_batch_bytes)

    def thresholds(self) -> PressureThresholds:
        """The pressure thresholds these settings give."""
        return PressureThresholds(
            memory_available_bytes=self.memory_available_bytes,
            memory_available_ratio=self.memory_available_ratio,
            nodefs_available_ratio=self.nodefs_available_ratio,
            imagefs_available_ratio=self.imagefs_available_ratio,
            transition_period_s=self.pressure_transition_period,
        )
