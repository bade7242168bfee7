"""An HTTPS endpoint of the hub that the API server calls: the aggregated API
(:mod:`cloudhub.metrics.aggregated`) and the node-selection admission webhook
(:mod:`cloudhub.upgrade.admission`). One aiohttp low-level server on one TLS port, owned
by the hub as a task; subclasses give :meth:`ssl_context` and :meth:`handle`."""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from cloudhub.hub import Hub

__all__ = ["HTTPSEndpoint"]

log = logging.getLogger(__name__)


class HTTPSEndpoint:
    """Listens on ``host:port`` (port 0: any free one; :attr:`port` is the bound one after
    :meth:`start`)."""

    what = "HTTPS endpoint"
    """What it serves, for the log line at start."""

    def __init__(self, *, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self._runner: web.ServerRunner | None = None

    def ssl_context(self) -> ssl.SSLContext:
        raise NotImplementedError

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        raise NotImplementedError

    async def start(self) -> int:
        """Listen; returns the bound port.

        Raises:
            ConfigError: the TLS credentials do not load (from :meth:`ssl_context`).
            OSError: the address is taken or not ours.
        """
        runner = web.ServerRunner(web.Server(self.handle, access_log=None))
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, ssl_context=self.ssl_context())
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        sockets = site._server.sockets if site._server is not None else []  # type: ignore[union-attr]
        self.port = sockets[0].getsockname()[1] if sockets else self.port
        log.info("%s on https://%s:%d", self.what, self.host, self.port)
        return self.port

    async def aclose(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def owned_by(self, hub: Hub, name: str) -> None:
        """Close it when the hub closes (a task of the hub's that waits for cancellation)."""

        async def serve_until_closed() -> None:
            try:
                await asyncio.Event().wait()
            finally:
                await self.aclose()

        hub.add_task(serve_until_closed(), name=name)
