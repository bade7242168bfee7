"""deploy/overlays/ha (issue 18 item 6): three replicas with ha.enabled, a RollingUpdate that
never has fewer than three serving (maxUnavailable 0), anti-affinity, a PodDisruptionBudget,
and RBAC for the replicas' Leases; validated by the reference kube-apiserver with
``kubectl apply --dry-run=server``. The base stays one replica with Recreate."""

from __future__ import annotations

import asyncio
import json
import subprocess

import yaml

from cloudhub.settings import load_hub_settings
from tests.deploy.test_kustomize import env_of, kubectl_run, render

HA = "overlays/ha"


def one(docs: list[dict], kind: str) -> dict:
    (doc,) = [d for d in docs if d["kind"] == kind]
    return doc


def field_env(deployment: dict) -> dict[str, str]:
    """The container's env from the Downward API: ``name -> fieldPath``."""
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {
        e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"]
        for e in container["env"]
        if "fieldRef" in e.get("valueFrom", {})
    }


async def test_the_ha_overlay_runs_three_replicas_rolling_with_none_unavailable(
    kubectl: str,
) -> None:
    docs = await render(kubectl, HA)
    deployment = one(docs, "Deployment")
    spec = deployment["spec"]
    assert spec["replicas"] == 3
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    anti = spec["template"]["spec"]["affinity"]["podAntiAffinity"]
    (term,) = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    selector = spec["selector"]["matchLabels"]
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == selector
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"] == selector
    assert pdb["spec"]["maxUnavailable"] == 1 and "minAvailable" not in pdb["spec"]
    # The base's environment is kept, the HA settings added to it.
    env = env_of(docs)
    assert env["CLOUDHUB_KUBE__IN_CLUSTER"] == "true" and "CLOUDHUB_PKI__SERVER_NAMES" in env
    fields = field_env(deployment)
    assert fields["CLOUDHUB_HA__IDENTITY"] == "metadata.name"
    assert fields["CLOUDHUB_HA__NAMESPACE"] == "metadata.namespace"
    assert fields["CLOUDHUB_HA__PEER_ADDRESS"] == "status.podIP"
    (container,) = spec["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["peer"] == int(env["CLOUDHUB_HA__PEER_PORT"]) and "websocket" in ports
    # The hub loads that environment (pod name and namespace as the kubelet fills them in).
    filled = {
        "metadata.name": "cloudhub-7d9f-abcde",
        "metadata.namespace": "edgefleet",
        "status.podIP": "10.244.1.7",
    }
    environ = {**env, **{k: filled[v] for k, v in fields.items() if v in filled}}
    settings = load_hub_settings(environ=environ)
    ha = settings.ha
    assert ha.enabled and ha.identity == "cloudhub-7d9f-abcde" and ha.namespace == "edgefleet"
    assert ha.overload_lag > 0 and (ha.peer_address, ha.peer_port) == ("10.244.1.7", 10351)
    # The base is unchanged: one replica, Recreate, no budget.
    base = await render(kubectl, "base")
    assert one(base, "Deployment")["spec"]["replicas"] == 1
    assert "PodDisruptionBudget" not in {d["kind"] for d in base}


async def test_the_ha_overlay_grants_the_replica_leases_in_the_hubs_namespace(
    kubectl: str,
) -> None:
    docs = await render(kubectl, HA)
    roles = {
        (d["metadata"].get("namespace"), d["metadata"]["name"]): d
        for d in docs
        if d["kind"] == "Role"
    }
    (binding,) = [
        d
        for d in docs
        if d["kind"] == "RoleBinding" and d["roleRef"]["name"] == "edgefleet:cloudhub-ha"
    ]
    namespace = binding["metadata"]["namespace"]
    assert namespace == one(docs, "Deployment")["metadata"]["namespace"]
    assert {"kind": "ServiceAccount", "name": "cloudhub", "namespace": namespace} in binding[
        "subjects"
    ]
    role = roles[(namespace, "edgefleet:cloudhub-ha")]
    (rule,) = role["rules"]
    assert rule["apiGroups"] == ["coordination.k8s.io"] and rule["resources"] == ["leases"]
    # cloudhub/ha/replicas.py: create, patch (renew), delete (release), get (confirm), and
    # the informer's list and watch.
    assert set(rule["verbs"]) == {"get", "list", "watch", "create", "patch", "delete"}


async def _kubectl(
    kubectl: str, config: str, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess:
    if stdin is None:
        return await kubectl_run(kubectl, "--kubeconfig", config, *args)
    proc = await asyncio.create_subprocess_exec(
        kubectl,
        "--kubeconfig",
        config,
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin.encode()), 120)
    return subprocess.CompletedProcess(args, proc.returncode or 0, out.decode(), err.decode())


async def test_the_ha_overlay_passes_the_reference_apiservers_server_side_dry_run(
    kubectl: str, kube_apiserver
) -> None:
    config = str(kube_apiserver.kubeconfig)
    # The namespaced objects' dry run needs their namespace to exist (as the base's own
    # test leaves it on this shared server); kube-node-lease the API server makes itself.
    exists = await _kubectl(kubectl, config, "get", "namespace", "edgefleet")
    if exists.returncode != 0:
        made = await _kubectl(kubectl, config, "create", "namespace", "edgefleet")
        assert made.returncode == 0 or "AlreadyExists" in made.stderr, made.stderr
    docs = await render(kubectl, HA)
    # The reference server is Kubernetes 1.20, which serves PodDisruptionBudget as
    # policy/v1beta1 only; the fields the overlay uses (maxUnavailable, selector) are the same
    # in policy/v1, so it is validated under the version this server has.
    for doc in docs:
        if doc["kind"] == "PodDisruptionBudget":
            assert doc["apiVersion"] == "policy/v1"
            doc["apiVersion"] = "policy/v1beta1"
    applied = await _kubectl(
        kubectl,
        config,
        "apply",
        "--dry-run=server",
        "-o",
        "json",
        "-f",
        "-",
        stdin=yaml.safe_dump_all(docs),
    )
    assert applied.returncode == 0, applied.stderr
    answered = json.loads(applied.stdout)
    items = answered["items"] if answered.get("kind") == "List" else [answered]
    kinds = {item["kind"] for item in items}
    assert {"Deployment", "PodDisruptionBudget", "Role", "RoleBinding"} <= kinds
    (deployment,) = [i for i in items if i["kind"] == "Deployment"]
    # What the server defaulted and validated, not only what we sent.
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert deployment["metadata"].get("uid")  # a server's answer (dry run: never stored)
    stored = await _kubectl(kubectl, config, "get", "pdb", "cloudhub", "-n", "edgefleet")
    assert stored.returncode != 0 and "NotFound" in stored.stderr


async def test_the_server_refuses_a_broken_ha_overlay(kubectl: str, kube_apiserver) -> None:
    config = str(kube_apiserver.kubeconfig)
    docs = await render(kubectl, HA)
    pdb = one(docs, "PodDisruptionBudget")
    pdb["apiVersion"] = "policy/v1beta1"
    pdb["spec"]["maxUnavailable"] = "one"  # neither a count nor a percentage
    refused = await _kubectl(
        kubectl,
        config,
        "apply",
        "--dry-run=server",
        "-f",
        "-",
        stdin=yaml.safe_dump(pdb),
    )
    assert refused.returncode != 0 and "maxUnavailable" in refused.stderr, refused.stderr
