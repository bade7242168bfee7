"""The asyncio side of day-2 streams: :class:`StreamEndpoint` runs a session's
:class:`protocol.streams.StreamMux` and gives each stream a :class:`Stream` to read and
write with back-pressure.

The session's reader feeds every stream message to :meth:`StreamEndpoint.feed`
(synchronously, in arrival order); a stream's received data waits in its queue, which
holds at most the window the mux granted (the peer cannot send more), and the credit goes
back as the reader takes it. A writer waits while the peer's window is used up, so a slow
``kubectl`` stops the container's output at the edge after one window instead of growing
the hub. ``send`` is the link's (or the agent's uplink's) send coroutine.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from protocol.errors import ErrorCode, UsageError
from protocol.messages import Message
from protocol.stream_messages import MAX_STREAM_CHUNK, StreamOpen
from protocol.streams import (
    DataReceived,
    Resized,
    StreamEnded,
    StreamMux,
    StreamOpened,
    WindowOpened,
)
from protocol.tasks import TaskScope

__all__ = ["Stream", "StreamEndpoint"]

log = logging.getLogger(__name__)

#: ``send(message)``: hand a message to the session (waits under back-pressure).
Send = Callable[[Message], Awaitable[Any]]

SEND_AHEAD = 64 * 1024
"""Bytes of one stream the session's BULK lane may hold before that stream's next data
chunk waits (with ``room``); the lane's streams take turns, so another stream's echo
waits behind one chunk of it, not this much."""


class Stream:
    """One open stream. Read with :meth:`read`, write with :meth:`write`.

    Attributes:
        id: the stream id.
        open: the ``stream_open`` that started it (operation, pod, container, params).
        ended: set once the stream is over, with why.
    """

    # An idle stream is most of what an open ``kubectl exec`` costs the hub, and thousands
    # may be open: no asyncio.Event (each holds a 600-byte deque) and no deque of our own;
    # readers, writers and waiters for the end get a future only while they wait (the
    # readers share one, the writers another: each wake-up releases them all).
    __slots__ = (
        "_ended_waiters",
        "_endpoint",
        "_queue",
        "_reader",
        "_writer",
        "ended",
        "id",
        "open",
    )

    def __init__(self, endpoint: StreamEndpoint, open_: StreamOpen) -> None:
        self.id = open_.stream_id
        self.open = open_
        self.ended: StreamEnded | None = None
        self._endpoint = endpoint
        self._queue: list[DataReceived | Resized] = []  # at most a window of chunks
        self._reader: asyncio.Future[None] | None = None
        self._writer: asyncio.Future[None] | None = None
        self._ended_waiters: list[asyncio.Future[None]] | None = None

    def _push(self, event: DataReceived | Resized) -> None:
        self._queue.append(event)
        self._reader = _wake(self._reader)

    def _window_opened(self) -> None:
        self._writer = _wake(self._writer)

    def _end(self, event: StreamEnded) -> None:
        if self.ended is None:
            self.ended = event
        self._reader = _wake(self._reader)
        self._writer = _wake(self._writer)
        waiters, self._ended_waiters = self._ended_waiters or [], None
        for waiter in waiters:
            _wake(waiter)

    async def read(self) -> DataReceived | Resized | None:
        """The next data (or terminal resize) from the peer; ``None`` once the stream
        ended and everything received was read (see :attr:`ended` for why)."""
        while not self._queue:
            if self.ended is not None:
                return None
            self._reader = _future(self._reader)
            await self._reader
        event = self._queue.pop(0)
        if isinstance(event, DataReceived) and event.data:
            grant = self._endpoint.mux.consumed(self.id, len(event.data))
            if grant is not None:
                await self._endpoint.send_now(grant)
        return event

    async def read_joined(self, max_bytes: int) -> DataReceived | Resized | None:
        """As :meth:`read`, with the data queued behind the first on its channel joined
        into it, up to ``max_bytes`` (at least the first chunk whole): a relay then makes
        one write of what one batch of datagrams brought, not one per 16 KiB chunk."""
        while not self._queue:
            if self.ended is not None:
                return None
            self._reader = _future(self._reader)
            await self._reader
        queue = self._queue
        first = queue[0]
        if not isinstance(first, DataReceived) or not first.data or first.eof:
            return await self.read()
        parts, size, eof, taken = [first.data], len(first.data), False, 1
        for event in queue[1:]:
            if (
                not isinstance(event, DataReceived)
                or event.channel != first.channel
                or size + len(event.data) > max_bytes
            ):
                break
            parts.append(event.data)
            size += len(event.data)
            taken += 1
            if event.eof:
                eof = True
                break
        if taken == 1:
            return await self.read()
        del queue[:taken]
        grant = self._endpoint.mux.consumed(self.id, size)
        if grant is not None:
            await self._endpoint.send_now(grant)
        return DataReceived(self.id, first.channel, b"".join(parts), eof)

    async def write(self, channel: int, data: bytes, *, eof: bool = False) -> None:
        """Send ``data`` on ``channel``, in chunks within the peer's window (waiting for
        credit as needed); ``eof`` marks the channel's end after it.

        Raises:
            ConnectionError: the stream ended meanwhile (``ended`` says why).
        """
        mux, view, sent_eof = self._endpoint.mux, memoryview(data), False
        while view or (eof and not sent_eof):
            if self.ended is not None:
                raise ConnectionResetError(f"stream {self.id} ended: {self.ended.reason}")
            size = min(len(view), MAX_STREAM_CHUNK, mux.credit(self.id))
            if view and size == 0:
                self._writer = _future(self._writer)
                await self._writer
                continue
            room = self._endpoint._room
            if room is not None and size:
                await room(SEND_AHEAD, self.id)  # our own queue short (streams take turns)
                size = min(len(view), MAX_STREAM_CHUNK, mux.credit(self.id))
                if self.ended is not None or size == 0:
                    continue
            last = size == len(view)
            message = mux.data(self.id, channel, bytes(view[:size]), eof=eof and last)
            view = view[size:]
            sent_eof = eof and last
            await self._endpoint.send_now(message)

    async def resize(self, width: int, height: int) -> None:
        """Hub side: the caller's terminal is ``width`` columns by ``height`` rows."""
        if self.ended is None:
            await self._endpoint.send_now(self._endpoint.mux.resize(self.id, width, height))

    async def close(self, exit_code: int | None = None) -> None:
        """Edge side: the stream is complete (after the last :meth:`write`)."""
        if self.ended is None:
            self._end(StreamEnded(self.id, exit_code=exit_code, by_peer=False))
            await self._endpoint.send_now(self._endpoint.mux.close(self.id, exit_code))
            self._endpoint.forget(self.id)

    async def reset(self, code: ErrorCode, reason: str = "") -> None:
        """Abort the stream (cancelled, refused, failed); tells the peer."""
        if self.ended is None:
            self._end(StreamEnded(self.id, code=code, reason=reason, by_peer=False))
            self._endpoint.forget(self.id)
            message = self._endpoint.mux.reset(self.id, code, reason)
            try:
                await self._endpoint.send_now(message)
            except ConnectionError:
                pass  # the session is gone: so is the stream on the other side

    async def wait_ended(self) -> StreamEnded:
        """Wait until the stream is over."""
        if self.ended is None:
            waiter = asyncio.get_running_loop().create_future()
            if self._ended_waiters is None:
                self._ended_waiters = []
            self._ended_waiters.append(waiter)
            await waiter
        assert self.ended is not None
        return self.ended


