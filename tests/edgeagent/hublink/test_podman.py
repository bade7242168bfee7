"""End to end on podman: pods created in the API run in real containers through the hub,
including the real workload manifests of tests/data/manifests."""

from __future__ import annotations

import copy
import pathlib

import pytest

from cloudhub.errors import KubeAPIError
from cloudhub.kube import CONFIGMAPS, EVENTS, NAMESPACES, PODS, SECRETS, KubeClient
from tests.edgeagent import manifests
from tests.edgeagent.hublink.fleet import eventually
from tests.edgeagent.hublink.objects import (
    BUSYBOX,
    condition,
    configmap,
    container_status,
    get_pod,
    is_running,
    pod,
)
from tests.edgeagent.test_manifests import REFUSED, RUNNING

pytestmark = [pytest.mark.podman, pytest.mark.slow]


async def test_pod_on_podman_with_config_and_deletion(fleet, kube: KubeClient, namespace: str):
    agent = fleet.agent("edge-pm", "docker")
    await kube.create(CONFIGMAPS, configmap("settings", namespace, {"greeting": "hello"}))
    body = pod(
        "web",
        namespace,
        "edge-pm",
        # PID 1 of a container ignores SIGTERM unless it handles it: handle it, so that the
        # deletion is graceful, not the grace period running out.
        "trap 'exit 0' TERM; "
        '[ "$(cat /cfg/greeting)" = hello ] && [ "$GREETING" = hello ] '
        "&& { sleep 600 & wait; }; exit 3",
        grace=5,
        container={
            "env": [
                {
                    "name": "GREETING",
                    "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "greeting"}},
                }
            ],
            "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}],
        },
        volumes=[{"name": "cfg", "configMap": {"name": "settings"}}],
    )
    created = await kube.create(PODS, body)

    async def running():
        p = await get_pod(kube, namespace, "web")
        return p if is_running(p) and condition(p, "Ready") == "True" else None

    p = await eventually(running, "web Running on podman in the API")
    assert container_status(p)["restartCount"] == 0
    assert p["status"]["podIP"] and p["status"]["podIP"] != "127.0.0.1"  # its own sandbox
    assert created["metadata"]["uid"] in await agent.running_pods()
    await kube.delete(PODS, "web", namespace)
    await eventually(
        lambda: _gone(kube, namespace, "web"), "web removed from the API after the edge stopped it"
    )
    assert created["metadata"]["uid"] not in await agent.running_pods()


async def _gone(kube: KubeClient, namespace: str, name: str) -> bool:
    return await get_pod(kube, namespace, name) is None


async def test_real_manifests_run_through_the_hub(fleet, kube: KubeClient, tmp_path: pathlib.Path):
    node = "edge-manifests"
    fleet.agent(node, "docker")
    docs = manifests.load_documents()
    pods = {}
    for name, ns, template in manifests.pod_templates(docs):
        p = manifests.to_pod(name, ns, template, node)
        p = manifests.adapt_for_busybox(p, BUSYBOX, tmp_path / "host")
        del p["metadata"]["uid"]  # the API gives it
        pods[p["metadata"]["name"]] = p
    namespaces = {p["metadata"]["namespace"] for p in pods.values()} | {
        (d.get("metadata") or {}).get("namespace") or "default" for _, d in docs
    }
    for ns in sorted(namespaces - {"default"}):
        try:
            await kube.create(
                NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
            )
        except KubeAPIError:
            pass  # exists (kube-system) or a name the API refuses
    for obj in manifests.configs(docs):
        obj = copy.deepcopy(obj)
        del obj["metadata"]["uid"]
        rt = CONFIGMAPS if obj["kind"] == "ConfigMap" else SECRETS
        try:
            await kube.create(rt, obj)
        except KubeAPIError:
            pass  # e.g. a Secret whose data is a placeholder, not base64: the API says no
    # The Karmada case names the ConfigMaps its CloneSet needs: make them.
    for ref in ("my-sample-config", "mysql-config"):
        await kube.create(
            CONFIGMAPS, configmap(ref, "test-cloneset", {"log": "info", "lower": "yes"})
        )
    created = {}
    for name, p in pods.items():
        try:
            created[name] = await kube.create(PODS, p)
        except KubeAPIError as exc:
            assert name not in RUNNING, (name, exc)

    async def settled():
        for name in RUNNING:
            ns = pods[name]["metadata"]["namespace"]
            if not is_running(await get_pod(kube, ns, name)):
                return False
        for name in REFUSED.keys() & created.keys():
            ns = pods[name]["metadata"]["namespace"]
            status = ((await get_pod(kube, ns, name)) or {}).get("status") or {}
            if status.get("reason") != "UnsupportedPodSpec":
                return False
        return True

    await eventually(settled, "every supported manifest Running in the API", timeout=120)
    for name in REFUSED.keys() & created.keys():
        ns = pods[name]["metadata"]["namespace"]
        status = (await get_pod(kube, ns, name))["status"]
        assert status["phase"] == "Failed"
        for field in REFUSED[name]:
            assert field in status["message"], (name, field, status["message"])
    # ... and the Event naming the fields reached the API through the hub
    refused = next(iter(sorted(REFUSED.keys() & created.keys())))
    ns = pods[refused]["metadata"]["namespace"]

    async def event():
        items, _ = await kube.list(EVENTS, ns)
        return [
            e
            for e in items
            if e.get("reason") == "UnsupportedPodSpec"
            and (e.get("involvedObject") or {}).get("name") == refused
        ]

    [found, *_] = await eventually(event, f"the UnsupportedPodSpec Event of {refused}")
    assert REFUSED[refused][0] in found["message"]
