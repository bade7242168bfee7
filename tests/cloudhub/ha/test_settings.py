"""The ``ha`` settings group and replica Lease names: every bad value is refused with
its key; identities become valid Lease names."""

from __future__ import annotations

import pytest

from cloudhub.ha import HASettings, replica_lease_name
from cloudhub.settings import load_hub_settings
from protocol.errors import SettingsError


def test_defaults_are_off_and_sized_for_a_two_second_renewal() -> None:
    s = load_hub_settings().ha
    assert s == HASettings()
    assert not s.enabled
    assert (s.replica_lease_duration, s.replica_renew_interval) == (6, 2.0)


def test_settings_come_from_the_environment_like_every_group() -> None:
    s = load_hub_settings(
        environ={"CLOUDHUB_HA__ENABLED": "true", "CLOUDHUB_HA__IDENTITY": "hub-0"}
    ).ha
    assert s.enabled and s.identity == "hub-0"


@pytest.mark.parametrize(
    ("values", "key"),
    [
        ({"namespace": "Not_A_Namespace"}, "namespace"),
        ({"namespace": "x" * 64}, "namespace"),
        ({"replica_lease_duration": 0}, "replica_lease_duration"),
        ({"replica_renew_interval": 0}, "replica_renew_interval"),
        ({"replica_lease_duration": 4, "replica_renew_interval": 3}, "replica_renew_interval"),
        ({"overload_lag": -1}, "overload_lag"),
        ({"overload_retry_max": 0}, "overload_retry_max"),
        ({"peer_port": -1}, "peer_port"),
        ({"peer_port": 65536}, "peer_port"),
        ({"peer_address": "10.0.0.1:10351"}, "peer_address"),
        ({"peer_address": "wss://hub-0"}, "peer_address"),
        ({"peer_address": "hub 0"}, "peer_address"),
    ],
)
def test_bad_values_are_refused_with_their_key(values: dict, key: str) -> None:
    with pytest.raises(SettingsError) as caught:
        HASettings(**values)
    assert caught.value.key == key


@pytest.mark.parametrize(
    ("identity", "name"),
    [
        ("edgefleet-hub-7d9f-abcde", "edgefleet-hub-edgefleet-hub-7d9f-abcde"),
        ("Build_Host.local-4242", "edgefleet-hub-build-host-local-4242"),
        ("x" * 80, "edgefleet-hub-" + "x" * 49),
    ],
)
def test_replica_lease_names_are_valid_kubernetes_names(identity: str, name: str) -> None:
    assert replica_lease_name(identity) == name
    assert len(name) <= 63


def test_an_identity_with_no_letter_or_digit_is_refused() -> None:
    with pytest.raises(ValueError, match="no letter or digit"):
        replica_lease_name("..__..")


def test_a_negative_quic_receive_buffer_is_refused() -> None:
    with pytest.raises(SettingsError) as caught:
        load_hub_settings(overrides={"listen.quic_receive_buffer": -1})
    assert "quic_receive_buffer" in str(caught.value)
