"""Settings of the hub's PKI: one frozen dataclass, the ``pki`` group of the hub's root
settings (``protocol.settings.load_settings``: file, environment ``CLOUDHUB_PKI__…``,
flags). Durations are in seconds. Nothing here reads the environment.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

from protocol.errors import SettingsError

__all__ = ["DAY", "PKISettings", "split_names"]

DAY = 86400.0
"""Seconds in a day."""

_DNS_NAME = re.compile(
    r"^(\*\.)?[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$"
)
_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _h(text: str, unit: str = "") -> dict[str, str]:
    return {"help": text, "unit": unit} if unit else {"help": text}


@dataclass(frozen=True, slots=True)
class PKISettings:
    """The hub CA, its serving certificate, bootstrap tokens and the join endpoint."""

    namespace: str = field(
        default="edgefleet",
        metadata=_h(
            "the hub's namespace: CA Secret, token Secrets, certificate records and the "
            "edgefleet-hub-info ConfigMap live there"
        ),
    )
    ca_secret: str = field(
        default="edgefleet-ca",
        metadata=_h(
            "Secret (kubernetes.io/tls: tls.crt, tls.key) holding the hub CA; created at first "
            "start if absent, or created beforehand by an operator supplying a CA"
        ),
    )
    ca_cert_file: str = field(
        default="",
        metadata=_h("PEM file of an operator-supplied CA, used instead of the Secret"),
    )
    ca_key_file: str = field(
        default="", metadata=_h("PEM file of that CA's ECDSA P-256 private key")
    )
    ca_lifetime: float = field(
        default=10 * 365 * DAY, metadata=_h("validity of a generated CA (kubeadm: 10 years)", "s")
    )
    node_cert_lifetime: float = field(
        default=30 * DAY,
        metadata=_h(
            "validity of node certificates; agents renew at a jittered 70-90 % of it, so a "
            "node may stay offline about 3 weeks after a renewal and still reconnect",
            "s",
        ),
    )
    server_names: tuple[str, ...] = field(
        default=("localhost", "127.0.0.1", "::1"),
        metadata=_h(
            "every DNS name and IP address agents use to reach the hub (load-balancer VIP, "
            "Service and public names); the serving certificate covers exactly these"
        ),
    )
    server_cert_lifetime: float = field(
        default=365 * DAY,
        metadata=_h(
            "validity of each replica's serving certificate (reissued when a third is left)",
            "s",
        ),
    )
    join_host: str = field(
        default="0.0.0.0", metadata=_h("address the join endpoint (HTTPS) listens on")
    )
    join_port: int = field(
        default=7444,
        metadata=_h(
            "TCP port of the join endpoint; separate from the mutual-TLS session ports as a "
            "joining node has no client certificate yet (as KubeEdge); 0 picks a free one"
        ),
    )
    session_port: int = field(
        default=7443,
        metadata=_h("the session port told to joining agents (QUIC UDP and WebSocket TCP)"),
    )
    public_address: str = field(
        default="",
        metadata=_h(
            "host or host:port printed in join commands; empty: the first server name and join_port"
        ),
    )
    token_ttl: float = field(
        default=DAY, metadata=_h("default bootstrap token lifetime (kubeadm: 24 h)", "s")
    )
    token_retention: float = field(
        default=7 * DAY,
        metadata=_h(
            "how long an expired, deleted or used token is kept so that a join with it is "
            "told why it is refused; then it is purged",
            "s",
        ),
    )
    join_request_timeout: float = field(
        default=30.0, metadata=_h("time one join request may take", "s")
    )
    max_join_request_bytes: int = field(
        default=64 * 1024,
        metadata=_h("largest join request body (a CSR and labels fit in 2 KiB)", "bytes"),
    )

    def __post_init__(self) -> None:
        if not _K8S_NAME.match(self.namespace) or len(self.namespace) > 63:
            raise SettingsError("namespace", "a namespace name (RFC 1123 label)", self.namespace)
        if not self.ca_secret:
            raise SettingsError("ca_secret", "a Secret name", self.ca_secret)
        if bool(self.ca_cert_file) != bool(self.ca_key_file):
            raise SettingsError(
                "ca_key_file", "ca_cert_file and ca_key_file given together", self.ca_key_file
            )
        for key in (
            "ca_lifetime",
            "node_cert_lifetime",
            "server_cert_lifetime",
            "token_ttl",
            "join_request_timeout",
        ):
            if not getattr(self, key) > 0:
                raise SettingsError(key, "> 0 seconds", getattr(self, key))
        if self.token_retention < 0:
            raise SettingsError("token_retention", ">= 0 seconds", self.token_retention)
        for key in ("join_port", "session_port"):
            if not 0 <= getattr(self, key) <= 65535:
                raise SettingsError(key, "a port 0..65535", getattr(self, key))
        if self.max_join_request_bytes < 4096:
            raise SettingsError("max_join_request_bytes", ">= 4096", self.max_join_request_bytes)
        if not self.server_names:
            raise SettingsError("server_names", "at least one DNS name or IP address", ())
        for name in self.server_names:
            _, ips = split_names([name])
            if not ips and not _DNS_NAME.match(name.lower()):
                raise SettingsError("server_names", "DNS names and IP addresses", name)

    @property
    def join_address(self) -> str:
        """``host:port`` agents are told to join (``public_address`` or the first server
        name with ``join_port``; IPv6 addresses in brackets)."""
        if self.public_address:
            return self.public_address
        host = self.server_names[0]
        if ":" in host:
            host = f"[{host}]"
        return f"{host}:{self.join_port}"


def split_names(names: list[str] | tuple[str, ...]) -> tuple[list[str], list[str]]:
    """Split server names into ``(dns_names, ip_addresses)``."""
    dns: list[str] = []
    ips: list[str] = []
    for name in names:
        try:
            ips.append(str(ipaddress.ip_address(name)))
        except ValueError:
            dns.append(name.lower())
    return dns, ips
