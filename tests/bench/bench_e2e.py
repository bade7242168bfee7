"""End to end through the hub: pod created in the API → Running in the API, and the
agent's idle footprint with its hub connection up.

Set-up: ``python -m cloudhub serve`` on its embedded API, in a process of its own (real
TLS from a test CA, QUIC and WebSocket on one loopback port); ``python -m edgeagent run``
agents with production defaults; this process creates pods through the API and watches
them (kubernetes_asyncio through ``cloudhub.kube``).

- **Latency**: 20 pods created one by one at random intervals (uniform 0.5-1.5 s, one a
  second on average: the node is not saturated, so this is latency rather than the
  engine's throughput); for each, the time from just before the create call to the first
  watch event showing it Running (phase Running, its container running). p50/p99/max. On
  the process runtime and on podman's Docker API (pods on the default bridge network,
  each with its own sandbox, as a plain Deployment's pods would be). The full run also
  reports a burst (uniform 0.1-0.6 s, ~3 pods/s), where podman's per-pod cost queues.
- **Idle footprint**: an agent with 10 running pods (process runtime) and a session with
  the hub, over QUIC and over WebSocket; after start-up settles, RSS at the end of an idle
  window and CPU as a share of one core over it.
- **Idle uplink bytes**: a byte-counting relay (UDP for QUIC, TCP for WebSocket) between
  agent and hub carries the session during the idle window: bytes on the socket in each
  direction (protocol, TLS/QUIC and WebSocket framing, QUIC acks; not IP/UDP/TCP headers),
  extrapolated to an hour. With no metrics wired yet this is the heartbeat traffic only
  (a ping every ``heartbeat_interval`` = 20 s, the hub's default).
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from cloudhub.kube import NAMESPACES, NODES, PODS, KubeClient  # noqa: E402
from protocol import pki  # noqa: E402
from tests.bench.settle import cpu_settled  # noqa: E402
from tests.edgeagent import podman_engine  # noqa: E402
from tests.edgeagent.hublink.fleet import AgentProcess, free_port  # noqa: E402
from tests.testpki import make_test_pki  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")


# --- the hub as a process ---------------------------------------------------------------


class HubProcess:
    """``python -m cloudhub serve`` on its embedded API."""

    def __init__(self, root: pathlib.Path, pki_ca: Any) -> None:
        self.root = root
        self.port = free_port()
        self.http_port = free_port()
        root.mkdir(parents=True, exist_ok=True)
        tls = root / "tls"
        tls.mkdir()
        creds = pki_ca.server
        (tls / "ca.crt").write_bytes(pki.dump_certificate_pem(pki_ca.ca.certificate))
        (tls / "hub.crt").write_bytes(pki.dump_certificate_pem(creds.chain))
        (tls / "hub.key").write_bytes(pki.dump_private_key_pem(creds.private_key))
        self.args = [
            sys.executable,
            "-m",
            "cloudhub",
            "serve",
            "--tls-ca-file",
            str(tls / "ca.crt"),
            "--tls-cert-file",
            str(tls / "hub.crt"),
            "--tls-key-file",
            str(tls / "hub.key"),
            "--kube-embedded-data-dir",
            str(root / "api"),
            "--kube-embedded-port",
            str(free_port()),
            "--listen-quic-host",
            "127.0.0.1",
            "--listen-quic-port",
            str(self.port),
            "--listen-websocket-host",
            "127.0.0.1",
            "--listen-websocket-port",
            str(self.port),
            "--observability-http-host",
            "127.0.0.1",
            "--observability-http-port",
            str(self.http_port),
            "--observability-log-level",
            "warning",
        ]
        self.proc: subprocess.Popen | None = None

    @property
    def kubeconfig(self) -> pathlib.Path:
        return self.root / "api" / "kubeconfig"

    def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        with open(self.root / "hub.log", "ab") as log:
            self.proc = subprocess.Popen(
                self.args, env=env, cwd=ROOT, stdout=log, stderr=log, start_new_session=True
            )
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("the hub exited: " + (self.root / "hub.log").read_text())
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.http_port}/readyz", timeout=2
                ) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the hub did not get ready within 60 s")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# --- a byte-counting relay --------------------------------------------------------------


class Relay:
    """Forwards UDP and TCP from ``port`` to the hub's ``target`` port, counting bytes."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.port = free_port()
        self.up = 0  # agent -> hub
        self.down = 0  # hub -> agent
        self.up_datagrams = 0  # UDP only (QUIC packets, coalesced ones count once)
        self.down_datagrams = 0
        self._udp: list[asyncio.DatagramTransport] = []
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        relay = self

        class Upstream(asyncio.DatagramProtocol):
            def __init__(self, front: asyncio.DatagramTransport, addr: Any) -> None:
                self.front, self.addr = front, addr

            def datagram_received(self, data: bytes, _addr: Any) -> None:
                relay.down += len(data)
                relay.down_datagrams += 1
                self.front.sendto(data, self.addr)

        class Front(asyncio.DatagramProtocol):
            def __init__(self) -> None:
                self.transport: asyncio.DatagramTransport | None = None
                self.upstreams: dict[Any, Any] = {}

            def connection_made(self, transport: Any) -> None:
                self.transport = transport

            def datagram_received(self, data: bytes, addr: Any) -> None:
                relay.up += len(data)
                relay.up_datagrams += 1
                upstream = self.upstreams.get(addr)
                if upstream is None:
                    task = loop.create_task(self._open(addr, data))
                    relay._tasks.add(task)
                    task.add_done_callback(relay._tasks.discard)
                elif not isinstance(upstream, list):
                    upstream.sendto(data)
                else:
                    upstream.append(data)

            async def _open(self, addr: Any, first: bytes) -> None:
                queue = [first]
                self.upstreams[addr] = queue
                transport, _ = await loop.create_datagram_endpoint(
                    lambda: Upstream(self.transport, addr),
                    remote_addr=("127.0.0.1", relay.target),
                )
                relay._udp.append(transport)
                self.upstreams[addr] = transport
                for data in queue:
                    transport.sendto(data)

        front, _ = await loop.create_datagram_endpoint(Front, local_addr=("127.0.0.1", self.port))
        self._udp.append(front)

        async def pipe(reader, writer, up: bool) -> None:
            try:
                while data := await reader.read(65536):
                    if up:
                        relay.up += len(data)
                    else:
                        relay.down += len(data)
                    writer.write(data)
                    await writer.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                writer.close()

        async def accept(reader, writer) -> None:
            try:
                hub_reader, hub_writer = await asyncio.open_connection("127.0.0.1", self.target)
            except OSError:
                writer.close()
                return
            await asyncio.gather(pipe(reader, hub_writer, True), pipe(hub_reader, writer, False))

        self._server = await asyncio.start_server(accept, "127.0.0.1", self.port)

    def reset(self) -> None:
        self.up = self.down = self.up_datagrams = self.down_datagrams = 0

    async def aclose(self) -> None:
        for transport in self._udp:
            transport.close()
        if self._server is not None:
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
        await asyncio.sleep(0)


