"""Issue 15 item 3 end to end: a ConfigMap over the session's message limit shows on the
pod as what it is. Before, the hub dead-lettered it (a Warning Event on the pod) and the
agent's own status said ``configmap "big" not found``; now the hub sends a placeholder in
its place (``protocol.undelivered``) and the pod's status on the edge, as kubectl shows
it, says ``configmap "big" exceeds the message limit (N > M bytes)``. With the real hub,
the real agent process and the real kubectl, on the embedded API and on the reference
kube-apiserver."""

from __future__ import annotations

import asyncio
import json
import pathlib
from collections.abc import AsyncIterator

import pytest

from cloudhub.kube import CONFIGMAPS, NAMESPACES, PODS, SECRETS, KubeClient
from cloudhub.standalone import APIServerSettings, EmbeddedAPIServer
from protocol.undelivered import ANNOTATION
from tests.edgeagent.hublink.conftest import Fleet
from tests.edgeagent.hublink.fleet import HubRunner, eventually, free_port, unique
from tests.edgeagent.hublink.objects import configmap, pod, secret
from tests.k8s.fixtures import kube_apiserver, kubectl  # noqa: F401  (session fixtures)

pytestmark = pytest.mark.slow

LIMIT = 64 * 1024
EMBEDDED = "embedded"
KUBE_APISERVER = "kube-apiserver"


@pytest.fixture(params=[EMBEDDED, pytest.param(KUBE_APISERVER, marks=pytest.mark.kubeapiserver)])
async def kubeconfig(request: pytest.FixtureRequest) -> AsyncIterator[pathlib.Path]:
    if request.param == KUBE_APISERVER:
        yield pathlib.Path(request.getfixturevalue("kube_apiserver").kubeconfig)
        return
    async with EmbeddedAPIServer(APIServerSettings(data_dir=None, port=0)) as api:
        yield api.kubeconfig_path


@pytest.fixture
async def small_hub_fleet(kubeconfig: pathlib.Path, pki_ca, tmp_path: pathlib.Path, request):
    hub = HubRunner(kubeconfig, pki_ca.server, free_port())
    await hub.start(**{"session.max_message_size": LIMIT})
    fleet = Fleet(tmp_path, hub, pki_ca, request)
    try:
        yield fleet
    finally:
        problems = await fleet.close()
        assert not problems, problems


async def kubectl_json(binary: str, kubeconfig: pathlib.Path, *args: str) -> dict:
    """``kubectl ... -o json``, run without blocking the loop (the embedded API serves on it)."""
    proc = await asyncio.create_subprocess_exec(
        binary,
        "--kubeconfig",
        str(kubeconfig),
        *args,
        "-o",
        "json",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    return json.loads(out)


def waiting_messages(obj: dict) -> list[str]:
    return [
        (cs.get("state") or {}).get("waiting", {}).get("message", "")
        for cs in (obj.get("status") or {}).get("containerStatuses") or []
    ]


async def test_a_pod_says_its_configmap_and_secret_exceed_the_message_limit(
    small_hub_fleet: Fleet,
    kubeconfig: pathlib.Path,
    kubectl: str,  # noqa: F811  (the fixture)
) -> None:
    kube = await KubeClient.from_kubeconfig(str(kubeconfig))
    try:
        namespace = unique("undelivered")
        await kube.create(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        )
        node = unique("edge-undelivered")
        await kube.create(CONFIGMAPS, configmap("big", namespace, {"blob": "x" * (100 * 1024)}))
        await kube.create(SECRETS, secret("huge", namespace, {"blob": "y" * (100 * 1024)}))
        await kube.create(CONFIGMAPS, configmap("small", namespace, {"k": "v"}))
        volumes = [{"name": "cfg", "configMap": {"name": "big"}}]
        await kube.create(PODS, pod("web", namespace, node, "sleep 3600", volumes=volumes))
        env_pod = pod("env", namespace, node, "sleep 3600")
        env_pod["spec"]["containers"][0]["envFrom"] = [
            {"configMapRef": {"name": "small"}},
            {"secretRef": {"name": "huge"}},
        ]
        await kube.create(PODS, env_pod)
        agent = small_hub_fleet.agent(node)

        def shown(name: str, text: str):
            async def check() -> dict | None:
                got = await kubectl_json(kubectl, kubeconfig, "get", "pod", name, "-n", namespace)
                return got if any(text in m for m in waiting_messages(got)) else None

            return check

        web = await eventually(
            shown("web", 'configmap "big" exceeds the message limit ('), "web's reason", 60
        )
        (message,) = [m for m in waiting_messages(web) if m]
        size, limit = message.rsplit("(", 1)[1].rstrip(" bytes)").split(" > ")
        assert int(size) > 100 * 1024 and int(limit) == LIMIT
        assert "not found" not in message
        await eventually(
            shown("env", 'secret "huge" exceeds the message limit ('), "env's reason", 60
        )
        # The edge holds a placeholder (identity, no data), not the data and not nothing.
        held = agent.read_store(lambda s: s.find_object("ConfigMap", namespace, "big"))
        assert held is not None and "data" not in held.body
        assert json.loads(held.body["metadata"]["annotations"][ANNOTATION])["limit"] == LIMIT
        assert agent.read_store(lambda s: s.find_object("ConfigMap", namespace, "small"))
    finally:
        await kube.close()
