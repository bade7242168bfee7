"""The whole life of a node's identity, as an operator and a device live it: every command
a separate process (``cloudhub token create``, ``edgeagent join``, ``edgeagent run``,
``cloudhub node revoke``), a real hub with the PKI extension on the embedded API, real
TLS over QUIC on loopback, the process runtime running a real pod.

token → join → run → Node Ready and a pod Running → the certificate (20 s here) renewed
over the live session with the pod untouched → revoked: the session is closed within a
second (even though the certificate that opened it has expired since: it was renewed
over that session) and the agent is refused with an error naming the recovery, keeps
running its pod, and comes back without a restart after ``edgeagent join --renew``."""

from __future__ import annotations

import shlex
import time

import pytest

from cloudhub.kube import PODS, KubeClient
from edgeagent.credentials import certificate_validity
from protocol import pki
from tests.edgeagent.certs.conftest import PKIHub, command
from tests.edgeagent.hublink.fleet import AgentProcess, eventually
from tests.edgeagent.hublink.objects import (
    condition,
    container_status,
    get_node,
    get_pod,
    is_running,
    pod,
)

pytestmark = pytest.mark.slow

NODE = "pi-flow"


async def token_command(pki_hub: PKIHub, *extra: str) -> list[str]:
    """``cloudhub token create``: the join command it prints, split."""
    created = await command(
        "cloudhub", "token", "create", "--ttl", "1h", *extra, "--kubeconfig", pki_hub.kubeconfig
    )
    assert created.returncode == 0, created.stderr
    printed = shlex.split(created.stdout.strip())
    assert printed[:2] == ["edgeagent", "join"], created.stdout
    return printed


def serial(agent: AgentProcess) -> int:
    return pki.load_certificate_pem((agent.state / "pki" / "node.crt").read_bytes()).serial_number


@pytest.mark.parametrize("pki_hub", [{"pki.node_cert_lifetime": 20.0}], indirect=True)
async def test_token_join_run_rotate_revoke_rejoin(
    pki_hub: PKIHub, kube: KubeClient, tmp_path
) -> None:
    from cloudhub.kube import NAMESPACES

    agent = AgentProcess(tmp_path / NODE, NODE, "process", None, None)  # hub.url from the join
    try:
        await _flow(pki_hub, kube, agent, NAMESPACES)
    except BaseException:
        print(f"===== agent log =====\n{agent.log()[-20000:]}")
        raise
    finally:
        await agent.stop()
        await agent.remove_everything()


async def _flow(pki_hub: PKIHub, kube: KubeClient, agent: AgentProcess, namespaces) -> None:
    # 1. The operator makes a token; the printed command is pasted on the device.
    printed = await token_command(pki_hub, "--labels", "site=lab")
    assert printed[printed.index("--hub") + 1] == pki_hub.join_address
    joined = await command(
        "edgeagent",
        *printed[1:],
        "--node-name",
        NODE,
        "--config",
        str(agent.config),
        "--state-dir",
        str(agent.state),
    )
    assert joined.returncode == 0, joined.stderr
    assert f"node {NODE} joined" in joined.stdout
    first_serial = serial(agent)
    _, first_expiry = certificate_validity((agent.state / "pki" / "node.crt").read_bytes())

    # 2. The agent connects with the issued certificate; the Node is Ready, a pod runs.
    agent.start()

    async def ready():
        node = await get_node(kube, NODE)
        return node if condition(node, "Ready") == "True" else None

    node = await eventually(ready, "Node Ready", 60)
    assert node["metadata"]["labels"]["site"] == "lab"
    assert pki_hub.session(NODE).link.peer_certificate.serial_number == first_serial
    await kube.create(
        namespaces, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}}
    )
    await kube.create(PODS, pod("worker", "apps", NODE, "exec sleep 600"))

    async def running():
        p = await get_pod(kube, "apps", "worker")
        return p if is_running(p) else None

    before = container_status(await eventually(running, "pod worker Running", 60))
    session_id = agent.hub_session()["session_id"]
    pid = agent.proc.pid

    # 3. Rotation over the live session (at 70-90 % of 20 s): new files, same session,
    # the pod untouched.
    # The files change before the agent logs it: wait for both.
    await eventually(
        lambda: (
            serial(agent) != first_serial
            and "renewed the certificate of node pi-flow" in agent.log()
        ),
        "the certificate renewed, and the agent says so",
        40,
    )
    assert agent.hub_session()["session_id"] == session_id
    assert agent.proc is not None and agent.proc.pid == pid
    after = container_status(await get_pod(kube, "apps", "worker"))
    assert after["containerID"] == before["containerID"] and after["restartCount"] == 0

    # 4. Revocation once the certificate that opened the session has expired (renewed
    # over it, so the session outlived it): the hub closes the session at once.
    await eventually(lambda: time.time() > first_expiry + 0.5, "the first certificate expired")
    assert pki_hub.session(NODE) is not None
    revoked = await command("cloudhub", "node", "revoke", NODE, "--kubeconfig", pki_hub.kubeconfig)
    assert revoked.returncode == 0, revoked.stderr
    done = time.monotonic()
    await eventually(lambda: pki_hub.session(NODE) is None, "the session closed", 5)
    latency = time.monotonic() - done
    assert latency < 1.0, latency

    # ...and refuses the agent from then on; the agent says what to do and keeps its pod.
    await eventually(lambda: agent.hub_session().get("state") == "refused", "the agent refused", 30)
    log = agent.log()
    assert "the hub closed the session and refuses this node (certificate revoked)" in log
    assert "the hub refused this node over quic" in log and "was revoked" in log
    assert "edgeagent join --renew --token NEW_TOKEN" in log
    assert "edgeagent join --renew" in agent.hub_session()["reason"]
    status = await command("edgeagent", "status", "--state-dir", str(agent.state))
    assert status.returncode == 0, status.stderr
    assert "hub:         refused since" in status.stdout, status.stdout
    assert "edgeagent join --renew --token NEW_TOKEN" in status.stdout  # what to run
    assert agent.running and agent.proc.pid == pid  # no crash loop; the store stays
    p = await get_pod(kube, "apps", "worker")
    assert container_status(p)["containerID"] == before["containerID"]

    # 5. Recovery: a new token and 'edgeagent join --renew' while the agent runs; it
    # reconnects without a restart, with its name, labels and pod.
    printed = await token_command(pki_hub)
    rejoined = await command(
        "edgeagent",
        "join",
        "--renew",
        "--token",
        printed[printed.index("--token") + 1],
        "--config",
        str(agent.config),
        "--state-dir",
        str(agent.state),
    )
    assert rejoined.returncode == 0, rejoined.stderr
    await eventually(
        lambda: agent.hub_session().get("state") == "connected", "reconnected after --renew", 30
    )
    assert agent.proc.pid == pid
    node = await eventually(ready, "Node Ready again", 30)
    assert node["metadata"]["labels"]["site"] == "lab"
    p = await get_pod(kube, "apps", "worker")
    assert is_running(p) and container_status(p)["containerID"] == before["containerID"]
    assert container_status(p)["restartCount"] == 0
