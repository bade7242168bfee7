"""``edgeagent join --renew`` while the agent runs (issue 15 item 15), with a real hub and
a real agent process waiting at its production back-off cap (60 s) after its certificate
expired: the join's new files wake it within seconds (it watches them), the join waits for
the new session and says so instead of "Start the agent"; with the agent stopped, the
advice is to start it; one running without the session address must be restarted."""

from __future__ import annotations

import pathlib
import re
import time

from edgeagent.join import next_step
from edgeagent.store import Store, agent_running
from tests.edgeagent.certs.conftest import PKIHub, command
from tests.edgeagent.certs.test_hublink_certs import write_expired_pki
from tests.edgeagent.hublink.fleet import AgentProcess, eventually


async def test_join_renew_wakes_the_running_agent_and_says_so(
    pki_hub: PKIHub, tmp_path: pathlib.Path
) -> None:
    agent = AgentProcess(tmp_path / "pi-renew", "pi-renew", "process", None, None)
    # what a join left long ago: the config with the session address, the files
    agent.config.write_text(f"log_level: INFO\nnode_name: pi-renew\nhub:\n  url: {pki_hub.url}\n")
    # offline longer than its certificate lived: it expired
    write_expired_pki(agent.state / "pki", pki_hub.pki.ca.authority, "pi-renew")
    agent.sets = (*agent.sets, "hub.backoff_cap=60")  # the production cap
    agent.start()
    try:
        await eventually(
            lambda: "expired" in agent.hub_session().get("reason", ""), "the local refusal", 60
        )
        assert agent.hub_session()["state"] == "no-credentials"
        await eventually(
            lambda: re.search(r"reconnecting to the hub in 6\d\.\d s", agent.log()), "the cap"
        )
        assert agent_running(agent.state / "store.db")

        token, _ = await pki_hub.pki.tokens.create(ttl=3600)
        started = time.monotonic()
        renewed = await command(
            "edgeagent", "join", "--renew", "--token", token, "--config", str(agent.config),
            "--state-dir", str(agent.state), "--hub", pki_hub.join_address,
            "--ca-cert-hash", pki_hub.pki.ca.ca_hash, "--wait", "30",
        )  # fmt: skip
        took = time.monotonic() - started
        assert renewed.returncode == 0, renewed.stderr
        assert "The running agent connected to the hub with the new certificate over" in (
            renewed.stdout
        ), renewed.stdout
        assert "systemctl enable" not in renewed.stdout
        assert took < 30, took  # well inside the 60 s back-off it was waiting out
        assert agent.hub_session()["state"] == "connected"
        assert "certificate files changed; dialling the hub now" in agent.log()
        assert pki_hub.session("pi-renew") is not None
    except BaseException:
        print(f"===== agent log =====\n{agent.log()[-20000:]}")
        raise
    finally:
        await agent.stop()
        await agent.remove_everything()

    assert not agent_running(agent.state / "store.db")  # stopped: the kernel dropped the lock
    # a token bound to the node replaces its still-valid certificate (a new key)
    token, _ = await pki_hub.pki.tokens.create(ttl=3600, node_name="pi-renew")
    stopped = await command(
        "edgeagent", "join", "--renew", "--token", token, "--config", str(agent.config),
        "--state-dir", str(agent.state),
    )  # fmt: skip
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.strip().endswith("Start the agent: systemctl enable --now edgeagent")


def test_the_advice_for_a_running_agent_without_the_new_address(tmp_path: pathlib.Path) -> None:
    record = {"sessionUrl": "quic://hub.example:7443", "joinedAt": time.time()}
    store_path = tmp_path / "store.db"
    assert "Start the agent" in next_step((store_path, "", False), record, wait=0)
    restart = next_step((store_path, "", True), record, wait=0)
    assert "no hub address" in restart and "systemctl restart edgeagent" in restart
    moved = next_step((store_path, "quic://old:7443", True), record, wait=0)
    assert "quic://old:7443" in moved and "systemctl restart edgeagent" in moved
    same = (store_path, record["sessionUrl"], True)
    assert "within a second" in next_step(same, record, wait=0)
    # waiting, the agent never reports the new session: say so, and where to look
    with Store.open(store_path) as store:
        store.set_state("hub.session", {"state": "refused", "since": "2020-01-01T00:00:00+00:00"})
    clock = iter([0.0, 0.0, 100.0])
    late = next_step(same, record, wait=5, echo=lambda line: None, monotonic=lambda: next(clock))
    assert "has not connected within 5 s" in late and "refused" in late
    assert "journalctl -u edgeagent" in late
