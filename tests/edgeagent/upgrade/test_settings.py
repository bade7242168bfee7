"""The agent's ``upgrade`` settings group: defaults, loading, bad values."""

from __future__ import annotations

import pytest

from edgeagent.errors import ConfigError
from edgeagent.settings import load_settings


def test_off_by_default_and_set_from_the_environment_and_flags() -> None:
    assert not load_settings(None, env={}).upgrade.enabled
    loaded = load_settings(
        None,
        env={"EDGEAGENT_UPGRADE__ENABLED": "true", "EDGEAGENT_UPGRADE__WINDOW": "22:00-04:00"},
        overrides={"upgrade.prefix": "/opt/edgeagent", "upgrade.max_attempts": "5"},
    )
    group = loaded.upgrade
    assert group.enabled and group.window == "22:00-04:00"
    assert group.prefix == "/opt/edgeagent" and group.max_attempts == 5
    assert group.cache_budget == 256 * 1024 * 1024


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("upgrade.window", "25:00-01:00"),
        ("upgrade.max_attempts", "0"),
        ("upgrade.cache_budget", "0"),
    ],
)
def test_bad_values_are_config_errors(key: str, value: str) -> None:
    with pytest.raises(ConfigError):
        load_settings(None, env={}, overrides={key: value})
