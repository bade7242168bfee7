"""deploy/admission: the ValidatingWebhookConfiguration that sends EdgeUpgrade and
EdgeImagePrePull writes to the hub's node-selection webhook (issue 19, security). Its
pieces fit the base (webhook -> Service port -> container port; the Deployment's
environment turns the webhook on at that port; the serving certificate names the Service
as the API server checks it; the hub may write that configuration's caBundle and no
other), and the reference kube-apiserver accepts it (server-side dry run). The path
through a real API server is tests/cloudhub/hub/test_upgrade_admission_kube.py."""

from __future__ import annotations

import pytest

from cloudhub.settings import load_hub_settings
from cloudhub.upgrade.admission import WEBHOOK_PATH
from tests.deploy.test_image_in_cluster import run
from tests.deploy.test_kustomize import DEPLOY, env_of, render


async def test_the_webhook_points_at_the_hub_of_the_base(kubectl: str) -> None:
    (config,) = await render(kubectl, "admission")
    assert config["kind"] == "ValidatingWebhookConfiguration"
    (hook,) = config["webhooks"]
    assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None"
    assert "caBundle" not in hook["clientConfig"]  # the hub's CA, written by the hub
    (rule,) = hook["rules"]
    assert rule["apiGroups"] == ["apps.edgefleet.io"]
    assert set(rule["resources"]) == {"edgeupgrades", "edgeimageprepulls"}
    assert set(rule["operations"]) == {"CREATE", "UPDATE"}
    target = hook["clientConfig"]["service"]
    assert target["path"] == WEBHOOK_PATH
    base = await render(kubectl, "base")
    (service,) = [d for d in base if d["kind"] == "Service"]
    assert (service["metadata"]["name"], service["metadata"]["namespace"]) == (
        target["name"],
        target["namespace"],
    )
    (port,) = [p for p in service["spec"]["ports"] if p["port"] == target["port"]]
    (deployment,) = [d for d in base if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    (served,) = [p for p in container["ports"] if p["name"] == port["targetPort"]]
    settings = load_hub_settings(environ=env_of(base))
    assert settings.upgrade.admission is True
    assert settings.upgrade.admission_port == served["containerPort"]
    assert settings.upgrade.admission_webhook == config["metadata"]["name"]
    assert f"{target['name']}.{target['namespace']}.svc" in settings.pki.server_names
    grants = [
        rule
        for d in base
        if d["kind"] == "ClusterRole"
        for rule in d["rules"]
        if "validatingwebhookconfigurations" in rule["resources"]
    ]
    assert grants == [
        {
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["validatingwebhookconfigurations"],
            "resourceNames": [config["metadata"]["name"]],
            "verbs": ["get", "update"],
        }
    ]


@pytest.mark.kubeapiserver
async def test_the_reference_apiserver_accepts_the_webhook(kube_apiserver, kubectl: str) -> None:
    k = [kubectl, "--kubeconfig", str(kube_apiserver.kubeconfig)]
    # a dry run only: a configuration for real would refuse the session's other tests'
    # EdgeUpgrades (failurePolicy Fail, no hub behind the Service)
    code, out, err = await run(*k, "apply", "--dry-run=server", "-k", str(DEPLOY / "admission"))
    assert code == 0, err
    assert "edgefleet-node-selection created (server dry run)" in out, out


@pytest.mark.parametrize("overlay", ["overlays/public", "overlays/public-1.20"])
async def test_the_public_overlays_keep_the_webhook_off_the_load_balancer(
    kubectl: str, overlay: str
) -> None:
    # The webhook asks no client certificate (the API server sends none): reachable from
    # the internet it would tell anyone whether any user (any groups) may list or get any
    # nodes, and turn one POST into up to 201 SubjectAccessReviews. Only the edge ports
    # belong on a load balancer; the webhook's Service stays ClusterIP.
    (hook,) = (await render(kubectl, "admission"))[0]["webhooks"]
    target = hook["clientConfig"]["service"]
    docs = await render(kubectl, overlay)
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    webhook_service = services[target["name"]]
    assert webhook_service["spec"].get("type", "ClusterIP") == "ClusterIP"
    assert any(p["port"] == target["port"] for p in webhook_service["spec"]["ports"])
    balanced = {
        (p["port"], p["protocol"], p["targetPort"])
        for s in services.values()
        if s["spec"].get("type") == "LoadBalancer"
        for p in s["spec"]["ports"]
    }
    assert balanced == {(7443, "UDP", "quic"), (7443, "TCP", "websocket"), (7444, "TCP", "join")}


@pytest.mark.parametrize(
    "overlay",
    ["base", "overlays/namespaced", "overlays/ha", "overlays/public", "overlays/public-1.20"],
)
async def test_the_hubs_own_prepulls_pass_the_webhook_in_every_overlay(
    kubectl: str, overlay: str
) -> None:
    # The placement controller creates EdgeImagePrePulls (updateStrategy.prePull) as the
    # hub's ServiceAccount with the EdgePlacement's nodeSelector, open or not: the webhook
    # admits them because that account may list nodes cluster-wide. An overlay whose
    # ClusterRole lost that would have every placement pre-pull refused.
    docs = await render(kubectl, overlay)
    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterRole"}
    bound = {
        d["roleRef"]["name"]
        for d in docs
        if d["kind"] == "ClusterRoleBinding"
        and {"kind": "ServiceAccount", "name": "cloudhub", "namespace": "edgefleet"}
        in d["subjects"]
    }
    listers = [
        name
        for name in bound
        for rule in roles[name]["rules"]
        if "" in rule["apiGroups"]
        and "nodes" in rule["resources"]
        and "list" in rule["verbs"]
        and not rule.get("resourceNames")
    ]
    assert listers, f"{overlay}: the hub may not list nodes cluster-wide"
