"""The join endpoint: HTTPS on its own TCP port (default 7444).

A node that has not joined has no client certificate, so it cannot use the mutual-TLS
session ports; it joins here, as kubeadm's discovery does:

``GET /v1/ca``
    The CA bundle (PEM). The agent fetches it over TLS *without* trusting it, and
    accepts it only if the hash of its public key matches the ``--ca-cert-hash`` it was
    given (kubeadm's ``--discovery-token-ca-cert-hash``).
``POST /v1/join``
    JSON ``{"token": "<id>.<secret>", "csr": "<PEM>", "labels": {...}}``, sent over TLS
    that trusts only the pinned CA and checks the server name. Answers ``200`` with
    ``{"kind": "JoinResponse", "nodeName", "certificate", "ca", "labels", "sessionPort",
    "hubTime"}``, or an error ``{"kind": "Status", "reason", "message", "code"}`` whose
    ``reason`` is the :class:`~cloudhub.pki.errors.JoinRefused` code (``TokenExpired``,
    ``TokenUsed``, …), as Kubernetes Status objects.
``GET /healthz``
    ``ok``.

The TLS context presents the replica's serving certificate (TLS 1.3, no client
certificate asked); a renewed serving certificate is used for new handshakes without a
restart.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time

from aiohttp import web

from cloudhub.errors import ConfigError, KubeAPIError
from cloudhub.pki.ca import CAManager
from cloudhub.pki.errors import JoinRefused
from cloudhub.pki.settings import PKISettings
from cloudhub.pki.signer import NodeSigner
from cloudhub.pki.tokens import TokenStore
from protocol import pki
from protocol.transport import TLSCredentials, server_ssl_context

__all__ = ["JOIN_API_PREFIX", "JoinServer"]

log = logging.getLogger(__name__)

JOIN_API_PREFIX = "/v1"
_MAINTENANCE_INTERVAL = 3600.0


def _tls_context(credentials: TLSCredentials) -> ssl.SSLContext:
    context = server_ssl_context(credentials)
    context.verify_mode = ssl.CERT_NONE  # a joining node has no client certificate yet
    return context


def _status(code: int, reason: str, message: str, headers: dict | None = None) -> web.Response:
    body = {
        "kind": "Status",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }
    return web.json_response(body, status=code, headers=headers)


class JoinServer:
    """Serves ``/v1/ca`` and ``/v1/join`` over HTTPS; started and closed by the hub.

    Args:
        settings: the PKI settings (address, port, limits).
        ca_manager: the started CA manager (CA bundle, serving certificate).
        tokens: the bootstrap token store (pruned hourly by this server).
        signer: signs joins.
    """

    def __init__(
        self,
        settings: PKISettings,
        ca_manager: CAManager,
        tokens: TokenStore,
        signer: NodeSigner,
    ) -> None:
        self.settings = settings
        self.ca = ca_manager
        self.tokens = tokens
        self.signer = signer
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._maintenance: asyncio.Task | None = None
        self._credentials: TLSCredentials | None = None
        self._context: ssl.SSLContext | None = None
        self.port = 0
        """The TCP port bound (useful with ``join_port=0``)."""

    async def start(self) -> None:
        """Publish the hub info, bind the port and serve.

        Raises:
            ConfigError: the port cannot be bound (in use, or not allowed).
        """
        s = self.settings
        outer = _tls_context(self._current_credentials())
        outer.sni_callback = self._sni  # swap in the current context per handshake
        app = web.Application(client_max_size=s.max_join_request_bytes)
        app.router.add_get(f"{JOIN_API_PREFIX}/ca", self._get_ca)
        app.router.add_post(f"{JOIN_API_PREFIX}/join", self._post_join)
        app.router.add_get("/healthz", self._healthz)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        self._site = web.TCPSite(self._runner, s.join_host, s.join_port, ssl_context=outer)
        try:
            await self._site.start()
        except OSError as exc:
            await self._runner.cleanup()
            raise ConfigError(
                f"the join endpoint cannot listen on {s.join_host}:{s.join_port}: {exc} "
                "(set pki.join_port, or 0 for a free port)"
            ) from exc
        except BaseException:
            await self._runner.cleanup()
            raise
        addresses = self._runner.addresses
        self.port = addresses[0][1] if addresses else s.join_port
        await self.ca.publish_hub_info(s.join_address)
        self._maintenance = asyncio.create_task(self._maintain(), name="cloudhub.pki.join.maintain")
        log.info(
            "join endpoint listening on %s:%d (CA pin %s)", s.join_host, self.port, self.ca.ca_hash
        )

    async def close(self) -> None:
        """Stop serving (requests in flight are given a moment, then cut)."""
        if self._maintenance is not None:
            self._maintenance.cancel()
            await asyncio.gather(self._maintenance, return_exceptions=True)
            self._maintenance = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> JoinServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- TLS -----------------------------------------------------------------------------

    def _current_credentials(self) -> TLSCredentials:
        credentials = self.ca.serving_credentials()
        if credentials is not self._credentials:
            self._context = _tls_context(credentials)
            self._credentials = credentials
        return credentials

    def _sni(self, ssl_object: ssl.SSLObject, server_name: str | None, context) -> None:
        self._current_credentials()
        ssl_object.context = self._context

    async def _maintain(self) -> None:
        while True:
            await asyncio.sleep(_MAINTENANCE_INTERVAL)
            try:
                await self.tokens.prune()
            except KubeAPIError as exc:
                log.warning("could not purge old bootstrap tokens: %s", exc)

    # -- handlers ------------------------------------------------------------------------

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _get_ca(self, request: web.Request) -> web.Response:
        return web.Response(body=self.ca.ca_pem, content_type="application/x-pem-file")

    async def _post_join(self, request: web.Request) -> web.Response:
        peer = request.remote or "?"
        started = time.monotonic()
        try:
            response = await asyncio.wait_for(
                self._join(request), self.settings.join_request_timeout
            )
        except asyncio.TimeoutError:
            log.warning("join from %s timed out", peer)
            return _status(503, "Timeout", "the join took too long; retry", {"Retry-After": "10"})
        log.debug(
            "join from %s answered %d in %.3f s", peer, response.status, time.monotonic() - started
        )
        return response

    async def _join(self, request: web.Request) -> web.Response:
        peer = request.remote or "?"
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            return _status(400, "BadRequest", "the request body is not JSON")
        if not isinstance(body, dict):
            return _status(400, "BadRequest", "the request body must be a JSON object")
        token, csr, labels = body.get("token"), body.get("csr"), body.get("labels") or {}
        if not isinstance(token, str) or not isinstance(csr, str):
            return _status(400, "BadRequest", "'token' and 'csr' must be strings")
        if not isinstance(labels, dict):
            return _status(400, "BadRequest", "'labels' must be an object of strings")
        try:
            result = await self.signer.join(token=token, csr_pem=csr.encode(), labels=labels)
        except JoinRefused as exc:
            log.warning("refused join from %s: %s: %s", peer, exc.reason, exc.message)
            return _status(exc.status, exc.reason, exc.message)
        except KubeAPIError as exc:
            log.error("join from %s failed: the API is unavailable: %s", peer, exc)
            return _status(
                503,
                "ServiceUnavailable",
                "the hub cannot reach its Kubernetes API right now; retry in a minute",
                {"Retry-After": "30"},
            )
        return web.json_response(
            {
                "apiVersion": "edgefleet.io/v1",
                "kind": "JoinResponse",
                "nodeName": result.node_name,
                "certificate": pki.dump_certificate_pem(result.certificate).decode("ascii"),
                "ca": result.ca_pem.decode("ascii"),
                "labels": dict(result.labels),
                "sessionPort": self.settings.session_port,
                "hubTime": time.time(),
            }
        )
