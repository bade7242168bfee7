"""The real workload manifests of ../shared/data/manifests on podman: those that use only
supported features run to Running; the others are refused with their fields named."""

from __future__ import annotations

import pathlib

import pytest

from edgeagent.pods import check_pod
from edgeagent.runtime import Labels
from tests.edgeagent import manifests
from tests.edgeagent.conftest import BUSYBOX_IMAGE, Harness
from tests.waiting import eventually

pytestmark = pytest.mark.podman

if not manifests.MANIFESTS.is_dir():
    pytest.skip(f"no manifest corpus at {manifests.MANIFESTS}", allow_module_level=True)

RUNNING = {
    "kubeedge-pi-counter-0",  # hostNetwork; its duplicate nodeSelector key is scheduling-only
    "counter-mapper-0",  # configMap items, hostPath Directory, limits, command/args
    "mosquitto-0",  # configMap subPath mount, ports
    "deploymentgrid-demo-0",  # downward-API env incl. status.podIP
    "http-probe-app-0",  # readinessProbe httpGet, limits
    "ud-deployment-0",
    "sample-0",  # Karmada CloneSet: configMap volume + configMapKeyRef env
}
CONFIG_ERRORS = {
    # Secret "mysecret" holds the placeholder YOUR_PASSWORD, which is not base64
    "mapper-test-0": "not valid base64",
    # envFrom ConfigMap "common-variables" is not in the corpus
    "edgex-device-random-0": 'configmap "common-variables" not found',
}
REFUSED = {
    "zigbee2mqtt-0": ["spec.containers[0].securityContext"],
    "edgenode1-0": ["spec.containers[0].securityContext", "spec.containers[1].securityContext"],
    "edgemesh-agent-0": ["spec.containers[0].securityContext"],
    "node-exporter-0": [
        "spec.hostPID",
        "spec.containers[0].volumeMounts[0].mountPropagation",
        "spec.containers[1].securityContext",
    ],
    "kube-router-0": ["spec.containers[0].securityContext"],
    "nvidia-device-plugin-daemonset-0": ["spec.containers[0].securityContext"],
    "smarter-device-manager-0": ["metadata.namespace", "spec.containers[0].securityContext"],
    "vllm-gemma-deployment-0": [
        "spec.containers[0].resources.limits.nvidia.com/gpu",
        "spec.containers[0].resources.limits.ephemeral-storage",
    ],
    "led-light-mapper-deployment-0": [
        "spec.containers[0].securityContext",
        "spec.volumes[0].configMap.name",
    ],
    "cloud-iptables-manager-0": ["spec.containers[0].securityContext"],
}


async def test_real_manifests(podman, tmp_path: pathlib.Path):
    from tests.edgeagent.conftest import agent_settings, make_runtime_for

    docs = manifests.load_documents()
    templates = manifests.pod_templates(docs)
    pods = {}
    for name, ns, tmpl in templates:
        pod = manifests.to_pod(name, ns, tmpl, "edge-test")
        pods[pod["metadata"]["name"]] = manifests.adapt_for_busybox(
            pod, BUSYBOX_IMAGE, tmp_path / "host"
        )
    assert set(pods) == RUNNING | set(CONFIG_ERRORS) | set(REFUSED), sorted(pods)
    # what the spec check says, before anything runs
    for name, pod in pods.items():
        problems = check_pod(pod, "docker")
        assert bool(problems) == (name in REFUSED), (name, problems)

    settings = agent_settings(tmp_path / "state", "docker", podman)
    h = Harness(
        tmp_path / "state", make_runtime_for("docker", tmp_path / "state", podman), settings
    )
    await h.start()
    try:
        for obj in manifests.configs(docs):
            h.apply(obj)
        # The Karmada case lists the ConfigMaps its CloneSet needs; derive them.
        for ref in ("my-sample-config", "mysql-config"):
            h.apply_config(
                "ConfigMap", ref, {"log": "info", "lower": "yes"}, namespace="test-cloneset"
            )
        for pod in pods.values():
            h.apply(pod)

        def settled():
            for name in RUNNING:
                if h.status(pods[name]).get("phase") != "Running":
                    return False
            for name in REFUSED:
                if h.status(pods[name]).get("reason") != "UnsupportedPodSpec":
                    return False
            for name in CONFIG_ERRORS:
                if not _waiting_reason(h, pods[name]):
                    return False
            return True

        await eventually(
            settled,
            timeout=60,
            interval=0.2,
            what="every manifest settled: "
            + str({n: h.status(p).get("phase") for n, p in pods.items()}),
        )
        await h.wait_ready(pods["http-probe-app-0"], timeout=30)  # its readiness probe
        grid = await h.exec(pods["deploymentgrid-demo-0"], "echo", "env")
        assert f"POD_IP={h.status(pods['deploymentgrid-demo-0'])['podIP']}" in grid
        assert "POD_NAME=deploymentgrid-demo-0" in grid and "NODE_NAME=edge-test" in grid
        conf = await h.exec(
            pods["mosquitto-0"], "mosquitto", "cat /mosquitto/config/mosquitto.conf"
        )
        assert "listener 1883" in conf
        mapper = await h.exec(pods["counter-mapper-0"], "mapper", "cat /tmp/config.yaml")
        assert "grpc_server" in mapper or "socket" in mapper
        for name, message in CONFIG_ERRORS.items():
            reason, text = _waiting_reason(h, pods[name])
            assert message in text, (name, reason, text)
            assert h.status(pods[name])["phase"] == "Pending"
        for name, fields in REFUSED.items():
            status = h.status(pods[name])
            assert status["phase"] == "Failed"
            for field in fields:
                assert field in status["message"], (name, field, status["message"])
            assert any(e["reason"] == "UnsupportedPodSpec" for e in h.events(pods[name]))
            assert await h.runtime.list({Labels.POD_UID: pods[name]["metadata"]["uid"]}) == []
    finally:
        await h.close()


def _waiting_reason(h: Harness, pod: dict) -> tuple[str, str] | None:
    for cs in h.status(pod).get("containerStatuses") or []:
        waiting = cs.get("state", {}).get("waiting") or {}
        if waiting.get("reason") in (
            "CreateContainerConfigError",
            "ContainerCreating",
        ) and waiting.get("message"):
            return waiting["reason"], waiting["message"]
    return None
