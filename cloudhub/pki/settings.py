"""Settings of the hub's PKI: one frozen dataclass, a group of the hub's root settings.

The hub's settings loader (file, then environment, then flags) fills it and passes it
down; nothing here reads the environment.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from cloudhub.errors import ConfigError

__all__ = ["DAY", "PKISettings", "split_names"]

DAY = 86400.0
"""Seconds in a day."""

_DNS_NAME = re.compile(
    r"^(\*\.)?[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$"
)
_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclass(frozen=True, slots=True)
class PKISettings:
    """The hub CA, its serving certificate, bootstrap tokens and the join endpoint."""

    namespace: str = "edgefleet"
    """The hub's namespace: the CA Secret, token Secrets, certificate records and the
    ``edgefleet-hub-info`` ConfigMap live there."""

    ca_secret: str = "edgefleet-ca"
    """Name of the Secret (type ``kubernetes.io/tls``: ``tls.crt``, ``tls.key``) holding
    the hub CA. Created at first start if absent; an operator may create it beforehand
    to supply their own CA."""

    ca_cert_file: str = ""
    """PEM file of an operator-supplied CA certificate; with ``ca_key_file``, used instead
    of the Secret (for sites that keep the CA key out of the cluster's API)."""

    ca_key_file: str = ""
    """PEM file of the operator-supplied CA's ECDSA P-256 private key."""

    ca_lifetime: float = 10 * 365 * DAY
    """Seconds a generated CA is valid: 10 years, as kubeadm's CA."""

    node_cert_lifetime: float = 30 * DAY
    """Seconds a node client certificate is valid. 30 days: the agent renews at a jittered
    70-90 % of it over its live session, so a node can be offline about 3 weeks after a
    renewal and still reconnect; longer offline needs ``edgeagent join --renew``."""

    server_names: tuple[str, ...] = ("localhost", "127.0.0.1", "::1")
    """Every DNS name and IP address agents use to reach the hub (load-balancer VIP,
    Service DNS names, public names). The serving certificate covers exactly these; an
    agent dialling another name is refused with an error naming it."""

    server_cert_lifetime: float = 365 * DAY
    """Seconds the hub's serving certificate is valid. Each replica issues its own at
    start (the key never leaves the process); :meth:`CAManager.serving_credentials`
    issues a fresh one when a third of the lifetime is left."""

    join_host: str = "0.0.0.0"
    """Address the join endpoint listens on."""

    join_port: int = 7444
    """TCP port of the join endpoint (HTTPS, server-authenticated only). Separate from the
    mutual-TLS session ports because a node that has not joined has no client
    certificate yet (KubeEdge likewise serves certificate requests on a port of its own)."""

    session_port: int = 7443
    """The port agents dial for sessions (QUIC on UDP and WebSocket on TCP share it);
    told to the agent in the join answer so that it can write its config."""

    public_address: str = ""
    """``host`` or ``host:port`` printed in join commands (``edgeagent join --hub``);
    empty uses the first of ``server_names`` and ``join_port``."""

    token_ttl: float = DAY
    """Default lifetime of a bootstrap token in seconds (24 h, as kubeadm)."""

    token_retention: float = 7 * DAY
    """Seconds an expired, deleted or used token is kept after it stopped being usable,
    so that a join with it is told *why* it is refused; then it is purged."""

    join_request_timeout: float = 30.0
    """Seconds one join request may take (reading it, API calls, answer)."""

    max_join_request_bytes: int = 64 * 1024
    """Largest join request body in bytes (a CSR and a few labels fit in 2 KiB)."""

    def __post_init__(self) -> None:
        if not _K8S_NAME.match(self.namespace) or len(self.namespace) > 63:
            raise ConfigError(f"pki.namespace {self.namespace!r} is not a valid namespace name")
        if not self.ca_secret:
            raise ConfigError("pki.ca_secret must not be empty")
        if bool(self.ca_cert_file) != bool(self.ca_key_file):
            raise ConfigError("pki.ca_cert_file and pki.ca_key_file must be given together")
        for key in (
            "ca_lifetime",
            "node_cert_lifetime",
            "server_cert_lifetime",
            "token_ttl",
            "join_request_timeout",
        ):
            if not getattr(self, key) > 0:
                raise ConfigError(f"pki.{key} must be > 0 seconds, got {getattr(self, key)!r}")
        if self.token_retention < 0:
            raise ConfigError("pki.token_retention must be >= 0 seconds")
        for key in ("join_port", "session_port"):
            if not 0 <= getattr(self, key) <= 65535:
                raise ConfigError(f"pki.{key} must be 0..65535, got {getattr(self, key)!r}")
        if self.max_join_request_bytes < 4096:
            raise ConfigError("pki.max_join_request_bytes must be at least 4096")
        if not self.server_names:
            raise ConfigError("pki.server_names must list at least one DNS name or IP address")
        for name in self.server_names:
            _, ips = split_names([name])
            if not ips and not _DNS_NAME.match(name.lower()):
                raise ConfigError(
                    f"pki.server_names: {name!r} is neither an IP address nor a DNS name"
                )

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
