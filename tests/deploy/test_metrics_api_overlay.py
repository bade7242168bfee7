"""deploy/overlays/metrics-api: the APIService ``v1beta1.metrics.k8s.io`` pointing at the
hub's aggregated API (issue 17 item 4). It renders with kubectl 1.20's kustomize, its
pieces fit together (APIService -> Service port -> container port; the hub's settings from
the Deployment's environment turn the aggregated API on at that port; the serving
certificate names the Service as the aggregator checks it), and the reference
kube-apiserver accepts every object (server-side dry run). The path through a real
aggregation layer is tests/cloudhub/metrics/test_aggregated_kube.py."""

from __future__ import annotations

import pytest

from cloudhub.settings import load_hub_settings
from tests.deploy.test_image_in_cluster import run
from tests.deploy.test_kustomize import DEPLOY, env_of, render

OVERLAY = "overlays/metrics-api"


async def test_the_overlay_points_the_apiservice_at_the_hub(kubectl: str) -> None:
    docs = await render(kubectl, OVERLAY)
    (apiservice,) = [d for d in docs if d["kind"] == "APIService"]
    spec = apiservice["spec"]
    assert apiservice["metadata"]["name"] == "v1beta1.metrics.k8s.io"
    assert (spec["group"], spec["version"]) == ("metrics.k8s.io", "v1beta1")
    assert "caBundle" not in spec and not spec.get("insecureSkipTLSVerify")  # the hub's CA
    target = spec["service"]
    (service,) = [d for d in docs if d["kind"] == "Service"]
    assert (service["metadata"]["name"], service["metadata"]["namespace"]) == (
        target["name"],
        target["namespace"],
    )
    (port,) = [p for p in service["spec"]["ports"] if p["port"] == target["port"]]
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    (served,) = [p for p in container["ports"] if p["name"] == port["targetPort"]]
    # the public ports stay as the base has them
    assert {p["name"] for p in container["ports"]} >= {"quic", "websocket", "join", "http"}
    env = env_of(docs)
    settings = load_hub_settings(environ=env)
    assert settings.metrics.aggregated_api is True
    assert settings.metrics.aggregated_port == served["containerPort"]
    assert settings.metrics.apiservice == apiservice["metadata"]["name"]
    assert f"{target['name']}.{target['namespace']}.svc" in settings.pki.server_names
    readers = [
        d for d in docs if d["kind"] == "ClusterRole" and "aggregated" in d["metadata"]["name"]
    ]
    assert readers and readers[0]["rules"][0]["apiGroups"] == ["metrics.k8s.io"]


@pytest.mark.kubeapiserver
async def test_the_reference_apiserver_accepts_the_overlay(kube_apiserver, kubectl: str) -> None:
    k = [kubectl, "--kubeconfig", str(kube_apiserver.kubeconfig)]
    # the namespace for real (a dry run does not create it); an APIService for real would
    # break discovery for the session's other tests (no hub behind it)
    code, _, err = await run(*k, "apply", "-f", str(DEPLOY / "hub" / "00-namespace.yaml"))
    assert code == 0, err
    code, out, err = await run(*k, "apply", "--dry-run=server", "-k", str(DEPLOY / OVERLAY))
    assert code == 0, err
    assert (
        "apiservice.apiregistration.k8s.io/v1beta1.metrics.k8s.io created (server dry run)" in out
    )
