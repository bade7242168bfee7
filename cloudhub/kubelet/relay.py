"""Day-2 streams across hub replicas: a ``kubectl exec``/``logs``/``port-forward`` that
reaches replica A for a node that replica B serves is relayed to B, replica to replica over
mutual TLS (issue 18 item 2).

- **Who and where.** The node's owner is the annotation on its Lease
  (:meth:`cloudhub.ha.NodeOwnership.owner`, one read per stream); the owner's address is the
  ``edgefleet.io/peer-address`` annotation on its replica Lease (``ha.peer_address`` and
  ``ha.peer_port``), which every replica watches.
- **Transport.** One WebSocket (``websockets``) per relayed stream, over TLS 1.3 where both
  ends present a peer certificate of the hub CA (:mod:`cloudhub.ha.peers`); a client that is
  not a replica (a node's certificate, another CA) is refused at the handshake or with close
  code 1008. Frames are msgpack arrays:

  - A → B, first: ``{"node", "operation", "namespace", "pod", "container", "params",
    "user"}``; B answers ``{"ok": true, "id": <B's stream id>}`` or ``{"ok": false,
    "offline": bool, "error": text}`` (B's own refusal, e.g. ``node X is offline since …``).
  - A → B: ``["w", channel, data, eof]`` (write), ``["z", width, height]`` (resize),
    ``["r", code, reason]`` (reset).
  - B → A: ``["d", channel, data, eof]`` (data), ``["e", exit_code, code, reason]`` (end;
    ``code`` ``null`` for an orderly end).

- **Bounds.** B reads the node's stream only as fast as the WebSocket drains, and A reads
  the WebSocket only as fast as its caller reads (``websockets``' receive queue of
  ``max_queue`` frames, then TCP): the node's stream window still bounds what is buffered.
  A relayed stream is opened on B as a local one, so B's limits and metrics apply there;
  A counts it too (``edgefleet_hub_streams_total``), with the same results.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import msgpack
import websockets
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve

from cloudhub.ha.peers import is_peer_certificate
from cloudhub.kubelet.errors import NodeOffline, RelayRefused, StreamUnavailable
from protocol.errors import ErrorCode
from protocol.stream_messages import StreamOpen
from protocol.streams import DataReceived, StreamEnded
from protocol.transport import TLSCredentials
from protocol.transport.tls import client_ssl_context, server_ssl_context

__all__ = ["RemoteStream", "StreamRelay"]

log = logging.getLogger(__name__)

OPEN_TIMEOUT = 10.0
"""Seconds for the TLS handshake, the upgrade and B's answer to the open."""
MAX_FRAME = 1024 * 1024
"""Largest relay frame, bytes (a stream's chunks are far smaller)."""
_POLICY = 1008  # WebSocket close code: policy violation (not a replica, a bad frame)


def _pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def _unpack(frame: str | bytes) -> Any:
    if not isinstance(frame, bytes):
        raise ValueError("relay frames are binary")
    return msgpack.unpackb(frame, raw=False)


class RemoteStream:
    """A stream on another replica's node session, used as a local
    :class:`~protocol.transport.streams.Stream` on the hub side (read, write, resize,
    reset, wait_ended; ``id``, ``open``, ``ended``)."""

    def __init__(self, ws: Any, open_: StreamOpen, owner: str) -> None:
        self.id = open_.stream_id
        self.open = open_
        self.owner = owner
        self.ended: StreamEnded | None = None
        self._ws = ws
        self._done = asyncio.Event()

    def _end(self, event: StreamEnded) -> None:
        if self.ended is None:
            self.ended = event
        self._done.set()

    async def read(self) -> DataReceived | None:
        """The next data from the node; ``None`` once the stream ended."""
        while self.ended is None:
            try:
                frame = _unpack(await self._ws.recv())
                kind = frame[0]
                if kind == "d":
                    _, channel, data, eof = frame
                    return DataReceived(self.id, int(channel), bytes(data), bool(eof))
                if kind == "e":
                    _, exit_code, code, reason = frame
                    self._end(
                        StreamEnded(
                            self.id,
                            exit_code=exit_code,
                            code=None if code is None else ErrorCode(code),
                            reason=str(reason),
                        )
                    )
                    await self._ws.close()
                    return None
                raise ValueError(f"unknown relay frame {kind!r}")
            except websockets.ConnectionClosed:
                self._end(
                    StreamEnded(
                        self.id,
                        code=ErrorCode.INTERNAL,
                        reason=f"node offline: the relay to hub replica {self.owner} ended",
                    )
                )
            except (ValueError, TypeError, IndexError, msgpack.UnpackException) as exc:
                log.warning("relay from hub replica %s: bad frame (%s)", self.owner, exc)
                await self.reset(ErrorCode.INVALID_MESSAGE, f"bad relay frame: {exc}")
        return None

    async def _send(self, frame: list[Any]) -> None:
        if self.ended is not None:
            raise ConnectionResetError(f"stream {self.id} ended: {self.ended.reason}")
        try:
            await self._ws.send(_pack(frame))
        except websockets.ConnectionClosed as exc:
            raise ConnectionResetError(f"the relay to hub replica {self.owner} ended") from exc

    async def write(self, channel: int, data: bytes, *, eof: bool = False) -> None:
        """Send ``data`` on ``channel`` to the node (``eof``: the channel's end).

        Raises:
            ConnectionError: the stream ended meanwhile.
        """
        await self._send(["w", channel, bytes(data), eof])

    async def resize(self, width: int, height: int) -> None:
        """The caller's terminal is ``width`` columns by ``height`` rows."""
        if self.ended is None:
            await self._send(["z", width, height])

    async def reset(self, code: ErrorCode, reason: str = "") -> None:
        """Abort the stream; tells the owner replica, which resets the node's stream."""
        if self.ended is not None:
            return
        try:
            await self._ws.send(_pack(["r", int(code), reason]))
        except websockets.ConnectionClosed:
            pass
        self._end(StreamEnded(self.id, code=code, reason=reason, by_peer=False))
        await self._ws.close()

    async def wait_ended(self) -> StreamEnded:
        """Wait until the stream is over."""
        await self._done.wait()
        assert self.ended is not None
        return self.ended


