"""HTTP front of the embedded API: Kubernetes REST paths on aiohttp.

Paths: ``/api/v1/...`` and ``/apis/<group>/<version>/...``, collection
(``[namespaces/<ns>/]<plural>``), object (``.../<name>``) and subresource
(``.../<name>/status``, ``namespaces/<name>/finalize``); the deprecated
``/watch/`` prefix; discovery, ``/version``, ``/healthz``, ``/livez``, ``/readyz``
and ``/openapi/v2`` (see :mod:`openapi`). Every request but the health and version
endpoints needs ``Authorization: Bearer <token>``.

Bodies are JSON (``application/json``; YAML is accepted too). Responses are JSON,
or a ``meta.k8s.io/v1`` Table when the client asks for one (kubectl get). Errors
are ``Status`` objects with the code, reason and details kube-apiserver uses.
"""

from __future__ import annotations

import asyncio
import hmac
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import yaml
from aiohttp import web

from cloudhub.aggregation import AggregatedAPI, AggregatedRequest, PodSubresource
from cloudhub.standalone import bodies, discovery, errors, openapi, patch, protobuf, tables
from cloudhub.standalone.encoding import dumps, loads
from cloudhub.standalone.errors import StatusError, StorageError
from cloudhub.standalone.options import DeleteOptions, ListParams, WriteOptions
from cloudhub.standalone.resources import ResourceType
from cloudhub.standalone.rest import Registry
from cloudhub.standalone.selectors import parse_label_selector
from cloudhub.standalone.settings import APIServerSettings
from cloudhub.standalone.store import DELETED, Entry
from cloudhub.standalone.watch import PREV_DELETED, Watch

__all__ = ["APIHandler"]

log = logging.getLogger(__name__)

JSON = "application/json"
_PUBLIC = frozenset({"/healthz", "/livez", "/readyz", "/version"})
#: How often an idle watch checks that its client is still connected (seconds).
_IDLE_CHECK_S = 15.0
#: Most bytes of events a watch hands to its connection at once; the rest waits in
#: the watch's queue, bounded by ``watch_queue_events``.
_WATCH_CHUNK_BYTES = 256 * 1024
#: Seconds a watch's client has to take the end of its stream (after its timeout, an
#: overflow or at shutdown) before the connection is closed under it.
_EOF_GRACE_S = 5.0
_BODY_TYPES = frozenset(
    {
        JSON,
        "application/yaml",
        "application/apply-patch+yaml",
        "application/octet-stream",
        *patch.PATCH_TYPES,
    }
)
_NOT_FOUND = StatusError(404, "NotFound", "the server could not find the requested resource", {})
_ROOT_PATHS = [
    "/api",
    "/api/v1",
    "/apis",
    "/healthz",
    "/livez",
    "/openapi/v2",
    "/openapi/v3",
    "/readyz",
    "/version",
]


def _no_such_group() -> web.Response:
    """What kube-apiserver answers for a group it does not serve: plain text."""
    return web.Response(status=404, text="404 page not found\n", content_type="text/plain")


def _group_doc(api: AggregatedAPI) -> dict[str, Any]:
    listed = {"groupVersion": f"{api.group}/{api.version}", "version": api.version}
    return {"name": api.group, "versions": [listed], "preferredVersion": listed}


def _aggregated_group(api: AggregatedAPI) -> dict[str, Any]:
    return _group_doc(api)


def _json_response(body: Any, status: int = 200) -> web.Response:
    data = body if isinstance(body, bytes) else dumps(body)
    return web.Response(body=data, status=status, content_type=JSON)


def _status_response(error: StatusError) -> web.Response:
    return _json_response(error.to_status(), error.code)


def _wants_table(accept: str) -> bool:
    return "as=Table" in accept and "g=meta.k8s.io" in accept


def _check_accept(accept: str) -> None:
    """406 unless the client takes JSON (kubectl and client-go list JSON as an alternative)."""
    if not accept:
        return
    for part in accept.split(","):
        media = part.split(";")[0].strip().lower()
        params = part.lower()
        if media in ("application/json", "*/*", "application/*", "application/yaml"):
            if "as=" not in params or "as=table" in params:
                return
    raise errors.not_acceptable(accept)


