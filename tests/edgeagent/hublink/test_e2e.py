"""End to end: the embedded API, a real hub, real agents as processes (process runtime),
real certificates over real QUIC and WebSocket on loopback.

Each test drives the system only through the Kubernetes API (as kubectl would) and looks
at the agent from outside (its store read-only, its processes through a runtime
instance of its own)."""

from __future__ import annotations

import asyncio
import pathlib
import subprocess
import sys

import pytest

from cloudhub.kube import CONFIGMAPS, PODS, SECRETS, KubeClient
from tests.edgeagent.hublink.fleet import ROOT, eventually
from tests.edgeagent.hublink.objects import (
    condition,
    configmap,
    container_status,
    get_node,
    get_pod,
    is_running,
    pod,
    secret,
)

pytestmark = pytest.mark.slow


async def test_node_registers_and_is_ready(fleet, kube: KubeClient):
    agent = fleet.agent(
        "edge-reg",
        sets=(
            "node.labels=site=plant-4,zone=line-2",
            "node.extended_resources=edgefleet.io/gpio=4",
        ),
    )

    async def ready():
        node = await get_node(kube, "edge-reg")
        return node if condition(node, "Ready") == "True" else None

    node = await eventually(ready, "Node edge-reg Ready")
    labels = node["metadata"]["labels"]
    assert labels["site"] == "plant-4" and labels["zone"] == "line-2"
    assert "node-role.kubernetes.io/edge" in labels
    status = node["status"]
    for resource in ("cpu", "memory", "pods", "ephemeral-storage", "edgefleet.io/gpio"):
        assert resource in status["capacity"], status["capacity"]
        assert resource in status["allocatable"], status["allocatable"]
    assert status["capacity"]["edgefleet.io/gpio"] == "4"
    assert status["capacity"]["pods"] == "110"
    info = status["nodeInfo"]
    assert info["operatingSystem"] == "linux"
    assert info["architecture"] in ("amd64", "arm64", "arm")
    assert info["kernelVersion"] and info["osImage"]
    assert info["containerRuntimeVersion"].startswith("process://")
    assert info["kubeletVersion"].startswith("edgeagent-")
    assert {"type": "InternalIP", "address": "127.0.0.1"} in status["addresses"]

    session = await eventually(
        lambda: agent.hub_session().get("state") == "connected" and agent.hub_session(),
        "hub.session connected in the agent's store",
    )
    assert session["transport"] == "quic" and session["since"]
    proc = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "edgeagent", "status", "--state-dir", str(agent.state)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        check=True,
    )
    out = proc.stdout
    assert f"hub:         connected over quic since {session['since']}" in out, out


