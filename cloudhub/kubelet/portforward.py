"""``/portForward/{namespace}/{pod}`` (kubelet's) and the embedded API's
``/api/v1/namespaces/{namespace}/pods/{pod}/portforward``: the caller's SPDY connection
(``protocol.spdy.portforward``) with one ``portforward`` stream to the pod's node for
every connection forwarded. Refusals before the upgrade get an HTTP status, as for exec;
a connection the node cannot make (nothing listens on the port) is reported on its error
stream, which kubectl prints, and the others go on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from aiohttp import web

from cloudhub.kubelet.exec import SpdyFeeder, offered_protocols, upgrade_to_spdy
from cloudhub.kubelet.logs import plain_error
from cloudhub.kubelet.streams import HubStreams, StreamUnavailable
from protocol.errors import ErrorCode
from protocol.spdy.connection import SpdyProtocolError
from protocol.spdy.portforward import PROTOCOL, Closed, Data, Ended, Pair, PortForwardServer
from protocol.streams import DataReceived
from protocol.transport.streams import Stream

__all__ = ["serve_portforward"]

log = logging.getLogger(__name__)


async def serve_portforward(
    request: web.BaseRequest,
    streams: HubStreams,
    find_pod: Callable[[str, str], dict[str, Any] | None],
    namespace: str,
    pod_name: str,
    container: str = "",
    *,
    user: str,
    error: Callable[[int, str], web.Response] = plain_error,
) -> web.StreamResponse:
    """Answer one port-forward request (see the module docstring)."""
    if request.headers.get("Upgrade", "").lower() != "spdy/3.1":
        return error(400, "unable to upgrade: missing upgrade headers in request (SPDY/3.1)")
    if PROTOCOL not in offered_protocols(request):
        return error(403, f"unable to upgrade: the client does not offer {PROTOCOL}")
    pod = find_pod(namespace, pod_name)
    if pod is None:
        return error(404, f'pods "{pod_name}" not found')
    node = (pod.get("spec") or {}).get("nodeName") or ""
    if not await streams.reachable(node):
        return error(503, streams.offline_message(node))
    response, feeder = await upgrade_to_spdy(request, PROTOCOL)
    transport = request.transport
    forward = _Forward(request, PortForwardServer(), streams, node, namespace, pod_name, user)
    try:
        await forward.run(feeder)
    finally:
        await forward.aclose()
        if transport is not None and not transport.is_closing():
            transport.close()
    return response


class _Forward:
    def __init__(
        self,
        request: web.BaseRequest,
        server: PortForwardServer,
        streams: HubStreams,
        node: str,
        namespace: str,
        pod: str,
        user: str,
    ) -> None:
        self.request = request
        self.server = server
        self.streams = streams
        self.where = (node, namespace, pod)
        self.user = user
        self.conns: dict[str, Stream] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()

    async def flush(self) -> None:
        async with self._lock:
            data = self.server.data_to_send()
            transport = self.request.transport
            if data and transport is not None and not transport.is_closing():
                transport.write(data)
                await self.request.protocol._drain_helper()  # type: ignore[attr-defined]

    async def run(self, feeder: SpdyFeeder) -> None:
        while True:
            chunk = await feeder.next()
            if chunk is None:
                return
            try:
                events = self.server.receive_data(chunk)
            except SpdyProtocolError as exc:
                log.warning(
                    "port-forward %s/%s: refused the caller's SPDY: %s", *self.where[1:], exc
                )
                await self.flush()
                return
            await self.flush()
            for event in events:
                if isinstance(event, Pair):
                    await self._pair(event)
                elif isinstance(event, Data):
                    stream = self.conns.get(event.request_id)
                    if stream is not None and stream.ended is None:
                        try:
                            await stream.write(0, event.data, eof=event.fin)
                        except ConnectionError:
                            pass  # its downstream task reports the end
                elif isinstance(event, Closed):
                    stream = self.conns.get(event.request_id)
                    if stream is not None:
                        await stream.reset(ErrorCode.INTERNAL, "the caller closed the connection")
                elif isinstance(event, Ended):
                    return

    async def _pair(self, pair: Pair) -> None:
        node, namespace, pod = self.where
        try:
            stream = await self.streams.open(
                node, "portforward", namespace, pod, "", {"port": pair.port}, user=self.user
            )
        except StreamUnavailable as exc:
            self.server.error(pair.request_id, str(exc))
            self.server.close(pair.request_id)
            await self.flush()
            return
        self.conns[pair.request_id] = stream
        task = asyncio.ensure_future(self._downstream(pair.request_id, stream))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _downstream(self, request_id: str, stream: Stream) -> None:
        cancelled = True
        try:
            while True:
                event = await stream.read()
                if event is None:
                    break
                if isinstance(event, DataReceived) and event.data:
                    self.server.write(request_id, event.data)
                    await self.flush()
            ended = stream.ended
            if ended is not None and ended.code is not None:
                self.server.error(request_id, ended.reason)
            self.server.close(request_id)
            await self.flush()
            cancelled = False
        finally:
            self.conns.pop(request_id, None)
            self.streams.finished(stream, cancelled=cancelled)

    async def aclose(self) -> None:
        for stream in list(self.conns.values()):
            await stream.reset(ErrorCode.INTERNAL, "the caller went away")
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
