"""deploy/base and its overlays (issue 16 item 5): each renders with kubectl 1.20's built-in
kustomize (v2.0.3, the oldest a supported cluster brings) and applies with
``kubectl apply -k`` to the embedded API; the public overlays put the load balancer's
address on the deploy path (the serving certificate's names and the join address
``cloudhub token create`` prints), and 1.20's uses one protocol per load balancer."""

from __future__ import annotations

import asyncio
import subprocess

import pytest
import yaml

from cloudhub.pki.settings import PKISettings
from cloudhub.standalone import APIServerSettings, EmbeddedAPIServer
from tests.deploy.wheels import REPO

DEPLOY = REPO / "deploy"
KUSTOMIZATIONS = ["base", "overlays/public", "overlays/public-1.20", "overlays/namespaced"]


async def kubectl_run(binary: str, *args: str) -> subprocess.CompletedProcess:
    proc = await asyncio.create_subprocess_exec(
        binary, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    return subprocess.CompletedProcess(args, proc.returncode or 0, out.decode(), err.decode())


async def render(kubectl: str, name: str) -> list[dict]:
    built = await kubectl_run(kubectl, "kustomize", str(DEPLOY / name))
    assert built.returncode == 0, built.stderr
    return [d for d in yaml.safe_load_all(built.stdout) if d]


def env_of(docs: list[dict]) -> dict[str, str]:
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value", "") for e in container["env"] if "value" in e}


@pytest.mark.parametrize("name", KUSTOMIZATIONS)
async def test_kustomization_renders_with_kubectl_1_20(kubectl: str, name: str) -> None:
    docs = await render(kubectl, name)
    kinds = {d["kind"] for d in docs}
    assert {"CustomResourceDefinition", "Deployment", "Service", "ClusterRole"} <= kinds
    assert "PodDisruptionBudget" not in kinds and "APIService" not in kinds
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "Recreate"


async def test_public_overlays_put_the_address_on_the_deploy_path(kubectl: str) -> None:
    base = env_of(await render(kubectl, "base"))
    assert "CLOUDHUB_PKI__PUBLIC_ADDRESS" not in base  # in-cluster only: the first server name
    for name in ("overlays/public", "overlays/public-1.20"):
        docs = await render(kubectl, name)
        env = env_of(docs)
        address = env["CLOUDHUB_PKI__PUBLIC_ADDRESS"]
        host = address.rsplit(":", 1)[0]
        assert host in env["CLOUDHUB_PKI__SERVER_NAMES"].split(",")
        # The hub's settings, loaded from that environment, print that address in joins.
        settings = PKISettings(
            public_address=address, server_names=tuple(env["CLOUDHUB_PKI__SERVER_NAMES"].split(","))
        )
        assert settings.join_address == address
        balancers = [
            d for d in docs if d["kind"] == "Service" and d["spec"].get("type") == "LoadBalancer"
        ]
        protocols = [{p["protocol"] for p in s["spec"]["ports"]} for s in balancers]
        if name.endswith("1.20"):
            assert sorted(map(sorted, protocols)) == [["TCP"], ["UDP"]]  # one per Service
        else:
            assert protocols == [{"TCP", "UDP"}]


@pytest.mark.parametrize("name", KUSTOMIZATIONS)
async def test_apply_k_to_the_embedded_api(kubectl: str, name: str) -> None:
    async with EmbeddedAPIServer(APIServerSettings(port=0)) as api:
        config = ["--kubeconfig", str(api.kubeconfig_path)]
        applied = await kubectl_run(kubectl, *config, "apply", "-k", str(DEPLOY / name))
        assert applied.returncode == 0, applied.stderr
        again = await kubectl_run(kubectl, *config, "apply", "-k", str(DEPLOY / name))
        assert again.returncode == 0 and "created" not in again.stdout, again.stdout
        got = await kubectl_run(
            kubectl, *config, "get", "deployment", "cloudhub", "-n", "edgefleet", "-o", "json"
        )
        assert got.returncode == 0, got.stderr


async def test_a_broken_overlay_is_refused(kubectl: str, tmp_path) -> None:
    (tmp_path / "kustomization.yaml").write_text("bases:\n  - ./no-such-base\n")
    built = await kubectl_run(kubectl, "kustomize", str(tmp_path))
    assert built.returncode != 0 and "no-such-base" in built.stderr
