"""The hub's image deployed into the reference cluster (issue 16 item 2).

kube-apiserver v1.20.2 has no kubelet, so the image built by deploy/build-image.sh runs
under podman the way the Deployment would run it: ``kubectl apply -k deploy/base`` first
(CRDs, RBAC, Namespace), then the Deployment's own environment (read from the rendered
manifests), its ServiceAccount's token, CA and namespace mounted where kubelet mounts them,
``KUBERNETES_SERVICE_HOST/PORT`` pointing at the API, a read-only root with a /tmp tmpfs and
user 65532. ``cloudhub token create`` run inside the container prints the join command; a
real agent (process runtime) joins with it, a pod bound to it runs and is Running in
``kubectl get pods``, and ``kubectl get nodes`` shows the node Ready.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import socket
import sys
import urllib.request
import uuid

import pytest
import yaml
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

from tests.deploy.conftest import IMAGE_TAG, node_pod
from tests.deploy.wheels import REPO
from tests.waiting import eventually

pytestmark = [pytest.mark.slow, pytest.mark.podman, pytest.mark.kubeapiserver]

ULIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


async def run(*args: str, timeout: float = 120, env=None):
    proc = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    return proc.returncode, out.decode(), err.decode()


def free_port() -> int:
    """A port free for both TCP and UDP (the session port carries QUIC and WebSocket)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
            tcp.bind(("127.0.0.1", 0))
            port = tcp.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
                try:
                    udp.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port


async def service_account_token(kubeconfig: str) -> str:
    configuration = k8s_client.Configuration()
    await k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    async with k8s_client.ApiClient(configuration) as api:
        request = k8s_client.AuthenticationV1TokenRequest(
            spec=k8s_client.V1TokenRequestSpec(
                audiences=["https://kubernetes.default.svc"], expiration_seconds=3600
            )
        )
        answer = await k8s_client.CoreV1Api(api).create_namespaced_service_account_token(
            "cloudhub", "edgefleet", request
        )
    return answer.status.token


