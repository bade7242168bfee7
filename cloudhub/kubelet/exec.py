"""``POST /exec/{namespace}/{pod}/{container}`` (kubelet's) and the embedded API's
``/api/v1/namespaces/{namespace}/pods/{pod}/exec``: the caller's SPDY/3.1 connection
(``protocol.spdy.remotecommand``), or its WebSocket with the channel protocols
(``cloudhub.kubelet.wsexec``), joined to an ``exec`` stream on the pod's node.

Query: ``command`` (repeated), ``stdin``, ``stdout``, ``stderr``, ``tty`` (and
``container``) on the API path; kube-apiserver calls them ``input``, ``output``, ``error``
and ``tty`` toward kubelets. Everything that can be refused is refused before the
upgrade, with an HTTP status (``kubectl`` prints it): no upgrade headers (``400``), no
common protocol (``403``), unknown pod or container (``404``/``400``), no command
(``400``), the node offline (``503``, ``node X is offline since …``). After the upgrade the
edge's refusal (no such executable...) or its end comes back as the v4 status on the error
stream, and kubectl exits with the command's exit code.

Data both ways is bounded: the caller's bytes wait in one queue that pauses the socket
past :data:`READ_PAUSE_BYTES`, and the node's output waits for the socket to drain before
the next piece is taken from the stream (whose window then stops the node).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from cloudhub.kubelet.logs import LogRequestError, plain_error, pod_container
from cloudhub.kubelet.streams import HubStreams, StreamUnavailable
from protocol.errors import ErrorCode
from protocol.spdy.connection import SpdyProtocolError
from protocol.spdy.remotecommand import (
    PROTOCOLS,
    Ended,
    Ready,
    RemoteCommandServer,
    Resize,
    Stdin,
    negotiate,
)
from protocol.streams import DataReceived
from protocol.transport.streams import Stream

__all__ = ["SpdyFeeder", "offered_protocols", "serve_exec", "upgrade_to_spdy"]

log = logging.getLogger(__name__)

_TRUE = ("true", "1", "True")
#: Bytes from the caller buffered before its socket is paused.
READ_PAUSE_BYTES = 256 * 1024


class SpdyFeeder:
    """aiohttp's payload parser slot after the upgrade: the connection's bytes, queued.

    One per open exec, attach or port-forward, mostly idle: a list and a future made only
    while the reader waits (an asyncio.Event and a deque hold ~600 bytes each).

    Attributes:
        chunks: what arrived, in order, not yet taken (``None``: the caller's EOF).
        size: bytes in ``chunks``.
        on_data: called (synchronously, from the protocol's ``data_received``) after each
            chunk or the EOF is queued: a consumer that runs only while there is something
            to take (the exec's stdin pump) starts itself from here.
    """

    __slots__ = ("_paused", "_transport", "_waiter", "chunks", "on_data", "size")

    def __init__(self, transport: Any) -> None:
        self.chunks: list[bytes | None] = []
        self.size = 0
        self.on_data: Callable[[], None] | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._transport = transport
        self._paused = False

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        self.chunks.append(bytes(data))
        self.size += len(data)
        self._wake()
        if self.size > READ_PAUSE_BYTES and not self._paused and self._transport is not None:
            self._transport.pause_reading()
            self._paused = True
        if self.on_data is not None:
            self.on_data()
        return False, b""

    def feed_eof(self) -> None:
        self.chunks.append(None)
        self._wake()
        if self.on_data is not None:
            self.on_data()

    async def next(self) -> bytes | None:
        while not self.chunks:
            if self._waiter is None or self._waiter.done():
                self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        chunk = self.chunks.pop(0)
        if chunk is not None:
            self.size -= len(chunk)
            if self._paused and self.size <= READ_PAUSE_BYTES // 2:
                self._transport.resume_reading()
                self._paused = False
        return chunk


#: The API's query names and what kube-apiserver calls them toward kubelets.
_KUBELET_NAMES = {"stdin": "input", "stdout": "output", "stderr": "error", "tty": "tty"}


def _flags(query: Any) -> dict[str, Any]:
    flags = {
        k: query.get(k) in _TRUE or query.get(alias) in _TRUE for k, alias in _KUBELET_NAMES.items()
    }
    flags["command"] = query.getall("command", [])
    return flags


def offered_protocols(request: web.BaseRequest) -> list[str]:
    """The subprotocols a client offers in its ``X-Stream-Protocol-Version`` headers (one
    header each, or comma-separated), in its order of preference."""
    values = request.headers.getall("X-Stream-Protocol-Version", [])
    return [v.strip() for value in values for v in value.split(",") if v.strip()]


async def upgrade_to_spdy(
    request: web.BaseRequest, protocol: str
) -> tuple[web.StreamResponse, SpdyFeeder]:
    """Answer ``101 Switching Protocols`` to SPDY/3.1 with the stream subprotocol
    ``protocol``, then take the connection over from aiohttp's HTTP parser.

    Returns:
        The response sent (the handler returns it once the session is over), and the
        feeder the connection's bytes now go to. The caller closes ``request.transport``
        when the session ends.
    """
    response = web.StreamResponse(
        status=101,
        headers={
            "Connection": "Upgrade",
            "Upgrade": "SPDY/3.1",
            "X-Stream-Protocol-Version": protocol,
        },
    )
    await response.prepare(request)  # type: ignore[arg-type]
    # Sent: nothing reads them again (aiohttp's end of the request only finds the response
    # prepared and writes its EOF), and the connection may stay open for hours: ~0.5 KiB.
    response.headers.clear()
    feeder = SpdyFeeder(request.transport)
    request.protocol.set_parser(feeder)  # type: ignore[attr-defined]
    return response, feeder


def serve_exec(
    request: web.BaseRequest,
    streams: HubStreams,
    find_pod: Callable[[str, str], dict[str, Any] | None],
    namespace: str,
    pod_name: str,
    container: str,
    *,
    user: str,
    operation: str = "exec",
    error: Callable[[int, str], web.Response] = plain_error,
) -> Awaitable[web.StreamResponse]:
    """Answer one exec (or attach) request (see the module docstring): await the result.

    The request's checks are made here, at once; what is awaited is the refusal or the
    session, one coroutine for the whole life of the exec (it may stay open for hours,
    idle: each frame it held cost every open exec a few hundred bytes).
    """
    upgrade = request.headers.get("Upgrade", "").lower()
    if upgrade not in ("spdy/3.1", "websocket"):
        return _answer(
            error(400, "unable to upgrade: missing upgrade headers in request (SPDY/3.1)")
        )
    protocol = negotiate(offered_protocols(request)) if upgrade == "spdy/3.1" else "websocket"
    if protocol is None:
        return _answer(
            error(
                403,
                f"unable to upgrade: unable to negotiate protocol: client supports "
                f"{offered_protocols(request)}, server supports {list(PROTOCOLS)}",
            )
        )
    pod = find_pod(namespace, pod_name)
    if pod is None:
        return _answer(error(404, f'pods "{pod_name}" not found'))
    node = (pod.get("spec") or {}).get("nodeName") or ""
    flags = _flags(request.query)
    try:
        container = pod_container(pod, container)
    except LogRequestError as exc:
        return _answer(error(400, str(exc)))
    if operation == "exec" and not flags["command"]:
        return _answer(error(400, "you must specify at least one command for the container"))
    if not (flags["stdin"] or flags["stdout"] or flags["stderr"]):
        return _answer(error(400, "you must specify at least one of stdin, stdout, stderr"))
    session = _ExecSession(request, streams, node, namespace, pod_name, container)
    return session.serve(protocol, flags, user, operation, error)


async def _answer(response: web.StreamResponse) -> web.StreamResponse:
    return response


class _ExecSession:
    """One exec/attach: :meth:`serve` checks the node, upgrades, waits for the caller's
    channels, opens the node's stream and carries the node's output to the caller, all in
    the handler's task; the caller's bytes go to the node from a pump task that runs only
    while some are waiting (:meth:`_kick`), so an idle exec holds one task, not two."""

    __slots__ = (
        "feeder",
        "pending",
        "pump",
        "pumping",
        "request",
        "server",
        "stream",
        "streams",
        "where",
    )

    def __init__(
        self,
        request: web.BaseRequest,
        streams: HubStreams,
        node: str,
        namespace: str,
        pod: str,
        container: str,
    ) -> None:
        self.request = request
        self.streams = streams
        self.where = (node, namespace, pod, container)
        self.server: RemoteCommandServer | None = None  # once upgraded
        self.feeder: SpdyFeeder | None = None  # once upgraded
        self.stream: Stream | None = None
        self.pending: list[Any] = []  # caller events before the node's stream is open
        self.pump: asyncio.Future[None] | None = None  # the upstream pump, while it runs
        self.pumping = True  # False once the caller's side is over (EOF, reset, failure)

    async def serve(
        self,
        protocol: str,
        flags: dict[str, Any],
        user: str,
        operation: str,
        error: Callable[[int, str], web.Response],
    ) -> web.StreamResponse:
        request, streams = self.request, self.streams
        node, namespace, pod, container = self.where
        if not await streams.reachable(node):
            return error(503, streams.offline_message(node))
        if protocol == "websocket":
            from cloudhub.kubelet.wsexec import serve_websocket

            return await serve_websocket(request, streams, self.where, flags, user, operation)
        response, feeder = await upgrade_to_spdy(request, protocol)
        transport = request.transport
        self.feeder = feeder
        server = self.server = RemoteCommandServer(
            stdin=flags["stdin"],
            stdout=flags["stdout"],
            stderr=flags["stderr"],
            tty=flags["tty"],
            protocol=protocol,
        )
        try:
            # wait until the caller opened every channel it asked for
            while True:
                events = await self._caller_events()
                if events is None:
                    return response
                if any(isinstance(e, Ready) for e in events):
                    self.pending += [e for e in events if not isinstance(e, Ready)]
                    break
                self.pending += events
            del events
            try:
                # the flags are the stream's params (command, stdin, stdout, stderr, tty)
                stream = await streams.open(
                    node, operation, namespace, pod, container, flags, user=user
                )
            except StreamUnavailable as exc:
                server.finish(None, str(exc))
                await self.flush()
                return response
            self.stream = stream
            cancelled = True
            feeder.on_data = self._kick
            self._kick()  # what came with or after the caller's last stream, if anything
            try:
                # the node's output to the caller, then the command's status
                while True:
                    event = await stream.read()
                    if event is None:
                        break
                    if isinstance(event, DataReceived) and event.data:
                        server.write(event.channel, event.data)
                        await self.flush()
                    del event
                ended = stream.ended
                assert ended is not None
                if ended.code is None:
                    server.finish(ended.exit_code if ended.exit_code is not None else 0)
                else:
                    server.finish(None, ended.reason)
                await self.flush()
                cancelled = False
            finally:
                self.pumping = False
                feeder.on_data = None
                pump, self.pump = self.pump, None
                if pump is not None:
                    pump.cancel()
                    await asyncio.gather(pump, return_exceptions=True)
                if stream.ended is None:
                    await stream.reset(ErrorCode.INTERNAL, "the caller went away")
                streams.finished(stream, cancelled=cancelled)
        finally:
            if transport is not None and not transport.is_closing():
                transport.close()
        return response

    async def flush(self) -> None:
        assert self.server is not None
        data = self.server.data_to_send()
        transport = self.request.transport
        if data and transport is not None and not transport.is_closing():
            transport.write(data)
            await self.request.protocol._drain_helper()  # type: ignore[attr-defined]

    async def _caller_events(self) -> list[Any] | None:
        assert self.feeder is not None and self.server is not None
        chunk = await self.feeder.next()
        if chunk is None:
            return None
        try:
            events = self.server.receive_data(chunk)
        except SpdyProtocolError as exc:
            log.warning("exec %s: refused the caller's SPDY: %s", "/".join(self.where[1:]), exc)
            await self.flush()
            return None
        await self.flush()
        return events

    def _kick(self) -> None:
        """Start the upstream pump, unless it runs already or the caller's side is over
        (called as the caller's bytes arrive, and once when the node's stream opens)."""
        # A running pump takes what just arrived before it stops (it checks for more with
        # no await between that check and its end, where it clears ``pump``).
        feeder = self.feeder
        assert feeder is not None
        if self.pump is None and self.pumping and (self.pending or feeder.chunks):
            self.pump = asyncio.ensure_future(self._upstream())

    async def _upstream(self) -> None:
        """The caller's stdin and resizes to the node, until none are waiting (a failure
        other than the stream's end is a bug: asyncio logs it with the task)."""
        stream = self.stream
        assert stream is not None
        events: list[Any] | None
        events, self.pending = self.pending, []
        try:
            while events is not None:
                for event in events:
                    if isinstance(event, Stdin):
                        await stream.write(0, event.data, eof=event.eof)
                    elif isinstance(event, Resize):
                        await stream.resize(event.width, event.height)
                    elif isinstance(event, Ended):
                        self.pumping = False
                        await stream.reset(ErrorCode.INTERNAL, event.reason)
                        return
                if not self.feeder.chunks:  # type: ignore[union-attr]
                    return  # the next bytes start another pump (``_kick``)
                events = await self._caller_events()  # queued: no wait
            self.pumping = False
            await stream.reset(ErrorCode.INTERNAL, "the caller went away")
        except ConnectionError:
            self.pumping = False  # the stream ended: the node's side ends the session
        except BaseException:
            self.pumping = False
            raise
        finally:
            self.pump = None
