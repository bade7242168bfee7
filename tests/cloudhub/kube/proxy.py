"""A fault-injecting HTTP proxy in front of a real Kubernetes API server, for client tests.

The client under test talks plain HTTP to the proxy; the proxy forwards every request to
the real API (HTTPS, its CA and bearer token from the upstream kubeconfig), streaming
responses so that watches work. Tests make it misbehave the ways an API or a network does:

- ``fail(method, path_part, status, times)``: answer the next matching requests with an
  error Status (503, 500, 429...) instead of forwarding them;
- ``cut_watches()``: end every open watch stream abruptly and refuse new ones (503) until
  ``restore_watches()``: an outage of the watch path only;
- ``after_once(method, path_part, action)``: run ``await action()`` after forwarding the
  next matching request and before answering it: another writer sneaking in between a
  client's read and its write;
- ``before_once(method, path_part, action)``: run ``await action()`` before forwarding the
  next matching request: a request slow on the wire, overtaken by one sent after it.
"""

from __future__ import annotations

import asyncio
import base64
import pathlib
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiohttp
import yaml
from aiohttp import web

__all__ = ["FaultyProxy"]


@dataclass
class _Fault:
    method: str
    path_part: str
    status: int
    times: int


_Hook = tuple[str, str, Callable[[], Awaitable[object]]]


def _take(hooks: list[_Hook], request: web.Request) -> Callable[[], Awaitable[object]] | None:
    """Remove and return the first hook matching the request's method and path."""
    for i, (method, part, action) in enumerate(hooks):
        if method == request.method and part in request.path:
            del hooks[i]
            return action
    return None


class FaultyProxy:
    """Forwards to the API named by ``upstream_kubeconfig``; listens on 127.0.0.1."""

    def __init__(self, upstream_kubeconfig: pathlib.Path, workdir: pathlib.Path) -> None:
        config = yaml.safe_load(upstream_kubeconfig.read_text())
        cluster = config["clusters"][0]["cluster"]
        self.upstream = cluster["server"].rstrip("/")
        self.token = config["users"][0]["user"]["token"]
        context = ssl.create_default_context()
        if "certificate-authority-data" in cluster:
            ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
            context.load_verify_locations(cadata=ca)
        else:
            context.load_verify_locations(cluster["certificate-authority"])
        self._ssl = context
        self.workdir = workdir
        self.kubeconfig = workdir / "proxy-kubeconfig"
        self.requests: list[tuple[str, str]] = []
        self._faults: list[_Fault] = []
        self._before: list[_Hook] = []
        self._after: list[_Hook] = []
        self._watches: set[asyncio.Task] = set()
        self._watch_outage = False
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> FaultyProxy:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self._ssl),
            timeout=aiohttp.ClientTimeout(total=None),
        )
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "p", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                    "users": [{"name": "p", "user": {"token": self.token}}],
                    "contexts": [{"name": "p", "context": {"cluster": "p", "user": "p"}}],
                    "current-context": "p",
                }
            )
        )
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.cut_watches()
        if self._watches:
            await asyncio.gather(*self._watches, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    # -- faults ---------------------------------------------------------------------------

    def fail(self, method: str, path_part: str, status: int, times: int = 1) -> None:
        """Answer the next ``times`` requests whose method and path match with ``status``."""
        self._faults.append(_Fault(method.upper(), path_part, status, times))

    def clear_faults(self) -> None:
        """Forget every pending fault: the API works again."""
        self._faults.clear()

    def after_once(
        self, method: str, path_part: str, action: Callable[[], Awaitable[object]]
    ) -> None:
        """Run ``action`` once, after forwarding the next matching request."""
        self._after.append((method.upper(), path_part, action))

    def before_once(
        self, method: str, path_part: str, action: Callable[[], Awaitable[object]]
    ) -> None:
        """Run ``action`` once, before forwarding the next matching request."""
        self._before.append((method.upper(), path_part, action))

    def cut_watches(self) -> None:
        """End every open watch abruptly; refuse new watches until :meth:`restore_watches`."""
        self._watch_outage = True
        for task in list(self._watches):
            task.cancel()

    def restore_watches(self) -> None:
        self._watch_outage = False

    def count(self, method: str, path_part: str) -> int:
        """Requests seen (forwarded or failed) with this method and path part."""
        return sum(1 for m, p in self.requests if m == method.upper() and path_part in p)

    # -- forwarding -----------------------------------------------------------------------

    def _fault_for(self, request: web.Request) -> int | None:
        for fault in self._faults:
            if (
                fault.times > 0
                and fault.method == request.method
                and fault.path_part in request.path
            ):
                fault.times -= 1
                return fault.status
        return None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append((request.method, request.path_qs))
        status = self._fault_for(request)
        watch = request.query.get("watch") in ("true", "1")
        if status is None and watch and self._watch_outage:
            status = 503
        if status is not None:
            body = {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "message": f"injected {status}",
                "reason": "ServiceUnavailable" if status == 503 else "InternalError",
                "code": status,
            }
            return web.json_response(body, status=status)
        assert self._session is not None
        headers = {
            k: v
            for k, v in request.headers.items()
            if k.lower() not in ("host", "authorization", "content-length")
        }
        headers["Authorization"] = f"Bearer {self.token}"
        data = await request.read()
        before = _take(self._before, request)
        if before is not None:
            await before()
        if not watch:
            async with self._session.request(
                request.method, self.upstream + request.path_qs, headers=headers, data=data or None
            ) as upstream:
                body = await upstream.read()
            after = _take(self._after, request)
            if after is not None:
                await after()
            return web.Response(
                status=upstream.status,
                body=body,
                content_type=upstream.content_type,
            )
        task = asyncio.current_task()
        assert task is not None
        self._watches.add(task)
        response = web.StreamResponse()
        try:
            async with self._session.request(
                request.method, self.upstream + request.path_qs, headers=headers
            ) as upstream:
                response.set_status(upstream.status)
                response.content_type = upstream.content_type
                await response.prepare(request)
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
            await response.write_eof()
        except asyncio.CancelledError:
            # an abrupt end: drop the connection under the client
            if request.transport is not None:
                request.transport.abort()
            raise
        finally:
            self._watches.discard(task)
        return response