# --- measurements -----------------------------------------------------------------------


def _pod(name: str, namespace: str, node: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "c",
                    "image": podman_engine.BUSYBOX_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["/bin/sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"],
                }
            ],
        },
    }


def _running(obj: dict) -> bool:
    status = obj.get("status") or {}
    cs = status.get("containerStatuses") or []
    return (
        status.get("phase") == "Running"
        and bool(cs)
        and all("running" in (c.get("state") or {}) for c in cs)
    )


async def _until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout} s: {what}")
        await asyncio.sleep(0.1)


async def _node_ready(kube: KubeClient, node: str) -> bool:
    try:
        obj = await kube.get(NODES, node)
    except Exception:
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


async def _latency(
    kube: KubeClient, node: str, count: int, seed: int, interval: tuple[float, float] = (0.5, 1.5)
) -> dict:
    """Create ``count`` pods at random intervals (uniform in ``interval`` seconds); seconds
    from create to Running."""
    namespace = f"bench-{uuid.uuid4().hex[:6]}"
    await kube.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    )
    _, rv = await kube.list(PODS, namespace)
    created: dict[str, float] = {}
    running: dict[str, float] = {}
    done = asyncio.Event()

    async def watch() -> None:
        nonlocal rv
        while True:
            try:
                async for kind, obj in kube.watch(PODS, namespace, resource_version=rv):
                    rv = obj["metadata"]["resourceVersion"]
                    if kind == "BOOKMARK":
                        continue
                    name = obj["metadata"]["name"]
                    if name not in running and _running(obj):
                        running[name] = time.monotonic()
                        if len(running) == count:
                            done.set()
            except Exception:
                await asyncio.sleep(0.05)

    watcher = asyncio.create_task(watch())
    rng = random.Random(seed)
    try:
        for i in range(count):
            await asyncio.sleep(rng.uniform(*interval))
            name = f"p-{i}"
            created[name] = time.monotonic()
            await kube.create(PODS, _pod(name, namespace, node))
        await asyncio.wait_for(done.wait(), 120)
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
    in_order = [round(running[n] - created[n], 3) for n in created]
    latencies = sorted(in_order)
    for name in created:  # clean up (grace 1 s)
        await kube.delete(PODS, name, namespace)

    async def all_gone() -> bool:
        items, _ = await kube.list(PODS, namespace)
        return not items

    await _until(all_gone, 120, "the benchmark's pods deleted")
    q = statistics.quantiles(latencies, n=100, method="inclusive")
    return {
        "pods": count,
        "interval_s": list(interval),
        "p50_s": round(statistics.median(latencies), 3),
        "p99_s": round(q[98], 3),
        "max_s": round(latencies[-1], 3),
        "min_s": round(latencies[0], 3),
        "in_creation_order_s": in_order,
    }


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


