"""The agent's settings: frozen dataclasses per concern, loaded once at start.

Precedence, lowest to highest: the defaults below, the YAML config file
(``/etc/edgeagent/config.yaml`` unless told otherwise), the environment
(``EDGEAGENT_`` + the dotted name upper-cased with ``__`` between levels, e.g.
``EDGEAGENT_STORE__COMMIT_DELAY``), then command-line flags (``--set store.commit_delay=2``).
Loading is ``protocol.settings`` (shared with the hub).
The result is passed down; nothing reads the environment at import or later.

The file mirrors the groups::

    node_name: pi-17
    state_dir: /var/lib/edgeagent
    runtime:
      kind: docker            # or "process"
      docker:
        url: unix:///var/run/docker.sock
    pods:
      backoff_initial: 10
    devices:                  # device twins and the local device API (docs/devices.md)
      socket_path: /run/edgeagent/devices.sock
    metrics:                  # node and pod metrics (docs/metrics.md)
      sample_interval_s: 15

A key that is not a setting is an error naming it (a typo must not be silently ignored).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from edgeagent.devices.settings import DeviceSettings
from edgeagent.errors import ConfigError
from edgeagent.metrics.settings import MetricsSettings

__all__ = [
    "DEFAULT_CONFIG_FILE",
    "AgentSettings",
    "DeviceSettings",
    "DockerSettings",
    "HubSettings",
    "MetricsSettings",
    "PodSettings",
    "ProcessSettings",
    "RuntimeSettings",
    "StoreSettings",
    "env_name",
    "load_settings",
]

DEFAULT_CONFIG_FILE = pathlib.Path("/etc/edgeagent/config.yaml")
ENV_PREFIX = "EDGEAGENT_"


@dataclass(frozen=True)
class StoreSettings:
    """The local SQLite store (``<state_dir>/store.db``)."""

    commit_delay: float = 1.0
    """Seconds a write may wait before it is committed, so that bursts (a pod starting
    produces several status changes within milliseconds) cost one commit. An idle agent
    writes nothing at all; this only bounds what a SIGKILL or power cut can lose."""

    synchronous: str = "NORMAL"
    """SQLite ``PRAGMA synchronous``: ``NORMAL`` (WAL: consistent after power loss, the
    last commits may roll back; no fsync per commit, which spares SD cards) or ``FULL``."""

    background_commit_delay: float = 300.0
    """Seconds a write that nothing waits for may stay uncommitted: a metrics sample every
    15 s, a delivery mark. Such writes ride along with the next commit made for another
    reason, else are committed after this delay, so that an idle agent with metrics on
    commits 12 times an hour instead of 240 (SD cards wear per page written). A crash or
    power cut loses at most this much of them: 5 minutes of samples, never anything that
    was acknowledged (a sealed metrics batch and an answered device report are committed
    before they leave)."""

    busy_timeout: float = 5.0
    """Seconds to wait for a lock held by another process (``edgeagent status``)."""

    full_retry: float = 5.0
    """Seconds between commit attempts while the disk is full."""

    outbox_max_events: int = 10_000
    """Most uncoalesced messages (events) kept while offline; the oldest are dropped beyond
    it. Status messages are coalesced per pod and never dropped."""


@dataclass(frozen=True)
class DockerSettings:
    """The Docker Engine API runtime (Docker, Moby, balena-engine, podman's service)."""

    url: str = "unix:///var/run/docker.sock"
    """Engine API endpoint (``unix://`` path or ``tcp://host:port``)."""

    api_version: str = "v1.40"
    """Engine API version to speak; ``auto`` asks the engine first. v1.40 (Docker 19.03)
    covers everything the agent uses, and pinning it saves a ``/version`` round trip at
    start (1.6 s on podman, which runs its OCI runtime to answer it)."""

    network: str = "bridge"
    """Network for pod sandboxes that do not use the host network."""

    sandbox_image: str = "registry.k8s.io/pause:3.9"
    """Image of the per-pod sandbox container that holds the pod's network namespace
    (kubelet's "pause" container)."""

    sandbox_command: tuple[str, ...] = ()
    """Command for the sandbox container; empty uses the image's entrypoint. Set it when
    the sandbox image is not a pause image (e.g. ``["sleep", "2147483647"]`` for busybox)."""

    api_timeout: float = 60.0
    """Seconds before one Engine API call is abandoned (pulls excepted)."""

    pull_timeout: float = 600.0
    """Seconds before an image pull is abandoned."""


@dataclass(frozen=True)
class ProcessSettings:
    """The process runtime: containers as child processes, for machines with no engine."""

    shell: str = "/bin/sh"
    """POSIX shell used for the tiny per-container supervisor that records exit codes."""


@dataclass(frozen=True)
class RuntimeSettings:
    """Which container runtime runs the pods."""

    kind: str = "docker"
    """``"docker"`` (Engine API through aiodocker) or ``"process"``."""

    connect_retry: float = 2.0
    """Seconds between attempts to reach an engine that is not up yet at start."""

    docker: DockerSettings = field(default_factory=DockerSettings)
    process: ProcessSettings = field(default_factory=ProcessSettings)


@dataclass(frozen=True)
class PodSettings:
    """Pod lifecycle timings. Defaults are kubelet's."""

    backoff_initial: float = 10.0
    """Seconds of the first crash-loop back-off; it doubles per restart (kubelet: 10 s)."""

    backoff_max: float = 300.0
    """Cap of the crash-loop and image-pull back-off in seconds (kubelet: 5 min)."""

    resync_period: float = 10.0
    """Seconds between relists of every managed container (one runtime call for all pods);
    a pod whose containers changed is looked at. Container exits are noticed at once
    through runtime events: this only bounds a missed event. Also the retry period of a
    pod waiting for a missing ConfigMap/Secret or a failed mount."""

    pod_resync_period: float = 60.0
    """Seconds between looks at a pod nothing woke (a safety net behind the relist)."""

    default_grace_period: float = 30.0
    """``terminationGracePeriodSeconds`` when the pod does not say (Kubernetes: 30 s)."""


@dataclass(frozen=True)
class HubSettings:
    """How to reach the cloud hub. Used by the uplink; ``url`` empty means no hub."""

    url: str = ""
    """Hub endpoint, e.g. ``quic://hub.example:7443``; empty to run without a hub."""

    ca_file: str = ""
    """Hub CA bundle (PEM); default ``<state_dir>/pki/ca.crt``."""

    cert_file: str = ""
    """This node's client certificate (PEM); default ``<state_dir>/pki/node.crt``."""

    key_file: str = ""
    """This node's private key (PEM, 0600); default ``<state_dir>/pki/node.key``."""


@dataclass(frozen=True)
class AgentSettings:
    """Root of the agent's settings."""

    node_name: str = ""
    """Kubernetes Node name of this machine; empty means the host name (lower-cased)."""

    state_dir: pathlib.Path = pathlib.Path("/var/lib/edgeagent")
    """Where the store, volumes, process-runtime records and logs live."""

    node_ip: str = ""
    """The node's IP for ``status.hostIP`` / host-network pods; empty: detected at start."""

    log_level: str = "INFO"
    """Python logging level name."""

    store: StoreSettings = field(default_factory=StoreSettings)
    runtime: RuntimeSettings = field(default_factory=RuntimeSettings)
    pods: PodSettings = field(default_factory=PodSettings)
    hub: HubSettings = field(default_factory=HubSettings)
    devices: DeviceSettings = field(default_factory=DeviceSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)

    @property
    def store_path(self) -> pathlib.Path:
        """The SQLite database file."""
        return self.state_dir / "store.db"

    def device_socket_path(self) -> pathlib.Path:
        """The device API's Unix socket (``devices.socket_path`` or its default)."""
        return pathlib.Path(self.devices.socket_path or self.state_dir / "devices.sock")

    def cert_path(self) -> pathlib.Path:
        """The node certificate file (``hub.cert_file`` or its default)."""
        return pathlib.Path(self.hub.cert_file or self.state_dir / "pki" / "node.crt")


# --- loading ----------------------------------------------------------------------------


def env_name(dotted: str) -> str:
    """The environment variable for a dotted setting name (``store.commit_delay`` →
    ``EDGEAGENT_STORE__COMMIT_DELAY``: ``__`` between levels, as ``protocol.settings``)."""
    return ENV_PREFIX + dotted.upper().replace(".", "__")


def load_settings(
    config_file: pathlib.Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    require_file: bool = False,
) -> AgentSettings:
    """Load the agent settings: defaults, then the file, then ``env``, then ``overrides``,
    with the loader both programs share (``protocol.settings``).

    Args:
        config_file: YAML file; ``None`` means :data:`DEFAULT_CONFIG_FILE`. A missing
            file is fine (defaults apply) unless ``require_file``.
        env: environment to read ``EDGEAGENT_*`` variables from (the caller passes
            ``os.environ``; nothing else is read).
        overrides: dotted name → value, from command-line flags; highest precedence.
        require_file: raise when the file does not exist (the path was given explicitly).

    Returns:
        The frozen settings, with ``node_name`` defaulted to the host name.

    Raises:
        ConfigError: unreadable/invalid file, unknown key, or a value of the wrong type;
            ``key`` names the setting.
    """
    from protocol.errors import SettingsError
    from protocol.settings import load_settings as load

    path = config_file or DEFAULT_CONFIG_FILE
    try:
        settings = load(
            AgentSettings,
            path=path if (require_file or path.exists()) else None,
            environ=env,
            env_prefix=ENV_PREFIX,
            overrides={k.replace("-", "_"): v for k, v in (overrides or {}).items()},
        )
    except SettingsError as exc:
        raise ConfigError(str(exc), key=exc.key, source=exc.source) from exc
    _validate(settings)
    if not settings.node_name:
        settings = dataclasses.replace(settings, node_name=socket.gethostname().lower())
    return settings


def _validate(s: AgentSettings) -> None:
    if s.runtime.kind not in ("docker", "process"):
        raise ConfigError(
            f"runtime.kind must be 'docker' or 'process', not {s.runtime.kind!r}",
            key="runtime.kind",
        )
    if s.store.synchronous.upper() not in ("NORMAL", "FULL", "EXTRA"):
        raise ConfigError(
            "store.synchronous must be NORMAL, FULL or EXTRA", key="store.synchronous"
        )
    for key, value in (
        ("store.commit_delay", s.store.commit_delay),
        ("store.background_commit_delay", s.store.background_commit_delay),
        ("pods.backoff_initial", s.pods.backoff_initial),
        ("pods.backoff_max", s.pods.backoff_max),
        ("pods.resync_period", s.pods.resync_period),
        ("pods.pod_resync_period", s.pods.pod_resync_period),
    ):
        if value < 0 or (not key.endswith("commit_delay") and value == 0):
            raise ConfigError(f"{key} must be positive, not {value}", key=key)
    if s.pods.backoff_max < s.pods.backoff_initial:
        raise ConfigError(
            "pods.backoff_max must be >= pods.backoff_initial", key="pods.backoff_max"
        )
    if not os.path.isabs(str(s.state_dir)):
        raise ConfigError(f"state_dir must be absolute, not {s.state_dir}", key="state_dir")
