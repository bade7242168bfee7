"""The aggregated API server's refusals and bad input, over real TLS on loopback: callers
that are not the front proxy, requests without a user, verbs and paths it does not serve,
selectors it does not parse; and the front-proxy settings from the ConfigMap. The path
through a real kube-apiserver is in ``test_aggregated_kube.py``."""

from __future__ import annotations

import json
import ssl
import time
from typing import Any

import aiohttp
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes

from cloudhub.aggregation import AggregatedRequest, AggregatedResource
from cloudhub.errors import ConfigError
from cloudhub.metrics.aggregated import (
    AggregatedAPIServer,
    FrontProxy,
    SelectorError,
    front_proxy_config,
    parse_selector,
)
from protocol import pki
from protocol.pki import leaf_certificate_builder

DAY = 86400.0


class Group:
    """A served group that answers from fixed objects and records what it was asked."""

    group = "metrics.k8s.io"
    version = "v1beta1"
    resources = (
        AggregatedResource("nodes", "", "NodeMetrics", namespaced=False),
        AggregatedResource("pods", "", "PodMetrics", namespaced=True),
    )

    def __init__(self) -> None:
        self.asked: list[AggregatedRequest] = []

    async def handle(self, request: AggregatedRequest) -> dict[str, Any] | None:
        self.asked.append(request)
        if request.name == "gone":
            return None
        return {"kind": request.resource.kind, "name": request.name, "ns": request.namespace}


def client_pem(ca: pki.CertificateAuthority, name: str, path) -> str:
    key = pki.generate_private_key()
    cert = leaf_certificate_builder(
        ca,
        x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, name)]),
        key.public_key(),
        DAY,
        time.time(),
        x509.ExtendedKeyUsageOID.CLIENT_AUTH,
    ).sign(ca.private_key, hashes.SHA256())
    path.write_bytes(pki.dump_certificate_pem(cert) + pki.dump_private_key_pem(key))
    return str(path)


@pytest.fixture
async def served(pki_ca, tmp_path):
    front_ca = pki.generate_ca("front-proxy-ca", lifetime=DAY, now=time.time())
    group = Group()
    server = AggregatedAPIServer(
        [group],
        lambda: pki_ca.server,
        FrontProxy(
            client_ca_pem=pki.dump_certificate_pem(front_ca.certificate),
            allowed_names=("front-proxy-client",),
        ),
        host="127.0.0.1",
        port=0,
    )
    port = await server.start()

    def context(cert: str | None) -> ssl.SSLContext:
        ctx = ssl.create_default_context(
            cadata=pki.dump_certificate_pem(pki_ca.ca.certificate).decode()
        )
        if cert is not None:
            ctx.load_cert_chain(cert)
        return ctx

    proxy = context(client_pem(front_ca, "front-proxy-client", tmp_path / "proxy.pem"))
    try:
        yield server, group, f"https://127.0.0.1:{port}", proxy, context, front_ca
    finally:
        await server.aclose()


async def call(url: str, context: ssl.SSLContext, method: str = "GET", **headers: str):
    async with aiohttp.ClientSession() as session:
        async with session.request(method, url, ssl=context, headers=headers) as answer:
            return answer.status, json.loads(await answer.text())


USER = {"X-Remote-User": "alice", "X-Remote-Group": "ops"}


async def test_serves_discovery_get_and_list_for_the_front_proxy(served) -> None:
    _server, group, url, proxy, _context, _ = served
    status, body = await call(f"{url}/apis", proxy)
    assert status == 200 and body["groups"][0]["name"] == "metrics.k8s.io"
    status, body = await call(f"{url}/apis/metrics.k8s.io/v1beta1", proxy)
    assert [r["name"] for r in body["resources"]] == ["nodes", "pods"]
    status, body = await call(f"{url}/apis/metrics.k8s.io/v1beta1/nodes/n1", proxy, **USER)
    assert (status, body) == (200, {"kind": "NodeMetrics", "name": "n1", "ns": None})
    path = "/apis/metrics.k8s.io/v1beta1/namespaces/ns1/pods?labelSelector=app%3Dweb,tier!%3Ddb"
    status, body = await call(url + path, proxy, **USER)
    assert (status, body["ns"], body["name"]) == (200, "ns1", None)
    selector = group.asked[-1].label_selector
    assert selector.matches({"app": "web"}) and not selector.matches({"app": "web", "tier": "db"})
    status, body = await call(
        f"{url}/apis/metrics.k8s.io/v1beta1/namespaces/ns1/pods/gone", proxy, **USER
    )
    assert (status, body["reason"]) == (404, "NotFound")


