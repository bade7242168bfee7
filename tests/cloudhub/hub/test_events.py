"""The hub's own Events stay bounded: repeats are one Event with a count (issue 15 item 17).

A node that reconnects over and over used to leave two new Events per session in the API
forever (5,760 after 2,880 sessions). The hub now correlates them as client-go does, so
whichever API it bridges to holds one ``EdgeConnected`` and one ``EdgeDisconnected`` per
node, each with the number of times it happened.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from cloudhub.events import EventRecorder
from cloudhub.kube import EVENTS, KubeClient, TokenBucket
from cloudhub.observability.metrics import HubMetrics
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


class _HeldPatches:
    """The test's API client with each PATCH of an Event held until the test lets it go,
    so that the recorder's writes can be seen in flight (the API itself is real)."""

    def __init__(self, client: KubeClient) -> None:
        self._client = client
        self.in_flight = 0
        self.most_in_flight = 0
        self.held = asyncio.Event()
        self.release = asyncio.Event()

    def __getattr__(self, name: str):
        return getattr(self._client, name)

    async def patch(self, *args, **kwargs):
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        self.held.set()
        try:
            await self.release.wait()
            return await self._client.patch(*args, **kwargs)
        finally:
            self.in_flight -= 1


@pytest.mark.parametrize("cluster", BOTH, indirect=True)
async def test_repeats_of_one_event_are_written_in_order(kube: KubeClient, unique) -> None:
    """A repeat recorded while the previous PATCH of its Event is on the wire is written
    after it, never beside it: with two workers, counts 11 and 12 in flight at once could
    land 12 then 11 (seen in CI against the kube-apiserver: the Event stayed at 11)."""
    held = _HeldPatches(kube)
    recorder = EventRecorder(held, TokenBucket(1000, 1000), HubMetrics(), workers=2)
    name = unique("edge-order")
    task = asyncio.create_task(recorder.run())
    try:
        recorder.node_event(name, "Normal", "EdgeConnected", "connected")

        async def created() -> bool:
            return len(await node_events(kube, name)) == 1

        await eventually(created, "the first Event created")
        recorder.node_event(name, "Normal", "EdgeConnected", "connected")  # count 2
        await asyncio.wait_for(held.held.wait(), DEADLINE)  # its PATCH is on the wire
        recorder.node_event(name, "Normal", "EdgeConnected", "connected")  # count 3
        recorder.node_event(name, "Normal", "EdgeConnected", "connected")  # count 4
        held.release.set()

        async def counted() -> bool:
            (event,) = await node_events(kube, name)
            return event["count"] == 4

        await eventually(counted, "the Event counted 4")
        assert held.most_in_flight == 1
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
