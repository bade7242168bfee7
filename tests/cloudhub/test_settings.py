"""The hub's settings: defaults, file, environment, overrides, and clear errors."""

from __future__ import annotations

import pathlib

import pytest

from cloudhub.settings import HubSettings, load_hub_settings
from protocol.errors import SettingsError
from protocol.settings import describe


def test_defaults() -> None:
    s = load_hub_settings()
    assert (s.listen.quic_port, s.listen.websocket_port) == (7443, 7443)
    assert s.nodes.lease_interval == 10.0 and s.nodes.not_ready_grace == 40.0
    assert (s.nodes.lease_duration, s.nodes.status_report_interval) == (40, 300.0)
    assert s.authorization.node_authorization is True
    assert s.observability.http_port == 9095
    assert s.kube.mode == "embedded"
    config = s.session.session_config()
    assert config.manual_ack is True and config.liveness_timeout == 60.0


def test_file_then_environment_then_overrides(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "hub.yaml"
    path.write_text(
        "listen: {quic_port: 8443, websocket_port: 8443}\n"
        "kube: {kubeconfig: /etc/kube.conf}\nstatus: {qps: 5}\n"
    )
    s = load_hub_settings(
        path,
        environ={"CLOUDHUB_STATUS__QPS": "7.5", "CLOUDHUB_LISTEN__QUIC": "false", "OTHER": "x"},
        overrides={"listen.websocket_port": "9443"},
    )
    assert s.listen.quic_port == 8443 and s.listen.websocket_port == 9443
    assert s.listen.quic is False
    assert s.status.qps == 7.5
    assert s.kube.mode == "kubeconfig" and s.kube.kubeconfig == pathlib.Path("/etc/kube.conf")


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"listen.quic_port": 70000}, "listen.quic_port"),
        ({"listen.quic_max_datagram_size": 1000}, "listen.quic_max_datagram_size"),
        ({"listen.quic_max_datagram_size": 20000}, "listen.quic_max_datagram_size"),
        ({"listen.quic_loopback_datagram_size": 100}, "listen.quic_loopback_datagram_size"),
        ({"nodes.lease_interval": 0}, "nodes.lease_interval"),
        ({"nodes.lease_interval": 50}, "nodes.lease_interval"),
        # 38 s * 1.05 = 39.9 s fits a 40 s Lease; 38.5 s * 1.05 does not
        ({"nodes.lease_interval": 38.5}, "nodes.lease_interval"),
        ({"nodes.lease_jitter": -0.1}, "nodes.lease_jitter"),
        ({"nodes.lease_jitter": 0.5}, "nodes.lease_jitter"),
        ({"ha.shutdown_reconnect_rate": 0}, "ha.shutdown_reconnect_rate"),
        ({"ha.shutdown_spread_max": -1}, "ha.shutdown_spread_max"),
        ({"ha.shutdown_spread_max": 301}, "ha.shutdown_spread_max"),
        ({"status.qps": "fast"}, "status.qps"),
        ({"session.heartbeat_interval": 90}, "session.heartbeat_interval"),
        ({"listen.quic": False, "listen.websocket": False}, "listen.websocket"),
        ({"kube.in_cluster": True, "kube.kubeconfig": "/k"}, "kube.in_cluster"),
        ({"observability.log_format": "xml"}, "observability.log_format"),
        ({"nodes.typo": 1}, "nodes.typo"),
    ],
)
def test_bad_values_name_their_key(overrides: dict, key: str) -> None:
    with pytest.raises(SettingsError) as info:
        load_hub_settings(overrides=overrides)
    assert info.value.key == key


def test_every_setting_documents_itself() -> None:
    for info in describe(HubSettings):
        assert info.help, f"{info.key} has no help text"
