"""edgeagent.upgrade.hold: the hold file and the maintenance window."""

from __future__ import annotations

import pathlib

import pytest

from edgeagent.errors import ConfigError
from edgeagent.upgrade import Window, held, hold, parse_window, unhold

MIDNIGHT = 1_700_006_400.0  # 2023-11-15T00:00:00Z


def at(hour: int, minute: int = 0) -> float:
    return MIDNIGHT + hour * 3600 + minute * 60


def test_a_window_within_a_day_and_one_past_midnight() -> None:
    day = parse_window("09:30-17:00")
    assert day == Window(570, 1020)
    assert day.contains(at(9, 30)) and day.contains(at(16, 59))
    assert not day.contains(at(17)) and not day.contains(at(9, 29))
    night = parse_window("22:00-04:00")
    assert night.contains(at(23)) and night.contains(at(3, 59)) and not night.contains(at(12))
    assert parse_window("00:00-00:00").contains(at(12))
    assert parse_window("") is None


@pytest.mark.parametrize("bad", ["24:00-01:00", "9:00-10:00", "09:00", "09:00-10:60", "x"])
def test_a_bad_window_is_a_config_error(bad: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_window(bad)
    assert caught.value.key == "upgrade.window"


def test_hold_and_window_defer_and_unhold_releases(tmp_path: pathlib.Path) -> None:
    window = parse_window("22:00-04:00")
    assert held(tmp_path, None, at(12)) == ""
    assert held(tmp_path, window, at(12)) == "OutsideMaintenanceWindow"
    assert held(tmp_path, window, at(23)) == ""
    hold(tmp_path, "", at(12))
    assert held(tmp_path, window, at(23)) == "Held"
    hold(tmp_path, "audit", at(12))
    assert held(tmp_path, None, at(12)) == "Held: audit"
    assert unhold(tmp_path) is True and unhold(tmp_path) is False
    assert held(tmp_path, None, at(12)) == ""
    (tmp_path / "upgrade" / "hold.json").write_text("[broken")
    assert held(tmp_path, None, at(12)) == "Held"  # a damaged hold still holds