async def _idle(
    kube: KubeClient,
    tmp: pathlib.Path,
    pki_ca: Any,
    hub: HubProcess,
    transport: str,
    idle_s: float,
) -> dict:
    """An agent with 10 pods connected through the relay: RSS, CPU and bytes when idle."""
    relay = Relay(hub.port)
    await relay.start()
    node = f"idle-{transport[:2]}"
    agent = AgentProcess(
        tmp / node,
        node,
        "process",
        f"quic://127.0.0.1:{relay.port}",
        pki_ca.ca,
        sets=(f"hub.transports={transport}",),
        quick=False,
    )
    namespace = f"idle-{uuid.uuid4().hex[:6]}"
    await kube.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    )
    agent.start()
    try:
        await _until(lambda: _node_ready(kube, node), 60, f"node {node} Ready")
        for i in range(10):
            await kube.create(PODS, _pod(f"idle-{i}", namespace, node))

        async def all_running() -> bool:
            items, _ = await kube.list(PODS, namespace)
            return len(items) == 10 and all(_running(p) for p in items)

        await _until(all_running, 120, "10 idle pods Running")
        assert agent.proc is not None
        pid = agent.proc.pid
        settled_s = await cpu_settled(pid)  # start-up work (commits, status writes) over
        setup_bytes = (relay.up, relay.down)
        relay.reset()
        c0, w0 = _cpu_ticks(pid), time.monotonic()
        await asyncio.sleep(idle_s)
        c1, w1 = _cpu_ticks(pid), time.monotonic()
        up, down = relay.up, relay.down
        window = w1 - w0
        session = agent.hub_session()
        return {
            "transport": session.get("transport"),
            "rss_mib": round(_rss_mib(pid), 1),
            "cpu_pct": round(100.0 * (c1 - c0) / CLK_TCK / window, 3),
            "idle_window_s": round(window, 1),
            "uplink_bytes": up,
            "downlink_bytes": down,
            "uplink_bytes_per_h": round(up * 3600 / window),
            "downlink_bytes_per_h": round(down * 3600 / window),
            "uplink_kbit_s": round(up * 8 / 1000 / window, 4),
            "setup_bytes_up_down": list(setup_bytes),
            "settled_after_s": round(settled_s, 1),
        }
    finally:
        await agent.stop()
        await agent.remove_everything()
        await relay.aclose()


