"""Issue 15 item 1 with the real agent process and the real hub: an edge message over the
hub's frame limit (hub at 1 MiB, agent at its 4 MiB default). On main the hub closed every
session with FRAME_TOO_LARGE, the agent resent the same message at every connect (92
sessions in 60 s) and none of the 10 messages behind it arrived. Now the limits are agreed
at the handshake and the message goes in chunks below them: one session, all delivered."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from cloudhub.kube import CONFIGMAPS, EVENTS, PODS, KubeClient
from edgeagent.errors import StoreError
from edgeagent.store import Store
from tests.edgeagent.hublink.fleet import ROOT, eventually
from tests.edgeagent.hublink.objects import configmap, pod
from tests.slowlink import SlowLink

pytestmark = pytest.mark.slow

MIB = 1024 * 1024


def event(node: str, reason: str, message: str) -> dict:
    return {
        "ref": {"kind": "Node", "namespace": "", "name": node, "uid": node},
        "type": "Warning",
        "reason": reason,
        "message": message,
        "timestamp": time.time(),
        "count": 1,
    }


def queue_offline(agent, huge_bytes: int, node: str) -> None:
    """What the agent queued while offline: a ``huge_bytes`` event first, ten behind it."""
    store = Store.open(agent.state / "store.db")
    try:
        store.outbox_append("event", event(node, "Huge", "h" * huge_bytes))
        for i in range(10):
            store.outbox_append("event", event(node, f"Small{i}", f"small {i}"))
    finally:
        store.close()


def node_events(kube: KubeClient, node: str, *reasons: str):
    """A check for :func:`eventually`: the Node's Events once the ten small ones and
    ``reasons`` are all there, else None."""
    wanted = set(reasons) | {f"Small{i}" for i in range(10)}

    async def check() -> list[dict] | None:
        selector = f"involvedObject.kind=Node,involvedObject.name={node}"
        mine, _ = await kube.list(EVENTS, "default", field_selector=selector)
        return mine if wanted <= {e["reason"] for e in mine} else None

    return check


def sessions_opened(hub) -> float:
    """Sessions the hub opened, both transports."""
    sample = hub.metrics.registry.get_sample_value
    return sum(
        sample("edgefleet_hub_sessions_opened_total", {"transport": t}) or 0.0
        for t in ("quic", "websocket")
    )


@pytest.mark.parametrize("transport", ["quic", "websocket"])
async def test_an_event_over_the_hub_frame_limit_neither_blocks_nor_storms(
    fleet, kube: KubeClient, transport: str
) -> None:
    await fleet.hub.stop()
    hub = await fleet.hub.start(**{"session.max_frame_size": 1 * MIB})
    node = f"edge-big-{transport}"
    agent = fleet.agent(node, start=False, sets=(f"hub.transports={transport}",))
    queue_offline(agent, 2 * MIB, node)
    agent.start()
    await eventually(
        node_events(kube, node, "Huge"), "the big event and the 10 behind it as Events", 60
    )
    await eventually(
        lambda: agent.read_store(lambda s: s.outbox_depth() == 0), "the outbox drained"
    )
    opened = sessions_opened(hub)
    assert opened == 1.0, f"{opened} sessions: the agent reconnected"


@pytest.mark.parametrize("transport", ["quic", "websocket"])
async def test_configmaps_converge_over_a_slow_lossy_link_in_one_session(
    fleet, kube: KubeClient, namespace: str, transport: str
) -> None:
    """Issue 15 item 2 with the real agent: three 40 KiB ConfigMaps over a 16 kB/s link
    with 2% datagram loss, the agent's liveness timeout 1.5 s (each ConfigMap alone takes
    2.5 s on the link). On main the agent declared the hub dead inside the first one and
    resent from scratch every session; now bytes count as liveness and its pings pass
    between the chunks: all three arrive in the first session."""
    node = f"edge-slow-{transport}"
    names = [f"big-{i}" for i in range(3)]
    uids = []
    for i, name in enumerate(names):
        made = await kube.create(
            CONFIGMAPS, configmap(name, namespace, {"blob": chr(97 + i) * (40 * 1024)})
        )
        uids.append(made["metadata"]["uid"])
    volumes = [{"name": n, "configMap": {"name": n}} for n in names]
    await kube.create(PODS, pod("reader", namespace, node, "sleep 3600", volumes=volumes))
    # The relay listens on loopback but stands for a real path: both ends use that
    # path's datagram size, not the loopback interface's.
    await fleet.hub.stop()
    await fleet.hub.start(**{"listen.quic_loopback_datagram_size": 0})
    async with SlowLink(fleet.hub.port, rate=16_000, loss=0.02) as relay:
        agent = fleet.agent(
            node,
            start=False,
            sets=(
                f"hub.transports={transport}",
                "hub.liveness_timeout=1.5",
                "hub.quic_loopback_datagram_size=0",
            ),
        )
        agent.hub_url = f"quic://127.0.0.1:{relay.port}"
        agent.start()

        def held() -> bool:
            try:
                return bool(agent.read_store(lambda s: all(u in s.inventory() for u in uids)))
            except StoreError:  # the agent is still creating its store
                return False

        await eventually(held, "the three ConfigMaps in the agent's store", timeout=90)
        sample = fleet.hub.hub.metrics.registry.get_sample_value
        opened = sample("edgefleet_hub_sessions_opened_total", {"transport": transport})
        assert opened == 1.0, f"{opened} sessions: the link dropped"
        assert relay.sent("down") > 3 * 40 * 1024


def edgeagent_status(agent) -> str:
    """``edgeagent status`` (the real command) on the agent's state directory."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, "-m", "edgeagent", "status", "--state-dir", str(agent.state)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("transport", ["quic", "websocket"])
