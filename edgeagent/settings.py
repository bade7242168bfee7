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
from edgeagent.upgrade.settings import UpgradeSettings

__all__ = [
    "DEFAULT_CONFIG_FILE",
    "DEFAULT_HUB_PORT",
    "AgentSettings",
    "DeviceSettings",
    "DockerSettings",
    "HubSettings",
    "MetricsSettings",
    "NodeSettings",
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
    """Seconds to wait for a lock held by another process while opening and migrating
    (before the event loop runs), and in ``edgeagent status``."""

    loop_busy_timeout: float = 0.05
    """Seconds a statement may wait for a lock held by another process once the agent
    runs: SQLite's busy handler sleeps in the calling thread, which is the event loop's,
    so a longer wait delays heartbeats. A write that finds the lock held fails at once
    with ``StoreBusyError``; the uplink waits for the lock by polling from the loop
    (``Store.wait_writable``), the flusher retries."""

    journal_size_limit: int = 1 << 20
    """Bytes the WAL file is truncated to after a checkpoint (SQLite's
    ``journal_size_limit``): without it the file stays at its high-water mark (4 MiB after
    an offline backlog) on the SD card."""

    reclaim_free_fraction: float = 0.25
    """Free pages, as a fraction of the file, above which the store gives them back to
    the file system (``incremental_vacuum``) once a backlog has drained."""

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


def _h(text: str, unit: str = "") -> dict[str, str]:
    """Field metadata: the one-line help ``edgeagent run --help`` shows, and the unit."""
    return {"help": text, "unit": unit} if unit else {"help": text}


DEFAULT_HUB_PORT = 7443
"""The hub's session port when ``hub.url`` names none: UDP for QUIC, TCP for WebSocket
(one Kubernetes Service with both protocols on one number)."""

TRANSPORTS = ("quic", "websocket")


@dataclass(frozen=True)
class HubSettings:
    """How to reach the cloud hub (the hub connection runs only when ``url`` is set).

    ``edgeagent join`` writes ``url`` into the config file and the TLS material into
    ``<state_dir>/pki``; the rest has defaults meant for production.
    """

    url: str = field(
        default="",
        metadata=_h(
            "hub session address: quic://HOST:PORT, wss://HOST:PORT or HOST[:PORT] "
            f"(port {DEFAULT_HUB_PORT} when omitted); empty runs the agent with no hub"
        ),
    )
    """The hub's address. The scheme does not restrict the transport (``transports``
    does): the one port serves QUIC over UDP and WebSocket over TCP."""

    quic_port: int = field(default=0, metadata=_h("UDP port for QUIC; 0: the url's port"))
    websocket_port: int = field(
        default=0, metadata=_h("TCP port for WebSocket over TLS; 0: the url's port")
    )
    server_name: str = field(
        default="",
        metadata=_h("name the hub certificate must carry; empty: the url's host"),
    )
    """Set it when dialling an address the certificate does not name (an IP behind NAT)."""

    transports: tuple[str, ...] = field(
        default=TRANSPORTS,
        metadata=_h("transports to use, in order of preference: quic, websocket"),
    )
    """QUIC first (one handshake, no head-of-line blocking, survives address changes),
    WebSocket as the fallback where UDP is blocked. ``websocket`` alone skips the 3 s
    QUIC attempt on networks known to drop UDP; ``quic`` alone never falls back."""

    ca_file: str = field(
        default="", metadata=_h("hub CA bundle (PEM); empty: <state_dir>/pki/ca.crt")
    )
    cert_file: str = field(
        default="", metadata=_h("node client certificate (PEM); empty: <state_dir>/pki/node.crt")
    )
    key_file: str = field(
        default="", metadata=_h("node private key (PEM, 0600); empty: <state_dir>/pki/node.key")
    )

    quic_handshake_timeout: float = field(
        default=3.0, metadata=_h("wait this long for QUIC before falling back", "s")
    )
    """UDP blocked by a firewall looks like silence, so this bounds a fallback; 3 s covers
    several round trips on a slow cellular link."""

    quic_max_datagram_size: int = field(
        default=1200,
        metadata=_h("UDP datagram size toward a hub off this host (a hub on it: 8192)", "bytes"),
    )
    """QUIC's minimum, which every path carries: aioquic has no path MTU discovery, so more
    is a promise about every path to the hub (``protocol.transport.datagrams``)."""

    quic_loopback_datagram_size: int = field(
        default=8192,
        metadata=_h(
            "UDP datagram size toward a hub at a loopback address (0: as off host)", "bytes"
        ),
    )
    """A hub on this host is reached over the loopback interface alone; set 0 when the
    loopback address is a local relay or tunnel onto a real path."""

    websocket_timeout: float = field(
        default=10.0, metadata=_h("TCP, TLS, upgrade and welcome over WebSocket", "s")
    )
    quic_retry_first: float = field(
        default=30.0,
        metadata=_h("after a fallback to WebSocket, try QUIC again this soon (then doubling)", "s"),
    )
    """A QUIC dial that straddles a hub restart can time out while WebSocket then works:
    that was no firewall, so look again soon."""
    quic_retry_interval: float = field(
        default=600.0, metadata=_h("while on WebSocket, try QUIC again at least this often", "s")
    )
    """10 min: rare enough to cost nothing, often enough to leave a fallback in the hour."""

    backoff_base: float = field(
        default=1.0, metadata=_h("first reconnect delay bound (full jitter)", "s")
    )
    backoff_cap: float = field(default=60.0, metadata=_h("longest reconnect delay", "s"))
    """A fleet rejoining after a hub outage spreads over a minute instead of stampeding."""

    healthy_after: float = field(
        default=10.0, metadata=_h("a session open this long resets the back-off", "s")
    )
    liveness_timeout: float = field(
        default=60.0, metadata=_h("a hub silent this long is taken as gone", "s")
    )
    """Pings go every ``heartbeat_interval`` the hub's welcome gives (capped at half of
    this); silence for this long closes the session and the agent redials."""

    max_clock_skew: float = field(
        default=60.0, metadata=_h("log a warning when the hub's clock differs by more", "s")
    )
    dead_letter_attempts: int = field(
        default=3, metadata=_h("sessions an over-size up-going message is tried in", "")
    )
    """A message over the limits the session agreed with the hub is skipped for the rest
    of that session and dead-lettered in the store after this many (docs/hublink.md)."""
    """Status, event and metric timestamps come from this clock: beyond a minute they are
    visibly off (certificates tolerate 5 min: ``protocol.pki.CLOCK_SKEW``)."""

    def __post_init__(self) -> None:
        for name in ("quic_port", "websocket_port"):
            port = getattr(self, name)
            if not 0 <= port <= 65535:
                raise ConfigError(f"hub.{name} must be 0..65535, not {port}", key=f"hub.{name}")
        if not (
            self.quic_loopback_datagram_size == 0
            or 1200 <= self.quic_loopback_datagram_size <= 16000
        ):
            raise ConfigError(
                f"hub.quic_loopback_datagram_size must be 0 or 1200..16000 bytes, "
                f"not {self.quic_loopback_datagram_size}",
                key="hub.quic_loopback_datagram_size",
            )
        if not 1200 <= self.quic_max_datagram_size <= 16000:
            raise ConfigError(
                f"hub.quic_max_datagram_size must be 1200..16000 bytes, "
                f"not {self.quic_max_datagram_size}",
                key="hub.quic_max_datagram_size",
            )
        if not self.transports or any(t not in TRANSPORTS for t in self.transports):
            raise ConfigError(
                f"hub.transports must be one or both of quic, websocket, not {self.transports}",
                key="hub.transports",
            )
        for name in (
            "quic_handshake_timeout",
            "websocket_timeout",
            "quic_retry_interval",
            "quic_retry_first",
            "backoff_base",
            "backoff_cap",
            "liveness_timeout",
            "max_clock_skew",
        ):
            if not getattr(self, name) > 0:
                raise ConfigError(f"hub.{name} must be > 0 seconds", key=f"hub.{name}")
        if self.dead_letter_attempts < 1:
            raise ConfigError(
                "hub.dead_letter_attempts must be >= 1", key="hub.dead_letter_attempts"
            )
        if self.healthy_after < 0:
            raise ConfigError("hub.healthy_after must be >= 0 seconds", key="hub.healthy_after")
        if self.url:
            self.address()  # raises ConfigError naming the problem

    def address(self) -> tuple[str, int, int]:
        """``(host, quic_port, websocket_port)`` from ``url`` and the port settings.

        Raises:
            ConfigError: ``url`` is empty or not ``[scheme://]host[:port]``.
        """
        url = self.url.strip()
        if not url:
            raise ConfigError("hub.url is empty: no hub configured", key="hub.url")
        scheme, sep, rest = url.partition("://")
        if not sep:
            scheme, rest = "", url
        if scheme not in ("", "quic", "wss", "https"):
            raise ConfigError(
                f"hub.url {url!r}: scheme must be quic://, wss:// or none", key="hub.url"
            )
        rest = rest.split("/", 1)[0]
        if rest.startswith("["):  # [IPv6]:port
            host, _, tail = rest[1:].partition("]")
            port_text = tail[1:] if tail.startswith(":") else ""
        elif rest.count(":") == 1:
            host, _, port_text = rest.partition(":")
        else:
            host, port_text = rest, ""
        try:
            port = int(port_text) if port_text else DEFAULT_HUB_PORT
        except ValueError:
            port = -1
        if not host or not 0 < port <= 65535:
            raise ConfigError(f"hub.url {url!r} is not [scheme://]host[:port]", key="hub.url")
        return host, self.quic_port or port, self.websocket_port or port


@dataclass(frozen=True)
class NodeSettings:
    """What the agent registers about this machine (the Node object's labels and
    resources). Capacity is measured at every connect; these add to it."""

    labels: dict[str, str] = field(
        default_factory=dict, metadata=_h("node labels, e.g. site=plant-4,zone=line-2")
    )
    """Reported in the hello; the hub adds the edge role and the well-known labels
    (hostname, os, arch). The hub decides which keys it accepts."""

    extended_resources: dict[str, str] = field(
        default_factory=dict,
        metadata=_h("extended resources as quantities, e.g. edgefleet.io/gpio=4"),
    )
    """Added to capacity and allocatable as they are (Kubernetes extended resources:
    a domain-prefixed name and an integer quantity)."""

    max_pods: int = field(default=110, metadata=_h("the node's pods capacity"))
    """kubelet's default ``maxPods``."""

    reserved_cpu: int = field(
        default=0, metadata=_h("CPU kept from allocatable for the system", "millicores")
    )
    reserved_memory: int = field(
        default=0, metadata=_h("memory kept from allocatable for the system", "bytes")
    )
    """Like kubelet's ``--system-reserved``: allocatable = capacity - reserved (none by
    default, as kubelet)."""

    def __post_init__(self) -> None:
        if self.max_pods < 1:
            raise ConfigError("node.max_pods must be >= 1", key="node.max_pods")
        for name in ("reserved_cpu", "reserved_memory"):
            if getattr(self, name) < 0:
                raise ConfigError(f"node.{name} must be >= 0", key=f"node.{name}")


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
    upgrade: UpgradeSettings = field(default_factory=UpgradeSettings)
    node: NodeSettings = field(default_factory=NodeSettings)

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
