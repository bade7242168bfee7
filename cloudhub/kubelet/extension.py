"""Day-2 streams as a hub extension: ``Hub(settings, extensions=[kubelet_extension()])``.

At install it makes the :class:`~cloudhub.kubelet.streams.HubStreams` (session hooks,
the edge's stream messages on the dispatcher, the two metrics) and, on the embedded API,
serves the pod subresources ``log`` and ``exec`` from it
(``EmbeddedAPIServer.add_pod_subresource``), as kube-apiserver proxies them to the node's
kubelet. The stream is logged with the user:
on the embedded API the holder of its one bearer token.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from cloudhub.kubelet.exec import serve_exec
from cloudhub.kubelet.logs import serve_logs, status_error
from cloudhub.kubelet.streams import HubStreams

if TYPE_CHECKING:
    from cloudhub.hub import Hub

__all__ = ["EMBEDDED_USER", "kubelet_extension"]

log = logging.getLogger(__name__)

EMBEDDED_USER = "embedded-api-admin"
"""The user streams opened through the embedded API are logged with (its token's holder)."""


def kubelet_extension(*, window: int | None = None) -> Any:
    """The extension; ``window``: bytes of a node's data buffered per stream."""

    def install(hub: Hub) -> None:
        streams = HubStreams(hub.registry, hub.dispatcher, hub.metrics.registry, window=window)
        hub.streams = streams  # type: ignore[attr-defined]

        def find_pod(namespace: str, name: str) -> dict[str, Any] | None:
            return hub.pods.get(name, namespace)

        api = hub.embedded_api
        if api is not None:

            async def pod_log(request: Any, namespace: str, pod: str) -> Any:
                container = request.query.get("container", "")
                return await serve_logs(
                    request,
                    streams,
                    find_pod,
                    namespace,
                    pod,
                    container,
                    user=EMBEDDED_USER,
                    error=status_error,
                )

            async def pod_exec(request: Any, namespace: str, pod: str) -> Any:
                container = request.query.get("container", "")
                return await serve_exec(
                    request,
                    streams,
                    find_pod,
                    namespace,
                    pod,
                    container,
                    user=EMBEDDED_USER,
                    error=status_error,
                )

            api.add_pod_subresource("log", pod_log)
            api.add_pod_subresource("exec", pod_exec)

    return install