async def test_refuses_callers_that_are_not_the_front_proxy(served, pki_ca, tmp_path) -> None:
    server, group, url, _proxy, context, front_ca = served
    nodes = f"{url}/apis/metrics.k8s.io/v1beta1/nodes"
    # a certificate of the front-proxy CA with a name not in allowed_names: 403
    other = context(client_pem(front_ca, "someone-else", tmp_path / "other.pem"))
    status, body = await call(nodes, other, **USER)
    assert (status, body["reason"]) == (403, "Forbidden") and server.refused == 1
    # a certificate of another CA (a node's, the hub CA), or none: the handshake fails
    node = pki_ca.node("pi-01")
    path = tmp_path / "node.pem"
    path.write_bytes(
        pki.dump_certificate_pem(node.chain) + pki.dump_private_key_pem(node.private_key)
    )
    for ctx in (context(str(path)), context(None)):
        with pytest.raises((aiohttp.ClientError, ssl.SSLError, ConnectionError)):
            await call(nodes, ctx, **USER)
    assert group.asked == []


async def test_bad_requests(served) -> None:
    server, group, url, proxy, _context, _ = served
    base = f"{url}/apis/metrics.k8s.io/v1beta1"
    status, body = await call(f"{base}/nodes", proxy)  # no user from the front proxy
    assert (status, body["reason"]) == (401, "Unauthorized") and server.refused == 1
    status, body = await call(f"{base}/nodes", proxy, "POST", **USER)
    assert (status, body["reason"]) == (405, "MethodNotAllowed")
    for path in (
        f"{url}/apis/other.k8s.io/v1",
        f"{url}/apis/metrics.k8s.io/v2",
        f"{url}/api/v1/nodes",
        f"{base}/services",
        f"{base}/namespaces/ns1/nodes/n1",  # nodes are cluster-scoped
        f"{base}/pods/p1",  # a pod needs its namespace
        f"{base}/nodes/n1/extra",
    ):
        status, body = await call(path, proxy, **USER)
        assert (status, body["reason"]) == (404, "NotFound"), path
    status, body = await call(f"{base}/pods?labelSelector=app+in+(a,b)", proxy, **USER)
    assert (status, body["reason"]) == (400, "BadRequest")
    assert group.asked == []
    # and it goes on serving
    status, _ = await call(f"{base}/nodes", proxy, **USER)
    assert status == 200


def test_parse_selector() -> None:
    selector = parse_selector("a=1, b==2,c!=3,d,!e")
    assert selector.matches({"a": "1", "b": "2", "d": ""})
    assert not selector.matches({"a": "1", "b": "2", "c": "3", "d": ""})
    assert not selector.matches({"a": "1", "b": "2"})
    assert not selector.matches({"a": "1", "b": "2", "d": "", "e": "x"})
    assert parse_selector(None).empty and parse_selector(" , ").empty
    for bad in ("app in (a,b)", "app notin (a)", "=x", "!=x", "a b=c"):
        with pytest.raises(SelectorError):
            parse_selector(bad)


def test_front_proxy_config_from_the_configmap() -> None:
    parsed = front_proxy_config(
        {
            "requestheader-client-ca-file": "PEM",
            "requestheader-allowed-names": '["front-proxy-client"]',
            "requestheader-username-headers": '["X-Remote-User"]',
            "requestheader-group-headers": '["X-Remote-Group"]',
        }
    )
    assert parsed == FrontProxy(b"PEM", ("front-proxy-client",))
    assert front_proxy_config({"requestheader-client-ca-file": "PEM"}).allowed_names == ()
    for data in (
        {},
        {"requestheader-client-ca-file": " "},
        {"requestheader-client-ca-file": "PEM", "requestheader-allowed-names": "[nope"},
        {"requestheader-client-ca-file": "PEM", "requestheader-allowed-names": '{"a": 1}'},
        {"requestheader-client-ca-file": "PEM", "requestheader-username-headers": "[1]"},
    ):
        with pytest.raises(ConfigError):
            front_proxy_config(data)


async def test_a_front_proxy_ca_that_does_not_load(pki_ca) -> None:
    server = AggregatedAPIServer(
        [Group()], lambda: pki_ca.server, FrontProxy(b"not a PEM"), host="127.0.0.1", port=0
    )
    with pytest.raises(ConfigError):
        await server.start()
