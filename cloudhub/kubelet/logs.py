"""``GET /containerLogs/{namespace}/{pod}/{container}`` (kubelet's) and the embedded API's
``GET /api/v1/namespaces/{namespace}/pods/{pod}/log``: one ``logs`` stream to the pod's node.

Query parameters, as kubelet and kube-apiserver take them: ``follow``, ``tailLines``,
``sinceSeconds`` or ``sinceTime`` (RFC 3339), ``timestamps``, ``previous``,
``limitBytes`` (and ``container`` on the API path). A bad value is ``400``; an unknown pod
``404``; a node without a session ``503`` with ``node X is offline since …``; what the
edge refuses (no such container, an option its runtime cannot honour) comes back with the
edge's reason. The body is the container's output, streamed as it arrives; the response
starts with the first bytes (or the edge's refusal), so an error still gets its status.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from cloudhub.errors import HubError
from cloudhub.kubelet.streams import HubStreams, StreamUnavailable
from protocol.errors import ErrorCode
from protocol.streams import DataReceived

__all__ = [
    "LogRequestError",
    "log_params",
    "plain_error",
    "pod_container",
    "serve_logs",
    "status_error",
]

log = logging.getLogger(__name__)

WRITE_BYTES = 256 * 1024
"""Most bytes of a node's output written to the caller at once: the chunks that arrived
together go in one TLS write (measured, one write per 16 KiB chunk cost the hub more CPU
in socket sends than in QUIC)."""

_TRUE = ("true", "1", "True")
_INT64_MAX = 2**63 - 1


class LogRequestError(HubError):
    """A query parameter is not acceptable (answered ``400``)."""


def _int(query: Mapping[str, str], name: str) -> int | None:
    text = query.get(name)
    if text is None or text == "":
        return None
    try:
        value = int(text)
    except ValueError:
        raise LogRequestError(f"{name}: {text!r} is not an integer") from None
    if value < 0:
        raise LogRequestError(f"{name}: must be >= 0")
    if value > _INT64_MAX:  # Kubernetes' int64; beyond it the stream_open would not encode
        raise LogRequestError(f"{name}: must be at most {_INT64_MAX}")
    return value


def log_params(query: Mapping[str, str], now: float) -> dict[str, Any]:
    """The ``stream_open`` params for a logs request's query.

    Raises:
        LogRequestError: a value is not acceptable.
    """
    params: dict[str, Any] = {
        "follow": query.get("follow") in _TRUE,
        "timestamps": query.get("timestamps") in _TRUE,
        "previous": query.get("previous") in _TRUE,
    }
    tail = _int(query, "tailLines")
    if tail is not None:
        params["tail_lines"] = tail
    limit = _int(query, "limitBytes")
    if limit is not None:
        if limit == 0:
            raise LogRequestError("limitBytes: must be > 0")
        params["limit_bytes"] = limit
    since_seconds = _int(query, "sinceSeconds")
    since_time = query.get("sinceTime")
    if since_seconds is not None and since_time:
        raise LogRequestError("at most one of sinceTime or sinceSeconds may be specified")
    if since_seconds is not None:
        if since_seconds == 0:
            raise LogRequestError("sinceSeconds: must be greater than 0")
        params["since_time"] = now - since_seconds
    elif since_time:
        try:
            parsed = datetime.datetime.fromisoformat(since_time.replace("Z", "+00:00"))
        except ValueError:
            raise LogRequestError(f"sinceTime: {since_time!r} is not an RFC 3339 time") from None
        if parsed.tzinfo is None:
            raise LogRequestError(f"sinceTime: {since_time!r} has no time zone")
        params["since_time"] = parsed.timestamp()
    return params


_REASONS = {400: "BadRequest", 404: "NotFound", 503: "ServiceUnavailable"}


def plain_error(status: int, message: str) -> web.Response:
    """An error as kubelet answers it. kube-apiserver turns a kubelet's error into its own
    Status, keeping the text only for a 500 (``an error on the server ("…") has prevented
    the request from succeeding``; for 400 or 503 it says "unknown reason"), so every error
    but a 404 goes out as 500 for the user to see why."""
    if status != 404:
        status = 500
    return web.Response(status=status, text=message, content_type="text/plain")


def status_error(status: int, message: str) -> web.Response:
    """An error as the Kubernetes API answers it: a ``Status`` (what kubectl prints)."""
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": _REASONS.get(status, "InternalError"),
        "code": status,
    }
    return web.json_response(body, status=status)


def pod_container(pod: dict[str, Any], container: str) -> str:
    """The container a request means: the named one, or the pod's only one.

    Raises:
        LogRequestError: no name and several containers, or no such container.
    """
    spec = pod.get("spec") or {}
    names = [c.get("name", "") for c in spec.get("containers") or ()]
    names += [c.get("name", "") for c in spec.get("initContainers") or ()]
    name = (pod.get("metadata") or {}).get("name", "")
    if not container:
        if len(spec.get("containers") or ()) == 1:
            return names[0]
        raise LogRequestError(
            f"a container name must be specified for pod {name}, choose one of: {names}"
        )
    if container not in names:
        raise LogRequestError(f"container {container} is not valid for pod {name}")
    return container


async def serve_logs(
    request: web.BaseRequest,
    streams: HubStreams,
    find_pod: Callable[[str, str], dict[str, Any] | None],
    namespace: str,
    pod_name: str,
    container: str,
    *,
    user: str,
    clock: Callable[[], float] = time.time,
    error: Callable[[int, str], web.Response] = plain_error,
) -> web.StreamResponse:
    """Answer one logs request (see the module docstring); ``error(status, message)``
    makes the error responses (:func:`plain_error` as kubelet, :func:`status_error` as
    the API)."""
    _text = error
    pod = find_pod(namespace, pod_name)
    if pod is None:
        return _text(404, f'pods "{pod_name}" not found')
    node = (pod.get("spec") or {}).get("nodeName") or ""
    if not node:
        return _text(400, f"pod {pod_name} is not bound to a node")
    try:
        container = pod_container(pod, container)
        params = log_params(request.query, clock())
    except LogRequestError as exc:
        return _text(400, str(exc))
    try:
        stream = await streams.open(node, "logs", namespace, pod_name, container, params, user=user)
    except StreamUnavailable as exc:
        return _text(503, str(exc))
    cancelled = True
    try:
        event = await stream.read()
        ended = stream.ended
        if event is None and ended is not None and ended.code is not None:
            status = {ErrorCode.NOT_FOUND: 404, ErrorCode.UNSUPPORTED: 400}.get(ended.code, 503)
            cancelled = False
            return _text(status, ended.reason)
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)  # type: ignore[arg-type]
        while event is not None:
            if isinstance(event, DataReceived) and event.data:
                await response.write(event.data)
            event = await stream.read_joined(WRITE_BYTES)
        cancelled = False
        await response.write_eof()
        return response
    finally:
        if cancelled:
            await stream.reset(ErrorCode.INTERNAL, "the caller went away")
        streams.finished(stream, cancelled=cancelled)
