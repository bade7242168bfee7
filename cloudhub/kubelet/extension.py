"""Day-2 streams as a hub extension: ``Hub(settings, extensions=[kubelet_extension(...)])``.

``cloudhub serve`` installs it (settings group ``kubelet``, on by default). At install it:

1. makes the :class:`~cloudhub.kubelet.streams.HubStreams` (session hooks, the edge's
   stream messages on the dispatcher, the two metrics), as ``hub.streams``;
2. on the embedded API, serves the pod subresources ``log``, ``exec``, ``attach`` and
   ``portforward`` from it
   (``EmbeddedAPIServer.add_pod_subresource``), as kube-apiserver proxies them to the
   node's kubelet; those streams are logged with the user :data:`EMBEDDED_USER` (the
   holder of the embedded API's one token);
3. with ``kubelet.client_ca_file`` set (a real cluster), starts the HTTPS kubelet API
   (:class:`~cloudhub.kubelet.server.KubeletServer`) and publishes its address and port in
   every edge Node's status (``hub.lifecycle.kubelet_endpoint``);
4. with ``ha.enabled``, ``ha.peer_address`` set and a hub CA to sign with (``peer_ca``),
   starts the stream relay (:class:`~cloudhub.kubelet.relay.StreamRelay`) on
   ``ha.peer_port`` and publishes ``peer_address:port`` on this replica's Lease, so that a
   stream for a node another replica serves reaches it.
"""

from __future__ import annotations

import asyncio
import logging
import pathlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cloudhub.errors import ConfigError
from cloudhub.ha.peers import PeerCredentials
from cloudhub.kubelet.exec import serve_exec
from cloudhub.kubelet.logs import serve_logs, status_error
from cloudhub.kubelet.portforward import serve_portforward
from cloudhub.kubelet.relay import StreamRelay
from cloudhub.kubelet.server import KubeletServer
from cloudhub.kubelet.settings import KubeletSettings
from cloudhub.kubelet.streams import HubStreams

if TYPE_CHECKING:
    from cloudhub.hub import Hub
    from protocol import pki

__all__ = ["EMBEDDED_USER", "kubelet_extension"]

log = logging.getLogger(__name__)

EMBEDDED_USER = "embedded-api-admin"
"""The user streams opened through the embedded API are logged with (its token's holder)."""


def kubelet_extension(
    settings: KubeletSettings | None = None,
    *,
    window: int | None = None,
    peer_ca: Callable[[], pki.CertificateAuthority] | None = None,
) -> Any:
    """The extension; ``window``: bytes of a node's data buffered per stream; ``peer_ca``:
    returns the hub CA, which signs this replica's peer certificate (the relay)."""
    settings = settings or KubeletSettings()

    async def install(hub: Hub) -> None:
        if not settings.enabled:
            return
        streams = HubStreams(hub.registry, hub.dispatcher, hub.metrics.registry, window=window)
        hub.streams = streams  # type: ignore[attr-defined]

        def find_pod(namespace: str, name: str) -> dict[str, Any] | None:
            return hub.pods.get(name, namespace)

        api = hub.embedded_api
        if api is not None:
            for name, serve in (
                ("log", serve_logs),
                ("exec", serve_exec),
                ("attach", _attach),
                ("portforward", serve_portforward),
            ):
                api.add_pod_subresource(name, _embedded(serve, streams, find_pod))
        if settings.client_ca_file:
            await _serve_https(hub, settings, streams, find_pod)
        if peer_ca is not None and hub.settings.ha.peer_address:
            await _serve_relay(hub, streams, peer_ca)

    return install


async def _serve_relay(hub: Hub, streams: HubStreams, peer_ca: Any) -> None:
    ha = hub.settings.ha
    if hub.ownership is None or hub.replicas is None:
        return  # one replica: every node it serves has its session here
    replicas, ownership = hub.replicas, hub.ownership
    relay = StreamRelay(
        streams,
        ownership.owner,
        replicas.peer_address,
        PeerCredentials(peer_ca, replicas.identity),
        host=ha.peer_host,
        port=ha.peer_port,
    )
    port = await relay.start()
    host = f"[{ha.peer_address}]" if ":" in ha.peer_address else ha.peer_address  # IPv6
    replicas.address = f"{host}:{port}"  # published by the replica Lease's start
    streams.relay = relay

    async def serve_until_closed() -> None:
        try:
            await asyncio.Event().wait()  # until the hub cancels its tasks at close
        finally:
            await relay.aclose()

    hub.relay = relay  # type: ignore[attr-defined]
    hub.add_task(serve_until_closed(), "stream-relay")


# These two return the serving coroutine instead of awaiting it: a frame fewer held by
# each open stream (an exec may stay open for hours).


def _attach(*args: Any, **kwargs: Any) -> Any:
    return serve_exec(*args, operation="attach", **kwargs)


def _embedded(serve: Any, streams: HubStreams, find_pod: Any) -> Any:
    def handler(request: Any, namespace: str, pod: str) -> Any:
        return serve(
            request,
            streams,
            find_pod,
            namespace,
            pod,
            request.query.get("container", ""),
            user=EMBEDDED_USER,
            error=status_error,
        )

    return handler


async def _serve_https(
    hub: Hub, settings: KubeletSettings, streams: HubStreams, find_pod: Any
) -> None:
    try:
        client_ca = await asyncio.to_thread(pathlib.Path(settings.client_ca_file).read_bytes)
    except OSError as exc:
        raise ConfigError(f"kubelet.client_ca_file: {exc}") from exc
    server = KubeletServer(
        streams,
        find_pod,
        hub._credentials_source(),
        client_ca,
        host=settings.host,
        port=settings.port,
        allowed_names=settings.allowed_names,
    )
    port = await server.start()
    address = settings.published_address()
    if address and hub.lifecycle is not None:
        hub.lifecycle.kubelet_endpoint = (address, port)
    else:
        log.warning(
            "kubelet API on port %d, but no kubelet.advertise_address: edge Nodes do not "
            "name it, so the API server cannot reach it",
            port,
        )

    interval = hub.settings.listen.credentials_check_interval

    async def serve_until_closed() -> None:
        try:
            while True:  # follow the hub's serving certificate, as the edge listeners do
                await asyncio.sleep(interval)
                try:
                    server.refresh_credentials()
                except Exception:
                    log.exception("kubelet API: the new serving certificate does not load")
        finally:
            await server.aclose()

    hub.kubelet_server = server  # type: ignore[attr-defined]
    hub.add_task(serve_until_closed(), "kubelet-api")