async def _measure(quick: bool, tmp: pathlib.Path) -> dict:
    pki_ca = make_test_pki()
    hub = HubProcess(tmp / "hub", pki_ca)
    hub.start()
    results: dict[str, Any] = {}
    kube = await KubeClient.from_kubeconfig(str(hub.kubeconfig))
    try:
        count = 6 if quick else 20
        agent = AgentProcess(
            tmp / "lat-process",
            "lat-process",
            "process",
            f"quic://127.0.0.1:{hub.port}",
            pki_ca.ca,
            quick=False,
        )
        agent.start()
        try:
            await _until(lambda: _node_ready(kube, "lat-process"), 60, "node Ready")
            results["pod_running_process"] = await _latency(kube, "lat-process", count, 1)
            if not quick:
                results["pod_running_process_burst"] = await _latency(
                    kube, "lat-process", count, 3, (0.1, 0.6)
                )
        finally:
            await agent.stop()
            await agent.remove_everything()
        engine = None
        try:
            engine = podman_engine.start_engine(tmp / "podman")
        except podman_engine.EngineUnavailable as exc:
            results["pod_running_podman"] = f"not measured: {exc}"
        if engine is not None:
            agent = AgentProcess(
                tmp / "lat-podman",
                "lat-podman",
                "docker",
                f"quic://127.0.0.1:{hub.port}",
                pki_ca.ca,
                engine=engine,
                quick=False,
            )
            agent.start()
            try:
                await _until(lambda: _node_ready(kube, "lat-podman"), 60, "node Ready")
                results["pod_running_podman"] = await _latency(kube, "lat-podman", count, 2)
                if not quick:
                    results["pod_running_podman_burst"] = await _latency(
                        kube, "lat-podman", count, 4, (0.1, 0.6)
                    )
            finally:
                await agent.stop()
                await agent.remove_everything()
                podman_engine.stop_engine(engine)
        idle_s = 10.0 if quick else 180.0
        # Both transports at once (two agents, two relays): the same idle window.
        quic, websocket = await asyncio.gather(
            _idle(kube, tmp, pki_ca, hub, "quic", idle_s),
            _idle(kube, tmp, pki_ca, hub, "websocket", idle_s),
        )
        results["idle_10_pods_quic"] = quic
        results["idle_10_pods_websocket"] = websocket
    finally:
        await kube.close()
        hub.stop()
    return results


def run(quick: bool) -> dict:
    results: dict[str, Any] = {"load_average_1m": round(os.getloadavg()[0], 2), "quick": quick}
    with tempfile.TemporaryDirectory(prefix="bench-e2e-") as tmp_name:
        results.update(asyncio.run(_measure(quick, pathlib.Path(tmp_name))))
    goals = [
        {
            "id": "agent.pod_running_p99_s",
            "value": results["pod_running_process"]["p99_s"],
            "target": 1,
            "unit": "s (process runtime, pod created in the API -> Running in the API)",
            "op": "<=",
        }
    ]
    podman = results.get("pod_running_podman")
    if isinstance(podman, dict):
        goals.append(
            {
                "id": "agent.pod_running_podman_p99_s",
                "value": podman["p99_s"],
                "target": 2,
                "unit": "s (podman, bridge network, created in the API -> Running in the API)",
                "op": "<=",
            }
        )
    for transport in ("quic", "websocket"):
        idle = results[f"idle_10_pods_{transport}"]
        goals.append(
            {
                "id": f"agent.rss_idle_10_pods_hub_{transport}_mb",
                "value": idle["rss_mib"],
                "target": 45,
                "unit": f"MiB (process runtime, session over {transport})",
                "op": "<=",
            }
        )
    goals.append(
        {
            "id": "agent.idle_uplink_heartbeat_kbit_s",
            "value": max(
                results[f"idle_10_pods_{t}"]["uplink_kbit_s"] for t in ("quic", "websocket")
            ),
            "target": 0.1,
            "unit": "kbit/s agent->hub on the socket, idle, heartbeats only (no metrics yet)",
            "op": "<=",
        }
    )
    return {"results": results, "goals": goals}
