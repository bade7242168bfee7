"""The server's own settings and limits: watch buffers and bookmarks, body size,
settings checks, TLS and token, and ``python -m cloudhub.standalone``."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import signal
import socket
import ssl
import subprocess
import sys
import tracemalloc

import aiohttp
import psutil
import pytest
from kubernetes_asyncio import client

from cloudhub.standalone import APIServerSettings, ConfigurationError, EmbeddedAPIServer
from tests.cloudhub.standalone.conftest import running, settings
from tests.environment import missing
from tests.k8s.kube_apiserver import kubectl_path
from tests.waiting import eventually

ROOT = pathlib.Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    "bad",
    [
        {"port": 70000},
        {"watch_history_events": 0},
        {"watch_queue_events": 0},
        {"bookmark_interval_s": 0},
        {"default_watch_timeout_s": -1},
        {"max_request_body_bytes": 10},
        {"max_object_bytes": 100},
        {"commit_interval_s": -0.1},
        {"commit_interval_s": float("nan")},
        {"bookmark_interval_s": float("inf")},
        {"default_watch_timeout_s": float("nan")},
        {"token": "has space"},
        {"token": ""},
    ],
)
def test_bad_settings_are_refused(bad: dict) -> None:
    with pytest.raises(ConfigurationError):
        APIServerSettings(**bad)


async def test_port_in_use_is_a_configuration_error() -> None:
    async with EmbeddedAPIServer(settings()) as first:
        with pytest.raises(ConfigurationError) as err:
            async with EmbeddedAPIServer(APIServerSettings(port=first.port)):
                pass
        assert str(first.port) in str(err.value)


async def _watch_lines(api: EmbeddedAPIServer, query: str) -> list[dict]:
    ctx = ssl.create_default_context(cafile=str(api.ca_cert_path))
    headers = {"Authorization": f"Bearer {api.token}"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session:
        url = f"{api.url}/api/v1/namespaces/default/configmaps?watch=1&{query}"
        async with session.get(url, headers=headers) as resp:
            assert resp.status == 200
            return [json.loads(line) async for line in resp.content if line.strip()]


async def test_bookmarks_follow_the_configured_interval() -> None:
    async with running(settings(bookmark_interval_s=0.2)) as (api, c):
        listed = await client.CoreV1Api(c).list_namespaced_config_map("default")
        events = await asyncio.wait_for(
            _watch_lines(
                api,
                f"resourceVersion={listed.metadata.resource_version}&allowWatchBookmarks=true"
                "&timeoutSeconds=1",
            ),
            20,
        )
    bookmarks = [e for e in events if e["type"] == "BOOKMARK"]
    assert len(bookmarks) >= 2
    assert all(e["object"]["metadata"]["resourceVersion"] for e in bookmarks)


async def test_a_watch_that_falls_behind_is_ended_and_can_resume() -> None:
    async with running(settings(watch_queue_events=5)) as (api, c):
        core = client.CoreV1Api(c)
        listed = await core.list_namespaced_config_map("default")
        start = listed.metadata.resource_version
        ctx = ssl.create_default_context(cafile=str(api.ca_cert_path))
        headers = {"Authorization": f"Bearer {api.token}"}
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session:
            url = f"{api.url}/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={start}"
            async with session.get(url, headers=headers) as resp:
                # The client reads nothing while 20 changes happen at once: more than
                # its buffer of 5 can hold before the server gets to write them.
                await asyncio.gather(
                    *(
                        core.create_namespaced_config_map(
                            "default",
                            client.V1ConfigMap(metadata=client.V1ObjectMeta(name=f"f{i}")),
                        )
                        for i in range(20)
                    )
                )
                received = [json.loads(line) async for line in resp.content if line.strip()]
        assert len(received) < 20  # the stream ended instead of growing without bound
        last = received[-1]["object"]["metadata"]["resourceVersion"] if received else start
        resumed = await asyncio.wait_for(
            _watch_lines(api, f"resourceVersion={last}&timeoutSeconds=1"), 20
        )
        names = {e["object"]["metadata"]["name"] for e in received + resumed}
        assert names == {f"f{i}" for i in range(20)}


def _served(port: int, peer: int) -> bool:
    """Whether the server (this process, on ``port``) holds a socket to client ``peer``."""
    return any(
        conn.laddr.port == port and conn.raddr and conn.raddr.port == peer
        for conn in psutil.Process().net_connections(kind="tcp")
    )


async def _stalled_watch(api: EmbeddedAPIServer, query: str) -> tuple[asyncio.StreamWriter, int]:
    """A watch whose client never reads (tiny receive buffer, and the stream reader's
    flow control stops reading the socket once its own buffer is full), and its port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", api.port))
    ctx = ssl.create_default_context(cafile=str(api.ca_cert_path))
    _, writer = await asyncio.open_connection(
        sock=sock, ssl=ctx, server_hostname="127.0.0.1", limit=4096
    )
    writer.write(
        f"GET /api/v1/namespaces/default/configmaps?watch=1&{query} HTTP/1.1\r\n"
        f"Host: 127.0.0.1\r\nAuthorization: Bearer {api.token}\r\n\r\n".encode()
    )
    await writer.drain()
    return writer, sock.getsockname()[1]


