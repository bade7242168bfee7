"""Exec and attach over WebSocket with Kubernetes' channel protocols (what clients other
than kubectl 1.20's SPDY use): ``v4.channel.k8s.io`` / ``channel.k8s.io`` (binary
messages, the first byte the channel: 0 stdin, 1 stdout, 2 stderr, 3 error, 4 resize) and
``v4.base64.channel.k8s.io`` / ``base64.channel.k8s.io`` (text messages, the channel as an
ASCII digit, the data base64). The WebSocket itself is aiohttp's (the HTTP server these
requests arrive on); the channel framing is :func:`decode` and :func:`encode`.

At the end the v4 variants get the command's ``Status`` on channel 3 (kubectl's exit code),
then a normal close. A message on an unknown channel, bad base64 or bad resize JSON
closes the WebSocket with 1008 (policy violation), the stream is reset.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
from typing import Any

from aiohttp import WSMsgType, web

from cloudhub.errors import HubError
from cloudhub.kubelet.streams import HubStreams, StreamUnavailable
from protocol.errors import ErrorCode
from protocol.spdy.remotecommand import exit_status
from protocol.streams import DataReceived
from protocol.transport.streams import Stream

__all__ = ["PROTOCOLS", "ChannelError", "decode", "encode", "serve_websocket"]

log = logging.getLogger(__name__)

PROTOCOLS = (
    "v4.channel.k8s.io",
    "v4.base64.channel.k8s.io",
    "channel.k8s.io",
    "base64.channel.k8s.io",
)
STDIN, STDOUT, STDERR, ERROR, RESIZE = 0, 1, 2, 3, 4


class ChannelError(HubError):
    """A message that breaks the channel protocol."""


def decode(message: bytes | str, *, b64: bool) -> tuple[int, bytes]:
    """``(channel, data)`` of one WebSocket message.

    Raises:
        ChannelError: empty, an unknown channel, or bad base64.
    """
    if not message:
        raise ChannelError("an empty message has no channel")
    if b64:
        text = message if isinstance(message, str) else message.decode("ascii", "replace")
        if text[0] not in "0123456789":  # ASCII: "²".isdigit() is true, int("²") fails
            raise ChannelError(f"channel {text[0]!r} is not a digit")
        channel = int(text[0])
        try:
            data = base64.b64decode(text[1:], validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ChannelError(f"bad base64: {exc}") from None
    else:
        raw = message if isinstance(message, bytes) else message.encode()
        channel, data = raw[0], raw[1:]
    if channel not in (STDIN, RESIZE):
        raise ChannelError(f"a client may not write channel {channel}")
    return channel, data


def encode(channel: int, data: bytes, *, b64: bool) -> bytes | str:
    """One WebSocket message for ``data`` on ``channel``."""
    if b64:
        return str(channel) + base64.b64encode(data).decode("ascii")
    return bytes([channel]) + data


async def serve_websocket(
    request: web.BaseRequest,
    streams: HubStreams,
    where: tuple[str, str, str, str],
    flags: dict[str, Any],
    user: str,
    operation: str,
) -> web.StreamResponse:
    """The WebSocket side of one exec/attach (the checks before the upgrade are done)."""
    ws = web.WebSocketResponse(protocols=PROTOCOLS)
    await ws.prepare(request)  # type: ignore[arg-type]
    protocol = ws.ws_protocol or "channel.k8s.io"
    b64 = "base64" in protocol
    node, namespace, pod, container = where
    params = {k: flags[k] for k in ("command", "stdin", "stdout", "stderr", "tty")}
    try:
        stream = await streams.open(node, operation, namespace, pod, container, params, user=user)
    except StreamUnavailable as exc:
        await _finish(ws, protocol, exit_status(None, str(exc)), b64)
        return ws
    cancelled = True
    reader = None
    try:
        reader = asyncio.ensure_future(_upstream(ws, stream, b64))
        while True:
            event = await stream.read()
            if event is None:
                break
            if isinstance(event, DataReceived) and event.data:
                out = encode(event.channel, event.data, b64=b64)
                await (ws.send_str(out) if isinstance(out, str) else ws.send_bytes(out))
        ended = stream.ended
        assert ended is not None
        if ended.code is None:
            status = exit_status(ended.exit_code if ended.exit_code is not None else 0)
        else:
            status = exit_status(None, ended.reason)
        await _finish(ws, protocol, status, b64)
        cancelled = False
    except ConnectionError:
        pass  # the caller went away
    finally:
        if reader is not None:
            reader.cancel()
        if stream.ended is None:
            await stream.reset(ErrorCode.INTERNAL, "the caller went away")
        streams.finished(stream, cancelled=cancelled)
    return ws


async def _finish(ws: web.WebSocketResponse, protocol: str, status: dict, b64: bool) -> None:
    if protocol.startswith("v4."):
        out = encode(ERROR, json.dumps(status).encode(), b64=b64)
        await (ws.send_str(out) if isinstance(out, str) else ws.send_bytes(out))
    await ws.close()


async def _upstream(ws: web.WebSocketResponse, stream: Stream, b64: bool) -> None:
    async for message in ws:
        if message.type not in (WSMsgType.BINARY, WSMsgType.TEXT):
            break
        try:
            channel, data = decode(message.data, b64=b64)
            if channel == RESIZE:
                size = json.loads(data)
                await stream.resize(int(size["Width"]), int(size["Height"]))
            elif data:
                await stream.write(STDIN, data)
        except (ChannelError, ValueError, KeyError, TypeError) as exc:
            log.warning("exec over WebSocket: refused a message: %s", exc)
            await stream.reset(ErrorCode.INVALID_MESSAGE, f"bad channel message: {exc}")
            await ws.close(code=1008, message=str(exc)[:100].encode())
            return
    if stream.ended is None:
        await stream.reset(ErrorCode.INTERNAL, "the caller closed the WebSocket")