class _Waker:
    """Wakes one watch stream: when the store delivers events to it, at a deadline
    (timeout, bookmark, idle check), or at shutdown. One future per wait and one
    timer handle: cheaper than ``asyncio.wait_for`` on an Event, which makes a task."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._waiter: asyncio.Future[None] | None = None

    def wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait_until(self, when: float) -> None:
        """Return at ``when`` (event-loop time) or at the next :meth:`wake`."""
        waiter = self._loop.create_future()
        self._waiter = waiter
        timer = self._loop.call_at(when, self.wake)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None


class APIHandler:
    """The aiohttp application serving one :class:`Registry`.

    Args:
        registry: Types and REST semantics.
        settings: Server settings (token, body limit, watch timings).
        token: The bearer token clients must present.
        server_address: ``host:port`` advertised by ``/api``.
    """

    def __init__(
        self,
        registry: Registry,
        settings: APIServerSettings,
        token: str,
        server_address: Callable[[], str],
    ) -> None:
        self.registry = registry
        self.settings = settings
        self._token = ("Bearer " + token).encode()
        self._server_address = server_address
        self._stopping = asyncio.Event()
        self._watches: set[_Waker] = set()
        self.openapi = openapi.OpenAPI(registry)
        self.aggregated: dict[str, AggregatedAPI] = {}
        """API groups served in process (:mod:`aggregation`), by group name."""
        self.pod_subresources: dict[str, PodSubresource] = {}
        """Pod subresources served in process (``log``, ``exec``...), by name."""

    def server(self) -> web.Server:
        """The aiohttp low-level server: every request goes to :meth:`handle`, which
        dispatches by path itself (no router: Kubernetes paths are parsed once)."""
        limit = self.settings.max_request_body_bytes

        def make_request(
            message: Any, payload: Any, protocol: Any, writer: Any, task: Any
        ) -> web.BaseRequest:
            return web.BaseRequest(
                message,
                payload,
                protocol,
                writer,
                task,
                asyncio.get_running_loop(),
                client_max_size=limit,
            )

        return web.Server(self.handle, request_factory=make_request, access_log=None)

    def stop_watches(self) -> None:
        """End every open watch stream (the server is shutting down)."""
        self._stopping.set()
        for waker in list(self._watches):
            waker.wake()

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        """Authenticate, dispatch, and turn errors into Status responses."""
        path = request.path.rstrip("/") or "/"
        if path not in _PUBLIC and not path.startswith(("/healthz/", "/livez/", "/readyz/")):
            given = request.headers.get("Authorization", "").encode()
            if not hmac.compare_digest(given, self._token):
                return _status_response(errors.unauthorized())
        try:
            response = await self._dispatch(request)
            if inspect.isawaitable(response):
                # A pod subresource served in process (exec, attach, port-forward, logs):
                # it may last hours, and is awaited here, once _dispatch's frame and the
                # parsed path are gone (~0.7 KiB an open exec held).
                response = await response
            return response
        except StatusError as exc:
            return _status_response(exc)
        except web.HTTPRequestEntityTooLarge:
            return _status_response(
                StatusError(
                    413,
                    "RequestEntityTooLarge",
                    f"the request body is larger than {self.settings.max_request_body_bytes} bytes",
                )
            )
        except StorageError as exc:
            log.error("storage failure on %s %s: %s", request.method, request.path, exc)
            return _status_response(errors.internal_error(str(exc)))
        except (web.HTTPException, asyncio.CancelledError, ConnectionError):
            raise
        except Exception as exc:
            # A bug of ours: answer with a Status like kube-apiserver's panic handler,
            # and log the traceback.
            log.exception("internal error on %s %s", request.method, request.path)
            return _status_response(errors.internal_error(f"{type(exc).__name__}: {exc}"))

    # -- dispatch ------------------------------------------------------------------

    async def _dispatch(
        self, request: web.BaseRequest
    ) -> web.StreamResponse | Awaitable[web.StreamResponse]:
        """The response, or for a pod subresource served in process the awaitable that
        makes it (:meth:`handle` awaits it)."""
        path = request.path
        parts = [p for p in path.split("/") if p]
        method = request.method
        if not parts:
            return _json_response({"paths": _ROOT_PATHS})
        head = parts[0]
        if head in ("healthz", "livez", "readyz"):
            return web.Response(text="ok", content_type="text/plain")
        if head == "version" and len(parts) == 1:
            return _json_response(discovery.version_info())
        if head == "openapi":
            return self.openapi.respond(request, parts[1:])
        if head == "api":
            if len(parts) == 1:
                return _json_response(discovery.api_versions(self._server_address()))
            group, version, rest = "", parts[1], parts[2:]
        elif head == "apis":
            types = self.registry.types()
            if len(parts) == 1:
                doc = discovery.api_group_list(types)
                doc["groups"] += [_aggregated_group(api) for api in self.aggregated.values()]
                return _json_response(doc)
            aggregated = self.aggregated.get(parts[1])
            if aggregated is not None:
                return await self._aggregated(request, aggregated, parts[2:])
            if discovery.api_group(types, parts[1]) is None:
                return _no_such_group()
            if len(parts) == 2:
                return _json_response(discovery.api_group(types, parts[1]))
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            # kube-apiserver lists its root paths with the 404 of an unknown path.
            return _json_response({"paths": _ROOT_PATHS}, 404)
        if not rest:
            doc = discovery.api_resource_list(self.registry.types(), group, version)
            if doc is None:
                if group:
                    return _no_such_group()
                raise _NOT_FOUND
            return _json_response(doc)
        watch_prefix = rest[0] == "watch"
        if watch_prefix:
            rest = rest[1:]
        if not rest:
            raise _NOT_FOUND
        namespace: str | None = None
        if (
            rest[0] == "namespaces"
            and len(rest) >= 3
            and not (len(rest) == 3 and rest[2] in ("status", "finalize"))
        ):
            namespace, rest = rest[1], rest[2:]
        plural = rest[0]
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else ""
        if len(rest) > 3:
            raise _NOT_FOUND
        rtype = self.registry.lookup(group, version, plural)
        if rtype is None:
            raise _NOT_FOUND
        if namespace is not None and not rtype.namespaced:
            raise _NOT_FOUND
        if rtype.namespaced and namespace is None and name is not None:
            raise _NOT_FOUND
        served = self.pod_subresources.get(sub) if sub and rtype.plural == "pods" else None
        if served is not None and not rtype.group and namespace is not None and name:
            return served(request, namespace, name)
        if sub and not (
            (sub == "status" and rtype.status_subresource)
            or (sub == "scale" and rtype.scale is not None)
            or (sub == "finalize" and rtype.plural == "namespaces" and not rtype.group)
        ):
            raise _NOT_FOUND
        query = request.query
        if watch_prefix or (name is None and query.get("watch") in ("true", "1", "True")):
            if method != "GET" or sub:
                raise errors.method_not_allowed(method, rtype.qualified)
            return await self._watch(request, rtype, namespace, name)
        if name is None:
            if method == "GET":
                return await self._list(request, rtype, namespace)
            if method == "POST":
                if rtype.namespaced and namespace is None:
                    raise errors.method_not_allowed(method, rtype.qualified)
                return await self._create(request, rtype, namespace or "")
            if method == "DELETE":
                return await self._delete_collection(request, rtype, namespace)
            raise errors.method_not_allowed(method, rtype.qualified)
        ns = namespace or ""
        if sub == "finalize" and method != "PUT":
            raise errors.method_not_allowed(method, rtype.qualified)
        if sub == "scale":
            return await self._scale(request, rtype, ns, name)
        if method == "GET":
            entry = await self.registry.get(rtype, ns, name)
            return self._object_response(request, rtype, entry)
        if method == "PUT":
            return await self._update(request, rtype, ns, name, sub)
        if method == "PATCH":
            return await self._patch(request, rtype, ns, name, sub)
        if method == "DELETE" and not sub:
            return await self._delete(request, rtype, ns, name)
        raise errors.method_not_allowed(method, rtype.qualified)

    async def _aggregated(
        self, request: web.BaseRequest, api: AggregatedAPI, parts: list[str]
    ) -> web.Response:
        """``/apis/<group>[/<version>[/[namespaces/<ns>/]<plural>[/<name>]]]`` of an
        in-process group."""
        if not parts:
            return _json_response({"kind": "APIGroup", "apiVersion": "v1", **_group_doc(api)})
        if parts[0] != api.version:
            raise _NOT_FOUND
        rest = parts[1:]
        if not rest:
            return _json_response(
                {
                    "kind": "APIResourceList",
                    "apiVersion": "v1",
                    "groupVersion": f"{api.group}/{api.version}",
                    "resources": [r.discovery() for r in api.resources],
                }
            )
        namespace: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        if len(rest) > 2:
            raise _NOT_FOUND
        resource = next((r for r in api.resources if r.plural == rest[0]), None)
        if resource is None or (namespace is not None and not resource.namespaced):
            raise _NOT_FOUND
        name = rest[1] if len(rest) > 1 else None
        qualified = f"{resource.plural}.{api.group}"
        if request.method != "GET" or request.query.get("watch") in ("true", "1", "True"):
            raise errors.method_not_allowed(
                "WATCH" if request.method == "GET" else request.method, qualified
            )
        if resource.namespaced and name is not None and namespace is None:
            raise _NOT_FOUND
        ask = AggregatedRequest(
            resource=resource,
            namespace=namespace,
            name=name,
            label_selector=parse_label_selector(request.query.get("labelSelector")),
            query=dict(request.query),
        )
        body = await api.handle(ask)
        if body is None:
            raise errors.not_found(resource.plural, api.group, name or "")
        return _json_response(body)

    # -- bodies and responses ------------------------------------------------------

    async def _body(self, request: web.BaseRequest) -> Any:
        raw = await request.read()
        ctype = request.content_type or JSON
        if not raw:
            return None
        if ctype == protobuf.CONTENT_TYPE:
            return protobuf.decode_object(raw)
        if ctype not in _BODY_TYPES:
            raise errors.unsupported_media_type(
                ctype, [JSON, "application/yaml", protobuf.CONTENT_TYPE]
            )
        if ctype in ("application/yaml", "application/apply-patch+yaml"):
            try:
                return bodies.load_yaml(raw)
            except bodies.BodyError as exc:
                raise errors.bad_request(f"the request body is refused: {exc}") from None
            except (ValueError, yaml.YAMLError) as exc:
                raise errors.bad_request(f"the request body is not valid YAML: {exc}") from None
        try:
            body = loads(raw)
            bodies.check_depth(body)
        except bodies.BodyError as exc:
            raise errors.bad_request(f"the request body is refused: {exc}") from None
        except ValueError as exc:
            raise errors.bad_request(f"the request body is not valid JSON: {exc}") from None
        return body

    def _dry_run(self, request: web.BaseRequest) -> bool:
        values = request.query.getall("dryRun", [])
        for value in values:
            if value != "All":
                raise errors.bad_request(
                    f'Invalid dry run value: "{value}": supported values: "All"'
                )
        return bool(values)

    def _write_options(self, request: web.BaseRequest) -> WriteOptions:
        return WriteOptions.parse(request.query, self._dry_run(request))

    def _object_response(
        self,
        request: web.BaseRequest,
        rtype: ResourceType,
        entry: Entry,
        status: int = 200,
        warnings: list[str] | None = None,
    ) -> web.Response:
        resp = self._object_body(request, rtype, entry, status)
        for text in warnings or ():
            resp.headers.add("Warning", '299 - "' + text.replace('"', '\\"') + '"')
        return resp

    def _object_body(
        self, request: web.BaseRequest, rtype: ResourceType, entry: Entry, status: int
    ) -> web.Response:
        accept = request.headers.get("Accept", "")
        _check_accept(accept)
        data = self.registry.render(rtype, entry)
        if _wants_table(accept):
            obj = loads(data)
            doc = tables.table(
                rtype,
                [obj],
                resource_version=obj["metadata"].get("resourceVersion", ""),
                include_object=request.query.get("includeObject", "Metadata"),
            )
            return _json_response(doc, status)
        return _json_response(data, status)

    # -- verbs ---------------------------------------------------------------------

    async def _list(
        self, request: web.BaseRequest, rtype: ResourceType, namespace: str | None
    ) -> web.Response:
        accept = request.headers.get("Accept", "")
        _check_accept(accept)
        params = ListParams.parse(rtype, request.query)
        result = await self.registry.list(rtype, namespace, params)
        render = self.registry.render
        if _wants_table(accept):
            objs = [loads(render(rtype, e)) for e in result.entries]
            doc = tables.table(
                rtype,
                objs,
                resource_version=str(result.revision),
                include_object=request.query.get("includeObject", "Metadata"),
                continue_token=result.continue_token,
                remaining=result.remaining,
            )
            return _json_response(doc)
        meta: dict[str, Any] = {"resourceVersion": str(result.revision)}
        if result.continue_token:
            meta["continue"] = result.continue_token
        if result.remaining is not None:
            meta["remainingItemCount"] = result.remaining
        head = b'{"kind":"%s","apiVersion":"%s","metadata":%s,"items":[' % (
            rtype.list_kind.encode(),
            rtype.api_version.encode(),
            dumps(meta),
        )
        body = head + b",".join(render(rtype, e) for e in result.entries) + b"]}"
        return _json_response(body)

    async def _create(
        self, request: web.BaseRequest, rtype: ResourceType, namespace: str
    ) -> web.Response:
        body = await self._body(request)
        opts = self._write_options(request)
        entry = await self.registry.create(rtype, namespace, body, opts)
        return self._object_response(request, rtype, entry, 201, opts.warnings)

    async def _update(
        self, request: web.BaseRequest, rtype: ResourceType, ns: str, name: str, sub: str
    ) -> web.Response:
        body = await self._body(request)
        opts = self._write_options(request)
        entry, created = await self.registry.update(
            rtype, ns, name, body, subresource=sub, opts=opts
        )
        return self._object_response(request, rtype, entry, 201 if created else 200, opts.warnings)

    async def _patch(
        self, request: web.BaseRequest, rtype: ResourceType, ns: str, name: str, sub: str
    ) -> web.Response:
        ctype = request.content_type
        if ctype not in patch.PATCH_TYPES:
            allowed = [patch.JSON_PATCH, patch.MERGE_PATCH]
            if rtype.strategic_merge:
                allowed.append(patch.STRATEGIC_MERGE_PATCH)
            raise errors.unsupported_media_type(ctype, allowed)
        body = await self._body(request)
        opts = self._write_options(request)
        entry = await self.registry.patch(rtype, ns, name, ctype, body, subresource=sub, opts=opts)
        return self._object_response(request, rtype, entry, 200, opts.warnings)

    async def _scale(
        self, request: web.BaseRequest, rtype: ResourceType, ns: str, name: str
    ) -> web.Response:
        """The ``autoscaling/v1`` Scale subresource (``kubectl scale``)."""
        _check_accept(request.headers.get("Accept", ""))
        method = request.method
        if method == "GET":
            return _json_response(await self.registry.get_scale(rtype, ns, name))
        if method not in ("PUT", "PATCH"):
            raise errors.method_not_allowed(method, f"{rtype.qualified}/scale")
        ctype = request.content_type
        if method == "PATCH" and ctype not in patch.PATCH_TYPES:
            raise errors.unsupported_media_type(ctype, list(patch.PATCH_TYPES))
        body = await self._body(request)

        def change(scale: dict[str, Any]) -> Any:
            if method == "PUT":
                return body
            if ctype == patch.JSON_PATCH:
                return patch.apply_json_patch(scale, body)
            if not isinstance(body, dict):
                raise errors.bad_request("a merge patch must be a JSON object")
            return patch.apply_merge_patch(scale, body)

        scale = await self.registry.update_scale(
            rtype, ns, name, change, self._write_options(request)
        )
        return _json_response(scale)

    async def _delete(
        self, request: web.BaseRequest, rtype: ResourceType, ns: str, name: str
    ) -> web.Response:
        body = await self._body(request)
        options = DeleteOptions.parse(body, request.query)
        if self._dry_run(request):
            options = DeleteOptions(**{**_options_dict(options), "dry_run": True})
        entry, gone = await self.registry.delete(rtype, ns, name, options)
        if gone and not rtype.return_deleted_object:
            details: dict[str, Any] = {"name": name}
            if rtype.group:
                details["group"] = rtype.group
            details["kind"] = rtype.plural
            details["uid"] = entry.uid
            return _json_response(
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Success",
                    "details": details,
                }
            )
        return self._object_response(request, rtype, entry)

    async def _delete_collection(
        self, request: web.BaseRequest, rtype: ResourceType, namespace: str | None
    ) -> web.Response:
        body = await self._body(request)
        options = DeleteOptions.parse(body, request.query)
        params = ListParams.parse(rtype, request.query)
        revision, entries = await self.registry.delete_collection(rtype, namespace, params, options)
        render = self.registry.render
        head = b'{"kind":"%s","apiVersion":"%s","metadata":{"resourceVersion":"%d"},"items":[' % (
            rtype.list_kind.encode(),
            rtype.api_version.encode(),
            revision,
        )
        return _json_response(head + b",".join(render(rtype, e) for e in entries) + b"]}")

    # -- watch ---------------------------------------------------------------------

    async def _watch(
        self, request: web.BaseRequest, rtype: ResourceType, namespace: str | None, name: str | None
    ) -> web.StreamResponse:
        accept = request.headers.get("Accept", "")
        _check_accept(accept)
        query = dict(request.query)
        if name is not None:
            query["fieldSelector"] = ",".join(
                filter(None, [query.get("fieldSelector", ""), f"metadata.name={name}"])
            )
        params = ListParams.parse(rtype, query)
        as_table = _wants_table(accept)
        try:
            watch = await self.registry.watch(rtype, namespace, params)
        except StatusError as exc:
            if exc.code != 410:
                raise
            resp = await self._start_stream(request)
            await resp.write(dumps({"type": "ERROR", "object": exc.to_status()}) + b"\n")
            await resp.write_eof()
            return resp
        waker = _Waker(asyncio.get_running_loop())
        self._watches.add(waker)
        try:
            return await self._stream(request, watch, waker, as_table)
        finally:
            self._watches.discard(waker)
            self.registry.unwatch(watch)

    async def _start_stream(self, request: web.BaseRequest) -> web.StreamResponse:
        resp = web.StreamResponse(status=200, headers={"Content-Type": JSON})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        return resp

    async def _stream(
        self, request: web.BaseRequest, watch: Watch, waker: _Waker, as_table: bool
    ) -> web.StreamResponse:
        settings = self.settings
        loop = asyncio.get_running_loop()
        rtype = watch.rtype
        params = watch.params
        timeout = params.timeout_s if params.timeout_s else settings.default_watch_timeout_s
        deadline = loop.time() + timeout
        bookmarks = params.allow_bookmarks
        next_bookmark = loop.time() + settings.bookmark_interval_s
        if bookmarks and timeout > 2:
            next_bookmark = min(next_bookmark, deadline - 2)
        resp = await self._start_stream(request)
        headers = [True]
        include = request.query.get("includeObject", "Metadata")
        render = self.registry.render
        transport = request.transport
        writing = [False]

        def stop_if_stalled() -> None:
            """The watch must end (overflow, deadline): a write blocked on a client that
            does not read would hold the connection and its buffers forever."""
            if writing[0] and transport is not None:
                transport.abort()
            waker.wake()

        def wake() -> None:
            if watch.ended:
                stop_if_stalled()
            else:
                waker.wake()

        watch.wakeup = wake
        expiry = loop.call_at(deadline, stop_if_stalled)

        async def write(data: bytes) -> None:
            writing[0] = True
            try:
                await resp.write(data)
            finally:
                writing[0] = False

        def line(event: str, data: bytes, shared: bytes | None = None) -> bytes:
            if as_table:
                obj = loads(data)
                doc = tables.table(
                    rtype,
                    [obj],
                    resource_version=obj["metadata"].get("resourceVersion", ""),
                    include_object=include,
                    headers=headers[0],
                )
                headers[0] = False
                return dumps({"type": event, "object": doc}) + b"\n"
            if shared is not None:
                return shared
            return b'{"type":"%s","object":%s}\n' % (event.encode(), data)

        try:
            initial, watch.initial = watch.initial, []
            chunk: list[bytes] = []
            size = 0
            for _, _, entry in initial:
                chunk.append(line("ADDED", render(rtype, entry)))
                size += len(chunk[-1])
                if size >= _WATCH_CHUNK_BYTES:
                    await write(b"".join(chunk))
                    chunk, size = [], 0
            if chunk:
                await write(b"".join(chunk))
            while True:
                if watch.ended or self._stopping.is_set():
                    break  # an overflowed watch drops its backlog: the client re-watches
                now = loop.time()
                if now >= deadline:
                    break
                if watch.queue:
                    chunk, size = [], 0
                    custom_version = rtype.custom and rtype.version != rtype.storage_version
                    # Bounded chunks: the backlog waits in the queue (where it counts
                    # towards watch_queue_events), not in the transport's buffer.
                    while watch.queue and size < _WATCH_CHUNK_BYTES:
                        event, change = watch.queue.popleft()
                        if event == PREV_DELETED:
                            chunk.append(
                                line(DELETED, self.registry.render_previous(rtype, change))
                            )
                        elif custom_version or as_table:
                            chunk.append(line(event, render(rtype, change.entry)))
                        else:
                            chunk.append(line(event, b"", change.event_line(event)))
                        size += len(chunk[-1])
                    await write(b"".join(chunk))
                    continue
                if bookmarks and now >= next_bookmark:
                    bookmark = {
                        "kind": rtype.kind,
                        "apiVersion": rtype.api_version,
                        "metadata": {
                            "resourceVersion": str(self.registry.store.durable_revision),
                            "creationTimestamp": None,
                        },
                    }
                    await write(dumps({"type": "BOOKMARK", "object": bookmark}) + b"\n")
                    next_bookmark = now + settings.bookmark_interval_s
                    if deadline - 2 > now:
                        next_bookmark = min(next_bookmark, deadline - 2)
                    continue
                if transport is None or transport.is_closing():
                    break  # the client went away while the watch was idle
                wait_until = min(deadline, next_bookmark) if bookmarks else deadline
                wait_until = min(wait_until, now + _IDLE_CHECK_S)
                # Nothing can be delivered between the checks above and this wait
                # (both run on the event loop without yielding), so no wake-up is lost.
                await waker.wait_until(wait_until)
            # The end of the stream may wait behind everything a stalled client left
            # unread: it gets a little time to take it, then the connection is cut.
            cut = loop.call_later(_EOF_GRACE_S, transport.abort) if transport else None
            try:
                await resp.write_eof()
            finally:
                if cut is not None:
                    cut.cancel()
        except (ConnectionResetError, ConnectionError):
            pass
        finally:
            expiry.cancel()
        return resp


def _options_dict(options: DeleteOptions) -> dict[str, Any]:
    return {
        "grace_period_s": options.grace_period_s,
        "precondition_uid": options.precondition_uid,
        "precondition_rv": options.precondition_rv,
        "propagation": options.propagation,
        "dry_run": options.dry_run,
    }
