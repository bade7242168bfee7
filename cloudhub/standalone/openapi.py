"""``/openapi/v3``: the OpenAPI v3 discovery kubectl needs to validate and apply.

kubectl (1.27 and later) validates manifests before sending them. It first reads
``/openapi/v3`` and the document of the object's group version; when the PATCH
operation of that kind lists the ``fieldValidation`` query parameter, kubectl
leaves validation to the server and sends ``fieldValidation=Strict`` (this
server refuses unknown fields then, see :mod:`decode`). Without these documents
kubectl falls back to downloading ``/openapi/v2`` as protobuf and fails with
"failed to download openapi".

The documents hold the REST paths of every served resource with their
operations and group-version-kind extensions, and for custom resources the
CRD's schema. Built-in kinds get an object schema only (no field list): kubectl
then computes strategic merge patches from its compiled-in types, which carry
the same merge keys.

``/openapi/v2`` is an empty document (protobuf, as kubectl asks for it): kubectl
only falls back to it for kinds the server does not serve, finds no schema there
and skips its own validation, so that the server's answer ("no matches for kind")
reaches the user instead of "failed to download openapi".
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from aiohttp import web

from cloudhub.standalone.errors import StatusError
from cloudhub.standalone.resources import ResourceType

__all__ = ["OpenAPI"]

_NOT_FOUND = StatusError(404, "NotFound", "the server could not find the requested resource")
_PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json")


def _param(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "description": description,
        "schema": {"type": "string", "uniqueItems": True},
    }


_WRITE_PARAMS = [
    _param("dryRun", "When present, indicates that modifications should not be persisted."),
    _param("fieldManager", "A name associated with the actor or entity making these changes."),
    _param(
        "fieldValidation",
        "How the server handles fields it does not know: Ignore, Warn or Strict.",
    ),
]


def _schema_name(rtype: ResourceType) -> str:
    if rtype.custom:
        reversed_group = ".".join(reversed(rtype.group.split(".")))
        return f"{reversed_group}.{rtype.version}.{rtype.kind}"
    group = rtype.group.split(".")[0] if rtype.group else "core"
    return f"io.k8s.api.{group}.{rtype.version}.{rtype.kind}"


class OpenAPI:
    """Builds and serves the OpenAPI v3 documents of a registry's types."""

    def __init__(self, registry: Any) -> None:
        self.registry = registry
        self._cache: dict[str, bytes] = {}
        self._types_seen: tuple[Any, ...] = ()

    def _prefix(self, group: str, version: str) -> str:
        return f"api/{version}" if not group else f"apis/{group}/{version}"

    def _by_group_version(self) -> dict[str, list[ResourceType]]:
        types = tuple(self.registry.types())
        if types != self._types_seen:
            self._types_seen = types
            self._cache = {}
        out: dict[str, list[ResourceType]] = {}
        for rtype in types:
            out.setdefault(self._prefix(rtype.group, rtype.version), []).append(rtype)
        return out

    def _document(self, types: list[ResourceType]) -> dict[str, Any]:
        paths: dict[str, Any] = {}
        schemas: dict[str, Any] = {
            "io.k8s.apimachinery.pkg.apis.meta.v1.Patch": {"type": "object"},
            "io.k8s.apimachinery.pkg.apis.meta.v1.Status": {"type": "object"},
        }
        for rtype in sorted(types, key=lambda t: t.plural):
            gvk = {"group": rtype.group, "version": rtype.version, "kind": rtype.kind}
            name = _schema_name(rtype)
            body_schema: dict[str, Any] = dict(rtype.schema) if rtype.schema else {"type": "object"}
            body_schema["x-kubernetes-group-version-kind"] = [gvk]
            schemas[name] = body_schema
            ref = {"$ref": f"#/components/schemas/{name}"}
            base = "/" + self._prefix(rtype.group, rtype.version)
            collection = (
                f"{base}/namespaces/{{namespace}}/{rtype.plural}"
                if rtype.namespaced
                else f"{base}/{rtype.plural}"
            )
            ok = {"200": {"description": "OK", "content": {"application/json": {"schema": ref}}}}

            def op(
                action: str,
                description: str,
                body: bool,
                gvk: dict[str, str] = gvk,
                ref: dict[str, str] = ref,
                ok: dict[str, Any] = ok,
            ) -> dict[str, Any]:
                out: dict[str, Any] = {
                    "description": description,
                    "parameters": list(_WRITE_PARAMS) if body else [],
                    "responses": ok,
                    "x-kubernetes-action": action,
                    "x-kubernetes-group-version-kind": gvk,
                }
                if body:
                    content = (
                        {
                            t: {
                                "schema": {
                                    "$ref": "#/components/schemas/"
                                    "io.k8s.apimachinery.pkg.apis.meta.v1.Patch"
                                }
                            }
                            for t in _PATCH_TYPES
                        }
                        if action == "patch"
                        else {"application/json": {"schema": ref}}
                    )
                    out["requestBody"] = {"content": content, "required": True}
                return out

            paths[collection] = {
                "get": op("list", f"list or watch objects of kind {rtype.kind}", False),
                "post": op("post", f"create a {rtype.kind}", True),
            }
            item = f"{collection}/{{name}}"
            paths[item] = {
                "get": op("get", f"read the specified {rtype.kind}", False),
                "put": op("put", f"replace the specified {rtype.kind}", True),
                "patch": op("patch", f"partially update the specified {rtype.kind}", True),
                "delete": op("delete", f"delete a {rtype.kind}", False),
            }
            if rtype.status_subresource:
                paths[f"{item}/status"] = {
                    "get": op("get", f"read status of the specified {rtype.kind}", False),
                    "put": op("put", f"replace status of the specified {rtype.kind}", True),
                    "patch": op("patch", f"partially update status of the {rtype.kind}", True),
                }
        return {
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": "v1.20.2"},
            "paths": paths,
            "components": {"schemas": schemas},
        }

    def _doc_bytes(self, key: str, types: list[ResourceType]) -> bytes:
        found = self._cache.get(key)
        if found is None:
            found = json.dumps(self._document(types), separators=(",", ":")).encode()
            self._cache[key] = found
        return found

    def respond(self, request: web.Request, parts: list[str]) -> web.Response:
        """Answer ``/openapi/<parts>``.

        Raises:
            StatusError: 404 for /openapi/v2 and unknown group versions.
        """
        if parts == ["v2"]:
            # An empty gnostic openapi_v2.Document: its protobuf encoding is zero bytes.
            return web.Response(
                body=b"", content_type="application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
            )
        if not parts or parts[0] != "v3":
            raise _NOT_FOUND
        groups = self._by_group_version()
        if len(parts) == 1:
            root = {
                "paths": {
                    key: {
                        "serverRelativeURL": f"/openapi/v3/{key}?hash="
                        + hashlib.sha512(self._doc_bytes(key, types)).hexdigest()[:64].upper()
                    }
                    for key, types in sorted(groups.items())
                }
            }
            return web.Response(body=json.dumps(root).encode(), content_type="application/json")
        key = "/".join(parts[1:])
        types = groups.get(key)
        if types is None:
            raise _NOT_FOUND
        return web.Response(
            body=self._doc_bytes(key, types),
            content_type="application/json",
            headers={"Cache-Control": "no-cache, private"},
        )