@pytest.mark.parametrize("transport", ["quic", "websocket"])
async def test_pod_runs_with_configmap_and_secret(
    fleet, kube: KubeClient, namespace: str, transport: str
):
    node = f"edge-{transport[:2]}"
    agent = fleet.agent(node, sets=(f"hub.transports={transport}",))
    await kube.create(
        CONFIGMAPS, configmap("settings", namespace, {"mode": "fast", "app.conf": "v1"})
    )
    await kube.create(SECRETS, secret("creds", namespace, {"token": "s3cret"}))
    # The container checks its environment and files and exits 3 if anything is missing:
    # Running with no restart proves the pod got them.
    script = (
        '[ "$MODE" = fast ] && [ "$TOKEN" = s3cret ] && [ "$mode" = fast ] '
        '&& [ "$(cat cfg/app.conf)" = v1 ] && [ "$(cat sec/token)" = s3cret ] '
        "&& exec sleep 600; exit 3"
    )
    body = pod(
        "web",
        namespace,
        node,
        script,
        container={
            "env": [
                {
                    "name": "MODE",
                    "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "mode"}},
                },
                {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
            ],
            "envFrom": [{"configMapRef": {"name": "settings"}}],
            "volumeMounts": [
                {"name": "cfg", "mountPath": "/cfg"},
                {"name": "sec", "mountPath": "/sec"},
            ],
        },
        volumes=[
            {"name": "cfg", "configMap": {"name": "settings"}},
            {"name": "sec", "secret": {"secretName": "creds"}},
        ],
    )
    await kube.create(PODS, body)

    async def running():
        p = await get_pod(kube, namespace, "web")
        return p if is_running(p) and condition(p, "Ready") == "True" else None

    p = await eventually(running, "pod web Running and Ready in the API")
    assert container_status(p)["restartCount"] == 0
    assert p["status"]["hostIP"] == "127.0.0.1"
    assert agent.hub_session()["transport"] == transport


async def test_configmap_update_refreshes_files_without_restart(
    fleet, kube: KubeClient, namespace: str
):
    fleet.agent("edge-cm")
    await kube.create(CONFIGMAPS, configmap("flags", namespace, {"flag": "off"}))
    body = pod(
        "reader",
        namespace,
        "edge-cm",
        "exec sleep 600",
        container={
            "volumeMounts": [{"name": "flags", "mountPath": "/flags"}],
            # Ready only once the mounted file says "on": the flip is the refresh.
            "readinessProbe": {
                "exec": {"command": ["/bin/sh", "-c", "grep -q on flags/flag"]},
                "periodSeconds": 1,
            },
        },
        volumes=[{"name": "flags", "configMap": {"name": "flags"}}],
    )
    await kube.create(PODS, body)

    async def running_not_ready():
        p = await get_pod(kube, namespace, "reader")
        return p if is_running(p) and condition(p, "Ready") == "False" else None

    before = await eventually(running_not_ready, "reader Running, not Ready")
    await kube.patch(CONFIGMAPS, "flags", {"data": {"flag": "on"}}, namespace)

    async def ready():
        p = await get_pod(kube, namespace, "reader")
        return p if condition(p, "Ready") == "True" else None

    after = await eventually(ready, "reader Ready after the ConfigMap update")
    assert container_status(after)["restartCount"] == 0
    assert container_status(after)["containerID"] == container_status(before)["containerID"]


async def test_pod_deleted_is_stopped_gracefully_and_removed(
    fleet, kube: KubeClient, namespace: str, tmp_path: pathlib.Path
):
    agent = fleet.agent("edge-del")
    marks = tmp_path / "marks"
    marks.mkdir()
    script = "trap 'echo term > /marks/stopped; exit 0' TERM; while true; do sleep 0.1; done"
    body = pod(
        "graceful",
        namespace,
        "edge-del",
        script.replace("/marks", "marks"),
        grace=10,
        container={"volumeMounts": [{"name": "marks", "mountPath": "/marks"}]},
        volumes=[{"name": "marks", "hostPath": {"path": str(marks), "type": "Directory"}}],
    )
    created = await kube.create(PODS, body)
    uid = created["metadata"]["uid"]
    await eventually(lambda: _running(kube, namespace, "graceful"), "graceful Running")
    assert uid in await agent.running_pods()
    await kube.delete(PODS, "graceful", namespace)  # default grace: the pod's 10 s

    async def gone():
        return await get_pod(kube, namespace, "graceful") is None

    await eventually(gone, "the pod removed from the API once the edge stopped it")
    assert (marks / "stopped").read_text().strip() == "term"  # SIGTERM, handled
    assert uid not in await agent.running_pods()
    await eventually(
        lambda: agent.read_store(lambda s: s.get_object(uid) is None), "the pod gone from the store"
    )


async def _running(kube: KubeClient, namespace: str, name: str) -> bool:
    return is_running(await get_pod(kube, namespace, name))


async def test_ready_does_not_wait_for_an_unreachable_hub(tmp_path: pathlib.Path, pki_ca):
    """READY=1 once the store and runtime are up, with a hub configured that never answers."""
    import socket

    from tests.edgeagent.hublink.fleet import AgentProcess, free_port

    sock_path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(sock_path))
    sock.setblocking(False)
    agent = AgentProcess(
        tmp_path / "a",
        "edge-alone",
        "process",
        f"quic://127.0.0.1:{free_port()}",
        pki_ca.ca,
        sets=("hub.transports=websocket",),  # refused at once: the log shows the retries
    )
    agent.start_env = {"NOTIFY_SOCKET": str(sock_path)}
    agent.start()
    loop = asyncio.get_running_loop()
    try:
        message = await asyncio.wait_for(loop.sock_recv(sock, 4096), 60)
        assert b"READY=1" in message, message
        assert agent.running
        await eventually(
            lambda: "failed" in agent.log() and agent.hub_session().get("state") == "connecting",
            "the agent keeps dialling the absent hub",
        )
    finally:
        await agent.stop()
        sock.close()


async def test_pod_created_before_its_configmap_starts_once_it_exists(
    fleet, kube: KubeClient, namespace: str
):
    """``kubectl apply`` of a directory often creates the pod first: it waits
    (ContainerCreating, as kubelet) and starts when the ConfigMap arrives through the hub."""
    fleet.agent("edge-order")
    body = pod(
        "early",
        namespace,
        "edge-order",
        '[ "$(cat cfg/k)" = v ] && exec sleep 600; exit 3',
        container={"volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}]},
        volumes=[{"name": "cfg", "configMap": {"name": "late-cm"}}],
    )
    await kube.create(PODS, body)

    async def waiting():
        p = await get_pod(kube, namespace, "early")
        state = container_status(p).get("state") or {}
        return (state.get("waiting") or {}).get("reason") == "ContainerCreating"

    await eventually(waiting, "early waiting for its ConfigMap (ContainerCreating)")
    await kube.create(CONFIGMAPS, configmap("late-cm", namespace, {"k": "v"}))
    await eventually(lambda: _running(kube, namespace, "early"), "early Running")
    p = await get_pod(kube, namespace, "early")
    assert container_status(p)["restartCount"] == 0
