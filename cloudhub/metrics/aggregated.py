"""The hub's aggregated API server: ``metrics.k8s.io/v1beta1`` over HTTPS for a real
cluster's kube-apiserver, behind the APIService ``v1beta1.metrics.k8s.io``
(``deploy/overlays/metrics-api``), as metrics-server serves it.

- TLS with the hub's serving certificate (from the hub CA: the APIService's ``caBundle``
  is the hub CA, and the certificate must name ``<service>.<namespace>.svc``, which the
  aggregator checks). The caller must present a client certificate from the front-proxy
  CA (the API server's ``--requestheader-client-ca-file``; :func:`front_proxy_config`
  reads it from ``kube-system/extension-apiserver-authentication`` as every extension API
  server does), else the handshake fails; its common name must be one of
  ``--requestheader-allowed-names`` when that list is not empty (``403`` otherwise).
- The requesting user comes from the username headers (``X-Remote-User`` by default) and
  its groups from the group headers; a resource request without a user is ``401``. Every
  request is logged with that user. Authorization is the API server's: it has already
  checked the user's RBAC before proxying (``get``/``list`` on ``metrics.k8s.io``).
- Paths: discovery (``/apis``, ``/apis/{group}``, ``/apis/{group}/{version}``), ``get`` and
  ``list`` of each :class:`~cloudhub.aggregation.AggregatedAPI` resource
  (``/apis/{group}/{version}[/namespaces/{ns}]/{plural}[/{name}]``), ``/healthz``,
  ``/readyz``, ``/livez``. Other verbs: ``405``; unknown paths: ``404``; a
  ``labelSelector`` that does not parse: ``400``; all as ``Status`` objects.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from cryptography import x509

from cloudhub.aggregation import AggregatedAPI, AggregatedRequest, AggregatedResource
from cloudhub.endpoint import HTTPSEndpoint
from cloudhub.errors import ConfigError, HubError, KubeNotFound
from cloudhub.kube import KubeClient, ResourceType
from protocol.transport import TLSCredentials
from protocol.transport.tls import server_ssl_context

__all__ = [
    "AggregatedAPIServer",
    "EqualitySelector",
    "FrontProxy",
    "SelectorError",
    "front_proxy_config",
    "parse_selector",
    "publish_ca_bundle",
]

log = logging.getLogger(__name__)

AUTHENTICATION_CONFIGMAP = ("kube-system", "extension-apiserver-authentication")
"""Where kube-apiserver publishes its front-proxy settings for extension API servers."""


@dataclass(frozen=True, slots=True)
class FrontProxy:
    """The API server's front-proxy (request header) authentication settings.

    Attributes:
        client_ca_pem: the CA bundle of ``--requestheader-client-ca-file``.
        allowed_names: ``--requestheader-allowed-names`` (empty: any certificate from
            the CA).
        username_headers: ``--requestheader-username-headers``.
        group_headers: ``--requestheader-group-headers``.
    """

    client_ca_pem: bytes
    allowed_names: tuple[str, ...] = ()
    username_headers: tuple[str, ...] = ("X-Remote-User",)
    group_headers: tuple[str, ...] = ("X-Remote-Group",)


def front_proxy_config(data: Mapping[str, str]) -> FrontProxy:
    """The front-proxy settings from the ``extension-apiserver-authentication`` ConfigMap's
    ``data`` (its list values are JSON arrays, as kube-apiserver writes them).

    Raises:
        ConfigError: no ``requestheader-client-ca-file`` (the API server runs without
            ``--requestheader-client-ca-file``), or a list value that is not a JSON array
            of strings.
    """
    import json

    ca = data.get("requestheader-client-ca-file") or ""
    if not ca.strip():
        raise ConfigError(
            "the API server publishes no requestheader-client-ca-file in "
            "kube-system/extension-apiserver-authentication: run it with "
            "--requestheader-client-ca-file (and --proxy-client-cert-file/--proxy-client-key-file)"
        )

    def names(key: str, default: tuple[str, ...]) -> tuple[str, ...]:
        text = data.get(key)
        if text is None:
            return default
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"{key} in the authentication ConfigMap: {exc}") from exc
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{key} in the authentication ConfigMap: not a list of strings")
        return tuple(value) or default

    return FrontProxy(
        client_ca_pem=ca.encode(),
        allowed_names=names("requestheader-allowed-names", ()),
        username_headers=names("requestheader-username-headers", ("X-Remote-User",)),
        group_headers=names("requestheader-group-headers", ("X-Remote-Group",)),
    )


APISERVICES = ResourceType("apiregistration.k8s.io", "v1", "apiservices", "APIService", False)


async def publish_ca_bundle(kube: KubeClient, name: str, ca_pem: bytes) -> bool:
    """Write the hub CA into the APIService ``name``'s ``spec.caBundle`` (as cert-manager's
    cainjector does), so that the aggregator trusts the hub's serving certificate; the
    hub CA is made at the hub's first start, so no manifest can carry it. Returns whether
    it wrote (``False``: already there, or no such APIService, logged).

    Raises:
        KubeAPIError: the API server refused the read or the patch (RBAC: ``get`` and
            ``patch`` on ``apiservices`` named ``name``).
    """
    import base64

    try:
        found = await kube.get(APISERVICES, name)
    except KubeNotFound:
        log.warning("APIService %s does not exist: nothing proxies metrics.k8s.io here", name)
        return False
    bundle = base64.b64encode(ca_pem).decode("ascii")
    if (found.get("spec") or {}).get("caBundle") == bundle:
        return False
    await kube.patch(APISERVICES, name, {"spec": {"caBundle": bundle}})
    log.info("APIService %s: caBundle set to the hub CA", name)
    return True


class SelectorError(HubError, ValueError):
    """A ``labelSelector`` this server does not parse (answered ``400``)."""


@dataclass(frozen=True, slots=True)
class EqualitySelector:
    """An equality-based label selector: ``(key, op, value)`` with op ``=``, ``!=``,
    ``exists`` or ``!exists`` (``value`` ``""`` for the last two)."""

    requirements: tuple[tuple[str, str, str], ...] = ()

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        for key, op, value in self.requirements:
            have = labels.get(key)
            if op == "=" and have != value:
                return False
            if op == "!=" and have == value:
                return False
            if op == "exists" and have is None:
                return False
            if op == "!exists" and have is not None:
                return False
        return True


def parse_selector(text: str | None) -> EqualitySelector:
    """Parse ``labelSelector``: ``a=b``, ``a==b``, ``a!=b``, ``a``, ``!a``, comma-separated
    (what ``kubectl top -l`` and the HPA controller's ``matchLabels`` send).

    Raises:
        SelectorError: a set-based requirement (``in``, ``notin``) or an empty key.
    """
    requirements: list[tuple[str, str, str]] = []
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        if "(" in part or " in " in f" {part} " or " notin " in f" {part} ":
            raise SelectorError(f"set-based requirement {part!r} is not supported here")
        if "!=" in part:
            key, _, value = part.partition("!=")
            op = "!="
        elif "=" in part:
            key, _, value = part.partition("==" if "==" in part else "=")
            op = "="
        elif part.startswith("!"):
            key, op, value = part[1:], "!exists", ""
        else:
            key, op, value = part, "exists", ""
        key, value = key.strip(), value.strip()
        if not key or " " in key:
            raise SelectorError(f"requirement {part!r} has no valid key")
        requirements.append((key, op, value))
    return EqualitySelector(tuple(requirements))


def _status(code: int, reason: str, message: str) -> web.Response:
    return web.json_response(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code,
        },
        status=code,
    )


def _common_name(der: bytes | None) -> str:
    if not der:
        return ""
    names = x509.load_der_x509_certificate(der).subject.get_attributes_for_oid(
        x509.NameOID.COMMON_NAME
    )
    return str(names[0].value) if names else ""


class AggregatedAPIServer(HTTPSEndpoint):
    """HTTPS server for aggregated API groups (see the module docstring).

    Args:
        apis: the groups served (``ResourceMetricsGroup``).
        credentials: the hub's serving credentials (called when the server starts).
        front_proxy: the API server's front-proxy settings.
        host, port: where to listen (port 0: any free one).
    """

    def __init__(
        self,
        apis: Sequence[AggregatedAPI],
        credentials: Callable[[], TLSCredentials],
        front_proxy: FrontProxy,
        *,
        host: str,
        port: int,
    ) -> None:
        super().__init__(host=host, port=port)
        self.apis = {(a.group, a.version): a for a in apis}
        self._credentials = credentials
        self.front_proxy = front_proxy
        self.refused = 0
        """Requests refused for the caller's identity (for tests and logs)."""

    what = "aggregated API (metrics.k8s.io)"

    def ssl_context(self) -> ssl.SSLContext:
        """Our chain, the front-proxy CA for client certificates.

        Raises:
            ConfigError: the CA bundle or the serving credentials do not load.
        """
        own = self._credentials()
        try:
            trusted = TLSCredentials.from_pem(self.front_proxy.client_ca_pem)
            context = server_ssl_context(
                TLSCredentials(cas=trusted.cas, chain=own.chain, private_key=own.private_key)
            )
        except Exception as exc:
            raise ConfigError(f"aggregated API TLS: {exc}") from exc
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        return context

    def _caller(self, request: web.BaseRequest) -> tuple[str, str | None]:
        """``(user, refusal or None)``; the user is ``""`` when no header names one."""
        transport = request.transport
        sslobj = transport.get_extra_info("ssl_object") if transport is not None else None
        name = _common_name(sslobj.getpeercert(binary_form=True) if sslobj else None)
        allowed = self.front_proxy.allowed_names
        if not name or (allowed and name not in allowed):
            return "", f"client certificate {name!r} is not an allowed front proxy"
        for header in self.front_proxy.username_headers:
            user = request.headers.get(header, "").strip()
            if user:
                return user, None
        return "", None

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if parts in (["healthz"], ["readyz"], ["livez"]):
            return web.Response(text="ok")
        user, refusal = self._caller(request)
        if refusal is not None:
            self.refused += 1
            log.warning("aggregated API: refused %s %s: %s", request.method, request.path, refusal)
            return _status(403, "Forbidden", f"forbidden: {refusal}")
        if request.method != "GET":
            return _status(405, "MethodNotAllowed", f"the server does not allow {request.method}")
        if parts == ["apis"]:
            return web.json_response(self._group_list())
        if len(parts) < 2 or parts[0] != "apis":
            return _status(404, "NotFound", f"the server could not find {request.path}")
        versions = [a for (g, _), a in self.apis.items() if g == parts[1]]
        if not versions:
            return _status(404, "NotFound", f"the server could not find {request.path}")
        if len(parts) == 2:
            return web.json_response(self._group(versions))
        api = self.apis.get((parts[1], parts[2]))
        if api is None:
            return _status(404, "NotFound", f"the server could not find {request.path}")
        if len(parts) == 3:
            return web.json_response(self._resource_list(api))
        if not user:
            self.refused += 1
            log.warning("aggregated API: %s without a user header refused", request.path)
            return _status(401, "Unauthorized", "Unauthorized: no user from the front proxy")
        return await self._resource(request, api, parts[3:], user)

    async def _resource(
        self, request: web.BaseRequest, api: AggregatedAPI, rest: list[str], user: str
    ) -> web.StreamResponse:
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        by_plural = {r.plural: r for r in api.resources}
        resource: AggregatedResource | None = by_plural.get(rest[0]) if rest else None
        if resource is None or len(rest) > 2 or (namespace and not resource.namespaced):
            return _status(404, "NotFound", f"the server could not find {request.path}")
        name = rest[1] if len(rest) == 2 else None
        if name is not None and resource.namespaced and namespace is None:
            return _status(404, "NotFound", f"the server could not find {request.path}")
        try:
            selector = parse_selector(request.query.get("labelSelector"))
        except SelectorError as exc:
            return _status(400, "BadRequest", f"labelSelector: {exc}")
        log.info("aggregated API: %s %s for %s", request.method, request.path_qs, user)
        answer = await api.handle(
            AggregatedRequest(resource, namespace, name, selector, dict(request.query))
        )
        if answer is None:
            return _status(404, "NotFound", f'{resource.plural}.{api.group} "{name}" not found')
        return web.json_response(answer)

    def _group(self, apis: list[AggregatedAPI]) -> dict[str, Any]:
        versions = [{"groupVersion": f"{a.group}/{a.version}", "version": a.version} for a in apis]
        return {
            "kind": "APIGroup",
            "apiVersion": "v1",
            "name": apis[0].group,
            "versions": versions,
            "preferredVersion": versions[0],
        }

    def _group_list(self) -> dict[str, Any]:
        groups: dict[str, list[AggregatedAPI]] = {}
        for (group, _), api in self.apis.items():
            groups.setdefault(group, []).append(api)
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [self._group(apis) for apis in groups.values()],
        }

    def _resource_list(self, api: AggregatedAPI) -> dict[str, Any]:
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{api.group}/{api.version}",
            "resources": [r.discovery() for r in api.resources],
        }
