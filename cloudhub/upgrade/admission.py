"""Admission of the resources that act on chosen edge nodes: a validating webhook that
refuses an EdgeUpgrade or EdgeImagePrePull whose ``spec.nodeSelector`` selects nodes its
creator may not see (issue 19, security).

Kubernetes records no creator on an object, so the check happens where the requesting
user is known: the API server's ``AdmissionReview`` (``request.userInfo``), which it sends
to the webhook the ValidatingWebhookConfiguration ``edgefleet-node-selection``
(``deploy/admission/``) registers for CREATE and UPDATE. The rule, asked of the API
server's own authorizer with ``SubjectAccessReview``\\ s (what ``kubectl auth can-i
--as`` asks):

1. a user who may ``list`` Nodes (cluster-wide) sees every node, present and future:
   any selector is admitted;
2. anyone else must bound the selector by name, with ``kubernetes.io/hostname`` in
   ``matchLabels`` or an ``In`` expression on it (the hub sets that label to the node's
   name, and the controllers read it as the Node's name whatever it says:
   :func:`~cloudhub.upgrade.model.selection_labels`), so that no node that joins or is
   relabelled later can be selected; and may ``get`` every node so named (at most
   :data:`MAX_NAMED_NODES`, each one SubjectAccessReview).

An UPDATE that leaves ``spec`` as it was (labels, annotations, finalizers) is admitted
without a check, so a user who may only pause or relabel is not refused for a selection
somebody else made; one that changes ``spec`` is checked as a CREATE is. DELETE is not
registered. A SubjectAccessReview that fails is a refusal (fail closed), as is an
unreadable review; the webhook's ``failurePolicy: Fail`` makes the API server refuse
when the hub does not answer.

On the embedded API there is one user (its bearer token) and no RBAC: the webhook is not
served there.

Sans-I/O: :func:`review` decides from an ``AdmissionReview`` and an ``authorize`` callable;
:class:`SubjectAccessReviewer` is that callable against the API server;
:class:`AdmissionServer` the HTTPS endpoint.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from cloudhub.endpoint import HTTPSEndpoint
from cloudhub.errors import ConfigError, KubeAPIError, KubeNotFound
from cloudhub.kube import KubeClient, ResourceType
from cloudhub.placement.errors import InvalidSpec
from cloudhub.placement.selectors import Operator, parse_label_selector
from cloudhub.upgrade.model import API_GROUP, HOSTNAME_LABEL, PLURAL
from protocol.transport import TLSCredentials
from protocol.transport.tls import server_ssl_context

__all__ = [
    "HOSTNAME_LABEL",
    "MAX_NAMED_NODES",
    "MAX_REVIEW_BYTES",
    "SELECTING_RESOURCES",
    "SUBJECTACCESSREVIEWS",
    "VALIDATINGWEBHOOKS",
    "WEBHOOK_PATH",
    "AdmissionServer",
    "Decision",
    "Requester",
    "SubjectAccessReviewer",
    "keep_webhook_ca_bundle",
    "named_nodes",
    "publish_webhook_ca_bundle",
    "review",
]

log = logging.getLogger(__name__)

WEBHOOK_PATH = "/validate/node-selection"
"""The path the ValidatingWebhookConfiguration names."""

MAX_NAMED_NODES = 200
"""Most nodes a user who may not list Nodes can name in one selector: one
SubjectAccessReview each, within the webhook's 10 s timeout."""

MAX_REVIEW_BYTES = 3 * 1024 * 1024
"""Largest AdmissionReview read (the API server's own request limit is 3 MiB)."""

SELECTING_RESOURCES = frozenset({(API_GROUP, PLURAL), (API_GROUP, "edgeimageprepulls")})
"""``(group, resource)`` of the resources whose ``spec.nodeSelector`` is checked."""

SUBJECTACCESSREVIEWS = ResourceType(
    "authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", False
)
VALIDATINGWEBHOOKS = ResourceType(
    "admissionregistration.k8s.io",
    "v1",
    "validatingwebhookconfigurations",
    "ValidatingWebhookConfiguration",
    False,
)


