"""The hub's settings: one frozen dataclass per concern, loaded once and passed down.

Load order (``protocol.settings.load_settings``): defaults, then a YAML file, then the
environment (prefix ``CLOUDHUB_``, ``__`` between levels: ``CLOUDHUB_LISTEN__QUIC_PORT``),
then command-line flags. ``cloudhub serve --help`` lists every key with its unit and
default; :func:`load_hub_settings` is the one entry point.

Every duration is in seconds, every size in bytes; rates are per second.
"""

from __future__ import annotations

import pathlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from cloudhub.devices.settings import DevicesSettings
from cloudhub.ha.settings import HASettings
from cloudhub.kubelet.settings import KubeletSettings
from cloudhub.metrics.settings import HubMetricsSettings
from cloudhub.pki.settings import PKISettings
from cloudhub.placement.settings import PlacementSettings
from cloudhub.upgrade.settings import UpgradeSettings
from protocol.config import SessionConfig
from protocol.errors import SettingsError
from protocol.settings import load_settings

__all__ = [
    "ENV_PREFIX",
    "AuthorizationSettings",
    "HubSettings",
    "KubeSettings",
    "ListenSettings",
    "NodeSettings",
    "ObservabilitySettings",
    "SessionSettings",
    "StatusSettings",
    "TLSSettings",
    "load_hub_settings",
]

ENV_PREFIX = "CLOUDHUB_"


#: A namespace name: an RFC 1123 label.
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def _h(text: str, unit: str = "") -> dict[str, str]:
    return {"help": text, "unit": unit} if unit else {"help": text}


# The checks below name the field only: the loader prefixes the group ("listen.").


