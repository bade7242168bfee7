"""Admission control (issue 18 item 4): while the hub's event loop lags, new sessions are
turned away with OVERLOADED and a full-jitter retry_after; once it has caught up they are
served. The lag is real: the hub's loop is blocked by CPU-bound work, as a burst of
handshakes would block it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import pytest

from cloudhub.ha import owner_of
from cloudhub.ha.overload import LoopLag
from cloudhub.kube import LEASES, KubeClient
from protocol.errors import CloseCode
from protocol.transport.errors import SessionRejected
from tests.clock import ManualClock
from tests.cloudhub.ha.conftest import ha_settings, websocket_agent
from tests.cloudhub.hub.conftest import BOTH, DEADLINE, Hubs, eventually
from tests.sim.fleet import node_credentials


async def test_a_lagging_hub_refuses_new_sessions_with_overloaded_then_serves_them(
    hubs: Hubs, unique
) -> None:
    hub = await hubs.start({"ha.overload_lag": 0.05, "ha.overload_retry_max": 7.0})
    assert hub.overload is not None
    agent = hubs.agent(unique("edge-busy"), start=False)
    blocked = asyncio.Event()

    def busy() -> None:
        time.sleep(0.4)  # CPU-bound work on the hub's loop: the load, not a wait
        blocked.set()

    asyncio.get_running_loop().call_soon(busy)
    await blocked.wait()
    with pytest.raises(SessionRejected) as refused:
        await agent.dial()
    assert refused.value.code is CloseCode.OVERLOADED
    assert "event loop is" in refused.value.reason
    assert refused.value.retry_after is not None and 0 <= refused.value.retry_after <= 7.0
    assert hub.overload.refused == 1
    # The lag is the worst of the last second: once it has passed, the node is served.
    agent.start()
    await agent.wait_for(lambda: agent.synced, DEADLINE)


def test_the_lag_is_the_worst_sample_of_the_hold_window() -> None:
    clock = ManualClock(100.0)
    lag = LoopLag(0.1, 5.0, hold=1.0, monotonic=clock, jitter=lambda: 0.5)
    lag.sample(0.3)
    clock.advance(0.5)
    lag.sample(0.01)
    assert lag.lag == pytest.approx(0.3)
    clock.advance(0.6)
    assert lag.lag == pytest.approx(0.01)


async def test_a_refusal_spreads_its_retry_after_over_the_whole_range() -> None:
    draws = iter([0.0, 0.999])
    lag = LoopLag(0.1, 10.0, jitter=lambda: next(draws))
    lag.sample(1.0)
    first, second = await lag.admit(None), await lag.admit(None)
    assert first is not None and second is not None
    assert (first.retry_after, round(second.retry_after or 0, 2)) == (0.0, 9.99)
    lag.sample(-0.5)  # a timer that fired early counts as no lag


@pytest.mark.parametrize(
    "kwargs",
    [
        {"threshold": 0, "retry_max": 1},
        {"threshold": 0.1, "retry_max": 0},
        {"threshold": 0.1, "retry_max": 1, "interval": 0},
        {"threshold": 0.1, "retry_max": 1, "interval": 0.5, "hold": 0.1},
    ],
)
def test_bad_limits_are_refused(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        LoopLag(**kwargs)


async def test_a_real_agent_comes_back_after_the_hubs_retry_after_not_its_own_backoff(
    hubs: Hubs, unique
) -> None:
    # The agent's dialer with a 30 s back-off: were the hub's retry_after only a floor under
    # its own draw, the second dial would come up to 30 s later; it comes within the
    # hub's 0.5 s spread (plus the dial itself).
    hub = await hubs.start({"ha.overload_lag": 0.05, "ha.overload_retry_max": 0.5})
    assert hub.overload is not None and hub.websocket_port
    name = unique("edge-retry")
    credentials = node_credentials(hubs.pki.ca, name)
    served = asyncio.Event()

    async def on_link(link) -> None:
        served.set()
        await link.wait_closed()

    uplink = websocket_agent(hub.websocket_port, name, credentials, on_link)
    blocked = asyncio.Event()

    def busy() -> None:
        time.sleep(0.4)  # CPU-bound work on the hub's loop: the load, not a wait
        blocked.set()

    asyncio.get_running_loop().call_soon(busy)
    await blocked.wait()
    task = asyncio.get_running_loop().create_task(uplink.run())
    try:
        await asyncio.wait_for(served.wait(), 8.0)
        assert hub.overload.refused >= 1
    finally:
        await uplink.close()
        await asyncio.wait_for(task, 5.0)


def _slow_claims(hub) -> tuple[asyncio.Event, asyncio.Event]:
    """Make the hub's ownership claims wait (the API slow to answer them): the first
    event is set when a claim starts, setting the second lets claims go on."""
    claim = hub.ownership.claim
    claiming = asyncio.Event()
    release = asyncio.Event()

    async def held_claim(node: str):
        claiming.set()
        await release.wait()
        return await claim(node)

    hub.ownership.claim = held_claim
    return claiming, release


@pytest.mark.parametrize("cluster", BOTH, indirect=True)
async def test_claims_beyond_the_limit_are_turned_away_with_overloaded_then_served(
    hubs: Hubs, namespace: str, unique
) -> None:
    """A reconnect storm queues at the agents, not in the API: with
    ``ha.claims_in_flight_max`` ownership claims in flight, the next node is turned away
    with OVERLOADED and a retry_after within ``ha.claims_retry_max``; once the claims are
    written it is served. (The 10,000-node hub_ha ramp, unbounded, sent a claim per arrival
    to the API at once: its queue delayed all three replicas' own Lease renewals past their
    fencing deadline.)"""
    hub = await hubs.start(
        ha_settings(namespace, "replica-a", **{
            "ha.claims_in_flight_max": 1, "ha.claims_retry_max": 3.0,
        })
    )  # fmt: skip
    assert hub.ownership is not None
    claiming, release = _slow_claims(hub)
    first = hubs.agent(unique("edge-first"))
    await asyncio.wait_for(claiming.wait(), DEADLINE)
    second = hubs.agent(unique("edge-second"), start=False)
    with pytest.raises(SessionRejected) as refused:
        await second.dial()
    assert refused.value.code is CloseCode.OVERLOADED
    assert "node ownership claims are being written" in refused.value.reason
    assert refused.value.retry_after is not None and 0 <= refused.value.retry_after <= 3.0
    assert hub.claims_refused == 1
    release.set()
    await first.wait_for(lambda: first.synced, DEADLINE)
    second.start()
    await second.wait_for(lambda: second.synced, DEADLINE)
    assert hub.claims_refused == 1


async def _arrival(port: int) -> bool:
    """Open a TCP connection to the hub's WebSocket port and send nothing: whether the
    hub keeps it (pending TLS) rather than dropping it on arrival."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        with contextlib.suppress(asyncio.TimeoutError):
            return await asyncio.wait_for(reader.read(1), 0.5) != b""  # EOF: dropped
        return True  # held open, waiting for our ClientHello
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def test_at_the_claims_bound_arrivals_are_shed_before_tls(
    hubs: Hubs, namespace: str, unique
) -> None:
    """While the claims are at ``ha.claims_in_flight_max`` the hub would turn a session
    away after TLS; ``listen.max_pending_handshakes_busy`` drops arrivals beyond it before
    TLS instead (the 10,000-node ramp paid ~3 handshakes per node served for refusals).
    Once the claims are written, arrivals are held again."""
    hub = await hubs.start(
        ha_settings(namespace, "replica-a", **{
            "ha.claims_in_flight_max": 1, "listen.max_pending_handshakes_busy": 1,
        })
    )  # fmt: skip
    assert hub.ownership is not None and hub.websocket_port
    claiming, release = _slow_claims(hub)
    first = hubs.agent(unique("edge-first"))
    await asyncio.wait_for(claiming.wait(), DEADLINE)
    assert hub._turning_away()
    # One slot while busy: a connection holds it; the next is dropped on arrival.
    _reader, writer = await asyncio.open_connection("127.0.0.1", hub.websocket_port)
    try:
        shed = hub.metrics.registry.get_sample_value
        before = shed("edgefleet_hub_handshakes_shed_total")
        assert not await _arrival(hub.websocket_port)
        assert shed("edgefleet_hub_handshakes_shed_total") == before + 1
    finally:
        writer.close()
        await writer.wait_closed()
    release.set()
    await first.wait_for(lambda: first.synced, DEADLINE)
    assert not hub._turning_away()
    async with contextlib.AsyncExitStack() as stack:  # the full bound again: two held
        held = await asyncio.open_connection("127.0.0.1", hub.websocket_port)
        stack.callback(held[1].close)
        assert await _arrival(hub.websocket_port)