@dataclass(frozen=True, slots=True)
class Requester:
    """Who asks, from ``AdmissionReview.request.userInfo``."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def from_user_info(cls, info: object) -> Requester:
        info = info if isinstance(info, Mapping) else {}
        extra = info.get("extra") if isinstance(info.get("extra"), Mapping) else {}
        return cls(
            username=str(info.get("username") or ""),
            uid=str(info.get("uid") or ""),
            groups=tuple(str(g) for g in info.get("groups") or () if isinstance(g, str)),
            extra={
                str(k): tuple(str(v) for v in values)
                for k, values in extra.items()
                if isinstance(values, list)
            },
        )


Authorize = Callable[[Requester, str, "str | None"], Awaitable[bool]]
"""``(who, verb, node name or None for all) -> allowed`` on ``nodes``; raises
:class:`~cloudhub.errors.KubeAPIError` when it cannot tell."""


@dataclass(frozen=True, slots=True)
class Decision:
    """The webhook's answer: ``allowed``, and the message shown to the user when not."""

    allowed: bool
    message: str = ""


def named_nodes(selector: object, path: str = "spec.nodeSelector") -> frozenset[str] | None:
    """The node names a ``metav1.LabelSelector`` is bounded to by ``kubernetes.io/hostname``
    (``matchLabels`` or ``In``; several bounds intersect), or ``None`` when it is not
    bounded by name (it may select nodes that join later).

    Raises:
        InvalidSpec: the selector does not parse.
    """
    bound: frozenset[str] | None = None
    for requirement in parse_label_selector(selector, path).requirements():
        if requirement.key == HOSTNAME_LABEL and requirement.operator is Operator.IN:
            values = frozenset(requirement.values)
            bound = values if bound is None else bound & values
    return bound


async def review(body: object, authorize: Authorize) -> tuple[str, Decision]:
    """Decide an ``AdmissionReview`` (see the module docstring).

    Returns:
        ``(request uid, decision)``.

    Raises:
        ValueError: ``body`` is not an AdmissionReview with a ``request`` and a ``uid``
            (the server answers ``400``).
    """
    request = body.get("request") if isinstance(body, Mapping) else None
    if not isinstance(request, Mapping) or not isinstance(request.get("uid"), str):
        raise ValueError("not an AdmissionReview: no request with a uid")
    uid = request["uid"]
    resource = request.get("resource") if isinstance(request.get("resource"), Mapping) else {}
    key = (resource.get("group"), resource.get("resource"))
    if key not in SELECTING_RESOURCES or request.get("subResource"):
        return uid, Decision(True)
    operation = request.get("operation")
    new = request.get("object") if isinstance(request.get("object"), Mapping) else {}
    old = request.get("oldObject") if isinstance(request.get("oldObject"), Mapping) else {}
    if operation not in ("CREATE", "UPDATE"):
        return uid, Decision(True)
    if operation == "UPDATE" and new.get("spec") == old.get("spec"):
        return uid, Decision(True)
    spec = new.get("spec") if isinstance(new.get("spec"), Mapping) else {}
    who = Requester.from_user_info(request.get("userInfo"))
    kind = (
        (request.get("kind") or {}).get("kind")
        if isinstance(request.get("kind"), Mapping)
        else None
    )
    name = request.get("name") or (new.get("metadata") or {}).get("name", "")
    what = f"{kind or key[1]} {name!r}"
    try:
        return uid, await _decide(spec.get("nodeSelector"), who, what, authorize)
    except KubeAPIError as exc:
        log.warning("admission of %s by %s: access review failed: %s", what, who.username, exc)
        return uid, Decision(False, f"the hub could not check node access for this {what}: {exc}")


async def _decide(selector: object, who: Requester, what: str, authorize: Authorize) -> Decision:
    try:
        names = named_nodes(selector)
    except InvalidSpec as exc:
        return Decision(False, f"{what}: {exc}")
    if await authorize(who, "list", None):
        return Decision(True)
    if names is None:
        return Decision(
            False,
            f"user {who.username!r} may not list nodes, so this {what} must name the nodes it "
            f"selects: spec.nodeSelector needs {HOSTNAME_LABEL} in matchLabels or an In "
            f"expression on it (an open selector could match nodes the user cannot see)",
        )
    if "" in names:  # a SubjectAccessReview without a name asks about every node
        return Decision(False, f"{what}: {HOSTNAME_LABEL} '' names no node")
    if len(names) > MAX_NAMED_NODES:
        return Decision(
            False,
            f"{what} names {len(names)} nodes; a user who may not list nodes can name at most "
            f"{MAX_NAMED_NODES}",
        )
    hidden = [name for name in sorted(names) if not await authorize(who, "get", name)]
    if hidden:
        shown = ", ".join(hidden[:5]) + (f" and {len(hidden) - 5} more" if len(hidden) > 5 else "")
        return Decision(
            False,
            f"user {who.username!r} may not get node(s) {shown}, which this {what} selects",
        )
    return Decision(True)