async def _write_big_configmaps(core: client.CoreV1Api, count: int, size: int) -> None:
    for i in range(count):
        await core.create_namespaced_config_map(
            "default",
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name=f"big{i}"), data={"x": "y" * size}
            ),
        )


async def test_a_client_that_stops_reading_is_cut_off_when_its_watch_overflows() -> None:
    """The events it cannot take are dropped with the watch, and the connection, stuck
    in a write the client will never read, is closed: nothing stays pinned for it."""
    async with running(settings(watch_queue_events=20)) as (api, c):
        writer, peer = await _stalled_watch(api, "timeoutSeconds=3600")
        await eventually(lambda: _served(api.port, peer), "the watch to open")
        # 12 MB for a client that reads none: more than every buffer on the way holds.
        await _write_big_configmaps(client.CoreV1Api(c), 200, 60_000)
        await eventually(lambda: not _served(api.port, peer), "the stalled watch to be closed")
        writer.close()


async def test_a_stalled_watch_is_cut_off_at_its_timeout() -> None:
    async with running(settings()) as (api, c):
        writer, peer = await _stalled_watch(api, "timeoutSeconds=2")
        await eventually(lambda: _served(api.port, peer), "the watch to open")
        # 12 MB the client never reads: the server is stuck writing when the time is up.
        await _write_big_configmaps(client.CoreV1Api(c), 200, 60_000)
        await eventually(lambda: not _served(api.port, peer), "the watch to end at its timeout")
        writer.close()


_WATCHER = """
import asyncio, ssl, sys, aiohttp
async def main(url, token, cafile, count):
    ctx = ssl.create_default_context(cafile=cafile)
    headers = {"Authorization": "Bearer " + token}
    connector = aiohttp.TCPConnector(ssl=ctx, limit=0)
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
        watches = []
        for _ in range(count):
            watches.append(await session.get(
                url + "/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=600"
            ))
        print("open", flush=True)
        sys.stdin.readline()
        for watch in watches:
            watch.close()
asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
"""


async def test_an_idle_watch_costs_the_server_little_memory() -> None:
    """Each connection's TLS layer reads through a buffer shared by the thread: asyncio's
    own gives every connection 256 KiB, ~290 KiB per idle watch in all."""
    count = 100
    async with running(settings()) as (api, _):
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                _WATCHER,
                api.url,
                api.token,
                str(api.ca_cert_path),
                str(count),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            assert proc.stdin is not None and proc.stdout is not None
            assert await asyncio.wait_for(proc.stdout.readline(), 60) == b"open\n"
            per_watch = (tracemalloc.get_traced_memory()[0] - before) / count
            proc.stdin.write(b"\n")
            await proc.stdin.drain()
            await asyncio.wait_for(proc.wait(), 60)
        finally:
            tracemalloc.stop()
    assert per_watch < 64 * 1024, f"{per_watch / 1024:.0f} KiB per idle watch"


async def test_body_over_the_limit_is_413() -> None:
    async with running(settings(max_request_body_bytes=4096)) as (api, _):
        ctx = ssl.create_default_context(cafile=str(api.ca_cert_path))
        headers = {"Authorization": f"Bearer {api.token}", "Content-Type": "application/json"}
        body = json.dumps({"metadata": {"name": "big"}, "data": {"k": "x" * 8192}})
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session:
            async with session.post(
                f"{api.url}/api/v1/namespaces/default/configmaps", data=body, headers=headers
            ) as resp:
                assert resp.status == 413
                status = await resp.json()
        assert status["kind"] == "Status" and status["reason"] == "RequestEntityTooLarge"