@pytest.mark.parametrize("cluster", BOTH, indirect=True)
async def test_an_agent_that_leaves_during_its_claim_leaves_the_node_unowned(
    hubs: Hubs, kube: KubeClient, namespace: str, unique, caplog
) -> None:
    """An agent whose handshake times out while its claim is in flight: the claim is
    written, then given back at once, so that the node is not held by a replica without a
    session (every other replica would turn its agent away as served there). Seen in the
    10,000-node ramp as "WebSocket link handler failed ... accept is not allowed for a
    server in state CLOSED", with the node's Lease left owned."""
    caplog.set_level(logging.INFO)
    hub = await hubs.start(ha_settings(namespace, "replica-a"))
    assert hub.ownership is not None
    claim = hub.ownership.claim
    claiming = asyncio.Event()
    release = asyncio.Event()
    claimed = asyncio.Event()

    async def held_claim(node: str):
        claiming.set()
        await release.wait()
        try:
            return await claim(node)
        finally:
            claimed.set()

    hub.ownership.claim = held_claim  # type: ignore[method-assign]
    name = unique("edge-gone")
    agent = hubs.agent(name, start=False)
    dial = asyncio.ensure_future(agent.dial())
    await asyncio.wait_for(claiming.wait(), DEADLINE)
    dial.cancel()  # the agent gives up and closes its connection
    with contextlib.suppress(asyncio.CancelledError):
        await dial

    async def gone() -> bool:
        return any(
            "left while its session was being admitted" in r.getMessage() for r in caplog.records
        )

    release.set()
    await asyncio.wait_for(claimed.wait(), DEADLINE)
    await eventually(gone, "the abandoned admission logged")

    async def unowned() -> bool:
        lease = await kube.get(LEASES, name, namespace)
        return not owner_of(lease)

    await eventually(unowned, "the node's Lease released")
    assert not hub.ownership.holds(name)
    assert not [r for r in caplog.records if "link handler failed" in r.getMessage()]