class SubjectAccessReviewer:
    """:data:`Authorize` against the API server (``create subjectaccessreviews``)."""

    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube

    async def __call__(self, who: Requester, verb: str, name: str | None) -> bool:
        attributes: dict[str, Any] = {"verb": verb, "group": "", "resource": "nodes"}
        if name is not None:
            attributes["name"] = name
        spec: dict[str, Any] = {"user": who.username, "resourceAttributes": attributes}
        if who.groups:
            spec["groups"] = list(who.groups)
        if who.uid:
            spec["uid"] = who.uid
        if who.extra:
            spec["extra"] = {k: list(v) for k, v in who.extra.items()}
        # rbac: hub's ClusterRole (create subjectaccessreviews)
        answer = await self.kube.create(
            SUBJECTACCESSREVIEWS,
            {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec},
        )
        return bool((answer.get("status") or {}).get("allowed"))


def _answer(api_version: str, uid: str, decision: Decision) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": decision.allowed}
    if not decision.allowed:
        response["status"] = {"code": 403, "reason": "Forbidden", "message": decision.message}
    return {"apiVersion": api_version, "kind": "AdmissionReview", "response": response}


async def _read_body(content: Any, limit: int) -> bytes:
    """The whole request body, up to ``limit`` bytes.

    ``StreamReader.read(n)`` returns what is buffered, not ``n`` bytes: one read cut
    reviews over aiohttp's read buffer (about 128 KiB, timing-dependent) short, and the
    truncated JSON was refused as unreadable.

    Raises:
        ValueError: the body is longer than ``limit`` bytes.
    """
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = await content.read(limit + 1 - size)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise ValueError(f"body over {limit} bytes")


def _field(request: Mapping[str, Any], name: str, key: str) -> str:
    """``request[name][key]`` as text for the log line, ``""`` when either is missing or
    not what a review holds (the decision has been made: an odd shape must not turn the
    answer into a 500)."""
    part = request.get(name)
    return str(part.get(key, "")) if isinstance(part, Mapping) else ""


class AdmissionServer(HTTPSEndpoint):
    """HTTPS endpoint of the webhook: ``POST`` :data:`WEBHOOK_PATH` with an AdmissionReview
    (``admission.k8s.io/v1`` or ``v1beta1``, answered in the same version), ``/healthz``.

    The API server sends no client certificate to webhooks unless it is given an admission
    kubeconfig, so none is asked for. Whoever reaches the port may therefore ask, for any
    user and groups, what a SubjectAccessReview would tell only those allowed to create
    one (may they list nodes, get these), at up to ``MAX_NAMED_NODES + 1`` reviews per
    POST: the port belongs on a ClusterIP Service only (``deploy/overlays/public`` puts
    only the edge ports on its load balancer).

    Args:
        authorize: the access check (:class:`SubjectAccessReviewer`).
        credentials: the hub's serving credentials; the certificate must name
            ``<service>.<namespace>.svc`` of the webhook's Service.
        host, port: where to listen (port 0: any free one).
    """

    def __init__(
        self,
        authorize: Authorize,
        credentials: Callable[[], TLSCredentials],
        *,
        host: str,
        port: int,
    ) -> None:
        super().__init__(host=host, port=port)
        self.authorize = authorize
        self._credentials = credentials
        self.denied = 0
        """Reviews answered ``allowed: false`` (for logs and tests)."""

    what = "admission webhook (node selection)"

    def ssl_context(self) -> ssl.SSLContext:
        """Our chain; no client certificate asked (see the class docstring).

        Raises:
            ConfigError: the serving credentials do not load.
        """
        try:
            context = server_ssl_context(self._credentials())
        except Exception as exc:
            raise ConfigError(f"admission webhook TLS: {exc}") from exc
        context.verify_mode = ssl.CERT_NONE
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        return context

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        if request.path in ("/healthz", "/readyz", "/livez"):
            return web.Response(text="ok")
        if request.path != WEBHOOK_PATH:
            return web.Response(status=404, text=f"no webhook at {request.path}\n")
        if request.method != "POST":
            return web.Response(status=405, text="POST an AdmissionReview\n")
        try:
            body = json.loads(await _read_body(request.content, MAX_REVIEW_BYTES))
            uid, decision = await review(body, self.authorize)
        except (ValueError, RecursionError) as exc:  # json.JSONDecodeError is a ValueError;
            # RecursionError: nested deeper than the interpreter's recursion limit
            log.warning("admission webhook: unreadable review refused: %s", exc)
            return web.Response(status=400, text=f"not an AdmissionReview: {exc}\n")
        api_version = str(body.get("apiVersion") or "admission.k8s.io/v1")
        request_info = body["request"]
        target = " ".join(
            str(part)
            for part in (
                request_info.get("operation"),
                _field(request_info, "resource", "resource"),
                request_info.get("name", ""),
            )
        )
        user = _field(request_info, "userInfo", "username")
        if decision.allowed:
            log.info("admission webhook: %s by %s allowed", target, user)
        else:
            self.denied += 1
            log.warning("admission webhook: %s by %s denied: %s", target, user, decision.message)
        return web.json_response(_answer(api_version, uid, decision))


