"""A board whose clock is hours behind (no RTC), end to end (issue 15 item 6b): a real
agent process on a clock 3 hours behind (libfaketime) cannot verify the hub's serving
certificate; its log and ``edgeagent status`` name this node's clock against a
certificate's notBefore and say NTP, not only the raw TLS error; once the clock is right
(an NTP step while it runs) it connects by itself."""

from __future__ import annotations

import pytest

from tests.edgeagent.certs.conftest import command
from tests.edgeagent.hublink.fleet import eventually
from tests.faketime import FakeClock

pytestmark = pytest.mark.slow


async def test_an_agent_hours_behind_names_its_clock_and_recovers_when_it_is_set(fleet, tmp_path):
    clock = FakeClock(tmp_path, -3 * 3600)
    agent = fleet.agent("edge-late", start=False)
    agent.start_env = clock.env()
    agent.start()

    def named() -> list[str]:
        return [
            line
            for line in agent.log().splitlines()
            if " ERROR " in line and "this node's clock reads" in line
        ]

    [line, *_] = await eventually(named, "an ERROR naming this node's clock", timeout=60)
    assert "before this node's certificate (issued by the hub)'s notBefore" in line
    assert "hours behind" in line and "timedatectl set-ntp true" in line
    session = await eventually(
        lambda: agent.hub_session().get("state") == "clock-wrong" and agent.hub_session(),
        "hub.session state clock-wrong",
    )
    assert "NTP" in session["reason"]
    shown = await command(
        "edgeagent", "status", "--config", str(agent.config), "--state-dir", str(agent.state)
    )
    assert shown.returncode == 0, shown.stderr
    assert "clock-wrong" in shown.stdout and "hours behind" in shown.stdout
    assert "TLS interception" not in agent.log() and "join --renew" not in agent.log()

    clock.set(0)  # NTP steps the clock right while the agent runs
    await eventually(
        lambda: agent.hub_session().get("state") == "connected", "connected once the clock is right"
    )
