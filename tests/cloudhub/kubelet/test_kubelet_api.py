"""``kubectl logs`` and ``kubectl exec`` with the real kubectl 1.20 against the embedded API
and against the real kube-apiserver 1.20, which dials the hub's kubelet API at the address
and port the hub publishes in the Node's status (``InternalDNS``, with the API server's
``--kubelet-preferred-address-types=InternalDNS,InternalIP,Hostname`` and its kubelet
client certificate), through a real agent process over QUIC. A caller with a certificate
that is not the API server's is refused in the TLS handshake."""

from __future__ import annotations

import asyncio
import pathlib
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from cloudhub.kube import NODES, PODS
from cloudhub.kubelet.extension import kubelet_extension
from cloudhub.kubelet.settings import KubeletSettings
from protocol import pki
from tests.cloudhub.hub.conftest import KUBE_APISERVER
from tests.edgeagent.hublink.fleet import AgentProcess, eventually, free_port, unique
from tests.edgeagent.hublink.objects import get_pod, is_running, pod

pytestmark = pytest.mark.slow


def http_get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return answer.read().decode()


def run(kubectl: str, kubeconfig: pathlib.Path, *args: str, stdin: str | None = None):
    return subprocess.run(
        [kubectl, "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


# The embedded API's side (the hub runs it and serves pods/log and pods/exec in process) is
# tested with the hub as a process in tests/e2e/test_day2.py; here the API is the real one.
@pytest.mark.kubeapiserver
@pytest.mark.parametrize("cluster", [KUBE_APISERVER], indirect=True)
async def test_logs_and_exec_through_the_hub(
    cluster, hubs, kube, namespace, kubectl, pki_ca, tmp_path, request
) -> None:
    settings = KubeletSettings(host="127.0.0.1", port=0, advertise_address="127.0.0.1")
    if cluster.name == KUBE_APISERVER:
        server = request.getfixturevalue("kube_apiserver")
        settings = KubeletSettings(
            host="127.0.0.1",
            port=0,
            advertise_address="127.0.0.1",
            client_ca_file=str(server.ca_file),
        )
    hub = await hubs.start(extensions=[kubelet_extension(settings)])
    node = unique("edge-kubelet")
    edge = AgentProcess(
        tmp_path / node, node, "process", f"quic://127.0.0.1:{hub.quic_port}", pki_ca.ca
    )
    edge.start()
    try:
        await kube.create(PODS, pod("talk", namespace, node, "echo hello; exec sleep 3600"))

        async def running():
            return is_running(await get_pod(kube, namespace, "talk"))

        await eventually(running, "pod talk Running")
        if cluster.name == KUBE_APISERVER:
            # the Node names the hub's kubelet API
            port = hub.kubelet_server.port
            found = await kube.get(NODES, node)
            assert found["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] == port
            assert found["status"]["addresses"][0] == {
                "type": "InternalDNS",
                "address": "127.0.0.1",
            }

        async def logs():
            done = await asyncio.to_thread(
                run, kubectl, cluster.kubeconfig, "logs", "-n", namespace, "talk"
            )
            last.append(done)
            return done if done.returncode == 0 and done.stdout else None

        last: list = []

        done = await eventually(logs, "kubectl logs", state=lambda: last[-1].stderr if last else "")
        assert done.stdout == "hello\n"
        done = await asyncio.to_thread(
            run,
            kubectl,
            cluster.kubeconfig,
            "exec",
            "-i",
            "-n",
            namespace,
            "talk",
            "--",
            "sh",
            "-c",
            "read x; echo got $x; exit 4",
            stdin="it\n",
        )
        assert (done.returncode, done.stdout) == (4, "got it\n"), done.stderr

        # port-forward through the API server to the hub's /portForward, with an HTTP GET
        pod_port, local_port = free_port(), free_port()
        site = tmp_path / "site"
        site.mkdir()
        (site / "index.html").write_text("via kube-apiserver\n")
        serve = f"exec {sys.executable} -m http.server {pod_port} --bind 127.0.0.1 -d {site}"
        await kube.create(PODS, pod("web", namespace, node, serve))

        async def web_running():
            return is_running(await get_pod(kube, namespace, "web"))

        await eventually(web_running, "pod web Running")
        forward = await asyncio.create_subprocess_exec(
            kubectl,
            "--kubeconfig",
            str(cluster.kubeconfig),
            "port-forward",
            "-n",
            namespace,
            "pod/web",
            f"{local_port}:{pod_port}",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            assert forward.stdout is not None
            await asyncio.wait_for(forward.stdout.readline(), 30)

            async def served():
                try:
                    return await asyncio.to_thread(http_get, f"http://127.0.0.1:{local_port}/")
                except OSError:
                    return None

            assert await eventually(served, "GET through port-forward") == "via kube-apiserver\n"
        finally:
            forward.kill()
            await forward.wait()

        if cluster.name == KUBE_APISERVER:
            # a node's certificate (the hub CA's), not the API server's: refused in the handshake
            context = ssl.create_default_context(
                cadata=pki.dump_certificate_pem(pki_ca.ca.certificate).decode()
            )
            client = pki_ca.node(node)
            cert = tmp_path / "node.pem"
            cert.write_bytes(
                pki.dump_certificate_pem(client.chain)
                + pki.dump_private_key_pem(client.private_key)
            )
            context.load_cert_chain(str(cert))
            url = f"https://127.0.0.1:{port}/containerLogs/{namespace}/talk/app"
            with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
                await asyncio.to_thread(urllib.request.urlopen, url, context=context, timeout=10)
            # and the hub goes on serving the API server
            done = await eventually(logs, "kubectl logs after the refused caller")
            assert done.stdout == "hello\n"
        # the node's link cut: the API server relays the hub's offline message at once
        await edge.stop()
        started = time.monotonic()
        done = await asyncio.to_thread(
            run, kubectl, cluster.kubeconfig, "logs", "-n", namespace, "talk"
        )
        assert done.returncode != 0 and f"node {node} is offline since" in done.stderr
        assert time.monotonic() - started < 5
        # exec, attach and port-forward too: the API server relays the hub's answer to
        # the upgrade at once
        for args in (
            ("exec", "-n", namespace, "talk", "--", "echo", "up"),
            ("attach", "-n", namespace, "talk"),
            ("port-forward", "-n", namespace, "pod/web", f"{free_port()}:{pod_port}"),
        ):
            started = time.monotonic()
            done = await asyncio.to_thread(run, kubectl, cluster.kubeconfig, *args)
            assert done.returncode != 0, (args, done.stdout)
            assert f"node {node} is offline since" in done.stderr, (args, done.stderr)
            assert time.monotonic() - started < 5, args
        # the node back: the next exec works
        edge.start()

        async def exec_works():
            done = await asyncio.to_thread(
                run,
                kubectl,
                cluster.kubeconfig,
                "exec",
                "-n",
                namespace,
                "talk",
                "--",
                "echo",
                "back",
            )
            return done.returncode == 0 and done.stdout == "back\n"

        await eventually(exec_works, "kubectl exec after the node is back")
    finally:
        await edge.stop()
        await edge.remove_everything()