async def publish_webhook_ca_bundle(
    kube: KubeClient, name: str, ca_pem: bytes, *, warn_missing: bool = True
) -> bool:
    """Write the hub CA into every webhook's ``clientConfig.caBundle`` of the
    ValidatingWebhookConfiguration ``name`` (the CA is made at the hub's first start, so
    no manifest can carry it; as for the metrics APIService). Returns whether it wrote
    (``False``: already there, or no such configuration, logged as a warning unless
    ``warn_missing`` is false).

    Raises:
        KubeAPIError: the read or the write was refused (RBAC: ``get`` and ``update`` on
            ``validatingwebhookconfigurations`` named ``name``), or it changed meanwhile
            (``KubeConflict``: the next start writes it).
    """
    import base64

    bundle = base64.b64encode(ca_pem).decode("ascii")
    try:
        found = await kube.get(VALIDATINGWEBHOOKS, name)
    except KubeNotFound:
        (log.warning if warn_missing else log.debug)(
            "ValidatingWebhookConfiguration %s does not exist: EdgeUpgrades and "
            "EdgeImagePrePulls are admitted without the node-access check "
            "(kubectl apply -f deploy/admission/)",
            name,
        )
        return False
    webhooks = found.get("webhooks") or []
    if all((w.get("clientConfig") or {}).get("caBundle") == bundle for w in webhooks):
        return False
    for webhook in webhooks:
        webhook.setdefault("clientConfig", {})["caBundle"] = bundle
    # rbac: hub's ClusterRole (update validatingwebhookconfigurations edgefleet-node-selection)
    await kube.replace(VALIDATINGWEBHOOKS, found)
    log.info("ValidatingWebhookConfiguration %s: caBundle set to the hub CA", name)
    return True


async def keep_webhook_ca_bundle(
    kube: KubeClient, name: str, ca_pem: Callable[[], bytes], interval: float
) -> None:
    """Forever: every ``interval`` seconds, :func:`publish_webhook_ca_bundle` of
    ``ca_pem()`` (read each time: the serving credentials' CA as it is then) again.

    The configuration is applied after the hub runs (docs/hub.md: ``kubectl apply -k
    deploy/admission`` once the hub answers), and a ``kubectl replace`` or a GitOps sync
    writes it back without the bundle: published once at start, the API server could not
    verify the hub and refused every EdgeUpgrade and EdgeImagePrePull write until the
    hub's next restart. One ``get`` per interval; a refused or conflicting write is logged
    and tried again at the next. Never raises but ``CancelledError`` (a hub task).
    """
    while True:
        await asyncio.sleep(interval)
        try:
            pem = ca_pem()
        except Exception as exc:  # credentials being rewritten: the next round reads them
            log.warning("ValidatingWebhookConfiguration %s: hub CA not read (%s)", name, exc)
            continue
        try:
            await publish_webhook_ca_bundle(kube, name, pem, warn_missing=False)
        except KubeAPIError as exc:
            log.warning("ValidatingWebhookConfiguration %s: caBundle not written (%s)", name, exc)
