"""The hub's own Events stay bounded: repeats are one Event with a count (issue 15 item 17).

A node that reconnects over and over used to leave two new Events per session in the API
forever (5,760 after 2,880 sessions). The hub now correlates them as client-go does, so
whichever API it bridges to holds one ``EdgeConnected`` and one ``EdgeDisconnected`` per
node, each with the number of times it happened.
"""

from __future__ import annotations

import pytest

from cloudhub.kube import EVENTS, KubeClient
from tests.cloudhub.hub.conftest import BOTH, DEADLINE, Hubs, eventually

ROUNDS = 12


async def node_events(kube: KubeClient, node: str) -> list[dict]:
    items, _ = await kube.list(EVENTS, "default", field_selector=f"involvedObject.name={node}")
    return items


@pytest.mark.parametrize("cluster", BOTH, indirect=True)
async def test_a_flapping_node_has_one_event_per_kind_with_its_count(
    hubs: Hubs, kube: KubeClient, unique
) -> None:
    hub = await hubs.start()
    name = unique("edge-flap")
    agent = hubs.agent(name, start=False)
    connected = 0

    def count() -> None:
        nonlocal connected
        connected += 1

    hub.registry.on_connect.append(lambda session: count() if session.node == name else None)
    for round_ in range(1, ROUNDS + 1):
        agent.start()
        await agent.wait_for(lambda: agent.synced, DEADLINE)
        assert connected == round_
        await agent.stop()

    async def counted() -> bool:
        events = await node_events(kube, name)
        totals: dict[str, int] = {}
        for e in events:
            totals[e["reason"]] = totals.get(e["reason"], 0) + int(e.get("count") or 1)
        return totals.get("EdgeConnected") == ROUNDS and totals.get("EdgeDisconnected") == ROUNDS

    await eventually(counted, f"{ROUNDS} connects and disconnects counted")
    events = await node_events(kube, name)
    by_reason = {}
    for e in events:
        by_reason.setdefault(e["reason"], []).append(e)
    (connect,) = by_reason["EdgeConnected"]  # one object, not twelve
    (disconnect,) = by_reason["EdgeDisconnected"]
    assert connect["count"] == ROUNDS and connect["type"] == "Normal"
    assert connect["message"] == "Edge agent connected over websocket"
    assert connect["series"]["count"] == ROUNDS
    assert connect["lastTimestamp"] >= connect["firstTimestamp"]
    assert disconnect["message"] == (
        "Edge agent disconnected (GOING_AWAY: agent stopping, closed by the agent)"
    )
