"""Settings of the hub's kubelet API (the ``kubelet`` group of the hub's root settings:
file, environment ``CLOUDHUB_KUBELET__…``, flags ``--kubelet-…``). Nothing here reads the
environment."""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol.errors import SettingsError

__all__ = ["KubeletSettings"]


def _h(text: str, unit: str = "") -> dict[str, str]:
    return {"help": text, "unit": unit} if unit else {"help": text}


@dataclass(frozen=True, slots=True)
class KubeletSettings:
    """The kubelet API the Kubernetes API server calls for logs, exec and port-forward."""

    enabled: bool = field(
        default=True,
        metadata=_h(
            "serve kubectl logs/exec through the nodes' sessions: on the embedded API in "
            "process; for a real cluster also over HTTPS when client_ca_file is set"
        ),
    )
    host: str = field(default="0.0.0.0", metadata=_h("address of the kubelet API's HTTPS server"))
    port: int = field(
        default=10350,
        metadata=_h(
            "port of the kubelet API's HTTPS server, published as every edge Node's "
            "daemonEndpoints.kubeletEndpoint.Port (0: any free port)"
        ),
    )
    advertise_address: str = field(
        default="",
        metadata=_h(
            "address the API server reaches this hub at, published as every edge Node's "
            "InternalDNS address (run the API server with "
            "--kubelet-preferred-address-types=InternalDNS,InternalIP,Hostname); "
            "empty: the host, when it is not a wildcard"
        ),
    )
    client_ca_file: str = field(
        default="",
        metadata=_h(
            "PEM CA bundle that signs the API server's kubelet client certificate "
            "(--kubelet-client-certificate); callers without one are refused. Empty: no "
            "HTTPS server (the embedded API needs none)"
        ),
    )
    allowed_names: tuple[str, ...] = field(
        default=(),
        metadata=_h("client certificate common names allowed (empty: any from client_ca_file)"),
    )

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise SettingsError("port", "a port 0..65535", self.port)

    def published_address(self) -> str:
        """The address to publish, or ``""`` when none is known."""
        if self.advertise_address:
            return self.advertise_address
        return "" if self.host in ("", "0.0.0.0", "::") else self.host
