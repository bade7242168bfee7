"""Admission: the per-source bound on pending handshakes, on its own; what both listeners
do with a link once its handshake is done."""

from __future__ import annotations

import asyncio

import pytest

from protocol.errors import CloseCode
from protocol.events import Closed
from protocol.transport import connect_quic, connect_websocket, serve_quic, serve_websocket
from protocol.transport.admission import PendingLimit
from tests.protocol.transport.conftest import hello, welcome


def test_a_source_gets_its_limit_and_its_slots_back() -> None:
    limit = PendingLimit(2)
    first = limit.admit(("10.0.0.1", 5000))
    second = limit.admit(("10.0.0.1", 5001))
    assert first is not None and second is not None
    assert limit.admit(("10.0.0.1", 5002)) is None  # a third at once: refused
    assert limit.admit(("10.0.0.2", 5000)) is not None  # another address is not affected
    assert limit.refused == 1
    first()
    first()  # released twice (upgrade done, then the end): counted once
    third = limit.admit(("10.0.0.1", 5003))
    assert third is not None
    assert limit.admit(("10.0.0.1", 5004)) is None
    second()
    third()
    assert len(limit) == 1  # 10.0.0.1 forgotten once nothing is pending; 10.0.0.2 holds one


def test_the_total_bounds_all_sources_together() -> None:
    limit = PendingLimit(2, total=3)
    held = [limit.admit(("10.0.0.1", 5000)), limit.admit(("10.0.0.2", 5000))]
    held.append(limit.admit(("10.0.0.3", 5000)))
    assert all(release is not None for release in held)
    assert limit.pending == 3
    assert limit.admit(("10.0.0.4", 5000)) is None  # a new address, but three pending
    assert (limit.refused_total, limit.refused) == (1, 0)
    held[0]()
    held[0]()  # twice: counted once
    assert limit.pending == 2
    assert limit.admit(("10.0.0.4", 5001)) is not None


def test_while_busy_the_smaller_total_bounds_arrivals() -> None:
    busy = [False]
    limit = PendingLimit(10, total=4, busy=lambda: busy[0], busy_total=1)
    first = limit.admit(("10.0.0.1", 5000))
    assert first is not None
    busy[0] = True
    assert limit.admit(("10.0.0.2", 5000)) is None  # one pending: the busy bound
    assert limit.refused_total == 1
    first()
    assert limit.admit(("10.0.0.2", 5001)) is not None  # busy still lets one through
    busy[0] = False
    assert limit.admit(("10.0.0.3", 5000)) is not None  # back to total
    assert limit.pending == 2


@pytest.mark.parametrize(("limit", "total"), [(0, None), (1, 0)])
def test_the_limits_must_be_positive(limit: int, total: int | None) -> None:
    with pytest.raises(ValueError, match=">= 1"):
        PendingLimit(limit, total)
    with pytest.raises(ValueError, match="busy_total must be >= 1"):
        PendingLimit(1, busy=lambda: True, busy_total=0)


@pytest.mark.parametrize("transport", ["quic", "websocket"])
async def test_a_failing_handler_closes_its_link_internal_error_on_both_listeners(
    transport: str, pki_ca, caplog: pytest.LogCaptureFixture
) -> None:
    """serve_link, shared by both listeners: a handler that raises after accepting is
    logged and its link closed with INTERNAL_ERROR; the listener keeps serving."""
    calls: list[str] = []

    async def handler(link) -> None:
        calls.append(link.transport)
        link.accept(welcome(link))
        raise RuntimeError("bug in the hub")

    serve = serve_quic if transport == "quic" else serve_websocket
    connect = connect_quic if transport == "quic" else connect_websocket
    server = await serve(handler, "127.0.0.1", 0, credentials=pki_ca.server)
    try:
        for _ in range(2):  # the second: the listener is still serving
            link = await connect(
                "127.0.0.1",
                server.port,
                credentials=pki_ca.client,
                hello=hello(),
                server_name="localhost",
            )

            async def closed(link=link) -> Closed:
                async for event in link:
                    if isinstance(event, Closed):
                        return event
                raise AssertionError(f"no Closed event: {link.close_event}")

            event = await asyncio.wait_for(closed(), 10)
            assert (event.code, event.reason, event.by_peer) == (
                CloseCode.INTERNAL_ERROR,
                "handler failed",
                True,
            )
            await link.close()
    finally:
        await asyncio.wait_for(server.aclose(), 10)
    assert calls == [transport, transport]
    name = "QUIC" if transport == "quic" else "WebSocket"
    failures = [r for r in caplog.records if "link handler failed (node edge-1)" in r.message]
    assert [r.message.split()[0] for r in failures] == [name, name]
    assert all(r.exc_info and isinstance(r.exc_info[1], RuntimeError) for r in failures)
