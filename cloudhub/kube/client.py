"""Raw-JSON requests to the Kubernetes API through kubernetes_asyncio's ApiClient.

The ApiClient brings configuration (kubeconfig, in-cluster), TLS and
credentials; requests go through ``call_api(..., _preload_content=False)`` so
that bodies stay JSON dicts.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config.config_exception import ConfigException

from cloudhub.kube.errors import AlreadyExists, Conflict, Gone, KubeError, NotFound, TransportError
from cloudhub.kube.resources import Resource

__all__ = ["KubeClient"]

_STATUS_ERRORS = {404: NotFound, 410: Gone}


class KubeClient:
    """A thin raw-JSON client.

    Args:
        api: a configured kubernetes_asyncio ``ApiClient`` (closed by :meth:`close`).
        request_timeout_s: timeout of ordinary requests (watches set their own).
    """

    def __init__(self, api: k8s.ApiClient, request_timeout_s: float = 30.0) -> None:
        self.api = api
        self.request_timeout_s = request_timeout_s

    @classmethod
    async def from_kubeconfig(cls, path: str | None = None) -> KubeClient:
        """A client from a kubeconfig file (``None``: the in-cluster service account).

        Raises:
            KubeError: the configuration cannot be loaded.
        """
        configuration = k8s.Configuration()
        try:
            if path is None:
                k8s_config.load_incluster_config(client_configuration=configuration)
            else:
                await k8s_config.load_kube_config(
                    config_file=str(path), client_configuration=configuration
                )
        except (ConfigException, OSError) as exc:
            raise KubeError(0, "ConfigurationError", str(exc)) from exc
        return cls(k8s.ApiClient(configuration))

    async def close(self) -> None:
        """Close the underlying HTTP session."""
        await self.api.close()

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- requests ------------------------------------------------------------------

    async def _request(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, Any]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout_s: float | None = None,
    ) -> aiohttp.ClientResponse:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        try:
            response = await self.api.call_api(
                path,
                method,
                query_params=query or [],
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _return_http_data_only=True,
                _request_timeout=timeout_s or self.request_timeout_s,
            )
        except ApiException as exc:  # raised for malformed requests
            raise KubeError(exc.status or 0, str(exc.reason), str(exc.body or "")) from exc
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise TransportError(0, type(exc).__name__, str(exc)) from exc
        if 200 <= response.status < 300:
            return response
        try:
            raw = await response.read()
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise TransportError(0, type(exc).__name__, str(exc)) from exc
        finally:
            response.release()
        raise _error(response.status, raw)

    async def _json(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        response = await self._request(method, path, **kw)
        try:
            raw = await response.read()
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise TransportError(0, type(exc).__name__, str(exc)) from exc
        finally:
            response.release()
        return json.loads(raw) if raw else {}

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> dict:
        """Read one object. Raises NotFound."""
        return await self._json("GET", resource.path(namespace, name))

    async def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        page_size: int = 500,
    ) -> tuple[list[dict[str, Any]], str]:
        """List every object, page by page (``limit``/``continue``).

        Returns:
            ``(items, resourceVersion)``; watch from that resourceVersion.
        """
        items: list[dict[str, Any]] = []
        cont = ""
        while True:
            query: list[tuple[str, Any]] = [("limit", page_size)]
            if label_selector:
                query.append(("labelSelector", label_selector))
            if cont:
                query.append(("continue", cont))
            page = await self._json("GET", resource.path(namespace), query=query)
            kind = resource.kind
            for item in page.get("items") or []:
                item.setdefault("kind", kind)
                item.setdefault("apiVersion", resource.api_version)
                items.append(item)
            meta = page.get("metadata") or {}
            cont = meta.get("continue") or ""
            if not cont:
                return items, str(meta.get("resourceVersion") or "")

    async def watch(
        self,
        resource: Resource,
        resource_version: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        timeout_s: int = 300,
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """Watch from ``resource_version`` with bookmarks, until the server ends it.

        Yields:
            ``(type, object)`` with type ADDED, MODIFIED, DELETED or BOOKMARK.

        Raises:
            Gone: the resourceVersion is too old: relist.
            KubeError: any other failure.
        """
        query: list[tuple[str, Any]] = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", timeout_s),
        ]
        if label_selector:
            query.append(("labelSelector", label_selector))
        response = await self._request(
            "GET", resource.path(namespace), query=query, timeout_s=timeout_s + 30
        )
        try:
            while True:
                try:
                    line = await response.content.readline()
                except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                    raise TransportError(0, type(exc).__name__, str(exc)) from exc
                if not line:
                    return
                if not line.strip():
                    continue
                event = json.loads(line)
                kind = event.get("type")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    raise _error(int(obj.get("code") or 500), json.dumps(obj).encode())
                obj.setdefault("kind", resource.kind)
                obj.setdefault("apiVersion", resource.api_version)
                yield kind, obj
        finally:
            response.release()

    async def create(
        self, resource: Resource, body: Mapping[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        """Create an object. Raises AlreadyExists."""
        return await self._json("POST", resource.path(namespace), body=dict(body))

    async def delete(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        uid: str | None = None,
        grace_period_s: int | None = None,
    ) -> None:
        """Delete an object (with a uid precondition when given). Raises NotFound, Conflict."""
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid:
            body["preconditions"] = {"uid": uid}
        if grace_period_s is not None:
            body["gracePeriodSeconds"] = grace_period_s
        await self._json("DELETE", resource.path(namespace, name), body=body)

    async def patch_status(
        self, resource: Resource, name: str, namespace: str | None, status: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Merge-patch the status subresource. Raises NotFound."""
        return await self._json(
            "PATCH",
            resource.path(namespace, name, "status"),
            body={"status": dict(status)},
            content_type="application/merge-patch+json",
        )


def _error(status: int, raw: bytes) -> KubeError:
    try:
        body = json.loads(raw) if raw else {}
    except ValueError:
        body = {}
    reason = str(body.get("reason") or "")
    message = str(body.get("message") or raw[:200].decode(errors="replace"))
    if status == 409:
        cls = AlreadyExists if reason == "AlreadyExists" else Conflict
        return cls(status, reason or "Conflict", message)
    cls = _STATUS_ERRORS.get(status, KubeError)
    return cls(status, reason or str(status), message)
