"""The asyncio side of day-2 streams (protocol/transport/streams.py), two endpoints wired
back to back in memory: back-pressure, window growth end to end, waiters."""

from __future__ import annotations

import asyncio

import pytest

from protocol.errors import ErrorCode, UsageError
from protocol.stream_messages import MAX_STREAM_CHUNK
from protocol.streams import DEFAULT_WINDOW, DataReceived, StreamMux
from protocol.transport.streams import Stream, StreamEndpoint
from tests.waiting import eventually


class Pair:
    """A hub endpoint and an edge endpoint; messages cross after ``delay`` loop turns (a
    credit round trip that is not free), both ways, in order."""

    def __init__(self, serve, *, hub_window: int = DEFAULT_WINDOW, max_window=None) -> None:
        self.delay = 0
        self.wire: list = []
        self.hub = StreamEndpoint(
            StreamMux(hub=True, window=hub_window, max_window=max_window), self._to_edge
        )
        self.edge = StreamEndpoint(StreamMux(hub=False), self._to_hub, serve)

    async def _cross(self, target: StreamEndpoint, message) -> None:
        for _ in range(self.delay):
            await asyncio.sleep(0)  # one loop turn each: the wire's latency, not a wait
        target.feed(message)

    async def _to_edge(self, message) -> None:
        await self._cross(self.edge, message)

    async def _to_hub(self, message) -> None:
        await self._cross(self.hub, message)

    async def aclose(self) -> None:
        await self.edge.aclose()
        await self.hub.aclose()


async def test_a_slow_reader_holds_at_most_the_window_and_the_writer_waits() -> None:
    written = 0

    async def serve(stream: Stream) -> None:
        nonlocal written
        while True:
            await stream.write(1, b"x" * MAX_STREAM_CHUNK)
            written += MAX_STREAM_CHUNK

    pair = Pair(serve, hub_window=4 * MAX_STREAM_CHUNK, max_window=64 * MAX_STREAM_CHUNK)
    pair.delay = 3
    try:
        stream = await pair.hub.open("logs", "ns", "pod", "c", {"follow": True})
        await eventually(lambda: written >= 4 * MAX_STREAM_CHUNK, what="a window written")
        for _ in range(50):  # the writer is stuck: nobody reads
            await asyncio.sleep(0)
        assert written <= 4 * MAX_STREAM_CHUNK
        assert pair.hub.mux.window_of(stream.id) == 4 * MAX_STREAM_CHUNK  # never grew
        for reads in range(1, 41):  # a slow reader: one chunk, then the writer catches up
            event = await stream.read()
            assert isinstance(event, DataReceived)
            for _ in range(20):
                await asyncio.sleep(0)
            assert written <= (4 + reads) * MAX_STREAM_CHUNK  # the window, never more
        assert pair.hub.mux.window_of(stream.id) == 4 * MAX_STREAM_CHUNK
        await stream.reset(ErrorCode.INTERNAL, "done")
    finally:
        await pair.aclose()


async def test_a_fast_reader_over_a_slow_credit_round_trip_grows_the_window() -> None:
    async def serve(stream: Stream) -> None:
        while True:
            await stream.write(1, b"x" * MAX_STREAM_CHUNK)

    pair = Pair(serve, hub_window=2 * MAX_STREAM_CHUNK, max_window=16 * MAX_STREAM_CHUNK)
    pair.delay = 5
    try:
        stream = await pair.hub.open("logs", "ns", "pod", "c", {"follow": True})
        for _ in range(200):
            assert isinstance(await stream.read(), DataReceived)
        assert pair.hub.mux.window_of(stream.id) == 16 * MAX_STREAM_CHUNK
        await stream.reset(ErrorCode.INTERNAL, "done")
        assert pair.hub.mux.grown == 0  # the growth went back with the stream
    finally:
        await pair.aclose()


async def test_the_end_wakes_every_writer_waiting_for_credit_and_every_waiter() -> None:
    started = asyncio.Event()
    outcomes: list[str] = []

    async def serve(stream: Stream) -> None:
        async def writer(channel: int) -> None:
            try:
                while True:
                    await stream.write(channel, b"y" * 1000)
            except ConnectionError:
                outcomes.append(f"writer {channel} ended")

        started.set()
        await asyncio.gather(writer(1), writer(2), stream.wait_ended())
        outcomes.append("waiter woke")

    pair = Pair(serve, hub_window=MAX_STREAM_CHUNK, max_window=MAX_STREAM_CHUNK)
    try:
        stream = await pair.hub.open("exec", "ns", "pod", "c", {"command": ["cat"]})
        await started.wait()
        for _ in range(50):  # nobody reads: both writers wait for credit
            await asyncio.sleep(0)
        assert outcomes == []
        await stream.reset(ErrorCode.INTERNAL, "the caller went away")
        await eventually(lambda: len(outcomes) == 3, what="both writers and the waiter")
        assert sorted(outcomes) == ["waiter woke", "writer 1 ended", "writer 2 ended"]
    finally:
        await pair.aclose()


async def test_a_cancelled_read_leaves_the_stream_readable() -> None:
    go = asyncio.Event()

    async def serve(stream: Stream) -> None:
        await go.wait()
        await stream.write(1, b"late")
        await stream.close(0)

    pair = Pair(serve)
    try:
        stream = await pair.hub.open("logs", "ns", "pod", "c", {})
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(stream.read(), 0.05)  # a caller giving up
        go.set()
        event = await stream.read()
        assert isinstance(event, DataReceived) and event.data == b"late"
        assert await stream.read() is None
        assert (await stream.wait_ended()).exit_code == 0
    finally:
        await pair.aclose()


async def test_read_joined_takes_what_is_queued_in_one_piece_and_returns_its_credit() -> None:
    done, written = asyncio.Event(), asyncio.Event()

    async def serve(stream: Stream) -> None:
        for n in range(6):
            await stream.write(1, bytes([n]) * 1000)
        await stream.write(2, b"err")  # another channel: not joined with the output
        await stream.write(1, b"last", eof=True)
        written.set()  # each write returned once the hub had it queued (no wire delay)
        await done.wait()

    pair = Pair(serve, hub_window=4 * MAX_STREAM_CHUNK)
    try:
        stream = await pair.hub.open("logs", "ns", "pod", "c", {})
        await asyncio.wait_for(written.wait(), 10)
        first = await stream.read_joined(2500)
        assert first == DataReceived(stream.id, 1, b"\0" * 1000 + b"\1" * 1000, False)
        rest = await stream.read_joined(1 << 20)
        assert rest == DataReceived(
            stream.id, 1, b"".join(bytes([n]) * 1000 for n in range(2, 6)), False
        )
        assert await stream.read_joined(1 << 20) == DataReceived(stream.id, 2, b"err", False)
        assert await stream.read_joined(1 << 20) == DataReceived(stream.id, 1, b"last", True)
        with pytest.raises(UsageError, match="of 0 received"):  # every byte was accounted
            pair.hub.mux.consumed(stream.id, 1)
        done.set()
        assert await stream.read_joined(1 << 20) is None
    finally:
        await pair.aclose()
