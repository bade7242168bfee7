"""The hub's clock as the agent keeps it (issue 15 items 5 and 6b): a skew measured at a
welcome holds while the wall clock moves with the monotonic clock and is dropped when the
wall clock is stepped; the node certificate is refused locally only when both clocks say
it expired; a clock behind a certificate's notBefore is named with both times and NTP."""

from __future__ import annotations

import logging
import pathlib
import time

import pytest

from edgeagent.certs import HubClock
from edgeagent.certs.clock import clock_behind, iso
from edgeagent.credentials import FileCredentials, certificate_validity
from edgeagent.errors import CredentialsError
from edgeagent.settings import AgentSettings
from tests.clock import ManualClock
from tests.edgeagent.hublink.fleet import write_node_pki


def clocks() -> tuple[ManualClock, ManualClock]:
    return ManualClock(1_800_000_000.0), ManualClock(1000.0)  # wall, monotonic


def test_the_skew_holds_while_both_clocks_move_together(caplog) -> None:
    wall, mono = clocks()
    clock = HubClock(wall=wall, monotonic=mono)
    assert clock.skew is None and clock.now() == wall()  # nothing measured yet
    with caplog.at_level(logging.WARNING):
        assert clock.measure(wall() + 1800) == -1800  # the board is 30 minutes behind
    assert "behind by 1800 s" in caplog.text and "NTP" in caplog.text
    wall.advance(3600)
    mono.advance(3600)
    assert clock.skew == -1800 and clock.now() == wall() + 1800
    # NTP slews (at most 500 ppm): 1 s over an hour is drift, not a step
    wall.advance(3601)
    mono.advance(3600)
    assert clock.skew == -1800 and clock.steps == 0


@pytest.mark.parametrize("step", [1800.0, -600.0])
def test_a_stepped_wall_clock_drops_the_skew(step: float, caplog) -> None:
    wall, mono = clocks()
    clock = HubClock(wall=wall, monotonic=mono)
    clock.measure(wall() + 1800)
    mono.advance(10)
    wall.advance(10 + step)  # NTP corrects the clock (or an operator's date -s)
    with caplog.at_level(logging.WARNING):
        assert clock.now() == wall()  # ours alone: the old skew described another clock
    assert clock.skew is None and clock.steps == 1
    [line] = [r.getMessage() for r in caplog.records if "stepped" in r.getMessage()]
    assert ("forward" if step > 0 else "back") in line and "1800 s skew" in line
    # the next welcome measures again
    assert clock.measure(wall() - 5, limit=60) == 5 and clock.skew == 5


def _settings(tmp_path: pathlib.Path) -> AgentSettings:
    return AgentSettings(node_name="pi-c", state_dir=tmp_path / "state")


def test_the_certificate_is_refused_locally_only_when_both_clocks_say_expired(
    tmp_path: pathlib.Path, pki_ca
) -> None:
    write_node_pki(tmp_path / "state" / "pki", pki_ca.ca, "pi-c")
    _, not_after = certificate_validity((tmp_path / "state" / "pki" / "node.crt").read_bytes())
    valid, expired = lambda: not_after - 143, lambda: not_after + 143
    # the corrected clock alone says expired (a stale skew): dial, the hub judges
    assert FileCredentials(_settings(tmp_path), wall_clock=valid, hub_clock=expired)()
    # our clock alone says expired (ours is ahead of the hub's): dial, the hub judges
    assert FileCredentials(_settings(tmp_path), wall_clock=expired, hub_clock=valid)()
    with pytest.raises(CredentialsError) as info:
        FileCredentials(_settings(tmp_path), wall_clock=expired, hub_clock=expired)()
    assert "expired" in str(info.value) and "join --renew" in str(info.value)


def test_a_clock_behind_a_certificate_is_named_with_both_times() -> None:
    now = time.time()
    text = clock_behind(now - 3 * 3600, now - 300, "the hub's serving certificate")
    assert text is not None
    assert iso(now - 3 * 3600) in text and iso(now - 300) in text
    assert "notBefore" in text and "2.9 hours behind" in text and "timedatectl set-ntp" in text
    assert clock_behind(now, now - 300, "x") is None
    assert "not a time" not in iso(now)
    assert "s since the epoch" in iso(1e20)  # out of range: still a message
