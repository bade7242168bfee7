"""Settings of hub high availability: the ``ha`` group of the hub's root settings (file,
environment ``CLOUDHUB_HA__…``, flags). Durations are in seconds. Nothing here reads the
environment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from protocol.errors import SettingsError

__all__ = ["HASettings"]

_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_PEER_HOST = re.compile(r"^(?:[A-Za-z0-9.-]+|[0-9A-Fa-f:]*:[0-9A-Fa-f:.]*)$")
"""A DNS name, an IPv4 address, or an IPv6 address (which the Lease annotation brackets)."""


def _h(text: str, unit: str = "") -> dict[str, str]:
    return {"help": text, "unit": unit} if unit else {"help": text}


@dataclass(frozen=True, slots=True)
class HASettings:
    """Several hub replicas sharing one fleet (docs/hub.md, "High availability")."""

    enabled: bool = field(
        default=False,
        metadata=_h(
            "node ownership by Lease: each node is served by one replica at a time, "
            "fenced; required when the Deployment runs more than one replica"
        ),
    )
    namespace: str = field(
        default="edgefleet",
        metadata=_h("namespace of the replicas' own Leases (the hub's namespace)"),
    )
    identity: str = field(
        default="",
        metadata=_h(
            "this replica's name in the Leases (default: the hub's identity, "
            "hostname-pid; in a cluster the pod name through the Downward API)"
        ),
    )
    replica_lease_duration: int = field(
        default=6,
        metadata=_h(
            "leaseDurationSeconds of a replica's own Lease: a replica that has not renewed "
            "it for this long is dead to the others, who then take its nodes over; it stops "
            "serving its nodes before that, by its own clock",
            "s",
        ),
    )
    replica_renew_interval: float = field(
        default=2.0,
        metadata=_h("renew the replica's own Lease this often (a third of its duration)", "s"),
    )
    loop_stall_max: float = field(
        default=15.0,
        metadata=_h(
            "the replica Lease is renewed on a thread of its own, so that a serving loop "
            "that is late (a reconnect storm) does not fence the replica; a serving loop "
            "that has not run at all for this long is hung: the renewals stop and the "
            "other replicas take its nodes over",
            "s",
        ),
    )

    peer_address: str = field(
        default="",
        metadata=_h(
            "host the other replicas reach this one at for relayed streams (in a cluster the "
            "pod IP, status.podIP through the Downward API); empty: no relay, and a kubectl "
            "exec/logs reaching this replica for a node another replica serves is refused "
            "as offline"
        ),
    )
    peer_port: int = field(
        default=10351,
        metadata=_h(
            "port of the replica-to-replica stream relay (mutual TLS with peer certificates "
            "from the hub CA); 0: any free port"
        ),
    )
    peer_host: str = field(default="0.0.0.0", metadata=_h("address the stream relay listens on"))

    overload_lag: float = field(
        default=0.0,
        metadata=_h(
            "turn new sessions away with OVERLOADED while the event loop lags more than "
            "this (the worst of the last second); 0: never (admission control off)",
            "s",
        ),
    )
    overload_retry_max: float = field(
        default=30.0,
        metadata=_h("OVERLOADED refusals ask agents to wait uniformly 0 to this long", "s"),
    )

    claims_in_flight_max: int = field(
        default=64,
        metadata=_h(
            "node ownership claims (a Lease GET, then a create or a PATCH) this replica "
            "writes to the API at once; a session arriving beyond them is turned away with "
            "OVERLOADED (claims_retry_max), so that a reconnect storm queues at the agents, "
            "not in the API, where it would delay the replica's own Lease renewals past "
            "their fencing deadline"
        ),
    )
    claims_retry_max: float = field(
        default=5.0,
        metadata=_h(
            "a session turned away because claims_in_flight_max claims are in flight is "
            "asked to wait uniformly 0 to this long",
            "s",
        ),
    )

    shutdown_reconnect_rate: float = field(
        default=500.0,
        metadata=_h(
            "a stopping hub spreads its agents' reconnects at about this many per second: "
            "each session's GOING_AWAY carries a retry_after drawn uniformly over "
            "sessions / this rate seconds (full jitter), at most shutdown_spread_max; "
            "applies with or without ha.enabled",
            "1/s",
        ),
    )
    shutdown_spread_max: float = field(
        default=15.0,
        metadata=_h(
            "longest such spread; before it closes its sessions the hub renews every node "
            "Lease older than nodes.not_ready_grace minus this minus 5 s, so that no node "
            'goes stale while its agent waits (docs/hub.md, "Liveness writes")',
            "s",
        ),
    )

    def __post_init__(self) -> None:
        if self.shutdown_reconnect_rate <= 0:
            raise SettingsError(
                "shutdown_reconnect_rate", "> 0 reconnects per second", self.shutdown_reconnect_rate
            )
        if not 0 <= self.shutdown_spread_max <= 300:
            raise SettingsError("shutdown_spread_max", "0..300 s", self.shutdown_spread_max)
        if not _K8S_NAME.match(self.namespace) or len(self.namespace) > 63:
            raise SettingsError("namespace", "a namespace name (RFC 1123 label)", self.namespace)
        if self.peer_address and not _PEER_HOST.match(self.peer_address):
            raise SettingsError(
                "peer_address", "a host name or IP address, without a port", self.peer_address
            )
        if not 0 <= self.peer_port <= 65535:
            raise SettingsError("peer_port", "a port 0..65535", self.peer_port)
        if self.loop_stall_max <= 0:
            raise SettingsError("loop_stall_max", "> 0", self.loop_stall_max)
        if self.overload_lag < 0:
            raise SettingsError("overload_lag", ">= 0 (0: off)", self.overload_lag)
        if self.overload_retry_max <= 0:
            raise SettingsError("overload_retry_max", "> 0", self.overload_retry_max)
        if self.claims_in_flight_max < 1:
            raise SettingsError("claims_in_flight_max", ">= 1", self.claims_in_flight_max)
        if self.claims_retry_max <= 0:
            raise SettingsError("claims_retry_max", "> 0", self.claims_retry_max)
        if self.replica_lease_duration < 1:
            raise SettingsError(
                "replica_lease_duration",
                "a whole number of seconds >= 1",
                self.replica_lease_duration,
            )
        if not 0 < self.replica_renew_interval * 2 <= self.replica_lease_duration:
            raise SettingsError(
                "replica_renew_interval",
                f"> 0 and at most half of replica_lease_duration ({self.replica_lease_duration} s)",
                self.replica_renew_interval,
            )