async def test_requests_need_the_token_but_health_and_version_do_not() -> None:
    async with EmbeddedAPIServer(settings()) as api:
        ctx = ssl.create_default_context(cafile=str(api.ca_cert_path))
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session:
            for path, status in (
                ("/api/v1/pods", 401),
                ("/healthz", 200),
                ("/readyz", 200),
                ("/version", 200),
            ):
                async with session.get(api.url + path) as resp:
                    assert resp.status == status, path
        # The serving certificate verifies against the CA for the loopback names.
        assert api.url.startswith("https://127.0.0.1:")


async def test_pipelined_requests_are_answered_in_order() -> None:
    """Requests sent back to back on one connection before any answer (HTTP/1.1
    pipelining) queue in the connection's request queue (a list of ours, not aiohttp's
    deque) and come back in the order sent."""
    async with EmbeddedAPIServer(settings()) as api:
        ctx = ssl.create_default_context(cafile=str(api.ca_cert_path))
        host, port = api.url.removeprefix("https://").rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port), ssl=ctx)
        paths = ["/healthz", "/api/v1/namespaces/nope", "/version", "/readyz", "/api/v1/pods"]
        writer.write(
            b"".join(
                f"GET {path} HTTP/1.1\r\nHost: {host}\r\n"
                f"Authorization: Bearer {api.token}\r\n\r\n".encode()
                for path in paths
            )
        )
        await writer.drain()
        answers = []
        for _ in paths:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            answers.append((int(head.split()[1]), await reader.readexactly(length)))
        writer.close()
        await writer.wait_closed()
    assert [status for status, _ in answers] == [200, 404, 200, 200, 200]
    assert answers[0][1] == answers[3][1] == b"ok"
    assert b"NotFound" in answers[1][1]
    assert b"gitVersion" in answers[2][1]
    assert b"PodList" in answers[4][1]


def test_cli_help_explains_every_option() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "cloudhub.standalone", "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )
    assert proc.returncode == 0
    for option in (
        "--data-dir",
        "--in-memory",
        "--host",
        "--port",
        "--advertise-host",
        "--token",
        "--kubeconfig-out",
        "--watch-history",
        "--bookmark-interval",
        "--commit-interval",
        "--no-fsync",
    ):
        assert option in proc.stdout, option


def test_cli_rejects_bad_options() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "cloudhub.standalone", "--port", "99999", "--in-memory"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )
    assert proc.returncode == 2
    assert "port" in proc.stderr


@pytest.mark.parametrize(
    ("flag", "value"), [("--commit-interval", "nan"), ("--bookmark-interval", "inf")]
)
def test_cli_rejects_non_finite_seconds(flag: str, value: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "cloudhub.standalone", flag, value, "--in-memory"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )
    assert proc.returncode == 2
    assert "must be a finite number of seconds" in proc.stderr


def test_cli_unusable_data_dir_is_exit_1_with_a_message(tmp_path: pathlib.Path) -> None:
    a_file = tmp_path / "not-a-dir"
    a_file.write_text("")
    proc = subprocess.run(
        [sys.executable, "-m", "cloudhub.standalone", "--data-dir", str(a_file), "--port", "0"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"error: cannot create {a_file}"), proc.stderr
    assert "Traceback" not in proc.stderr


def test_cli_serves_until_sigterm(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "kubeconfig"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cloudhub.standalone",
            "--data-dir",
            str(tmp_path / "data"),
            "--port",
            "0",
            "--kubeconfig-out",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert proc.stdout is not None
        serving = proc.stdout.readline()
        assert serving.startswith("serving https://127.0.0.1:")
        assert proc.stdout.readline().strip() == f"kubeconfig {out}"
        assert (out.stat().st_mode & 0o777) == 0o600
        kubectl_binary = kubectl_path()
        if kubectl_binary is None:
            missing("no kubectl", "scripts/setup.sh test unpacks Debian's kubectl 1.20.2")
        kubectl = subprocess.run(
            [str(kubectl_binary), "--kubeconfig", str(out), "get", "namespaces", "-o", "name"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert "namespace/default" in kubectl.stdout, kubectl.stderr
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (tmp_path / "data" / "state.db").exists()