class StreamRelay:
    """Both ends of the relay for one replica.

    Args:
        streams: this replica's :class:`~cloudhub.kubelet.streams.HubStreams` (B's side
            opens on them).
        owner_of: ``async (node) -> identity`` of the other live replica serving ``node``,
            ``""`` for none (:meth:`cloudhub.ha.NodeOwnership.owner`).
        address_of: ``(identity) -> "host:port"`` that replica published, ``""`` for none.
        credentials: this replica's peer credentials (called for each new connection).
        host, port: where B's side listens (port 0: any free one).
    """

    def __init__(
        self,
        streams: Any,
        owner_of: Callable[[str], Awaitable[str]],
        address_of: Callable[[str], str],
        credentials: Callable[[], TLSCredentials],
        *,
        host: str,
        port: int,
    ) -> None:
        self.streams = streams
        self._owner_of = owner_of
        self._address_of = address_of
        self._credentials = credentials
        self.host = host
        self.port = port
        self._server: Any = None
        self.refused = 0
        """Connections refused because the client was no replica."""

    # -- B: serve streams of this replica's nodes to the others ------------------------------

    async def start(self) -> int:
        """Listen; returns the bound port."""
        context = server_ssl_context(self._credentials())
        self._server = await serve(
            self._serve, self.host, self.port, ssl=context, max_size=MAX_FRAME, ping_interval=20
        )
        sockets = list(self._server.sockets)
        self.port = sockets[0].getsockname()[1] if sockets else self.port
        log.info("stream relay for the other replicas on port %d", self.port)
        return self.port

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, ws: ServerConnection) -> None:
        sslobj = ws.transport.get_extra_info("ssl_object")
        peer = is_peer_certificate(sslobj.getpeercert(binary_form=True) if sslobj else None)
        if not peer:
            self.refused += 1
            log.warning("stream relay: refused a client that is no hub replica")
            await ws.close(_POLICY, "not a hub replica")
            return
        try:
            request = _unpack(await asyncio.wait_for(ws.recv(), OPEN_TIMEOUT))
            args = [str(request[k]) for k in ("node", "operation", "namespace", "pod")]
            container, user = str(request.get("container", "")), str(request.get("user", ""))
            params = request.get("params") or {}
            if not isinstance(params, dict):
                raise ValueError("params must be a map")
        except (ValueError, TypeError, KeyError, msgpack.UnpackException) as exc:
            log.warning("stream relay: bad open from hub replica %s (%s)", peer, exc)
            await ws.close(_POLICY, "bad open")
            return
        except (TimeoutError, websockets.ConnectionClosed):
            return
        node, operation, namespace, pod = args
        try:
            stream = await self.streams.open(
                node, operation, namespace, pod, container, params, user=user, relay=False
            )
        except StreamUnavailable as exc:
            offline = isinstance(exc, NodeOffline)
            await ws.send(_pack({"ok": False, "offline": offline, "error": str(exc)}))
            await ws.close()
            return
        log.info("relaying stream %d on node %s for hub replica %s", stream.id, node, peer)
        await ws.send(_pack({"ok": True, "id": stream.id}))
        await self._pump(ws, stream, peer)

    async def _pump(self, ws: ServerConnection, stream: Any, peer: str) -> None:
        upstream = asyncio.ensure_future(self._upstream(ws, stream, peer))
        cancelled = True
        try:
            while True:
                event = await stream.read()
                if event is None:
                    break
                if isinstance(event, DataReceived):
                    await ws.send(_pack(["d", event.channel, event.data, event.eof]))
            ended = stream.ended
            assert ended is not None
            code = None if ended.code is None else int(ended.code)
            await ws.send(_pack(["e", ended.exit_code, code, ended.reason]))
            cancelled = False
        except websockets.ConnectionClosed:
            pass
        finally:
            upstream.cancel()
            await asyncio.gather(upstream, return_exceptions=True)
            if stream.ended is None:
                await stream.reset(ErrorCode.INTERNAL, f"hub replica {peer} went away")
            self.streams.finished(stream, cancelled=cancelled)
            await ws.close()

    async def _upstream(self, ws: ServerConnection, stream: Any, peer: str) -> None:
        try:
            async for raw in ws:
                frame = _unpack(raw)
                kind = frame[0]
                if kind == "w":
                    _, channel, data, eof = frame
                    await stream.write(int(channel), bytes(data), eof=bool(eof))
                elif kind == "z":
                    await stream.resize(int(frame[1]), int(frame[2]))
                elif kind == "r":
                    await stream.reset(ErrorCode(frame[1]), str(frame[2]))
                    return
                else:
                    raise ValueError(f"unknown relay frame {kind!r}")
        except (ValueError, TypeError, IndexError, msgpack.UnpackException) as exc:
            log.warning("stream relay: bad frame from hub replica %s (%s)", peer, exc)
            await stream.reset(ErrorCode.INVALID_MESSAGE, f"bad relay frame: {exc}")
            await ws.close(_POLICY, "bad frame")
        except ConnectionError:
            pass  # the node's stream ended: the downstream side sends the end
        except websockets.ConnectionClosed:
            pass

    # -- A: reach a node another replica serves ---------------------------------------------

    async def locate(self, node: str) -> tuple[str, str] | None:
        """``(owner, "host:port")`` of the other replica serving ``node``, or ``None``."""
        try:
            owner = await self._owner_of(node)
        except Exception as exc:  # an API failure: the node counts as unreachable here
            log.warning("cannot read node %s's owner (%s)", node, exc)
            return None
        address = self._address_of(owner) if owner else ""
        return (owner, address) if address else None

    async def open(
        self,
        where: tuple[str, str],
        node: str,
        operation: str,
        namespace: str,
        pod: str,
        container: str,
        params: dict[str, Any],
        user: str,
    ) -> RemoteStream:
        """Open a stream on ``node`` at replica ``where`` (from :meth:`locate`).

        Raises:
            RelayRefused: the owner refused (``offline``: it no longer has the node).
            ConnectionError: the owner could not be reached.
        """
        owner, address = where
        context = client_ssl_context(self._credentials())
        context.check_hostname = False  # dialled by pod IP: the peer check below names it
        try:
            ws = await asyncio.wait_for(
                connect(f"wss://{address}/", ssl=context, max_size=MAX_FRAME, ping_interval=20),
                OPEN_TIMEOUT,
            )
        except (OSError, TimeoutError, ssl.SSLError, websockets.WebSocketException) as exc:
            raise ConnectionError(f"cannot reach hub replica {owner} at {address}: {exc}") from exc
        try:
            sslobj = ws.transport.get_extra_info("ssl_object")
            der = sslobj.getpeercert(binary_form=True) if sslobj else None
            if is_peer_certificate(der) != owner:
                raise ConnectionError(f"{address} is not hub replica {owner}")
            request = {
                "node": node,
                "operation": operation,
                "namespace": namespace,
                "pod": pod,
                "container": container,
                "params": params,
                "user": user,
            }
            await ws.send(_pack(request))
            answer = _unpack(await asyncio.wait_for(ws.recv(), OPEN_TIMEOUT))
            if not answer.get("ok"):
                offline = bool(answer.get("offline"))
                raise RelayRefused(str(answer.get("error", "")), offline=offline)
            opened = StreamOpen(
                stream_id=int(answer["id"]),
                operation=operation,
                namespace=namespace,
                pod=pod,
                container=container,
                window=0,
                params=params,
            )
        except (websockets.ConnectionClosed, TimeoutError, ValueError, KeyError) as exc:
            await ws.close()
            raise ConnectionError(f"hub replica {owner} ended the relay: {exc}") from exc
        except BaseException:
            await ws.close()
            raise
        return RemoteStream(ws, opened, owner)
