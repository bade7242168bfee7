"""Which Kubernetes API calls the hub makes, two ways:

- :func:`static_calls` reads the hub's source: every ``KubeClient`` verb call, every
  ``Informer`` and every ``update_with_retry`` whose resource type is a
  ``cloudhub.kube.resources`` constant (or a module-level ``ResourceType``), in every
  module of ``cloudhub`` except the API server itself (``standalone``) and the client
  (``kube``). A verb call on a client whose resource type it cannot resolve is an error:
  nothing can hide a call from the RBAC check.
- :class:`RecordingKubeClient` records the requests a ``KubeClient`` really sends (method
  and path, hence verb, group, resource, subresource and namespace), for the integration
  flows to replay against the RBAC rules.

A call is ``(api_group, resource, verb)``, with ``resource`` like ``"pods/status"`` for a
subresource, as RBAC rules name them.
"""

from __future__ import annotations

import ast
import importlib
import pathlib
import re
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

from cloudhub.errors import KubeAPIError
from cloudhub.kube import KubeClient
from cloudhub.kube import resources as kube_resources
from cloudhub.kube.resources import ResourceType

REPO = pathlib.Path(__file__).resolve().parents[2]
HUB = REPO / "cloudhub"
EXCLUDED = ("standalone", "kube")

VERBS = {
    "get": "get",
    "list": "list",
    "create": "create",
    "replace": "update",
    "patch": "patch",
    "delete": "delete",
    "watch": "watch",
}

Call = tuple[str, str, str]


class UnresolvedCall(AssertionError):
    """A client verb call whose resource type the scanner cannot resolve."""


def _constants() -> dict[str, ResourceType]:
    found = {
        name: value
        for name, value in vars(kube_resources).items()
        if isinstance(value, ResourceType)
    }
    for path in _modules():
        module = importlib.import_module(_module_name(path))
        for name, value in vars(module).items():
            if isinstance(value, ResourceType):
                found.setdefault(name, value)
    return found


def _modules() -> list[pathlib.Path]:
    return sorted(
        p
        for p in HUB.rglob("*.py")
        if p.relative_to(HUB).parts[0] not in EXCLUDED and "__pycache__" not in p.parts
    )


