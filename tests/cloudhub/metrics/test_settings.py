"""The hub's ``metrics`` settings group: defaults, loading, validation naming the key."""

from __future__ import annotations

import pytest

from cloudhub.metrics import HubMetricsSettings, PressureThresholds
from cloudhub.settings import load_hub_settings
from protocol.errors import SettingsError


def test_defaults_are_kubelets_thresholds() -> None:
    settings = load_hub_settings(overrides={})
    assert settings.metrics.enabled
    assert settings.metrics.thresholds() == PressureThresholds()


def test_flags_and_environment_reach_the_group() -> None:
    settings = load_hub_settings(
        environ={"CLOUDHUB_METRICS__MAX_BATCH_BYTES": "4096"},
        overrides={"metrics.memory_available_ratio": "0.2", "metrics.enabled": "false"},
    )
    assert settings.metrics.max_batch_bytes == 4096
    assert settings.metrics.thresholds().memory_available_ratio == 0.2
    assert not settings.metrics.enabled


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("metrics.nodefs_available_ratio", "1.5"),
        ("metrics.memory_available_bytes", "-1"),
        ("metrics.pressure_transition_period", "-3"),
        ("metrics.max_batch_bytes", "10"),
        ("metrics.aggregated_port", "70000"),
        ("metrics.aggregated_api", "maybe"),
    ],
)
def test_bad_values_name_the_key(key: str, value: str) -> None:
    with pytest.raises(SettingsError) as error:
        load_hub_settings(overrides={key: value})
    assert error.value.key == key


def test_thresholds_follow_the_settings() -> None:
    thresholds = HubMetricsSettings(
        memory_available_bytes=1, imagefs_available_ratio=0.3, pressure_transition_period=0
    ).thresholds()
    assert (thresholds.memory_available_bytes, thresholds.imagefs_available_ratio) == (1, 0.3)
    assert thresholds.transition_period_s == 0
