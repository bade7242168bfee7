"""Settings of the agent's metrics: sampling, batching, offline budget."""

from __future__ import annotations

from dataclasses import dataclass

from edgeagent.metrics.errors import MetricsSettingsError

__all__ = ["DEFAULT_NET_EXCLUDE", "MetricsSettings"]

DEFAULT_NET_EXCLUDE: tuple[str, ...] = (
    "lo",
    "veth",
    "docker",
    "br-",
    "cni",
    "flannel",
    "cali",
    "cilium",
    "weave",
    "podman",
    "virbr",
    "vxlan",
    "tunl",
    "kube-",
)
"""Interface name prefixes left out of the node's network bytes: loopback and the virtual
links of container engines and CNIs, whose traffic is already counted on the physical
interface it leaves by."""


@dataclass(frozen=True)
class MetricsSettings:
    """How the agent samples and delivers metrics.

    Attributes:
        sample_interval_s: seconds between samples. 15 s is metrics-server's default
            resolution, so ``kubectl top`` is as fresh as on a kubelet node.
        batch_interval_s: seconds between deliveries while connected, rounded to a whole
            number of samples (a batch leaves right after its last sample). 60 s puts
            four samples in a batch, so the per-message overhead (frame, QUIC packet,
            the hub's ack) is paid once a minute.
        budget_bytes: bytes the unsent samples and batches may take in the store
            (payload plus ``ROW_OVERHEAD_BYTES`` per row). At 2 MiB a node with five
            containers keeps about two days at full resolution before down-sampling.
        max_window_s: down-sampling never merges samples into a window longer than this
            (seconds); once every old sample is that coarse, the oldest are dropped.
        batch_max_samples: samples per batch when draining a backlog (240 = one hour at
            15 s, a few tens of KiB on the wire, far below the 4 MiB frame limit).
        max_in_flight: sealed batches sent and not yet acknowledged; sealing stops at
            this many, so a slow link keeps the rest down-samplable.
        enabled: sample and deliver metrics (the agent's settings group ``metrics``).
        state_dir: the directory whose filesystem is sampled as the "state" filesystem;
            empty means the agent's ``state_dir``.
        root_path: the filesystem sampled as the node's root (``/``).
        sys_root: where sysfs is mounted (thermal zones, GPUs).
        net_exclude: interface name prefixes left out of the network bytes.
    """

    sample_interval_s: float = 15.0
    batch_interval_s: float = 60.0
    budget_bytes: int = 2 * 1024 * 1024
    max_window_s: float = 3600.0
    batch_max_samples: int = 240
    max_in_flight: int = 4
    enabled: bool = True
    state_dir: str = ""
    root_path: str = "/"
    sys_root: str = "/sys"
    net_exclude: tuple[str, ...] = DEFAULT_NET_EXCLUDE

    def __post_init__(self) -> None:
        if not self.sample_interval_s > 0:
            raise MetricsSettingsError("sample_interval_s", "must be > 0")
        if not self.batch_interval_s >= self.sample_interval_s:
            raise MetricsSettingsError("batch_interval_s", "must be >= sample_interval_s")
        if self.budget_bytes < 16 * 1024:
            raise MetricsSettingsError("budget_bytes", "must be at least 16 KiB")
        if self.max_window_s < self.sample_interval_s:
            raise MetricsSettingsError("max_window_s", "must be >= sample_interval_s")
        if self.batch_max_samples < 1:
            raise MetricsSettingsError("batch_max_samples", "must be >= 1")
        if self.max_in_flight < 1:
            raise MetricsSettingsError("max_in_flight", "must be >= 1")
