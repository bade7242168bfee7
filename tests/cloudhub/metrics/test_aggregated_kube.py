"""``kubectl top node`` / ``kubectl top pod`` (the real kubectl 1.20) on the real
kube-apiserver 1.20, through its aggregation layer: APIService ``v1beta1.metrics.k8s.io``
with the hub CA as ``caBundle``, the API server proxying with its front-proxy client
certificate (``--proxy-client-cert-file``) to the hub's HTTPS aggregated API, which takes
the front-proxy CA from ``kube-system/extension-apiserver-authentication``. The hub is
reached through an ``ExternalName`` Service (``localhost``: no kube-proxy runs); the
aggregator checks the hub's certificate for ``<service>.<namespace>.svc``.

Also the GET the HPA controller's resource metrics client makes (pods of a namespace by
label selector), and callers that are not the front proxy are refused.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from cloudhub.hub import Hub
from cloudhub.kube import PODS, ResourceType
from cloudhub.metrics.aggregated import APISERVICES, publish_ca_bundle
from cloudhub.metrics.extension import MetricsExtension
from cloudhub.metrics.settings import HubMetricsSettings
from cloudhub.settings import load_hub_settings
from protocol import pki
from protocol.transport import TLSCredentials
from tests.cloudhub.hub.conftest import KUBE_APISERVER, TEST_SETTINGS
from tests.cloudhub.metrics.helpers import body, sample
from tests.edgeagent.hublink.fleet import eventually, free_port, unique
from tests.edgeagent.hublink.objects import pod

pytestmark = [pytest.mark.slow, pytest.mark.kubeapiserver]

SERVICES = ResourceType("", "v1", "services", "Service", True)
APISERVICE = "v1beta1.metrics.k8s.io"
SERVICE = "cloudhub-metrics"


def kubectl_run(kubectl: str, kubeconfig, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [kubectl, "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def api_get(server, path: str) -> tuple[int, dict]:
    request = urllib.request.Request(
        server.url + path, headers={"Authorization": f"Bearer {server.token}"}
    )
    try:
        with urllib.request.urlopen(request, context=server.ssl_context(), timeout=15) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


@pytest.fixture
def serving(pki_ca, namespace) -> TLSCredentials:
    """The hub's serving certificate from the hub CA, naming the Service as the
    aggregator dials it (and loopback for the edges)."""
    cert, key = pki.issue_server_certificate(
        pki_ca.ca,
        dns_names=["localhost", f"{SERVICE}.{namespace}.svc"],
        ip_addresses=["127.0.0.1"],
        lifetime=86400.0,
        now=time.time(),
    )
    return TLSCredentials(cas=(pki_ca.ca.certificate,), chain=(cert,), private_key=key)


@pytest.mark.parametrize("cluster", [KUBE_APISERVER], indirect=True)
async def test_kubectl_top_through_the_aggregation_layer(
    cluster, hubs, kube, namespace, kubectl, pki_ca, serving, request, tmp_path
) -> None:
    server = request.getfixturevalue("kube_apiserver")
    port = free_port()
    # registered as deploy/overlays/metrics-api does: no caBundle, the hub writes its CA
    await kube.create(
        SERVICES,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": SERVICE, "namespace": namespace},
            "spec": {"type": "ExternalName", "externalName": "localhost"},
        },
    )
    await kube.create(
        APISERVICES,
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": APISERVICE},
            "spec": {
                "group": "metrics.k8s.io",
                "version": "v1beta1",
                "service": {"name": SERVICE, "namespace": namespace, "port": port},
                "groupPriorityMinimum": 100,
                "versionPriority": 100,
            },
        },
    )
    try:
        await top_through_the_hub(
            cluster, hubs, kube, namespace, kubectl, pki_ca, serving, server, port, tmp_path
        )
    finally:
        await kube.delete(APISERVICES, APISERVICE)


async def top_through_the_hub(
    cluster, hubs, kube, namespace, kubectl, pki_ca, serving, server, port, tmp_path
) -> None:
    extension = MetricsExtension(
        HubMetricsSettings(aggregated_api=True, aggregated_host="127.0.0.1", aggregated_port=port)
    )
    settings = load_hub_settings(
        overrides={**TEST_SETTINGS, "kube.kubeconfig": str(cluster.kubeconfig)}
    )
    hub = Hub(settings, credentials=serving, extensions=[extension])
    hubs.hubs.append(hub)
    await hub.start()
    hubs.hub = hub
    aggregated = hub.aggregated_server  # type: ignore[attr-defined]
    # the front-proxy settings came from the cluster's ConfigMap, the caBundle from the hub
    assert aggregated.front_proxy.allowed_names == ("front-proxy-client",)
    registered = await kube.get(APISERVICES, APISERVICE)
    ca_pem = pki.dump_certificate_pem(pki_ca.ca.certificate)
    assert base64.b64decode(registered["spec"]["caBundle"]) == ca_pem
    assert not await publish_ca_bundle(kube, APISERVICE, ca_pem)  # already there
    assert not await publish_ca_bundle(kube, "v1.no-such.example.com", ca_pem)

    node = unique("edge-top")
    hubs.agent(node)
    web = pod("web", namespace, node, "exec sleep 3600")
    web["metadata"]["labels"] = {"app": "web"}
    await kube.create(PODS, web)

    async def node_known():
        return hub.nodes.get(node) if hub.nodes is not None else None

    await eventually(node_known, f"Node {node} registered")

    async def pod_indexed():
        return extension.pods.pod_node(namespace, "web") == node

    await eventually(pod_indexed, "pod web in the hub's index")
    # CPU per 15 s window (ms) and working sets (KiB), as an agent's samples carry them
    now = time.time()
    containers = {(namespace, "web", "app"): (600, 20_480)}
    extension.store.ingest(node, body(1, sample(0, cpu_ms=1500, containers=containers)), now)
    containers = {(namespace, "web", "app"): (1500, 30_720)}
    extension.store.ingest(node, body(2, sample(1, cpu_ms=3000, containers=containers)), now)

    async def available():
        found = await kube.get(APISERVICES, APISERVICE)
        conditions = (found.get("status") or {}).get("conditions") or []
        last.append(conditions)
        return any(c["type"] == "Available" and c["status"] == "True" for c in conditions)

    last: list = []
    await eventually(available, "APIService Available", state=lambda: last[-1:])

    async def proxied():  # the aggregator's proxy handler is registered separately
        try:
            status, _ = await asyncio.to_thread(api_get, server, "/apis/metrics.k8s.io/v1beta1")
        except ValueError:  # Go's plain-text 404 until then
            return False
        return status == 200

    await eventually(proxied, "metrics.k8s.io proxied by the API server")
    top = await asyncio.to_thread(kubectl_run, kubectl, cluster.kubeconfig, "top", "node")
    assert top.returncode == 0, top.stderr
    row = next(line.split() for line in top.stdout.splitlines() if line.startswith(node))
    # 3000 ms of CPU in the latest 15 s window: 200m; working set 4,000,000 - 3,000,000
    # KiB: 976Mi
    assert (row[1], row[3]) == ("200m", "976Mi"), top.stdout
    top = await asyncio.to_thread(
        kubectl_run, kubectl, cluster.kubeconfig, "top", "pod", "-n", namespace
    )
    assert top.returncode == 0, top.stderr
    rows = [line.split() for line in top.stdout.splitlines()[1:]]
    # 1500 ms over 15 s: 100m; 30 MiB working set
    assert rows == [["web", "100m", "30Mi"]], top.stdout

    # the HPA controller's resource metrics client: pods of a namespace by selector
    status, listed = await asyncio.to_thread(
        api_get,
        server,
        f"/apis/metrics.k8s.io/v1beta1/namespaces/{namespace}/pods?labelSelector=app%3Dweb",
    )
    assert status == 200, listed
    assert [i["metadata"]["name"] for i in listed["items"]] == ["web"]
    assert listed["items"][0]["containers"][0]["usage"] == {
        "cpu": "100000000n",
        "memory": "30720Ki",
    }
    status, listed = await asyncio.to_thread(
        api_get,
        server,
        f"/apis/metrics.k8s.io/v1beta1/namespaces/{namespace}/pods?labelSelector=app%3Ddb",
    )
    assert (status, listed["items"]) == (200, [])
    status, missing = await asyncio.to_thread(
        api_get, server, f"/apis/metrics.k8s.io/v1beta1/namespaces/{namespace}/pods/nope"
    )
    assert status == 404 and missing["reason"] == "NotFound"

    # a caller that is not the front proxy (a node certificate of the hub CA): refused
    # in the handshake; the API server's requests go on being served
    context = ssl.create_default_context(
        cadata=pki.dump_certificate_pem(pki_ca.ca.certificate).decode()
    )
    client = pki_ca.node(node)
    cert = tmp_path / "node.pem"
    cert.write_bytes(
        pki.dump_certificate_pem(client.chain) + pki.dump_private_key_pem(client.private_key)
    )
    context.load_cert_chain(str(cert))
    url = f"https://127.0.0.1:{aggregated.port}/apis/metrics.k8s.io/v1beta1/nodes"
    with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
        await asyncio.to_thread(urllib.request.urlopen, url, context=context, timeout=10)
    status, listed = await asyncio.to_thread(api_get, server, "/apis/metrics.k8s.io/v1beta1/nodes")
    assert status == 200 and node in [i["metadata"]["name"] for i in listed["items"]]
