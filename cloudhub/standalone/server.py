"""``EmbeddedAPIServer``: the embedded Kubernetes-compatible API, started and
stopped as one async context manager.

    async with EmbeddedAPIServer(APIServerSettings(data_dir=path, port=0)) as api:
        api.url              # https://127.0.0.1:PORT
        api.kubeconfig_path  # a kubeconfig for kubectl and kubernetes_asyncio
        api.token            # the bearer token
        api.ca_cert_path     # the CA that signed the serving certificate

Start-up order: TLS files and token, the durable store (objects loaded, custom
resource types registered), the embedded controllers, the HTTPS listener, then
the kubeconfig (it names the port actually bound). Close reverses it: watches
end, the listener stops, the controllers stop, pending commits are flushed.
"""

from __future__ import annotations

import asyncio
import collections
import pathlib
import shutil
import ssl
import tempfile
from types import TracebackType
from typing import Any

from aiohttp import web

from cloudhub.aggregation import AggregatedAPI, PodSubresource
from cloudhub.standalone.controllers import Controllers
from cloudhub.standalone.errors import ConfigurationError, StandaloneError, StorageError
from cloudhub.standalone.expiry import EVENTS_KEY, EventExpiry
from cloudhub.standalone.handlers import APIHandler
from cloudhub.standalone.options import DeleteOptions
from cloudhub.standalone.persistence import MemoryBackend, SQLiteBackend, StorageBackend
from cloudhub.standalone.pki import ServerPKI, ensure_pki, write_kubeconfig
from cloudhub.standalone.rest import Registry
from cloudhub.standalone.settings import APIServerSettings
from cloudhub.standalone.store import Store
from protocol.transport.leantls import server_protocol

__all__ = ["EmbeddedAPIServer"]

_WILDCARDS = ("0.0.0.0", "::", "")

#: Seconds a client has to complete the TLS handshake, and to close TLS at the end.
_TLS_HANDSHAKE_S = 60.0
_TLS_SHUTDOWN_S = 5.0


class _MessageQueue(list):
    """aiohttp's queue of parsed requests per connection, as a list: aiohttp makes it a
    deque, 760 bytes even when empty, and uses ``append``, ``popleft``, ``len`` and truth
    only; it holds one request at a time unless the client pipelines (56 bytes)."""

    __slots__ = ()

    def popleft(self) -> Any:
        return self.pop(0)


def _lean_handler(handler: asyncio.Protocol) -> asyncio.Protocol:
    """aiohttp's per-connection ``RequestHandler`` with its request queue a list (an idle
    watch or exec holds one handler for its whole life). Left as it is when the queue is
    not the empty deque expected (another aiohttp)."""
    queue = getattr(handler, "_messages", None)
    if type(queue) is collections.deque and not queue:
        handler._messages = _MessageQueue()  # type: ignore[attr-defined]
    return handler


class _LeanTLSSite(web.TCPSite):
    """``web.TCPSite`` whose connections share one TLS read buffer per thread
    (``protocol.transport.leantls``: asyncio's own TLS layer holds 256 KiB per connection,
    ~290 KiB per open watch): TLS is put between each accepted TCP connection and
    aiohttp's handler here, as ``loop.create_server(ssl=...)`` would do; and each
    handler's request queue is a list (:func:`_lean_handler`)."""

    async def start(self) -> None:
        await web.BaseSite.start(self)
        loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None and self._ssl_context is not None
        context = self._ssl_context

        def connection() -> asyncio.Protocol:
            return server_protocol(
                _lean_handler(server()),
                context,
                handshake_timeout=_TLS_HANDSHAKE_S,
                shutdown_timeout=_TLS_SHUTDOWN_S,
            )

        self._server = await loop.create_server(
            connection, self._host, self._port, backlog=self._backlog
        )
        sockets = self._server.sockets
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port


