"""Day-2 operations on the edge: the streams the hub opens for ``kubectl logs``, ``exec``,
``attach`` and ``port-forward`` (docs/streams.md), run against the container runtime.

:class:`Day2` is an agent service plugged into the hub link before the agent starts::

    hub = HubLink()
    services = [hub, Day2(hub)]

It registers the stream messages on the link (``stream_open``, ``stream_data``,
``stream_window``, ``stream_resize``, ``stream_reset``) and advertises the ``streams``
capability in the hello. Each session gets a fresh :class:`~protocol.transport.streams.
StreamEndpoint`; when the session ends, every stream on it ends (a command started for
an exec is killed: the caller is gone). Each stream is logged with the user who asked
(the apiserver's, as the hub passes it on).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from protocol.stream_messages import StreamData, StreamOpen, StreamReset, StreamResize, StreamWindow

if TYPE_CHECKING:
    from protocol.transport.streams import Stream, StreamEndpoint

__all__ = ["Day2"]

log = logging.getLogger(__name__)


class Day2:
    """The agent's side of day-2 streams (an ``AgentService``).

    Args:
        hub: the hub link (``edgeagent.uplink.session.HubLink``): ``register``,
            ``add_session_task``, ``capabilities`` and ``link`` are used.
        window: bytes of the hub's data (stdin) buffered per stream.
    """

    name = "day2"

    def __init__(self, hub: Any, *, window: int | None = None) -> None:
        self._hub = hub
        self._window = window
        self._runtime: Any = None
        self._endpoint: StreamEndpoint | None = None
        self._endpoint_link: Any = None
        for kind in (StreamOpen, StreamData, StreamWindow, StreamResize, StreamReset):
            hub.register(kind, self._feed)
        hub.add_session_task(self._session)
        if "streams" not in hub.capabilities:
            hub.capabilities.append("streams")

    async def run(self, ctx: Any) -> None:
        """Serve streams with the agent's runtime until cancelled."""
        self._runtime = ctx.runtime
        try:
            await asyncio.Event().wait()
        finally:
            self._runtime = None

    def _endpoint_for(self, link: Any) -> StreamEndpoint:
        # The multiplexer, the endpoint and the operations (with the runtime's exec and
        # logs code) are imported by the first stream: an idle agent does without them.
        from protocol.streams import StreamMux
        from protocol.transport.streams import StreamEndpoint

        if self._endpoint is None or self._endpoint_link is not link:
            mux = (
                StreamMux(hub=False)
                if self._window is None
                else StreamMux(hub=False, window=self._window)
            )
            self._endpoint = StreamEndpoint(
                mux, link.send, self._serve, room=getattr(link, "wait_room", None)
            )
            self._endpoint_link = link
        return self._endpoint

    def _feed(self, message: Any) -> None:
        link = self._hub.link
        if link is None:
            return
        self._endpoint_for(link).feed(message)

    async def _session(self, link: Any) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            if self._endpoint_link is link and self._endpoint is not None:
                endpoint, self._endpoint, self._endpoint_link = self._endpoint, None, None
                await endpoint.aclose()

    async def _serve(self, stream: Stream) -> None:
        from edgeagent.day2.operations import serve_stream

        await serve_stream(stream, self._runtime)
