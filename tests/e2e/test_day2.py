"""Day-2 operations end to end: the real kubectl (Debian's 1.20) against ``cloudhub serve``
on its embedded API, a real agent process (process runtime) over real QUIC: ``kubectl
logs`` with ``--tail``, ``-f`` and ``--limit-bytes``; bad requests; the node's link cut:
the command fails at once with the offline message; back online, the next one works."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import subprocess
import time
from collections.abc import AsyncIterator

import pytest

from cloudhub.kube import NAMESPACES, NODES, PODS, KubeClient
from cloudhub.nodes.model import TRANSPORT_ANNOTATION
from tests.edgeagent.conftest import podman_engine  # noqa: F401  (session fixture)
from tests.edgeagent.hublink.fleet import eventually, unique
from tests.edgeagent.hublink.objects import get_pod, is_running, pod

pytestmark = pytest.mark.slow


#: A container that prints ``tick 1``, ``tick 2``... five times a second.
TICKER = "i=0; while :; do i=$((i+1)); echo tick $i; sleep 0.2; done"


async def kubectl_run(
    kubectl: str, hub, *args: str, timeout: float = 60, input: str | None = None
) -> subprocess.CompletedProcess:
    """Run kubectl against the hub to its end (``input`` on its stdin); text out."""
    return await asyncio.to_thread(
        subprocess.run,
        [kubectl, "--kubeconfig", str(hub.kubeconfig), *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@contextlib.asynccontextmanager
async def kubectl_running(
    kubectl: str, hub, *args: str
) -> AsyncIterator[asyncio.subprocess.Process]:
    """kubectl against the hub as a process that streams (``logs -f``, ``attach``,
    ``port-forward``), its stdout and stderr piped; killed at the end of the block."""
    proc = await asyncio.create_subprocess_exec(
        kubectl,
        "--kubeconfig",
        str(hub.kubeconfig),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        yield proc
    finally:
        proc.kill()
        await proc.wait()


async def running_pod(kube: KubeClient, namespace: str, body: dict) -> None:
    await kube.create(PODS, body)
    name = body["metadata"]["name"]

    async def running():
        return is_running(await get_pod(kube, namespace, name))

    await eventually(running, f"pod {name} Running")


@pytest.fixture
async def ns(kube: KubeClient) -> str:
    """A namespace of the test's own."""
    name = unique("day2")
    await kube.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    return name


async def test_kubectl_logs_tail_follow_limit_and_offline(hub, kube, ns, agent, kubectl) -> None:
    node = unique("edge-logs")
    edge = agent(node)
    await running_pod(
        kube, ns, pod("hello", ns, node, "echo one; echo two; echo three; exec sleep 3600")
    )

    async def all_lines():
        done = await kubectl_run(kubectl, hub, "logs", "-n", ns, "hello")
        return done if done.returncode == 0 and done.stdout.count("\n") == 3 else None

    done = await eventually(all_lines, "kubectl logs shows the three lines")
    assert done.stdout == "one\ntwo\nthree\n"
    done = await kubectl_run(kubectl, hub, "logs", "-n", ns, "hello", "--tail=2")
    assert (done.returncode, done.stdout) == (0, "two\nthree\n"), done.stderr
    done = await kubectl_run(
        kubectl, hub, "logs", "-n", ns, "hello", "-c", "app", "--limit-bytes=6"
    )
    assert (done.returncode, done.stdout) == (0, "one\ntw"), done.stderr

    # bad input: an unknown container, an unknown pod, a bad tailLines value
    done = await kubectl_run(kubectl, hub, "logs", "-n", ns, "hello", "-c", "nope")
    assert done.returncode != 0 and "container nope is not valid for pod hello" in done.stderr
    done = await kubectl_run(kubectl, hub, "logs", "-n", ns, "absent")
    assert done.returncode != 0 and "not found" in done.stderr
    # the process runtime's files have no times: said so, not silently ignored
    done = await kubectl_run(kubectl, hub, "logs", "-n", ns, "hello", "--timestamps")
    assert done.returncode != 0 and "--timestamps" in done.stderr, done.stderr

    # -f: lines written after kubectl started arrive while it runs
    await running_pod(
        kube,
        ns,
        pod("ticker", ns, node, TICKER),
    )
    async with kubectl_running(kubectl, hub, "logs", "-f", "-n", ns, "ticker") as follow:
        first = await asyncio.wait_for(follow.stdout.readline(), 30)
        assert first.startswith(b"tick ")
        later = b""
        for _ in range(10):
            later = await asyncio.wait_for(follow.stdout.readline(), 30)
        assert int(later.split()[1]) == int(first.split()[1]) + 10  # in order, none lost

    # the link cut: kubectl fails fast with the offline message
    await edge.stop()
    started = time.monotonic()
    done = await kubectl_run(kubectl, hub, "logs", "-n", ns, "hello")
    took = time.monotonic() - started
    assert done.returncode != 0 and f"node {node} is offline since" in done.stderr, done.stderr
    assert took < 5, took
    # back: the next command works
    edge.start()
    await eventually(all_lines, "kubectl logs after the node is back")