class EmbeddedAPIServer:
    """The embedded API server.

    Args:
        settings: How to run it (see :class:`APIServerSettings`).

    Raises (from :meth:`start` / ``__aenter__``):
        StorageError: The data directory, database or TLS files are unusable.
        ConfigurationError: The address cannot be bound.
    """

    def __init__(self, settings: APIServerSettings) -> None:
        self.settings = settings
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._pki: ServerPKI | None = None
        self._store: Store | None = None
        self._registry: Registry | None = None
        self._controllers: Controllers | None = None
        self._expiry: EventExpiry | None = None
        self._handler: APIHandler | None = None
        self._runner: web.ServerRunner | None = None
        self._port = 0
        self._kubeconfig: pathlib.Path | None = None
        self._aggregated: dict[str, AggregatedAPI] = {}
        self._pod_subresources: dict[str, PodSubresource] = {}

    # -- public ------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``https://host:port`` of the running server."""
        return f"https://{self._url_host()}:{self._port}"

    @property
    def port(self) -> int:
        """The TCP port bound (useful with ``port=0``)."""
        return self._port

    @property
    def kubeconfig_path(self) -> pathlib.Path:
        """The kubeconfig written at start (``data_dir/kubeconfig`` or a temporary file)."""
        if self._kubeconfig is None:
            raise StandaloneError("the server is not started")
        return self._kubeconfig

    @property
    def token(self) -> str:
        """The bearer token clients must send."""
        if self._pki is None:
            raise StandaloneError("the server is not started")
        return self._pki.token

    @property
    def ca_cert_path(self) -> pathlib.Path:
        """PEM file of the CA that signed the serving certificate."""
        if self._pki is None:
            raise StandaloneError("the server is not started")
        return self._pki.ca_cert_path

    def add_api(self, api: AggregatedAPI) -> None:
        """Serve an API group from code in this process (``metrics.k8s.io`` from the
        hub's edge metrics), before or after :meth:`start`.

        Raises:
            ConfigurationError: the group is already served (stored or in process).
        """
        if api.group in self._aggregated or (
            self._registry is not None and any(t.group == api.group for t in self._registry.types())
        ):
            raise ConfigurationError(f"API group {api.group} is already served")
        self._aggregated[api.group] = api

    def add_pod_subresource(self, name: str, handler: PodSubresource) -> None:
        """Serve the pod subresource ``name`` (``log``, ``exec``...) from code (the hub's
        day-2 streams), before or after :meth:`start`."""
        self._pod_subresources[name] = handler

    def remove_api(self, group: str) -> None:
        """Stop serving an in-process API group (no-op if it is not served)."""
        self._aggregated.pop(group, None)

    async def __aenter__(self) -> EmbeddedAPIServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Load the state, start the controllers and listen. See the class docstring."""
        settings = self.settings
        if settings.data_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="edgefleet-apiserver-")
            files = pathlib.Path(self._tmp.name)
            backend: StorageBackend = MemoryBackend()
        else:
            files = settings.data_dir
            backend = await asyncio.to_thread(
                SQLiteBackend, files / "state.db", synchronous_full=settings.synchronous_full
            )
        try:
            self._pki = await asyncio.to_thread(ensure_pki, files, self._hosts(), settings.token)
            self._store = Store(
                backend,
                history_events=settings.watch_history_events,
                commit_interval_s=settings.commit_interval_s,
            )
            rows = await self._store.open()
            self._registry = Registry(
                self._store,
                watch_queue_events=settings.watch_queue_events,
                max_object_bytes=settings.max_object_bytes,
            )
            self._registry.load(rows)
            self._controllers = Controllers(self._registry)
            await self._controllers.start()
            self._expiry = self._event_expiry(self._registry, settings.event_ttl_s)
            await self._expiry.start()
            await self._ensure_default_namespaces()
            self._handler = APIHandler(
                self._registry,
                settings,
                self._pki.token,
                lambda: f"{self._url_host()}:{self._port}",
            )
            self._handler.aggregated = self._aggregated
            self._handler.pod_subresources = self._pod_subresources
            await self._listen()
            self._kubeconfig = files / "kubeconfig"
            await asyncio.to_thread(write_kubeconfig, self._kubeconfig, self.url, self._pki)
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        """Stop serving and flush; safe to call twice."""
        if self._handler is not None:
            self._handler.stop_watches()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._expiry is not None:
            await self._expiry.close()
            self._expiry = None
        if self._controllers is not None:
            await self._controllers.close()
            self._controllers = None
        if self._store is not None:
            await self._store.close()
            self._store = None
        if self._tmp is not None:
            await asyncio.to_thread(shutil.rmtree, self._tmp.name, True)
            self._tmp = None

    # -- internals -------------------------------------------------------------------

    @staticmethod
    def _event_expiry(registry: Registry, ttl_s: float) -> EventExpiry:
        rtype = registry.type_for_key(EVENTS_KEY)
        assert rtype is not None  # a built-in type

        async def delete(namespace: str, name: str, options: DeleteOptions) -> None:
            await registry.delete(rtype, namespace, name, options)

        return EventExpiry(registry.store, delete, ttl_s)

    @property
    def expired_events(self) -> int:
        """Events deleted by their TTL since start (``settings.event_ttl_s``)."""
        return self._expiry.expired if self._expiry is not None else 0

    def _url_host(self) -> str:
        host = self.settings.advertise_host or self.settings.host
        if host in _WILDCARDS:
            host = "127.0.0.1"
        return f"[{host}]" if ":" in host else host

    def _hosts(self) -> list[str]:
        hosts = ["127.0.0.1", "::1", "localhost"]
        for extra in (self.settings.advertise_host, self.settings.host):
            if extra and extra not in _WILDCARDS and extra not in hosts:
                hosts.append(extra)
        return hosts

    async def _ensure_default_namespaces(self) -> None:
        """``default``, ``kube-system``, ``kube-public`` and ``kube-node-lease`` exist
        in every cluster (kube-apiserver's system namespaces controller makes them)."""
        assert self._registry is not None
        registry = self._registry
        rtype = registry.lookup("", "v1", "namespaces")
        assert rtype is not None
        for name in ("default", "kube-system", "kube-public", "kube-node-lease"):
            if registry.store.get("namespaces", "", name) is None:
                await registry.create(rtype, "", {"metadata": {"name": name}})

    async def _listen(self) -> None:
        assert self._handler is not None and self._pki is not None
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self._pki.cert_path, self._pki.key_path)
        ctx.set_alpn_protocols(["http/1.1"])
        self._runner = web.ServerRunner(
            self._handler.server(), handle_signals=False, shutdown_timeout=1.0
        )
        await self._runner.setup()
        site = _LeanTLSSite(
            self._runner, self.settings.host, self.settings.port, ssl_context=ctx, backlog=1024
        )
        try:
            await site.start()
        except OSError as exc:
            raise ConfigurationError(
                f"cannot listen on {self.settings.host}:{self.settings.port}: {exc}"
            ) from exc
        sockets = self._runner.addresses
        if not sockets:
            raise StorageError("the listener has no socket")
        self._port = sockets[0][1]