async def test_an_event_over_the_message_limit_is_dead_lettered_and_the_session_stays(
    fleet, kube: KubeClient, transport: str
) -> None:
    """Issue 15 item 1, the agent side: a 9 MiB event is over the 8 MiB message limit both
    sides agree on, so it cannot go even in chunks. Before, ``send()`` raised
    ``MessageTooLarge`` and the agent closed with GOING_AWAY ("edge outbox failure") and
    redialled, with the same message first every time, and none of the 10 behind it was
    delivered. Now it is dead-lettered in the store (one attempt here:
    ``hub.dead_letter_attempts=1``) with a Warning MessageTooLarge Event on the Node, the
    ten behind it arrive, the session stays, and ``edgeagent status`` says so."""
    node = f"edge-dead-{transport}"
    agent = fleet.agent(
        node, start=False, sets=(f"hub.transports={transport}", "hub.dead_letter_attempts=1")
    )
    queue_offline(agent, 9 * MIB, node)
    agent.start()
    events = await eventually(
        node_events(kube, node, "MessageTooLarge"), "the 10 small events and the Warning", 60
    )
    assert "Huge" not in {e["reason"] for e in events}
    (warning,) = [e for e in events if e["reason"] == "MessageTooLarge"]
    assert warning["type"] == "Warning"
    assert "event Huge" in warning["message"] and "8388608" in warning["message"]
    await eventually(
        lambda: agent.read_store(lambda s: s.outbox_depth() == 0), "the outbox drained"
    )
    dead = agent.read_store(lambda s: s.dead_letters())
    assert [(d.kind, d.body["reason"], d.attempts) for d in dead] == [("event", "Huge", 1)]
    assert dead[0].size > 9 * MIB and len(dead[0].body["message"]) == 9 * MIB
    opened = sessions_opened(fleet.hub.hub)
    assert opened == 1.0, f"{opened} sessions: the agent reconnected"
    assert "edge outbox failure" not in agent.log()
    shown = edgeagent_status(agent)
    assert "dead letters: 1 message(s)" in shown, shown
    assert "event  Node " + node in shown, shown


async def test_an_unsendable_event_is_tried_once_per_session_up_to_the_bound(
    fleet, kube: KubeClient
) -> None:
    """The default bound (``hub.dead_letter_attempts`` = 3): one failed attempt per session,
    kept in the outbox (and counted in the store) until the third session, then
    dead-lettered with its Warning (the hub is restarted to end each session)."""
    node = "edge-bound"
    agent = fleet.agent(node, start=False)
    store = Store.open(agent.state / "store.db")
    try:
        huge = store.outbox_append("event", event(node, "Huge", "h" * (9 * MIB)))
    finally:
        store.close()
    agent.start()
    selector = f"involvedObject.kind=Node,involvedObject.name={node}"

    async def has_event(reason: str) -> bool:
        mine, _ = await kube.list(EVENTS, "default", field_selector=selector)
        return reason in {e["reason"] for e in mine}

    for attempt in (1, 2):
        await eventually(
            lambda n=attempt: agent.read_store(
                lambda s: s.send_attempts(huge) == n and s.dead_letter_count() == 0
            ),
            f"attempt {attempt} counted, the event still queued",
        )
        await fleet.hub.stop()
        await fleet.hub.start()
        assert not await has_event("MessageTooLarge")
    await eventually(
        lambda: agent.read_store(lambda s: [d.attempts for d in s.dead_letters()] == [3]),
        "the event dead-lettered at the third session",
    )
    await eventually(lambda: has_event("MessageTooLarge"), "the Warning on the Node")
    await eventually(
        lambda: agent.read_store(lambda s: s.outbox_depth() == 0), "the Warning acknowledged"
    )
