"""The kubelet API's HTTPS server: what kube-apiserver dials for ``kubectl logs`` and
``exec`` on an edge pod (the Node's published address and port lead here).

- TLS with the hub's serving certificate (from the hub CA), re-read for every new
  connection's context when the hub's credentials change; the caller must present a
  client certificate from ``kubelet.client_ca_file`` (the API server's
  ``--kubelet-client-certificate``), else the handshake fails; with ``allowed_names``
  set, its common name must be one of them (``403`` otherwise, logged).
- Paths, as kubelet's: ``/containerLogs/{namespace}/{pod}/{container}`` (GET),
  ``/exec/...`` and ``/attach/{namespace}/{pod}/{container}`` (GET or POST);
  ``/portForward/{namespace}/{pod}``; ``/healthz``. Anything else
  is ``404``.
- Each stream is logged with the caller: the certificate's common name, and the user the
  API server names in ``X-Remote-User`` when it sends one (it does for aggregated APIs, not
  for kubelet calls).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from typing import Any

from aiohttp import web
from cryptography import x509

from cloudhub.errors import ConfigError
from cloudhub.kubelet.exec import serve_exec
from cloudhub.kubelet.logs import plain_error, serve_logs
from cloudhub.kubelet.portforward import serve_portforward
from cloudhub.kubelet.streams import HubStreams
from protocol.transport import TLSCredentials
from protocol.transport.leantls import server_protocol
from protocol.transport.tls import load_chain_pem, server_ssl_context

__all__ = ["KubeletServer"]

log = logging.getLogger(__name__)

TLS_HANDSHAKE_S = 10.0
"""Seconds a caller has to complete the TLS handshake (kube-apiserver needs milliseconds);
a connection that sends nothing is closed then."""


class _LeanTLSSite(web.TCPSite):
    """``web.TCPSite`` with TLS from ``protocol.transport.leantls``: asyncio's own TLS
    layer allocates a 256 KiB read buffer per accepted connection (measured: 2,000 idle
    TCP connections that never sent a ClientHello held 600 MiB of the hub for 60 s)."""

    async def start(self) -> None:
        await web.BaseSite.start(self)
        server = self._runner.server
        assert server is not None and self._ssl_context is not None
        context = self._ssl_context

        def connection() -> asyncio.Protocol:
            return server_protocol(server(), context, handshake_timeout=TLS_HANDSHAKE_S)

        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            connection, self._host, self._port, backlog=self._backlog
        )


def _common_name(der: bytes | None) -> str:
    if not der:
        return ""
    cert = x509.load_der_x509_certificate(der)
    names = cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)
    return str(names[0].value) if names else ""


class KubeletServer:
    """HTTPS kubelet API over the hub's streams.

    Args:
        streams: the hub's streams.
        find_pod: ``(namespace, name) -> pod`` from the hub's informer.
        credentials: the hub's serving credentials (called for each new context).
        client_ca_pem: the CA bundle the caller's certificate must chain to.
        host, port: where to listen (port 0: any free one).
        allowed_names: client certificate common names allowed (empty: any).
    """

    def __init__(
        self,
        streams: HubStreams,
        find_pod: Callable[[str, str], dict[str, Any] | None],
        credentials: Callable[[], TLSCredentials],
        client_ca_pem: bytes,
        *,
        host: str,
        port: int,
        allowed_names: tuple[str, ...] = (),
    ) -> None:
        self.streams = streams
        self.find_pod = find_pod
        self._credentials = credentials
        self._client_ca_pem = client_ca_pem
        self.host = host
        self.port = port
        self.allowed_names = allowed_names
        self._runner: web.ServerRunner | None = None
        self._context: ssl.SSLContext | None = None
        self._chain: tuple[Any, ...] = ()
        self.refused = 0
        """Requests refused for the caller's identity (for tests and logs)."""

    def ssl_context(self) -> ssl.SSLContext:
        """The server context: our chain, the API server's client CA.

        Raises:
            ConfigError: the CA bundle or the serving credentials do not load.
        """
        own = self._credentials()
        self._chain = own.chain
        try:
            trusted = TLSCredentials.from_pem(self._client_ca_pem)
            context = server_ssl_context(
                TLSCredentials(cas=trusted.cas, chain=own.chain, private_key=own.private_key)
            )
        except Exception as exc:
            raise ConfigError(f"kubelet API TLS: {exc}") from exc
        context.minimum_version = ssl.TLSVersion.TLSv1_2  # kube-apiserver 1.20's Go speaks 1.3 too
        return context

    async def start(self) -> int:
        """Listen; returns the bound port."""
        server = web.Server(self.handle, access_log=None)
        runner = web.ServerRunner(server)
        await runner.setup()
        self._context = self.ssl_context()
        site = _LeanTLSSite(runner, self.host, self.port, ssl_context=self._context)
        await site.start()
        self._runner = runner
        sockets = site._server.sockets if site._server is not None else []  # type: ignore[union-attr]
        self.port = sockets[0].getsockname()[1] if sockets else self.port
        log.info("kubelet API on https://%s:%d", self.host, self.port)
        return self.port

    def refresh_credentials(self) -> bool:
        """Load the hub's serving certificate again if it changed (reissued by the hub CA,
        or new files): new handshakes present it, open connections keep theirs. Returns
        whether it changed."""
        own = self._credentials()
        if self._context is None or own.chain == self._chain:
            return False
        from protocol import pki

        pem = pki.dump_certificate_pem(own.chain) + pki.dump_private_key_pem(own.private_key)
        load_chain_pem(self._context, pem)
        self._chain = own.chain
        log.info("kubelet API: serving a new certificate")
        return True

    async def aclose(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def _caller(self, request: web.BaseRequest) -> tuple[str, str | None]:
        """``(user for logs, refusal or None)``."""
        transport = request.transport
        sslobj = transport.get_extra_info("ssl_object") if transport is not None else None
        der = sslobj.getpeercert(binary_form=True) if sslobj is not None else None
        name = _common_name(der)
        if not name:
            return "", "a client certificate is required"
        if self.allowed_names and name not in self.allowed_names:
            return name, f"client certificate {name!r} is not allowed to use the kubelet API"
        remote = request.headers.get("X-Remote-User")
        return (f"{remote} (via {name})" if remote else name), None

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if parts == ["healthz"]:
            return web.Response(text="ok")
        user, refusal = self._caller(request)
        if refusal is not None:
            self.refused += 1
            log.warning("kubelet API: refused %s %s: %s", request.method, request.path, refusal)
            return web.Response(status=403, text=f"Forbidden: {refusal}")
        if len(parts) == 4 and parts[0] == "containerLogs" and request.method == "GET":
            _, namespace, pod, container = parts
            return await serve_logs(
                request, self.streams, self.find_pod, namespace, pod, container, user=user
            )
        if len(parts) == 4 and parts[0] in ("exec", "attach") and request.method in ("GET", "POST"):
            operation, namespace, pod, container = parts
            return await serve_exec(
                request,
                self.streams,
                self.find_pod,
                namespace,
                pod,
                container,
                user=user,
                operation=operation,
            )
        if len(parts) == 3 and parts[0] == "portForward" and request.method in ("GET", "POST"):
            _, namespace, pod = parts
            return await serve_portforward(
                request, self.streams, self.find_pod, namespace, pod, user=user
            )
        return plain_error(404, f"404 page not found: {request.path}")