def _positive(obj: object, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if not value > 0:
            raise SettingsError(name, "> 0", value)


def _port(obj: object, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if not 0 <= value <= 65535:
            raise SettingsError(name, "a port 0..65535", value)


@dataclass(frozen=True, slots=True)
class ListenSettings:
    """Where edge agents connect."""

    quic_host: str = field(
        default="0.0.0.0", metadata=_h("address to listen on for QUIC (UDP); '::' for IPv6")
    )
    quic_port: int = field(
        default=7443,
        metadata=_h(
            "UDP port for QUIC; 0 picks a free one. Same number as the WebSocket "
            "port so that one Service carries both"
        ),
    )
    websocket_host: str = field(
        default="0.0.0.0", metadata=_h("address to listen on for WebSocket over TLS (TCP)")
    )
    websocket_port: int = field(
        default=7443, metadata=_h("TCP port for WebSocket over TLS; 0 picks a free one")
    )
    quic: bool = field(default=True, metadata=_h("serve QUIC"))
    websocket: bool = field(
        default=True, metadata=_h("serve WebSocket (the fallback where UDP is blocked)")
    )
    hello_timeout: float = field(
        default=10.0,
        metadata=_h("time a new connection has for its TLS handshake and its hello", "s"),
    )
    quic_receive_buffer: int = field(
        default=4 * 1024 * 1024,
        metadata=_h(
            "UDP receive buffer asked for the QUIC socket (SO_RCVBUF): a reconnecting fleet's "
            "handshakes wait in the kernel while the loop is busy instead of being dropped; "
            "the kernel caps it at net.core.rmem_max (raise that sysctl to get it all); "
            "0: the OS default",
            "bytes",
        ),
    )
    quic_max_datagram_size: int = field(
        default=1200,
        metadata=_h(
            "UDP datagram size toward agents off this host (agents on it: 8192); QUIC's "
            "minimum by default, which every path carries: aioquic has no path MTU discovery",
            "bytes",
        ),
    )
    quic_loopback_datagram_size: int = field(
        default=8192,
        metadata=_h(
            "UDP datagram size toward agents at a loopback address (the path is the loopback "
            "interface alone); 0: as off this host (agents behind a local relay or tunnel)",
            "bytes",
        ),
    )
    backlog: int = field(
        default=1024,
        metadata=_h("TCP listen backlog: a fleet reconnecting after a hub restart arrives at once"),
    )
    max_pending_handshakes_per_source: int = field(
        default=256,
        metadata=_h(
            "WebSocket connections one address may have in TLS or the upgrade at once; more "
            "are dropped as they arrive (half-open connections hold ~57 KiB each until the "
            "hello deadline); a fleet behind one NAT address that hits it retries with back-off"
        ),
    )
    max_pending_handshakes: int = field(
        default=512,
        metadata=_h(
            "WebSocket connections all addresses together may have in TLS or the upgrade "
            "at once; more are dropped as they arrive, before TLS (they cost nothing, and "
            "their agents retry with back-off). Bounds how far a fleet reconnecting at once "
            "puts the event loop behind: handshakes beyond it only queue, late"
        ),
    )
    max_pending_handshakes_busy: int = field(
        default=32,
        metadata=_h(
            "max_pending_handshakes while the hub turns new sessions away (its node "
            "ownership claims at ha.claims_in_flight_max, or its loop later than "
            "ha.overload_lag): the arrivals it would refuse after TLS are dropped before "
            "it, and the few let through are told OVERLOADED with a retry_after"
        ),
    )
    credentials_check_interval: float = field(
        default=30.0,
        metadata=_h(
            "how often the listeners look for new serving credentials (the hub CA's "
            "reissued certificate, tls.* files rotated on disk); new handshakes use them",
            "s",
        ),
    )

    def __post_init__(self) -> None:
        _port(self, "quic_port", "websocket_port")
        _positive(
            self,
            "hello_timeout",
            "backlog",
            "credentials_check_interval",
            "max_pending_handshakes_per_source",
            "max_pending_handshakes",
            "max_pending_handshakes_busy",
        )
        if not (self.quic or self.websocket):
            raise SettingsError("websocket", "at least one of quic, websocket on", False)
        if not 1200 <= self.quic_max_datagram_size <= 16000:
            raise SettingsError(
                "quic_max_datagram_size", "1200..16000 bytes", self.quic_max_datagram_size
            )
        size = self.quic_loopback_datagram_size
        if not (size == 0 or 1200 <= size <= 16000):
            raise SettingsError("quic_loopback_datagram_size", "0 or 1200..16000 bytes", size)
        if self.quic_receive_buffer < 0:
            raise SettingsError(
                "quic_receive_buffer", ">= 0 bytes (0: the OS default)", self.quic_receive_buffer
            )


@dataclass(frozen=True, slots=True)
class TLSSettings:
    """Certificates from an outside CA (PEM files). Unset (the default), the hub runs its
    own CA (``pki.*``: the CA in a Secret, bootstrap-token join, renewal); set, the hub
    serves with these and its own CA, join endpoint and renewal are off."""

    ca_file: pathlib.Path | None = field(
        default=None,
        metadata=_h(
            "PEM bundle of the outside CA that issued node certificates; unset: the hub's own CA"
        ),
    )
    cert_file: pathlib.Path | None = field(
        default=None,
        metadata=_h(
            "PEM server certificate (chain) the hub presents, issued by that CA (with tls.ca_file)"
        ),
    )
    key_file: pathlib.Path | None = field(
        default=None, metadata=_h("PEM private key of that server certificate (with tls.ca_file)")
    )


@dataclass(frozen=True, slots=True)
class KubeSettings:
    """How the hub reaches Kubernetes: a kubeconfig, the in-cluster service account, or
    (when neither is given) the embedded standalone API server."""

    kubeconfig: pathlib.Path | None = field(
        default=None, metadata=_h("kubeconfig file of the cluster to bridge to")
    )
    context: str | None = field(default=None, metadata=_h("kubeconfig context to use"))
    in_cluster: bool = field(
        default=False, metadata=_h("use the pod's service account (the hub runs in the cluster)")
    )
    embedded_data_dir: pathlib.Path = field(
        default=pathlib.Path("/var/lib/cloudhub/api"),
        metadata=_h(
            "embedded API (no kubeconfig, not in-cluster): its SQLite state, CA and kubeconfig"
        ),
    )
    embedded_host: str = field(
        default="127.0.0.1",
        metadata=_h("embedded API: listen address (loopback: it holds every Secret)"),
    )
    embedded_port: int = field(
        default=6443, metadata=_h("embedded API: TCP port (kube-apiserver's 6443)")
    )
    embedded_event_ttl: float = field(
        default=3600.0,
        metadata=_h(
            "embedded API: how long an Event is kept after its last write "
            "(kube-apiserver's --event-ttl, 1 h)",
            "s",
        ),
    )
    request_timeout: float = field(
        default=30.0, metadata=_h("time allowed for one API request (not watches)", "s")
    )
    watch_timeout: int = field(
        default=300,
        metadata=_h("how long the API keeps one watch open before the informer re-watches", "s"),
    )
    namespaces: tuple[str, ...] = field(
        default=(),
        metadata=_h(
            "namespaced mode: watch pods, ConfigMaps, Secrets and namespaced custom resources "
            "only in these namespaces (one informer each; RoleBindings there suffice, "
            "deploy/overlays/namespaced); empty: every namespace (a ClusterRole)"
        ),
    )

    def __post_init__(self) -> None:
        _port(self, "embedded_port")
        _positive(self, "request_timeout", "watch_timeout", "embedded_event_ttl")
        for ns in self.namespaces:
            if not _DNS_LABEL.fullmatch(ns):
                raise SettingsError("namespaces", "namespace names (DNS labels)", ns)
        if len(set(self.namespaces)) != len(self.namespaces):
            raise SettingsError("namespaces", "each namespace once", ",".join(self.namespaces))
        if self.in_cluster and self.kubeconfig is not None:
            raise SettingsError("in_cluster", "not together with kube.kubeconfig", True)

    @property
    def mode(self) -> Literal["kubeconfig", "in-cluster", "embedded"]:
        """Which of the three ways is used."""
        if self.kubeconfig is not None:
            return "kubeconfig"
        return "in-cluster" if self.in_cluster else "embedded"


@dataclass(frozen=True, slots=True)
class NodeSettings:
    """Edge nodes as Kubernetes Nodes: Leases, conditions, writes about nodes."""

    lease_interval: float = field(
        default=10.0,
        metadata=_h(
            "renew a connected node's Lease about this often (kubelet: 10 s, 6 writes/node/min); "
            "32 with status_report_interval 600 is the edge liveness profile (1.9 writes/node/"
            "min) for clusters whose --node-monitor-grace-period is at least 50 s: with the "
            "40 s default before Kubernetes 1.32 a node moving between hub replicas after a "
            'replica\'s death could pass it (docs/hub.md, "Liveness writes")',
            "s",
        ),
    )
    lease_jitter: float = field(
        default=0.05,
        metadata=_h(
            "each renewal comes lease_interval * (1 ± this) after the last, drawn uniformly, "
            "so that nodes that connected together (a reconnect storm) do not renew together",
        ),
    )
    lease_duration: int = field(
        default=40,
        metadata=_h("leaseDurationSeconds written in the Lease (kubelet: 40 s)", "s"),
    )
    not_ready_grace: float = field(
        default=40.0,
        metadata=_h(
            "after a disconnect, set Ready=Unknown once this long has passed "
            "without a new session (node lifecycle controller: 40 s)",
            "s",
        ),
    )
    status_report_interval: float = field(
        default=300.0,
        metadata=_h(
            "refresh a connected node's Ready heartbeat this often; the Lease is the "
            "frequent heartbeat and the node lifecycle controller judges by it "
            "(kubelet's nodeStatusReportFrequency: 5 min; 10 min halves these writes)",
            "s",
        ),
    )
    lease_namespace: str = field(
        default="kube-node-lease", metadata=_h("namespace of the node Leases")
    )
    event_namespace: str = field(
        default="default",
        metadata=_h("namespace of the Events about Nodes (where kubelet records them)"),
    )
    writers: int = field(
        default=16,
        metadata=_h(
            "Lease and Node writes in flight at once (renewals are spread over the interval)"
        ),
    )
    qps: float = field(
        default=50.0,
        metadata=_h(
            "Node object writes and Events per second (Lease renewals are paced by "
            "lease_interval instead)",
            "1/s",
        ),
    )
    burst: int = field(default=100, metadata=_h("Node writes and Events allowed at once"))

    def __post_init__(self) -> None:
        _positive(
            self,
            "lease_interval",
            "lease_duration",
            "not_ready_grace",
            "status_report_interval",
            "writers",
            "qps",
            "burst",
        )
        if not 0 <= self.lease_jitter < 0.5:
            raise SettingsError("lease_jitter", "a fraction 0 <= jitter < 0.5", self.lease_jitter)
        if self.lease_interval * (1 + self.lease_jitter) >= self.lease_duration:
            raise SettingsError(
                "lease_interval",
                f"* (1 + lease_jitter {self.lease_jitter}) < lease_duration "
                f"({self.lease_duration} s)",
                self.lease_interval,
            )


@dataclass(frozen=True, slots=True)
class StatusSettings:
    """Pod status written up to the API: coalesced per pod, rate-limited."""

    qps: float = field(
        default=50.0,
        metadata=_h(
            "pod status writes per second, whatever the fleet does (kubelet's "
            "kubeAPIQPS is 50 for one node)",
            "1/s",
        ),
    )
    burst: int = field(default=100, metadata=_h("pod status writes allowed at once"))
    workers: int = field(
        default=8, metadata=_h("pod status writes in flight at once (each waits for a token)")
    )
    retry_cap: float = field(
        default=30.0,
        metadata=_h(
            "longest back-off between retries of a write the API refused with a "
            "transient error; such writes are retried until they succeed",
            "s",
        ),
    )

    def __post_init__(self) -> None:
        _positive(self, "qps", "burst", "workers", "retry_cap")


@dataclass(frozen=True, slots=True)
class SessionSettings:
    """The protocol session on the hub's side."""

    heartbeat_interval: float = field(
        default=20.0,
        metadata=_h(
            "told to agents in the welcome: ping after this long without traffic; "
            "below the 30 s UDP idle timeout of common NATs",
            "s",
        ),
    )
    liveness_timeout: float = field(
        default=60.0,
        metadata=_h("close a session after this long without a byte from the agent", "s"),
    )
    close_timeout: float = field(
        default=5.0, metadata=_h("time a closing session waits for the agent's close", "s")
    )
    max_frame_size: int = field(
        default=4 * 1024 * 1024,
        metadata=_h(
            "largest frame accepted or sent (agreed with each agent: the smaller)", "bytes"
        ),
    )
    max_message_size: int = field(
        default=8 * 1024 * 1024,
        metadata=_h(
            "largest message accepted or sent, in chunks below the frame size (agreed with "
            "each agent: the smaller); a larger object is a dead letter with an Event",
            "bytes",
        ),
    )

    def __post_init__(self) -> None:
        _positive(self, "heartbeat_interval", "liveness_timeout", "close_timeout")
        if self.heartbeat_interval >= self.liveness_timeout:
            raise SettingsError(
                "heartbeat_interval",
                f"< liveness_timeout ({self.liveness_timeout} s)",
                self.heartbeat_interval,
            )

    def session_config(self) -> SessionConfig:
        """The sans-I/O session config of every hub session (``manual_ack``: an edge
        message is acked once its effect is durable in the API)."""
        return SessionConfig(
            liveness_timeout=self.liveness_timeout,
            ping_interval=min(self.heartbeat_interval, self.liveness_timeout / 2),
            close_timeout=self.close_timeout,
            max_frame_size=self.max_frame_size,
            max_message_size=self.max_message_size,
            manual_ack=True,
        )


@dataclass(frozen=True, slots=True)
class AuthorizationSettings:
    """What a node may see and change."""

    node_authorization: bool = field(
        default=True,
        metadata=_h(
            "a session may only name its own Node, its pods and the ConfigMaps and "
            "Secrets they reference (the Kubernetes Node authorizer's rule)"
        ),
    )


@dataclass(frozen=True, slots=True)
class ObservabilitySettings:
    """Metrics, health and logs."""

    http_host: str = field(
        default="0.0.0.0", metadata=_h("address of the /metrics, /healthz and /readyz server")
    )
    http_port: int = field(
        default=9095,
        metadata=_h(
            "port of /metrics, /healthz, /readyz; 9095 stays clear of Prometheus "
            "(9090) and its Pushgateway (9091) on a shared host; 0 picks a free one"
        ),
    )
    log_format: Literal["json", "text"] = field(
        default="json", metadata=_h("json: one object per line; text: for a terminal")
    )
    log_level: Literal["debug", "info", "warning", "error"] = field(
        default="info", metadata=_h("lowest level logged")
    )
    ready_api_timeout: float = field(
        default=2.0, metadata=_h("/readyz: time the API has to answer its probe", "s")
    )

    def __post_init__(self) -> None:
        _port(self, "http_port")
        _positive(self, "ready_api_timeout")


@dataclass(frozen=True, slots=True)
class HubSettings:
    """Everything ``cloudhub serve`` needs."""

    listen: ListenSettings = field(default_factory=ListenSettings)
    tls: TLSSettings = field(default_factory=TLSSettings)
    kube: KubeSettings = field(default_factory=KubeSettings)
    nodes: NodeSettings = field(default_factory=NodeSettings)
    status: StatusSettings = field(default_factory=StatusSettings)
    session: SessionSettings = field(default_factory=SessionSettings)
    authorization: AuthorizationSettings = field(default_factory=AuthorizationSettings)
    observability: ObservabilitySettings = field(default_factory=ObservabilitySettings)
    pki: PKISettings = field(default_factory=PKISettings)
    devices: DevicesSettings = field(default_factory=DevicesSettings)
    metrics: HubMetricsSettings = field(default_factory=HubMetricsSettings)
    placement: PlacementSettings = field(default_factory=PlacementSettings)
    ha: HASettings = field(default_factory=HASettings)
    kubelet: KubeletSettings = field(default_factory=KubeletSettings)
    upgrade: UpgradeSettings = field(default_factory=UpgradeSettings)


def load_hub_settings(
    path: str | pathlib.Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> HubSettings:
    """Load the hub's settings: defaults, then ``path`` (YAML), then ``environ``
    (``CLOUDHUB_*``), then ``overrides`` (dotted keys, e.g. from flags).

    Raises:
        protocol.errors.SettingsError: an unknown key, a bad value or an unreadable file;
            the message names the key, what was expected (with its unit) and the source.
    """
    return load_settings(
        HubSettings,
        path=path,
        environ=environ,
        env_prefix=ENV_PREFIX,
        overrides=overrides,
    )
