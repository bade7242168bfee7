"""The ``ha`` settings group and replica Lease names: every bad value is refused with
its key; identities become valid Lease names."""

from __future__ import annotations

import hashlib
import re

import pytest

from cloudhub.ha import HASettings, replica_lease_name
from cloudhub.settings import load_hub_settings
from protocol.errors import SettingsError

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


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
        ({"claims_in_flight_max": 0}, "claims_in_flight_max"),
        ({"claims_retry_max": 0}, "claims_retry_max"),
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


def _sha(identity: str) -> str:
    return hashlib.sha256(identity.encode()).hexdigest()[:8]


@pytest.mark.parametrize(
    ("identity", "name"),
    [
        # a pod name is a DNS-1123 label already: kept as it is
        ("edgefleet-hub-7d9f-abcde", "edgefleet-hub-edgefleet-hub-7d9f-abcde"),
        ("hub-0", "edgefleet-hub-hub-0"),
        # changed by the cleaning: a short SHA-256 of the original appended
        (
            "Build_Host.local-4242",
            f"edgefleet-hub-build-host-local-4242-{_sha('Build_Host.local-4242')}",
        ),
        ("HUB-0", f"edgefleet-hub-hub-0-{_sha('HUB-0')}"),
        ("-hub-0-", f"edgefleet-hub-hub-0-{_sha('-hub-0-')}"),
        # too long: cut, then the suffix
        ("x" * 80, f"edgefleet-hub-{'x' * 40}-{_sha('x' * 80)}"),
        ("a" * 39 + "-b" * 10, f"edgefleet-hub-{'a' * 39}-{_sha('a' * 39 + '-b' * 10)}"),
        ("hübner", f"edgefleet-hub-h-bner-{_sha('hübner')}"),
    ],
)
def test_replica_lease_names_are_valid_kubernetes_names(identity: str, name: str) -> None:
    assert replica_lease_name(identity) == name
    assert len(name) <= 63
    assert _DNS1123_LABEL.fullmatch(name)


def test_identities_that_clean_to_one_text_get_different_leases() -> None:
    names = {
        replica_lease_name(i) for i in ("Hub_0", "hub.0", "hub-0", "HUB 0", "y" * 70, "y" * 71)
    }
    assert len(names) == 6
    assert all(len(n) <= 63 and _DNS1123_LABEL.fullmatch(n) for n in names)


def test_an_identity_with_no_letter_or_digit_is_refused() -> None:
    with pytest.raises(ValueError, match="no letter or digit"):
        replica_lease_name("..__..")


def test_a_negative_quic_receive_buffer_is_refused() -> None:
    with pytest.raises(SettingsError) as caught:
        load_hub_settings(overrides={"listen.quic_receive_buffer": -1})
    assert "quic_receive_buffer" in str(caught.value)
