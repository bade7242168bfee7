"""Settings of the device twins and the local device API (a group of the agent's settings)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DeviceSettings:
    """Device twins on the edge and the local device API mappers use (the agent's
    settings group ``devices``).

    Attributes:
        enabled: serve device twins and the device API (the agent feeds them the Device
            and DeviceModel objects the hub sends this node).
        socket_path: the Unix socket mappers connect to; empty means
            ``<state_dir>/devices.sock`` (the agent resolves it; ``DeviceAPIServer`` needs
            a path). The state directory is ``0700``, so only root's mappers reach that
            default; for mappers running in a group, set e.g.
            ``/run/edgeagent/devices.sock`` with ``socket_group`` (the agent creates a
            missing directory ``0750``).
        socket_mode: permission bits of the socket: ``0o660`` lets the owner and the
            group read/write (connect) and nobody else, as the Docker socket does.
        socket_group: group name or id to own the socket (mappers run in it); ``None``
            keeps the agent's group.
        tcp_port: also listen on TCP at ``tcp_host:tcp_port`` (0 picks a free port);
            ``None`` (default) means Unix socket only.
        tcp_host: TCP address; must be a loopback address: the API has no authentication
            beyond who can reach it.
        max_body_bytes: largest request body; a report of 1,000 values is ~100 KiB.
        max_wait_seconds: cap on a long-poll's ``wait``; 300 s stays under common proxy
            and client idle timeouts while keeping idle mappers to one request per 5 min.
        idle_timeout_seconds: a keep-alive connection idle this long is closed.
        history_limit: history entries kept per (device, property) for reports made with
            ``history: true``.
    """

    enabled: bool = True
    socket_path: str = ""
    socket_mode: int = 0o660
    socket_group: str | int | None = None
    tcp_port: int | None = None
    tcp_host: str = "127.0.0.1"
    max_body_bytes: int = 1024 * 1024
    max_wait_seconds: float = 300.0
    idle_timeout_seconds: float = 120.0
    history_limit: int = 1000

    def __post_init__(self) -> None:
        if self.tcp_port is not None:
            try:
                loopback = ipaddress.ip_address(self.tcp_host).is_loopback
            except ValueError:
                loopback = self.tcp_host == "localhost"
            if not loopback:
                raise ValueError(
                    f"device API tcp_host must be a loopback address, got {self.tcp_host!r}"
                )
            if not 0 <= self.tcp_port <= 65535:
                raise ValueError(f"tcp_port must be 0..65535, got {self.tcp_port}")
        if self.max_body_bytes < 1024:
            raise ValueError("max_body_bytes must be at least 1024")
        if self.max_wait_seconds <= 0 or self.idle_timeout_seconds <= 0:
            raise ValueError("max_wait_seconds and idle_timeout_seconds must be positive")
