"""``/metrics``, ``/healthz`` and ``/readyz`` over plain HTTP (aiohttp).

- ``/healthz``: the event loop answers (liveness: restart the hub if this stops).
- ``/readyz``: the Kubernetes API answers and every informer has synced; otherwise 503
  with the reasons, one per line (readiness: send edges elsewhere meanwhile).
- ``/metrics``: the Prometheus text exposition of :class:`HubMetrics`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from cloudhub.errors import ConfigError
from cloudhub.observability.metrics import HubMetrics

__all__ = ["HealthServer", "ReadinessCheck"]

log = logging.getLogger(__name__)

#: ``check() -> list of reasons not to be ready`` (empty: ready).
ReadinessCheck = Callable[[], Awaitable[list[str]]]

_PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


class HealthServer:
    """The observability endpoint.

    Args:
        metrics: what ``/metrics`` renders.
        ready: the readiness check.
        host / port: where to listen (port 0 picks a free one: read :attr:`port`).
    """

    def __init__(self, metrics: HubMetrics, ready: ReadinessCheck, host: str, port: int) -> None:
        self.metrics = metrics
        self.ready = ready
        self.host = host
        self._port = port
        self._runner: web.AppRunner | None = None

    @property
    def port(self) -> int:
        """The bound port (after :meth:`start`)."""
        return self._port

    async def start(self) -> None:
        """Bind and serve.

        Raises:
            ConfigError: the address cannot be bound.
        """
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self._port)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise ConfigError(
                f"observability.http_port: cannot listen on {self.host}:{self._port}: {exc}"
            ) from exc
        self._runner = runner
        for address in runner.addresses:
            self._port = address[1]
            break

    async def aclose(self) -> None:
        """Stop serving."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _metrics(self, request: web.Request) -> web.Response:
        body = self.metrics.render()
        return web.Response(body=body, headers={"Content-Type": _PROMETHEUS_TEXT})

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, request: web.Request) -> web.Response:
        reasons = await self.ready()
        if reasons:
            return web.Response(status=503, text="".join(f"{r}\n" for r in reasons))
        return web.Response(text="ok\n")