def _future(waiter: asyncio.Future[None] | None) -> asyncio.Future[None]:
    """The waiter to await: the pending one, or a new one."""
    if waiter is None or waiter.done():
        return asyncio.get_running_loop().create_future()
    return waiter


def _wake(waiter: asyncio.Future[None] | None) -> None:
    """Release whoever awaits ``waiter``; returns ``None``, the slot's next value."""
    if waiter is not None and not waiter.done():
        waiter.set_result(None)
    return None


class StreamEndpoint:
    """A session's streams.

    Args:
        mux: the sans-I/O state (``StreamMux(hub=...)``).
        send: the session's send coroutine; it raises ``ConnectionError`` (or the
            protocol's ``ConnectionClosed``) when the session is gone.
        on_open: edge side: called with every stream the hub opens, as a task this
            endpoint owns (cancelled by :meth:`aclose`).
        room: ``room(max_bytes, stream_id)`` waits until the session's BULK lane holds at
            most that many bytes of the stream (``Link.wait_room``); each data chunk
            waits for it first with :data:`SEND_AHEAD`, so a stream's own queue stays
            short whatever its window.
    """

    def __init__(
        self,
        mux: StreamMux,
        send: Send,
        on_open: Callable[[Stream], Awaitable[None]] | None = None,
        room: Callable[[int], Awaitable[None]] | None = None,
    ) -> None:
        self.mux = mux
        self._send = send
        self._room = room
        self._on_open = on_open
        self._streams: dict[int, Stream] = {}
        self._replies: list[Message] = []
        self._scope = TaskScope()
        self._flushing = False
        self.closed_reason: str | None = None

    def __len__(self) -> int:
        return len(self._streams)

    async def send_now(self, message: Message) -> None:
        """Send one stream message.

        Raises:
            ConnectionResetError: the session is gone.
        """
        if self.closed_reason is not None:
            raise ConnectionResetError(self.closed_reason)
        try:
            await self._send(message)
        except ConnectionError:
            raise
        except Exception as exc:  # the protocol's ConnectionClosed / StateError
            raise ConnectionResetError(f"the session ended: {exc}") from exc

    async def open(
        self,
        operation: str,
        namespace: str,
        pod: str,
        container: str,
        params: dict[str, Any] | None = None,
        *,
        user: str = "",
    ) -> Stream:
        """Hub side: open a stream and send its ``stream_open``.

        Raises:
            UsageError: too many streams on this session.
            ConnectionResetError: the session is gone.
        """
        message = self.mux.open(operation, namespace, pod, container, params, user=user)
        stream = Stream(self, message)
        self._streams[stream.id] = stream
        try:
            await self.send_now(message)
        except BaseException:
            self._streams.pop(stream.id, None)
            self.mux.reset(stream.id, ErrorCode.INTERNAL)
            raise
        return stream

    def forget(self, stream_id: int) -> None:
        self._streams.pop(stream_id, None)

    def feed(self, message: Message) -> None:
        """A stream message from the peer (called synchronously by the session's reader)."""
        events, replies = self.mux.receive(message)
        for event in events:
            cls = event.__class__
            if cls is StreamOpened:
                assert isinstance(event, StreamOpened)
                stream = Stream(self, event.open)
                self._streams[stream.id] = stream
                if self._on_open is None:
                    raise UsageError("an endpoint without on_open cannot accept streams")
                self._scope.create_task(self._run(stream), name=f"stream-{stream.id}")
                continue
            stream = self._streams.get(event.stream_id)
            if stream is None:
                continue
            if cls is DataReceived or cls is Resized:
                stream._push(event)  # type: ignore[arg-type]
            elif cls is WindowOpened:
                stream._window_opened()
            elif cls is StreamEnded:
                assert isinstance(event, StreamEnded)
                if not event.by_peer:
                    log.warning("stream %d reset: %s", event.stream_id, event.reason)
                self._streams.pop(event.stream_id, None)
                stream._end(event)
        if replies:
            self._replies += replies
            if not self._flushing:
                self._flushing = True
                self._scope.create_task(self._flush(), name="stream-replies")

    async def _flush(self) -> None:
        try:
            while self._replies:
                message = self._replies.pop(0)
                try:
                    await self.send_now(message)
                except ConnectionError:
                    self._replies.clear()
        finally:
            self._flushing = False

    async def _run(self, stream: Stream) -> None:
        assert self._on_open is not None
        try:
            await self._on_open(stream)
        except asyncio.CancelledError:
            await asyncio.shield(stream.reset(ErrorCode.INTERNAL, "the node is shutting down"))
            raise
        except Exception as exc:
            log.exception("stream %d (%s) failed", stream.id, stream.open.operation)
            await stream.reset(ErrorCode.INTERNAL, f"{stream.open.operation} failed: {exc}")
        else:
            if stream.ended is None:
                await stream.close()

    def session_ended(self, reason: str) -> None:
        """The session is gone: every stream ends with ``reason``."""
        self.closed_reason = reason
        self.mux.reset_all()
        streams, self._streams = list(self._streams.values()), {}
        for stream in streams:
            stream._end(StreamEnded(stream.id, code=ErrorCode.INTERNAL, reason=reason))

    async def aclose(self) -> None:
        """Cancel the streams' tasks (edge side) and end every stream."""
        if self.closed_reason is None:
            self.session_ended("the session closed")
        await self._scope.aclose()