async def test_kubectl_exec_non_tty(hub, kube, ns, agent, kubectl) -> None:
    node = unique("edge-exec")
    agent(node)
    await running_pod(kube, ns, pod("shell", ns, node, "echo hi > greeting; exec sleep 3600"))
    done = await kubectl_run(
        kubectl, hub, "exec", "-n", ns, "shell", "--", "sh", "-c", "cat greeting; echo oops >&2"
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "hi\n", "oops\n"), done.stderr
    # stdin through, and the command's exit code back out as kubectl's
    proc = await asyncio.to_thread(
        subprocess.run,
        [
            kubectl,
            "--kubeconfig",
            str(hub.kubeconfig),
            "exec",
            "-i",
            "-n",
            ns,
            "shell",
            "--",
            "sh",
            "-c",
            "tr a-z A-Z; exit 3",
        ],
        input="shout\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (proc.returncode, proc.stdout) == (3, "SHOUT\n"), proc.stderr
    # bad input: no such executable, no such container
    done = await kubectl_run(kubectl, hub, "exec", "-n", ns, "shell", "--", "no-such-tool")
    assert done.returncode != 0 and "executable file not found" in done.stderr, done.stderr
    done = await kubectl_run(kubectl, hub, "exec", "-n", ns, "shell", "-c", "nope", "--", "true")
    assert done.returncode != 0 and "nope" in done.stderr, done.stderr


async def test_kubectl_exec_stdin_of_megabytes_arrives_whole_and_in_order(
    hub, kube, ns, agent, kubectl
) -> None:
    """Far more stdin than a stream's window and the hub's read pause (the hub's stdin
    pump stops and starts again with every burst, the socket paused and resumed): the
    command sees every byte, in order, and its end."""
    node = unique("edge-stdin")
    agent(node)
    await running_pod(kube, ns, pod("sink", ns, node, "exec sleep 3600"))
    # 1.9 MB: more than 7 windows (256 KiB) and the hub's read pause (256 KiB)
    data = b"".join(hashlib.sha256(str(i).encode()).hexdigest().encode() for i in range(30_000))
    proc = await asyncio.to_thread(
        subprocess.run,
        [
            kubectl,
            "--kubeconfig",
            str(hub.kubeconfig),
            "exec",
            "-i",
            "-n",
            ns,
            "sink",
            "--",
            "sha256sum",
        ],
        input=data,
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[0].decode() == hashlib.sha256(data).hexdigest()


async def test_kubectl_exec_it_through_a_pty_type_read_back_and_resize(
    hub, kube, ns, agent, kubectl
) -> None:
    """``kubectl exec -it POD -- sh`` with kubectl on a real pseudo-terminal: what is typed
    reaches the shell, its answer comes back, and a terminal resize reaches the shell's
    terminal (``stty size``)."""
    node = unique("edge-tty")
    agent(node)
    await running_pod(kube, ns, pod("term", ns, node, "exec sleep 3600"))
    await drive_tty(kubectl, hub, ns, "term")


async def drive_tty(kubectl: str, hub, ns: str, name: str) -> None:
    """Run ``kubectl exec -it`` on a pty: type, read back, resize, exit 5."""
    import fcntl
    import os
    import pty
    import signal
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    proc = await asyncio.create_subprocess_exec(
        kubectl,
        "--kubeconfig",
        str(hub.kubeconfig),
        "exec",
        "-it",
        "-n",
        ns,
        name,
        "--",
        "sh",
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
        preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
    )
    os.close(slave)
    os.set_blocking(master, False)
    loop = asyncio.get_running_loop()
    seen = bytearray()

    async def read_until(marker: bytes, timeout: float = 30) -> bytes:
        deadline = loop.time() + timeout
        while marker not in seen:
            ready = loop.create_future()
            loop.add_reader(master, ready.set_result, None)
            try:
                await asyncio.wait_for(ready, max(0.1, deadline - loop.time()))
            except asyncio.TimeoutError:
                raise AssertionError(f"no {marker!r} in {bytes(seen)!r}") from None
            finally:
                loop.remove_reader(master)
            try:
                seen.extend(os.read(master, 65536))
            except BlockingIOError:
                continue
        return bytes(seen)

    try:
        os.write(master, b"echo $((6*7))x\r")
        await read_until(b"42x")
        os.write(master, b"stty size\r")
        await read_until(b"24 80")
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        os.killpg(proc.pid, signal.SIGWINCH)

        async def resized() -> bool:
            os.write(master, b"stty size\r")
            try:
                await read_until(b"40 120", timeout=2)
                return True
            except AssertionError:
                return False

        await eventually(resized, "the resize reached the shell's terminal", 30)
        os.write(master, b"exit 5\r")
        assert await asyncio.wait_for(proc.wait(), 30) == 5
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        os.close(master)


async def test_logs_previous_and_exec_over_websocket(hub, kube, ns, agent, kubectl) -> None:
    """The agent on WebSocket only; a container that failed once: ``--previous`` shows the
    failed attempt's output, plain logs the current one's."""
    node = unique("edge-ws")
    agent(node, "hub.transports=websocket")
    script = (
        "if [ -e data/marker ]; then echo second; exec sleep 3600; "
        "else touch data/marker; echo first; exit 1; fi"
    )
    body = pod(
        "again",
        ns,
        node,
        script,
        container={"volumeMounts": [{"name": "data", "mountPath": "/data"}]},
        volumes=[{"name": "data", "emptyDir": {}}],
        restartPolicy="OnFailure",
    )
    await kube.create(PODS, body)

    async def restarted_and_running():
        found = await get_pod(kube, ns, "again")
        statuses = ((found or {}).get("status") or {}).get("containerStatuses") or []
        return is_running(found) and statuses and statuses[0].get("restartCount", 0) >= 1

    await eventually(restarted_and_running, "pod again restarted once and Running", 90)
    found = await kube.get(NODES, node)
    assert found["metadata"]["annotations"][TRANSPORT_ANNOTATION] == "websocket"

    async def current():
        done = await kubectl_run(kubectl, hub, "logs", "-n", ns, "again")
        return done if done.returncode == 0 and done.stdout else None

    assert (await eventually(current, "kubectl logs")).stdout == "second\n"
    done = await kubectl_run(kubectl, hub, "logs", "-n", ns, "again", "--previous")
    assert (done.returncode, done.stdout) == (0, "first\n"), done.stderr
    done = await kubectl_run(kubectl, hub, "exec", "-n", ns, "again", "--", "cat", "data/marker")
    assert (done.returncode, done.stdout) == (0, ""), done.stderr


@pytest.mark.podman
async def test_logs_and_exec_on_the_docker_runtime(
    hub,
    kube,
    ns,
    agent,
    kubectl,
    podman_engine,  # noqa: F811 (the session fixture imported above)
    tmp_path,
) -> None:
    """The same commands against podman's Docker API: the engine's logs (with
    ``--timestamps``, which the engine keeps) and its exec (stdin, stderr, exit code)."""
    node = unique("edge-docker")
    agent(node, runtime="docker", engine=podman_engine)
    await running_pod(
        kube, ns, pod("box", ns, node, "echo one; echo two; echo three; exec sleep 3600")
    )

    async def three_lines():
        done = await kubectl_run(kubectl, hub, "logs", "-n", ns, "box")
        return done if done.returncode == 0 and done.stdout.count("\n") == 3 else None

    assert (await eventually(three_lines, "kubectl logs")).stdout == "one\ntwo\nthree\n"
    done = await kubectl_run(kubectl, hub, "logs", "-n", ns, "box", "--tail=1", "--timestamps")
    assert done.returncode == 0, done.stderr
    stamp, text = done.stdout.strip().split(" ", 1)
    assert text == "three" and stamp[:2] == "20", done.stdout
    proc = await kubectl_run(
        kubectl,
        hub,
        *("exec", "-i", "-n", ns, "box", "--"),
        *("sh", "-c", "read x; echo got $x; echo err >&2; exit 6"),
        input="it\n",
    )
    assert (proc.returncode, proc.stdout) == (6, "got it\n"), proc.stderr
    # the container's stderr, then kubectl's own line about the exit code
    assert proc.stderr == "err\ncommand terminated with exit code 6\n"

    # kubectl cp in and out (tar over exec: stdin to its end, then stdout)
    local = tmp_path / "payload.txt"
    local.write_text("copied through the hub\n" * 100)
    done = await kubectl_run(kubectl, hub, "cp", str(local), f"{ns}/box:/tmp/payload.txt")
    assert done.returncode == 0, done.stderr
    back = tmp_path / "back.txt"
    done = await kubectl_run(kubectl, hub, "cp", f"{ns}/box:/tmp/payload.txt", str(back))
    assert done.returncode == 0, done.stderr
    assert back.read_text() == local.read_text()


async def test_kubectl_attach_streams_the_containers_output(hub, kube, ns, agent, kubectl) -> None:
    node = unique("edge-attach")
    agent(node)
    await running_pod(
        kube,
        ns,
        pod("ticks", ns, node, TICKER),
    )
    async with kubectl_running(kubectl, hub, "attach", "-n", ns, "ticks") as attach:
        first = await asyncio.wait_for(attach.stdout.readline(), 30)
        second = await asyncio.wait_for(attach.stdout.readline(), 30)
        assert first.startswith(b"tick ") and int(second.split()[1]) == int(first.split()[1]) + 1
    done = await kubectl_run(kubectl, hub, "attach", "-i", "-n", ns, "ticks")
    assert done.returncode != 0 and "attach without -i" in done.stderr, done.stderr


async def test_kubectl_port_forward_with_an_http_get(
    hub, kube, ns, agent, kubectl, tmp_path
) -> None:
    """A pod serving HTTP on a port of the node (process runtime: the host network);
    ``kubectl port-forward`` to a local port; an HTTP GET through it, twice (two
    connections)."""
    import sys
    import urllib.request

    from tests.edgeagent.hublink.fleet import free_port

    node = unique("edge-pf")
    agent(node)
    pod_port, local_port = free_port(), free_port()
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "index.html").write_text("through the hub\n")
    server = (
        f"exec {sys.executable} -m http.server {pod_port} --bind 127.0.0.1 -d {tmp_path / 'site'}"
    )
    await running_pod(kube, ns, pod("web", ns, node, server))
    async with kubectl_running(
        kubectl, hub, "port-forward", "-n", ns, "pod/web", f"{local_port}:{pod_port}"
    ) as forward:
        line = await asyncio.wait_for(forward.stdout.readline(), 30)
        assert b"Forwarding from 127.0.0.1:" in line, line

        def get() -> str:
            url = f"http://127.0.0.1:{local_port}/index.html"
            with urllib.request.urlopen(url, timeout=10) as answer:
                return answer.read().decode()

        async def served():
            try:
                return await asyncio.to_thread(get)
            except OSError:
                return None  # the http.server may still be starting

        assert (
            await eventually(served, "an HTTP GET through the port-forward") == "through the hub\n"
        )
        assert await asyncio.to_thread(get) == "through the hub\n"  # a second connection


async def test_malformed_spdy_is_refused_and_nothing_else_is_disturbed(
    hub, kube, ns, agent, kubectl
) -> None:
    """After a real exec upgrade on the embedded API, garbage instead of SPDY frames: the
    hub answers GOAWAY(PROTOCOL_ERROR) and drops that connection; a kubectl exec at the
    same time and after works."""
    from tests.bench.bench_streams import API

    node = unique("edge-bad")
    agent(node)
    await running_pod(kube, ns, pod("calm", ns, node, "exec sleep 3600"))
    api = API(hub.kubeconfig)
    reader, writer, head = await api.request(
        "POST",
        f"/api/v1/namespaces/{ns}/pods/calm/exec?command=cat&stdin=true&stdout=true",
        {
            "Connection": "Upgrade",
            "Upgrade": "SPDY/3.1",
            "X-Stream-Protocol-Version": "v4.channel.k8s.io",
        },
    )
    assert head.startswith(b"HTTP/1.1 101"), head
    # a control frame of SPDY version 2: not spoken
    writer.write(b"\x80\x02\x00\x01\x00\x00\x00\x0a" + b"\x00" * 10)
    answer = await asyncio.wait_for(reader.read(), 30)  # until the hub closes it
    assert answer[:4] == b"\x80\x03\x00\x07" and answer[12:16] == (1).to_bytes(4, "big"), answer
    writer.close()
    done = await kubectl_run(kubectl, hub, "exec", "-n", ns, "calm", "--", "echo", "fine")
    assert (done.returncode, done.stdout) == (0, "fine\n"), done.stderr
    # an upgrade without SPDY's headers is refused before it starts
    reader, writer, head = await api.request(
        "POST", f"/api/v1/namespaces/{ns}/pods/calm/exec?command=ls"
    )
    writer.close()
    assert head.startswith(b"HTTP/1.1 400"), head


@pytest.mark.parametrize("subprotocol", ["v4.channel.k8s.io", "v4.base64.channel.k8s.io"])
async def test_exec_over_websocket_channels(hub, kube, ns, agent, subprotocol) -> None:
    """A WebSocket client (the ``websockets`` library) execs with the channel protocols:
    stdin in, stdout and stderr out on their channels, the v4 status with the exit code on
    channel 3; a message on a channel a client may not write closes it with 1008."""
    import base64
    import json

    import websockets

    from tests.bench.bench_streams import API

    node = unique("edge-ws-exec")
    agent(node)
    await running_pod(kube, ns, pod("wsx", ns, node, "exec sleep 3600"))
    api = API(hub.kubeconfig)
    b64 = "base64" in subprotocol
    query = "command=sh&command=-c&command=read+x%3B+echo+got+%24x%3B+echo+err+%3E%262%3B+exit+2"
    url = f"wss://{api.url.netloc}/api/v1/namespaces/{ns}/pods/wsx/exec?{query}&stdin=true&stdout=true&stderr=true"

    def frame(channel: int, data: bytes):
        return str(channel) + base64.b64encode(data).decode() if b64 else bytes([channel]) + data

    def unframe(message) -> tuple[int, bytes]:
        if b64:
            return int(message[0]), base64.b64decode(message[1:])
        return message[0], message[1:]

    async with websockets.connect(
        url,
        ssl=api.context,
        subprotocols=[subprotocol],
        additional_headers={"Authorization": f"Bearer {api.token}"},
    ) as ws:
        assert ws.subprotocol == subprotocol
        await ws.send(frame(0, b"it\n"))
        got: dict[int, bytes] = {}
        async for message in ws:
            channel, data = unframe(message)
            got[channel] = got.get(channel, b"") + data
    assert got[1] == b"got it\n" and got[2] == b"err\n"
    status = json.loads(got[3])
    assert status["reason"] == "NonZeroExitCode"
    assert status["details"]["causes"] == [{"reason": "ExitCode", "message": "2"}]

    async with websockets.connect(
        url,
        ssl=api.context,
        subprotocols=[subprotocol],
        additional_headers={"Authorization": f"Bearer {api.token}"},
    ) as ws:
        await ws.send(frame(1, b"a client may not write stdout"))
        with pytest.raises(websockets.ConnectionClosed) as closed:
            async for _ in ws:
                pass
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008


@pytest.mark.podman
async def test_kubectl_exec_it_on_the_docker_runtime(
    hub,
    kube,
    ns,
    agent,
    kubectl,
    podman_engine,  # noqa: F811 (the session fixture imported above)
) -> None:
    """``kubectl exec -it`` through the engine's exec with a tty: type, read back, resize."""
    node = unique("edge-docker-tty")
    agent(node, runtime="docker", engine=podman_engine)
    await running_pod(kube, ns, pod("term", ns, node, "exec sleep 3600"))
    await drive_tty(kubectl, hub, ns, "term")


async def test_exec_attach_port_forward_fail_fast_offline_and_work_when_back(
    hub, kube, ns, agent, kubectl
) -> None:
    """The node's link cut (its agent gone): ``kubectl exec``, ``attach`` and
    ``port-forward`` each fail within 5 s with the hub's offline message, no hang; when
    the node is back, the next exec works."""
    from tests.edgeagent.hublink.fleet import free_port

    node = unique("edge-off")
    edge = agent(node)
    await running_pod(kube, ns, pod("ticks", ns, node, "while :; do echo tick; sleep 0.2; done"))
    done = await kubectl_run(kubectl, hub, "exec", "-n", ns, "ticks", "--", "echo", "up")
    assert (done.returncode, done.stdout) == (0, "up\n"), done.stderr

    await edge.stop()  # SIGTERM: the agent closes its session, the hub marks it offline
    commands = {
        "exec": ("exec", "-n", ns, "ticks", "--", "echo", "up"),
        "attach": ("attach", "-n", ns, "ticks"),
        "port-forward": ("port-forward", "-n", ns, "pod/ticks", f"{free_port()}:8080"),
    }
    for name, args in commands.items():
        started = time.monotonic()
        done = await kubectl_run(kubectl, hub, *args, timeout=30)
        took = time.monotonic() - started
        assert done.returncode != 0, (name, done.stdout)
        assert f"node {node} is offline since" in done.stderr, (name, done.stderr)
        assert took < 5, (name, took)

    edge.start()

    async def exec_works():
        done = await kubectl_run(kubectl, hub, "exec", "-n", ns, "ticks", "--", "echo", "back")
        return done.returncode == 0 and done.stdout == "back\n"

    await eventually(exec_works, "kubectl exec after the node is back")