def _module_name(path: pathlib.Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")


def _last_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _subresource(call: ast.Call) -> str | None:
    for keyword in call.keywords:
        if keyword.arg == "subresource" and isinstance(keyword.value, ast.Constant):
            return keyword.value.value
    return None


def _looks_like_client(node: ast.AST) -> bool:
    text = ast.unparse(node).lower()
    return "client" in text or "kube" in text


#: Functions that make API calls on a resource type passed to them: name -> (position of
#: the resource type argument, (verb, whether a ``subresource=`` applies to it)).
WRAPPERS = {
    "Informer": (1, (("list", False), ("watch", False))),
    "add_informer": (0, (("list", False), ("watch", False))),  # cloudhub.hub.Hub.add_informer
    "scoped_informers": (1, (("list", False), ("watch", False))),  # cloudhub.kube.scoped
    # A read of the object itself, then a write of the object or of its subresource.
    "update_with_retry": (1, (("get", False), ("update", True))),
}

#: Marks a call made only against the embedded API (where the hub is its own admin), e.g.
#: creating its namespace; such calls are listed apart and need no RBAC rule.
EMBEDDED_ONLY = "rbac: embedded API only"
OPERATOR = "rbac: operator's credentials"
"""Marks calls made by a CLI under the operator's kubeconfig, not the hub's account."""


def _forwarded(node: ast.AST, arg: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """True when ``arg`` is a parameter of a wrapper function ``node`` sits in (the wrapper
    itself forwards it; its callers are scanned instead)."""
    if not isinstance(arg, ast.Name):
        return False
    scope = parents.get(node)
    while scope is not None and not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
        scope = parents.get(scope)
    if scope is None or scope.name not in WRAPPERS:
        return False
    return arg.id in {a.arg for a in scope.args.args + scope.args.kwonlyargs}


def static_calls(*, embedded_only: bool = False) -> dict[Call, list[str]]:
    """Every API call in the hub's source: ``{(group, resource, verb): [where, ...]}``.

    Args:
        embedded_only: return instead the calls marked ``# rbac: embedded API only``.

    Raises:
        UnresolvedCall: a client verb call names its resource type indirectly.
    """
    constants = _constants()
    calls: dict[Call, list[str]] = {}

    def add(rt: ResourceType, verb: str, sub: str | None, where: str, line: str) -> None:
        if (EMBEDDED_ONLY in line) != embedded_only:
            return
        resource = f"{rt.plural}/{sub}" if sub else rt.plural
        calls.setdefault((rt.group, resource, verb), []).append(where)

    for path in _modules():
        text = path.read_text()
        lines = text.splitlines()
        tree = ast.parse(text, filename=str(path))
        parents = {
            child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)
        }
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            where = f"{path.relative_to(REPO)}:{node.lineno}"
            # The call's line and the comment line above it may carry the marker.
            line = " ".join(lines[max(0, node.lineno - 2) : node.lineno])
            if OPERATOR in line:
                continue
            func = node.func
            name = _last_name(func)
            if name in WRAPPERS and len(node.args) > WRAPPERS[name][0]:
                position, verbs = WRAPPERS[name]
                arg = node.args[position]
                rt = constants.get(_last_name(arg) or "")
                if rt is None:
                    if _forwarded(node, arg, parents):
                        continue
                    raise UnresolvedCall(f"{where}: {ast.unparse(node)[:80]}")
                for verb, on_subresource in verbs:
                    add(rt, verb, _subresource(node) if on_subresource else None, where, line)
                continue
            if not isinstance(func, ast.Attribute) or func.attr not in VERBS or not node.args:
                continue
            rt = constants.get(_last_name(node.args[0]) or "")
            if rt is None:
                if _looks_like_client(func.value) and not isinstance(node.args[0], ast.Constant):
                    raise UnresolvedCall(
                        f"{where}: {ast.unparse(node)[:80]}: name the resource type with a "
                        "cloudhub.kube.resources constant so that the RBAC check sees it"
                    )
                continue
            add(rt, VERBS[func.attr], _subresource(node), where, line)
    return calls


# -- recording what is really sent --------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """One API request as RBAC sees it."""

    verb: str
    group: str
    resource: str
    """``plural`` or ``plural/subresource``."""
    namespace: str
    """``""`` for cluster-scoped requests and requests across all namespaces."""
    name: str

    @property
    def call(self) -> Call:
        return (self.group, self.resource, self.verb)


_PATH = re.compile(
    r"^/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
    r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>[^/]+))?$"
)


def parse_request(method: str, url: str) -> Request:
    """The RBAC view of ``method url`` (as kube-apiserver's request info resolver does)."""
    parts = urlsplit(url)
    match = _PATH.match(parts.path)
    if match is None:
        raise ValueError(f"not a resource request: {method} {url}")
    query = parse_qs(parts.query)
    name = unquote(match["name"] or "")
    plural = match["plural"]
    if match["ns"] is None and plural == "namespaces" and name:
        # /api/v1/namespaces/NAME is the Namespace object itself.
        pass
    resource = plural + (f"/{match['sub']}" if match["sub"] else "")
    if method == "GET":
        verb = "get" if name else ("watch" if query.get("watch") == ["true"] else "list")
    else:
        verb = {
            "POST": "create",
            "PUT": "update",
            "PATCH": "patch",
            "DELETE": "delete" if name else "deletecollection",
        }[method]
    return Request(verb, match["group"] or "", resource, unquote(match["ns"] or ""), name)


class RecordingKubeClient(KubeClient):
    """A ``KubeClient`` that records every request it sends (``requests``) and those the
    API answered 403 Forbidden (``forbidden``)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.requests: list[Request] = []
        self.forbidden: list[Request] = []

    async def _open(self, verb, method, rt, path, *, query=None, **kwargs):
        url = path + ("?" + "&".join(f"{k}={v}" for k, v in query) if query else "")
        request = parse_request(method, url)
        self.requests.append(request)
        try:
            return await super()._open(verb, method, rt, path, query=query, **kwargs)
        except KubeAPIError as exc:
            if exc.status == 403:
                self.forbidden.append(request)
            raise
