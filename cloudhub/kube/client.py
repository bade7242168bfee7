"""A raw-JSON Kubernetes client built on kubernetes_asyncio's transport.

kubernetes_asyncio loads the kubeconfig or the in-cluster service account, holds
the TLS and bearer-token settings and the aiohttp session. The hub asks it for raw
responses (``_preload_content=False``) and keeps plain JSON dicts: deserialising
100,000 pods into generated model objects costs far longer than the API takes to
send them (DESIGN.md, "Kubernetes bridge").

Every non-2xx answer becomes a :class:`cloudhub.errors.KubeAPIError` subclass
carrying the Status object; transport failures become
:class:`cloudhub.errors.KubeUnavailable`. Nothing from aiohttp or
kubernetes_asyncio escapes this module.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import ssl
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client.exceptions import OpenApiException
from kubernetes_asyncio.config.config_exception import ConfigException
from yaml import YAMLError

from cloudhub.errors import (
    ConfigError,
    KubeAPIError,
    KubeConflict,
    KubeGone,
    KubeNotFound,
    KubeUnavailable,
)
from cloudhub.kube.resources import ResourceType

__all__ = ["PATCH_CONTENT_TYPES", "KubeClient", "RequestObserver"]

log = logging.getLogger(__name__)

PATCH_CONTENT_TYPES = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
}

#: Called after every API request: ``(verb, resource plural, HTTP status or 0, seconds)``.
RequestObserver = Callable[[str, str, int, float], None]

#: A watch line longer than this is refused rather than buffered without bound (bytes).
MAX_WATCH_LINE = 32 * 1024 * 1024

_ERRORS_BY_STATUS: dict[int, type[KubeAPIError]] = {
    404: KubeNotFound,
    409: KubeConflict,
    410: KubeGone,
}


def api_error(status: int, body: bytes | dict | None) -> KubeAPIError:
    """Build the right :class:`KubeAPIError` subclass from a status and a Status body."""
    parsed: dict | None
    if isinstance(body, dict):
        parsed = body
    else:
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None
    if not isinstance(parsed, dict):
        text = body.decode(errors="replace")[:500] if isinstance(body, bytes) else ""
        return _ERRORS_BY_STATUS.get(status, KubeAPIError)(status, "", text or "no Status body")
    reason = str(parsed.get("reason", ""))
    message = str(parsed.get("message", ""))
    return _ERRORS_BY_STATUS.get(status, KubeAPIError)(status, reason, message, parsed)


def _failure(exc: BaseException, timeout: float | aiohttp.ClientTimeout | None) -> str:
    """What went wrong with a request that got no answer, for its error's message.

    ``asyncio.TimeoutError`` (aiohttp's timeouts too) carries no text: it reads "no answer
    within 30 s" rather than nothing (a 10,000-node run logged ~730 "could not release
    node ...'s Lease: 0: PATCH ...: " lines, each ending in an empty message).
    """
    if isinstance(exc, asyncio.TimeoutError):
        seconds = timeout.total if isinstance(timeout, aiohttp.ClientTimeout) else timeout
        return f"no answer within {seconds:g} s" if seconds else "timed out"
    return str(exc) or type(exc).__name__


def _kubeconfig_problem(path: str) -> str | None:
    """Why no file of ``path`` (``os.pathsep``-joined) can be a kubeconfig, or ``None``.

    Two stats at start, before the event loop has work: cheaper than a thread hop.
    """
    paths = [p for p in path.split(os.pathsep) if p]
    if any(os.path.isfile(p) for p in paths):
        return None
    shown = ", ".join(repr(p) for p in paths) or repr(path)
    what = "is not a file" if any(os.path.exists(p) for p in paths) else "does not exist"
    return f"kubeconfig {shown} {what}"


class KubeClient:
    """Raw-JSON access to the Kubernetes API.

    Args:
        api_client: a configured ``kubernetes_asyncio.client.ApiClient``; the
            KubeClient owns it and closes it in :meth:`close`.
        request_timeout: seconds allowed for one non-watch request.
        observer: optional :data:`RequestObserver` for metrics.
    """

    def __init__(
        self,
        api_client: k8s_client.ApiClient,
        *,
        request_timeout: float = 30.0,
        observer: RequestObserver | None = None,
        max_connections: int = 64,
    ) -> None:
        self._api = api_client
        self._timeout = request_timeout
        self._observer = observer
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        configuration = api_client.configuration
        self._base = configuration.host.rstrip("/")
        self._server_name = getattr(configuration, "tls_server_name", None)
        self._proxy = configuration.proxy

    def _http(self) -> aiohttp.ClientSession:
        """Our own aiohttp session, made from the client's configuration (CA, client
        certificate, verification, server name, proxy). kubernetes_asyncio's session sets
        ``trust_env``, which sends every request through two thread-pool hops (netrc and
        proxy lookups): a tenth of a millisecond each, at a thousand Lease renewals a
        second. Authentication headers still come from kubernetes_asyncio (token refresh,
        exec plugins)."""
        if self._session is None:
            c = self._api.configuration
            context = ssl.create_default_context(cafile=c.ssl_ca_cert)
            if c.cert_file:
                context.load_cert_chain(c.cert_file, keyfile=c.key_file)
            if not c.verify_ssl:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._max_connections, ssl=context),
                trust_env=False,
                read_bufsize=2**21,  # watch events of large objects (etcd allows 1.5 MiB)
                timeout=aiohttp.ClientTimeout(total=None),
            )
        return self._session

    @classmethod
    async def from_kubeconfig(
        cls, path: str, *, context: str | None = None, **kwargs: Any
    ) -> KubeClient:
        """Connect with a kubeconfig file.

        Args:
            path: the file, or several joined with ``os.pathsep`` as in ``$KUBECONFIG``
                (merged by kubernetes_asyncio; missing ones skipped, as kubectl does).

        Raises:
            ConfigError: no file is there (named, not kubernetes_asyncio's "Expected key
                current-context" for an empty configuration), or it is unusable.
        """
        problem = _kubeconfig_problem(path)
        if problem is not None:
            raise ConfigError(problem)
        try:
            api = await k8s_config.new_client_from_config(config_file=path, context=context)
        except (ConfigException, OSError, ValueError, TypeError, KeyError, YAMLError) as exc:
            raise ConfigError(f"cannot use kubeconfig {path!r}: {exc}") from exc
        return cls(api, **kwargs)

    @classmethod
    def in_cluster(cls, **kwargs: Any) -> KubeClient:
        """Connect with the pod's service account (in-cluster config).

        Raises:
            ConfigError: not running in a pod with a service account.
        """
        configuration = k8s_client.Configuration()
        try:
            k8s_config.load_incluster_config(client_configuration=configuration)
        except ConfigException as exc:
            raise ConfigError(f"no in-cluster Kubernetes configuration: {exc}") from exc
        return cls(k8s_client.ApiClient(configuration), **kwargs)

    @property
    def host(self) -> str:
        """The API server's base URL."""
        return self._api.configuration.host

    async def close(self) -> None:
        """Close the underlying HTTP sessions."""
        if self._session is not None:
            await self._session.close()
            self._session = None
        await self._api.close()

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- the one request path ------------------------------------------------------------

    async def _open(
        self,
        verb: str,
        method: str,
        rt: ResourceType | str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | aiohttp.ClientTimeout | None = None,
    ) -> aiohttp.ClientResponse:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        started = time.monotonic()
        if timeout is None:
            timeout = self._timeout
        if not isinstance(timeout, aiohttp.ClientTimeout):
            timeout = aiohttp.ClientTimeout(total=timeout)
        try:
            await self._api.update_params_for_auth(headers, [], ["BearerToken"])
            data = None if body is None else json.dumps(body).encode()
            resp = await self._http().request(
                method,
                self._base + path,
                params=query or None,
                data=data,
                headers=headers,
                timeout=timeout,
                server_hostname=self._server_name,
                proxy=self._proxy,
            )
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            self._observe(verb, rt, 0, started)
            raise KubeUnavailable(0, "", f"{method} {path}: {_failure(exc, timeout)}") from exc
        except (OpenApiException, ValueError, TypeError) as exc:  # the request could not be made
            self._observe(verb, rt, 0, started)
            raise KubeAPIError(0, "", f"{method} {path}: cannot make the request: {exc}") from exc
        if resp.status >= 300:
            try:
                data = await resp.read()
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                data = str(exc).encode()
            finally:
                resp.release()
            self._observe(verb, rt, resp.status, started)
            raise api_error(resp.status, data)
        return resp

    def _observe(self, verb: str, rt: ResourceType | str, status: int, started: float) -> None:
        if self._observer is not None:
            resource = rt if isinstance(rt, str) else rt.plural
            self._observer(verb, resource, status, time.monotonic() - started)

    async def _json(
        self,
        verb: str,
        method: str,
        rt: ResourceType | str,
        path: str,
        **kwargs: Any,
    ) -> dict:
        started = time.monotonic()
        resp = await self._open(verb, method, rt, path, **kwargs)
        try:
            data = await resp.read()
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            self._observe(verb, rt, 0, started)
            text = _failure(exc, kwargs.get("timeout") or self._timeout)
            raise KubeUnavailable(0, "", f"{method} {path}: reading the answer: {text}") from exc
        finally:
            resp.release()
        self._observe(verb, rt, resp.status, started)
        try:
            return json.loads(data) if data else {}
        except ValueError as exc:
            raise KubeAPIError(resp.status, "", f"{method} {path}: answer is not JSON") from exc

    # -- verbs ---------------------------------------------------------------------------

    async def version(self, *, timeout: float | None = None) -> dict:
        """GET ``/version``: a cheap probe that the API answers (readiness).

        Raises:
            KubeAPIError: no answer within ``timeout`` seconds, or an error status.
        """
        return await self._json("get", "GET", "version", "/version", timeout=timeout)

    async def get(
        self,
        rt: ResourceType,
        name: str,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> dict:
        """GET one object.

        Raises:
            KubeNotFound: no such object. Other :class:`KubeAPIError` for other failures.
        """
        return await self._json("get", "GET", rt, rt.path(namespace, name, subresource))

    async def list(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 500,
    ) -> tuple[list[dict], str]:
        """LIST a collection, following ``continue`` tokens page by page.

        Args:
            limit: objects per page; the API decides the real page size.

        Returns:
            ``(items, resourceVersion)``: every object, and the list's
            resourceVersion to start a watch from.

        Raises:
            KubeGone: a continue token expired mid-list (the caller relists).
        """
        items: list[dict] = []
        token = ""
        while True:
            query = [("limit", str(limit))]
            if token:
                query.append(("continue", token))
            if label_selector:
                query.append(("labelSelector", label_selector))
            if field_selector:
                query.append(("fieldSelector", field_selector))
            page = await self._json("list", "GET", rt, rt.path(namespace), query=query)
            kind = rt.kind
            for item in page.get("items") or ():
                # Lists omit apiVersion/kind on items; the watch includes them.
                item.setdefault("apiVersion", rt.api_version)
                item.setdefault("kind", kind)
                items.append(item)
            meta = page.get("metadata") or {}
            token = meta.get("continue") or ""
            if not token:
                return items, str(meta.get("resourceVersion", ""))

    async def create(self, rt: ResourceType, body: dict, namespace: str | None = None) -> dict:
        """POST a new object.

        Raises:
            KubeConflict: an object with that name exists (reason ``AlreadyExists``).
        """
        ns = namespace or (body.get("metadata") or {}).get("namespace")
        return await self._json("create", "POST", rt, rt.path(ns), body=body)

    async def replace(
        self, rt: ResourceType, body: dict, *, subresource: str | None = None
    ) -> dict:
        """PUT an object (or its subresource); ``metadata.resourceVersion`` guards the write.

        Raises:
            KubeConflict: the resourceVersion is stale.
        """
        meta = body.get("metadata") or {}
        path = rt.path(meta.get("namespace"), meta["name"], subresource)
        return await self._json("update", "PUT", rt, path, body=body)

    async def patch(
        self,
        rt: ResourceType,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        patch_type: str = "merge",
    ) -> dict:
        """PATCH an object or its subresource.

        Args:
            patch: a dict for merge/strategic patches, a list of operations for JSON patch.
            patch_type: ``"merge"``, ``"json"`` or ``"strategic"``.
        """
        path = rt.path(namespace, name, subresource)
        return await self._json(
            "patch", "PATCH", rt, path, body=patch, content_type=PATCH_CONTENT_TYPES[patch_type]
        )

    async def delete(
        self,
        rt: ResourceType,
        name: str,
        namespace: str | None = None,
        *,
        grace_period_seconds: int | None = None,
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> dict:
        """DELETE an object, optionally with a grace period and uid/resourceVersion preconditions.

        Returns:
            The API's answer: the object (still terminating) or a Status.

        Raises:
            KubeNotFound: already gone. KubeConflict: a precondition failed.
        """
        options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        preconditions = {}
        if uid:
            preconditions["uid"] = uid
        if resource_version:
            preconditions["resourceVersion"] = resource_version
        if preconditions:
            options["preconditions"] = preconditions
        return await self._json("delete", "DELETE", rt, rt.path(namespace, name), body=options)

    async def watch(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        *,
        resource_version: str = "",
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
        allow_bookmarks: bool = True,
        inactivity_timeout: float | None = None,
    ) -> AsyncIterator[tuple[str, dict]]:
        """WATCH a collection from a resourceVersion; yields ``(type, object)``.

        ``type`` is ADDED, MODIFIED, DELETED or BOOKMARK. The stream ends when the
        server closes it (after ``timeout_seconds``). An ERROR event carrying a 410
        Status raises :class:`KubeGone` so the caller relists.

        Args:
            inactivity_timeout: seconds without a byte (event or bookmark) after
                which the watch is abandoned with :class:`KubeUnavailable`; default
                ``timeout_seconds + 30``.

        Raises:
            KubeGone: the resourceVersion is too old.
            KubeUnavailable: the connection failed or went silent.
        """
        query = [("watch", "true"), ("timeoutSeconds", str(timeout_seconds))]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        if allow_bookmarks:
            query.append(("allowWatchBookmarks", "true"))
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        idle = inactivity_timeout if inactivity_timeout is not None else timeout_seconds + 30
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self._timeout, sock_read=idle)
        started = time.monotonic()
        resp = await self._open(
            "watch", "GET", rt, rt.path(namespace), query=query, timeout=timeout
        )
        self._observe("watch", rt, resp.status, started)
        buffer = b""
        try:
            async for chunk in resp.content.iter_any():
                buffer += chunk
                if len(buffer) > MAX_WATCH_LINE and b"\n" not in buffer:
                    raise KubeAPIError(resp.status, "", "watch event larger than the line limit")
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield _watch_event(line)
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise KubeUnavailable(0, "", f"watch {rt.plural}: {exc or type(exc).__name__}") from exc
        finally:
            resp.release()
        if buffer.strip():
            yield _watch_event(buffer)


def _watch_event(line: bytes) -> tuple[str, dict]:
    try:
        event = json.loads(line)
        kind, obj = event["type"], event["object"]
    except (ValueError, KeyError, TypeError) as exc:
        raise KubeAPIError(200, "", f"malformed watch event: {line[:200]!r}") from exc
    if kind == "ERROR":
        status = int(obj.get("code") or 500) if isinstance(obj, dict) else 500
        raise api_error(status, obj if isinstance(obj, dict) else None)
    return kind, obj