def kill_leftovers(marker: str) -> None:
    """SIGKILL every process whose command line names ``marker`` (this test's state
    directory: the process runtime's shims and their children)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if marker.encode() in cmdline:
            pid = int(entry)
            try:
                if os.getpgid(pid) == pid:  # a group leader: its children too (the pod's)
                    os.killpg(pid, signal.SIGKILL)
                else:
                    os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def deployment_env(rendered: str) -> dict[str, str]:
    (deployment,) = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "ghcr.io/edgefleet/cloudhub:0.1.0"
    env = {}
    for item in container["env"]:
        if "value" in item:
            env[item["name"]] = item["value"]
        elif item["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace":
            env[item["name"]] = deployment["metadata"]["namespace"]
    return env


async def test_image_runs_the_fleet_in_the_reference_cluster(
    hub_image, kube_apiserver, kubectl: str, tmp_path
) -> None:
    admin = str(kube_apiserver.kubeconfig)
    k = [kubectl, "--kubeconfig", admin]
    code, _, err = await run(*k, "apply", "-k", str(REPO / "deploy" / "base"))
    assert code == 0, err
    code, rendered, err = await run(kubectl, "kustomize", str(REPO / "deploy" / "base"))
    assert code == 0, err
    name = f"cloudhub-test-{uuid.uuid4().hex[:8]}"
    node = f"edge-{uuid.uuid4().hex[:6]}"
    agent = None
    try:
        # What kubelet would mount for the ServiceAccount, readable by user 65532.
        sa = tmp_path / "serviceaccount"
        sa.mkdir(mode=0o755)
        (sa / "token").write_text(await service_account_token(admin))
        (sa / "ca.crt").write_bytes(kube_apiserver.ca_file.read_bytes())
        (sa / "namespace").write_text("edgefleet")
        for path in sa.iterdir():
            path.chmod(0o644)
        api_port = kube_apiserver.url.rsplit(":", 1)[1]
        session, join, http = free_port(), free_port(), free_port()
        env = deployment_env(rendered) | {
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": api_port,
            # This machine's ports instead of the pod's own network namespace.
            "CLOUDHUB_LISTEN__QUIC_PORT": str(session),
            "CLOUDHUB_LISTEN__WEBSOCKET_PORT": str(session),
            "CLOUDHUB_PKI__SESSION_PORT": str(session),
            "CLOUDHUB_PKI__JOIN_PORT": str(join),
            "CLOUDHUB_OBSERVABILITY__HTTP_PORT": str(http),
            # As the public overlays set it: the address devices dial.
            "CLOUDHUB_PKI__SERVER_NAMES": "localhost",
            "CLOUDHUB_PKI__PUBLIC_ADDRESS": f"localhost:{join}",
        }
        args = ["podman", "run", "-d", "--name", name, "--network", "host", *ULIMITS]
        args += ["--read-only", "--tmpfs", "/tmp", "--user", "65532:65532"]
        args += ["-v", f"{sa}:{SA_DIR}:ro"]
        for key, value in env.items():
            args += ["-e", f"{key}={value}"]
        code, _, err = await run(*args, IMAGE_TAG)
        assert code == 0, err

        async def ready() -> bool:
            state = await run("podman", "inspect", "--format", "{{.State.Running}}", name)
            if state[1].strip() != "true":
                logs = await run("podman", "logs", name)
                pytest.fail(f"the hub's container exited:\n{logs[1][-3000:]}{logs[2][-3000:]}")

            def probe() -> bool:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{http}/readyz", timeout=2) as r:
                        return r.status == 200
                except OSError:
                    return False

            return await asyncio.to_thread(probe)

        await eventually(ready, "the hub's /readyz", 180)

        # The join command, as an operator gets it: from inside the hub's container.
        code, out, err = await run("podman", "exec", name, "cloudhub", "token", "create")
        assert code == 0, err
        command = shlex.split(out.strip())
        assert command[:4] == ["edgeagent", "join", "--hub", f"localhost:{join}"], out
        state = tmp_path / "agent"
        config = tmp_path / "agent.yaml"
        config.write_text(f"state_dir: {state}\nruntime:\n  kind: process\n")
        agent_env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        joined = await run(
            sys.executable, "-m", "edgeagent", *command[1:], "--node-name", node,
            "--config", str(config), env=agent_env,
        )  # fmt: skip
        assert joined[0] == 0, joined[1] + joined[2]
        log = (tmp_path / "agent.log").open("wb")
        agent = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "edgeagent", "run", "--config", str(config),
            env=agent_env, stdout=log, stderr=log, start_new_session=True,
        )  # fmt: skip

        async def node_ready() -> bool:
            code, out, _ = await run(*k, "get", "node", node, "-o", "json")
            if code != 0:
                return False
            conditions = json.loads(out)["status"].get("conditions", [])
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

        await eventually(node_ready, f"kubectl get nodes to show {node} Ready", 120)

        manifest = tmp_path / "pod.yaml"
        manifest.write_text(yaml.safe_dump(node_pod("hello", node, ["sleep", "3600"])))
        code, _, err = await run(*k, "apply", "-f", str(manifest))
        assert code == 0, err

        async def running() -> bool:
            code, out, _ = await run(*k, "get", "pod", "hello", "-n", "default", "-o", "json")
            return code == 0 and json.loads(out)["status"].get("phase") == "Running"

        await eventually(running, "kubectl get pods to show the pod Running", 120)
        code, out, _ = await run(*k, "get", "pods", "-n", "default", "-o", "wide")
        assert "hello" in out and "Running" in out and node in out
    finally:
        # The pod goes first, so that the agent stops its process (pods outlive an agent
        # by design); what is left of this test's pods after that is killed by PID.
        await run(*k, "delete", "pod", "hello", "-n", "default", "--ignore-not-found",
                  "--wait=true", "--timeout=60s")  # fmt: skip
        if agent is not None and agent.returncode is None:
            os.killpg(agent.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(agent.wait(), 30)
            except asyncio.TimeoutError:
                os.killpg(agent.pid, signal.SIGKILL)
                await agent.wait()
        kill_leftovers(str(tmp_path / "agent"))
        await run("podman", "rm", "-f", "-t", "5", name)
        await run(*k, "delete", "node", node, "--ignore-not-found")
        # The kube-apiserver is shared by the session: the CRDs go again (as in
        # test_hub_manifests; the namespace stays, nothing would finish deleting it).
        await run(*k, "delete", "--ignore-not-found", "-k", str(REPO / "deploy" / "crds"))
