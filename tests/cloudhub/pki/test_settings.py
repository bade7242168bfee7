"""PKI settings: defaults, checks naming the key, loading as the hub's ``pki`` group."""

from __future__ import annotations

import pytest

from cloudhub.pki import PKISettings
from cloudhub.settings import load_hub_settings
from protocol.errors import SettingsError


def test_defaults() -> None:
    s = PKISettings()
    assert (s.join_port, s.session_port, s.namespace) == (7444, 7443, "edgefleet")
    assert s.node_cert_lifetime == 30 * 86400
    assert s.join_address == "localhost:7444"
    assert PKISettings(server_names=("fd00::1",)).join_address == "[fd00::1]:7444"
    assert PKISettings(public_address="hub.example.com").join_address == "hub.example.com"


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"join_port": 70000}, "join_port"),
        ({"node_cert_lifetime": 0}, "node_cert_lifetime"),
        ({"ca_cert_file": "/x.crt"}, "ca_key_file"),
        ({"server_names": ()}, "server_names"),
        ({"server_names": ("hub_example",)}, "server_names"),
        ({"namespace": "Not-A-Namespace"}, "namespace"),
        ({"token_retention": -1}, "token_retention"),
    ],
)
def test_bad_values_name_the_key(overrides: dict, key: str) -> None:
    with pytest.raises(SettingsError) as caught:
        PKISettings(**overrides)
    assert caught.value.key == key


def test_loaded_as_the_hubs_pki_group() -> None:
    settings = load_hub_settings(
        environ={
            "CLOUDHUB_PKI__SERVER_NAMES": "hub.example.com,10.0.0.7",
            "CLOUDHUB_PKI__NODE_CERT_LIFETIME": "604800",
        },
        overrides={"pki.join_port": 9444},
    )
    assert settings.pki.server_names == ("hub.example.com", "10.0.0.7")
    assert settings.pki.node_cert_lifetime == 604800.0
    assert settings.pki.join_port == 9444
    with pytest.raises(SettingsError) as caught:
        load_hub_settings(overrides={"pki.join_port": -1})
    assert caught.value.key == "pki.join_port"
