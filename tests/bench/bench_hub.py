"""The hub at scale: idle sessions held, RSS per session, steady CPU, delivery latency.

Set-up (every figure is the hub process's own):

- the embedded Kubernetes-compatible API in a process of its own
  (``python -m cloudhub.standalone --in-memory``), as a real cluster's API would be;
- ``python -m cloudhub serve`` against it through a kubeconfig, with default settings:
  heartbeats every 20 s, Lease renewals every 10 s, Node writes at 50/s. The hub does
  every Node, Lease and Event write it really does; the API's own CPU is reported apart;
- simulated agents (:mod:`tests.sim`, ``python -m tests.sim --no-status``) in one or more
  processes of their own: the real protocol over real WebSocket or QUIC with a real node
  certificate each, answering nothing but the protocol (idle agents: no pod status).

For each transport a fresh API and hub are started; the hub's RSS is read once it is
ready and settled with no session (``rss_0``), then the fleet grows step by step (1,000,
5,000, 10,000 WebSocket sessions; 1,000 and 5,000 QUIC; a few hundred with ``--quick``).
At each step, once the hub reports every session connected and every Node registered
(the one-time registration burst is over: three writes per new node through the 50/s
node-write limiter, a GET, the create and its ``EdgeConnected`` Event, so 600 s for
10,000; a step whose registration did not end in time is not measured), the
*steady state* is a window (60 s, rounded up to two or more whole Lease renew
intervals of the node liveness profile, ``EDGEFLEET_BENCH_NODE_PROFILE``:
tests/bench/profiles.py; 5 s with ``--quick``) in which nothing but heartbeats and Lease
renewals happen; over it:

- **CPU**: the hub's user + system CPU time over the window, as % of one core;
- **RSS per session**: (hub RSS at the end of the window - ``rss_0``) / N, KiB.

``*_sessions_held`` is the largest step at which every session was held through the
window.

**Delivery** (at the 1,000 step of each transport): pods bound to fleet nodes are created
in the API at 50/s (20 s; 4 s quick), each annotated with its creation time taken just
before the create call (``sim.edgefleet.io/created-at``); an agent measures the time from
there to the ``object_upsert`` carrying the pod (first arrival). p50/p99/max over all pods;
the goal's figure is the worse p99 of the two transports.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pathlib
import signal
import statistics
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any

import psutil
from prometheus_client.parser import text_string_to_metric_families

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from cloudhub.errors import KubeConflict  # noqa: E402
from cloudhub.kube import NAMESPACES, PODS, KubeClient  # noqa: E402
from protocol import pki  # noqa: E402
from tests.bench.apiproc import cancel_on_sigterm  # noqa: E402
from tests.bench.fds import ensure_open_files  # noqa: E402
from tests.bench.profiles import node_profile  # noqa: E402
from tests.edgeagent.hublink.fleet import free_port  # noqa: E402
from tests.sim.agent import CREATED_AT  # noqa: E402
from tests.testpki import make_test_pki  # noqa: E402

NAMESPACE = "bench"
AGENTS_PER_PROCESS = 2500
# Sessions started per second across the fleet. QUIC handshakes are pure Python (aioquic)
# and cost the hub several times a TLS handshake: at 200/s they saturate its core, the
# loop falls behind, established sessions miss their deadlines and the fleet collapses
# into reconnects (measured: 1,000 held sessions fell to 254 while 4,000 more dialled).
RAMP = {"websocket": 200.0, "quic": 50.0}
DELIVERY_RATE = 50.0  # pods created per second (the load)
REGISTRATION_WRITES_PER_S = 50.0  # the hub's default node-write limiter (nodes.qps)
HUB_COMMAND = [sys.executable, "-m", "cloudhub"]  # a profiler may wrap it

FULL = {
    "websocket": [1000, 5000, 10000],
    "quic": [1000, 5000],
    "window": 60.0,
    "delivery_seconds": 20.0,
    "settle": 5.0,
    "hub_flags": [],
}
QUICK = {
    "websocket": [200],
    "quic": [100],
    "window": 5.0,
    "delivery_seconds": 3.0,
    "settle": 2.0,
    # Registration (Node, Lease, Event per node) is paced at 50 Node writes/s by default;
    # a smoke run does not wait for that (the full run keeps the default).
    "hub_flags": ["--nodes-qps", "1000", "--nodes-burst", "1000"],
}
GOALS = {
    "websocket": {"held": 10000, "rss": 64.0, "cpu": 25.0},
    "quic": {"held": 5000, "rss": 128.0},
    "delivery_p99_ms": 250.0,
}


def _progress(what: str, **figures: Any) -> None:
    """One line on stderr per step (a full run takes many minutes; stdout is the JSON)."""
    print(f"bench_hub: {what} {json.dumps(figures)}", file=sys.stderr, flush=True)


def _log_file(path: pathlib.Path) -> Any:
    """A child process's log file (small, local: opened synchronously on purpose)."""
    return path.open("wb")


def _cpu_seconds(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


# --- processes ------------------------------------------------------------------------------


class Stack:
    """The embedded API and the hub, each in a process of its own."""

    def __init__(
        self,
        root: pathlib.Path,
        pki_ca: Any,
        hub_flags: list[str],
        api_flags: tuple[str, ...] = (),
    ) -> None:
        self.root = root
        self.hub_flags = hub_flags
        self.api_flags = api_flags
        self.port = free_port()  # QUIC (UDP) and WebSocket (TCP), as deployed
        self.http_port = free_port()
        self.api: asyncio.subprocess.Process | None = None
        self.hub: asyncio.subprocess.Process | None = None
        tls = root / "tls"
        tls.mkdir(parents=True)
        (tls / "ca.crt").write_bytes(pki.dump_certificate_pem(pki_ca.ca.certificate))
        (tls / "ca.key").write_bytes(pki.dump_private_key_pem(pki_ca.ca.private_key))
        (tls / "hub.crt").write_bytes(pki.dump_certificate_pem(pki_ca.server.chain))
        (tls / "hub.key").write_bytes(pki.dump_private_key_pem(pki_ca.server.private_key))
        self.tls = tls
        self.kubeconfig = root / "kubeconfig"

    async def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.api = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "cloudhub.standalone",
            "--in-memory",
            "--port",
            "0",
            "--kubeconfig-out",
            str(self.kubeconfig),
            *self.api_flags,
            env=env,
            cwd=ROOT,
            stdout=asyncio.subprocess.PIPE,
            stderr=_log_file(self.root / "api.log"),
            start_new_session=True,
        )
        assert self.api.stdout is not None
        deadline = time.monotonic() + 60
        while True:
            line = await asyncio.wait_for(self.api.stdout.readline(), 60)
            if not line:
                raise RuntimeError("the API exited: " + (self.root / "api.log").read_text())
            if line.startswith(b"kubeconfig "):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("the API did not start within 60 s")
        # What an operator applies before the hub (deploy/hub/00-namespace.yaml).
        client = await KubeClient.from_kubeconfig(str(self.kubeconfig))
        try:
            for name in ("edgefleet", "kube-node-lease", NAMESPACE):
                with contextlib.suppress(KubeConflict):
                    await client.create(NAMESPACES, {"metadata": {"name": name}})
        finally:
            await client.close()
        with _log_file(self.root / "hub.log") as log:
            self.hub = await asyncio.create_subprocess_exec(
                *HUB_COMMAND,
                "serve",
                "--tls-ca-file",
                str(self.tls / "ca.crt"),
                "--tls-cert-file",
                str(self.tls / "hub.crt"),
                "--tls-key-file",
                str(self.tls / "hub.key"),
                "--kube-kubeconfig",
                str(self.kubeconfig),
                "--pki-ca-cert-file",
                str(self.tls / "ca.crt"),
                "--pki-ca-key-file",
                str(self.tls / "ca.key"),
                "--pki-join-host",
                "127.0.0.1",
                "--pki-join-port",
                "0",
                "--listen-quic-host",
                "127.0.0.1",
                "--listen-quic-port",
                str(self.port),
                "--listen-websocket-host",
                "127.0.0.1",
                "--listen-websocket-port",
                str(self.port),
                "--listen-backlog",
                "4096",
                "--observability-http-host",
                "127.0.0.1",
                "--observability-http-port",
                str(self.http_port),
                "--observability-log-level",
                "warning",
                *self.hub_flags,
                env=env,
                cwd=ROOT,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        deadline = time.monotonic() + 90
        while True:
            if self.hub.returncode is not None:
                raise RuntimeError("the hub exited: " + (self.root / "hub.log").read_text())
            with contextlib.suppress(OSError):
                if await asyncio.to_thread(self._get, "/readyz") is not None:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError("the hub did not get ready within 90 s")
            await asyncio.sleep(0.2)

    def _get(self, path: str) -> str | None:
        url = f"http://127.0.0.1:{self.http_port}{path}"
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.read().decode() if r.status == 200 else None

    async def metrics(self) -> dict[tuple[str, tuple], float]:
        """The hub's /metrics as {(sample name, sorted labels): value}."""
        text = await asyncio.to_thread(self._get, "/metrics")
        out: dict[tuple[str, tuple], float] = {}
        for family in text_string_to_metric_families(text or ""):
            for s in family.samples:
                out[s.name, tuple(sorted(s.labels.items()))] = s.value
        return out

    @property
    def hub_ps(self) -> psutil.Process:
        assert self.hub is not None
        return psutil.Process(self.hub.pid)

    @property
    def api_ps(self) -> psutil.Process:
        assert self.api is not None
        return psutil.Process(self.api.pid)

    async def stop(self) -> None:
        for proc in (self.hub, self.api):
            if proc is None or proc.returncode is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 60)
            except asyncio.TimeoutError:
                proc.kill()
                await proc.wait()


def _total(metrics: dict, name: str, **labels: str) -> float:
    """Sum of the samples called ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in metrics.items() if n == name and want <= set(ls))


@dataclass
class SimProcess:
    """One ``python -m tests.sim`` process and what its JSON lines said."""

    proc: asyncio.subprocess.Process
    count: int
    last: dict = field(default_factory=dict)
    latencies_ms: list[float] = field(default_factory=list)
    reader: asyncio.Task | None = None

    async def read(self) -> None:
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            with contextlib.suppress(ValueError):
                report = json.loads(line)
                self.latencies_ms += report.pop("latencies_ms", [])
                self.last = report


class Fleet:
    """Simulated agents in processes of ``AGENTS_PER_PROCESS`` each, one transport."""

    def __init__(self, stack: Stack, transport: str) -> None:
        self.stack = stack
        self.transport = transport
        self.procs: list[SimProcess] = []
        self.size = 0

    async def grow(self, target: int) -> None:
        """Start processes with agents ``size .. target-1`` (ramped at ``RAMP`` per second
        overall)."""
        chunks = []
        start = self.size
        while start < target:
            n = min(AGENTS_PER_PROCESS, target - start)
            chunks.append((start, n))
            start += n
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        for first, n in chunks:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "tests.sim",
                "--ca-cert",
                str(self.stack.tls / "ca.crt"),
                "--ca-key",
                str(self.stack.tls / "ca.key"),
                "--nodes",
                str(n),
                "--start-index",
                str(first),
                "--prefix",
                f"{self.transport[:2]}-",
                "--transport",
                self.transport,
                "--host",
                "127.0.0.1",
                "--quic-port",
                str(self.stack.port),
                "--websocket-port",
                str(self.stack.port),
                "--ramp",
                str(RAMP[self.transport] / len(chunks)),
                "--no-status",
                env=env,
                cwd=ROOT,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=_log_file(self.stack.root / f"sim-{first}.log"),
                start_new_session=True,
            )
            sim = SimProcess(proc, n)
            sim.reader = asyncio.ensure_future(sim.read())
            self.procs.append(sim)
        self.size = target

    def connected(self) -> int:
        return sum(p.last.get("connected", 0) for p in self.procs)

    def sessions(self) -> int:
        """Sessions ever opened (more than connected means some were dropped and redone)."""
        return sum(p.last.get("sessions", 0) for p in self.procs)

    def take_latencies(self) -> list[float]:
        out = []
        for p in self.procs:
            out += p.latencies_ms
            p.latencies_ms = []
        return out

    def cpu_seconds(self) -> float:
        total = 0.0
        for p in self.procs:
            with contextlib.suppress(psutil.Error):
                total += _cpu_seconds(psutil.Process(p.proc.pid))
        return total

    async def stop(self) -> None:
        for p in self.procs:
            if p.proc.returncode is None:
                assert p.proc.stdin is not None
                p.proc.stdin.close()  # end of stdin: the process stops its agents
        # One deadline for all: agents of a collapsing QUIC fleet can take minutes to stop
        # (each stuck in a dial); their hub is going away anyway.
        waits = [asyncio.ensure_future(p.proc.wait()) for p in self.procs]
        if waits:
            await asyncio.wait(waits, timeout=60)
        for p in self.procs:
            if p.proc.returncode is None:
                p.proc.kill()
                await p.proc.wait()
            if p.reader is not None:
                await asyncio.gather(p.reader, return_exceptions=True)
        await asyncio.gather(*waits, return_exceptions=True)


# --- measurements -------------------------------------------------------------------------


async def wait_held(stack: Stack, fleet: Fleet, n: int, timeout: float) -> dict:
    """Wait until the hub holds ``n`` sessions of the fleet's transport and has registered
    ``n`` Nodes; returns how long each took (s) and how far it got."""
    started = time.monotonic()
    connected_at = registered_at = None
    connected = registered = 0.0
    while time.monotonic() - started < timeout:
        try:
            m = await stack.metrics()
        except OSError:  # an overloaded hub answers late: ask again
            await asyncio.sleep(1.0)
            continue
        connected = _total(m, "edgefleet_hub_connected_nodes", transport=fleet.transport)
        registered = _total(m, "edgefleet_hub_node_writes_total", what="node") - _total(
            m, "edgefleet_hub_node_writes_total", what="node", result="retried"
        )
        if connected >= n and connected_at is None:
            connected_at = time.monotonic() - started
        if connected >= n and registered >= n:
            registered_at = time.monotonic() - started
            break
        await asyncio.sleep(1.0)
    return {
        "connected": int(connected),
        "registered": int(registered),
        "connect_s": round(connected_at, 1) if connected_at is not None else None,
        "register_s": round(registered_at, 1) if registered_at is not None else None,
    }


async def steady_window(stack: Stack, fleet: Fleet, n: int, seconds: float) -> dict:
    """CPU and RSS of the hub over ``seconds`` of steady state with ``n`` sessions."""
    hub, api = stack.hub_ps, stack.api_ps
    m0 = await stack.metrics()
    cpu0, api0, sim0, t0 = _cpu_seconds(hub), _cpu_seconds(api), fleet.cpu_seconds(), time.time()
    await asyncio.sleep(seconds)
    cpu1, api1, sim1, t1 = _cpu_seconds(hub), _cpu_seconds(api), fleet.cpu_seconds(), time.time()
    m1 = await stack.metrics()
    rss = hub.memory_info().rss
    wall = t1 - t0

    def delta(name: str, **labels: str) -> float:
        return _total(m1, name, **labels) - _total(m0, name, **labels)

    held = _total(m1, "edgefleet_hub_connected_nodes", transport=fleet.transport)
    return {
        "sessions": n,
        "held_through_window": int(held) >= n and delta("edgefleet_hub_sessions_closed_total") == 0,
        "hub_cpu_pct": round(100 * (cpu1 - cpu0) / wall, 1),
        "hub_rss_kib": rss // 1024,
        "api_cpu_pct": round(100 * (api1 - api0) / wall, 1),
        "sim_cpu_pct": round(100 * (sim1 - sim0) / wall, 1),
        "lease_renewals_per_s": round(
            delta("edgefleet_hub_node_writes_total", what="lease") / wall
        ),
        "messages_in_per_s": round(delta("edgefleet_hub_messages_total", direction="in") / wall, 1),
        "sessions_closed_in_window": int(delta("edgefleet_hub_sessions_closed_total")),
        "window_s": round(wall, 1),
    }


async def delivery(stack: Stack, fleet: Fleet, seconds: float, transport: str) -> dict:
    """Create pods at ``DELIVERY_RATE``/s spread over the fleet; agents time their arrival."""
    client = await KubeClient.from_kubeconfig(str(stack.kubeconfig), request_timeout=60)
    try:
        count = int(seconds * DELIVERY_RATE)
        fleet.take_latencies()
        prefix = f"{transport[:2]}-"
        errors: list[str] = []

        async def create(i: int) -> None:
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{transport}-pod-{i}",
                    "namespace": NAMESPACE,
                    "annotations": {CREATED_AT: repr(time.time())},
                },
                "spec": {
                    "nodeName": f"{prefix}{(i * 7919) % fleet.size}",
                    "containers": [{"name": "app", "image": "busybox:1.36"}],
                },
            }
            try:
                await client.create(PODS, pod, NAMESPACE)
            except Exception as exc:  # counted and reported
                errors.append(repr(exc))

        started = time.monotonic()
        tasks = []
        for i in range(count):
            delay = started + i / DELIVERY_RATE - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(create(i)))
        await asyncio.gather(*tasks)
        created_in = time.monotonic() - started
        latencies: list[float] = []
        deadline = time.monotonic() + 60
        while len(latencies) < count - len(errors) and time.monotonic() < deadline:
            await asyncio.sleep(1.0)
            latencies += fleet.take_latencies()
    finally:
        await client.close()
    latencies.sort()

    def pct(p: float) -> float | None:
        if not latencies:
            return None
        return round(latencies[min(len(latencies) - 1, int(p * len(latencies)))], 1)

    return {
        "pods": count,
        "rate_per_s": round(count / created_in, 1),
        "delivered": len(latencies),
        "create_errors": len(errors),
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "max_ms": latencies[-1] if latencies else None,
        "mean_ms": round(statistics.fmean(latencies), 1) if latencies else None,
    }


async def run_transport(
    root: pathlib.Path, pki_ca: Any, transport: str, plan: dict
) -> dict[str, Any]:
    stack = Stack(root / transport, pki_ca, [*plan["hub_flags"], *node_profile().flags])
    out: dict[str, Any] = {"steps": []}
    await stack.start()
    fleet = Fleet(stack, transport)
    try:
        await asyncio.sleep(plan["settle"])  # informers synced, start-up garbage gone
        out["rss_0_kib"] = stack.hub_ps.memory_info().rss // 1024
        out["held"] = 0
        for n in plan[transport]:
            await fleet.grow(n)
            # Generous: the ramp, then the registration burst (3 node writes per new node
            # at 50/s: about 17 nodes/s).
            timeout = n / RAMP[transport] + 3 * n / REGISTRATION_WRITES_PER_S + 120
            reached = await wait_held(stack, fleet, n, timeout=timeout)
            step: dict[str, Any] = {"sessions": n, **reached}
            if reached["connected"] < n or reached["registered"] < n:
                # A window with registrations still being written is not the steady state
                # (at 10,000 it read 38 % of a core, with 900 Nodes left to register).
                step["note"] = (
                    "not every session was established in time"
                    if reached["connected"] < n
                    else "registration had not ended in time: no steady window measured"
                )
                out["steps"].append(step)
                _progress(f"{transport} {n}", **step)
                break
            await asyncio.sleep(plan["settle"])
            window = plan["window"]
            if plan is FULL:  # whole renew intervals; a smoke run keeps its short window
                window = node_profile().window(window)
            step.update(await steady_window(stack, fleet, n, window))
            step["rss_per_session_kib"] = round((step["hub_rss_kib"] - out["rss_0_kib"]) / n, 1)
            step["client_sessions_opened"] = fleet.sessions()
            out["steps"].append(step)
            _progress(f"{transport} {n}", **step)
            if not step["held_through_window"]:
                break
            out["held"] = n
            if n == plan[transport][0]:
                out["delivery"] = await delivery(stack, fleet, plan["delivery_seconds"], transport)
                _progress(f"{transport} delivery", **out["delivery"])
    finally:
        await fleet.stop()
        await stack.stop()
    return out


async def run_async(quick: bool) -> dict:
    cancel_on_sigterm()
    plan = QUICK if quick else FULL
    # the hub and the sims inherit it: a socket per session in the hub (10,050 open at
    # 10,000 sessions), plus the API's and files; the bench itself holds few
    ensure_open_files(max(plan["websocket"]) + 4096)
    pki_ca = make_test_pki()
    results: dict[str, Any] = {
        "setup": (
            "hub (python -m cloudhub serve, default settings) against the embedded API in its "
            "own process (python -m cloudhub.standalone --in-memory); simulated agents "
            f"(python -m tests.sim --no-status) in processes of up to {AGENTS_PER_PROCESS}, "
            f"ramped at {RAMP['websocket']:.0f}/s (WebSocket), {RAMP['quic']:.0f}/s (QUIC); "
            f"steady window {plan['window']:.0f} s"
        ),
        "cpus": os.cpu_count(),
        "node_profile": node_profile().name,
    }
    with tempfile.TemporaryDirectory(prefix="bench-hub-") as tmp:
        for transport in ("websocket", "quic"):
            results[transport] = await run_transport(pathlib.Path(tmp), pki_ca, transport, plan)
    return results


def _at_held(result: dict, key: str) -> float:
    """``key`` at the largest step held (the last step measured when none was)."""
    steps = [s for s in result["steps"] if key in s]
    held = [s for s in steps if s["sessions"] == result["held"]]
    step = (held or steps or [{}])[-1]
    return float(step.get(key, float("nan")))


def run(quick: bool) -> dict:
    results = asyncio.run(run_async(quick))
    ws, quic = results["websocket"], results["quic"]
    p99s = [r["delivery"]["p99_ms"] for r in (ws, quic) if (r.get("delivery") or {}).get("p99_ms")]
    goals = [
        {
            "id": "hub.ws_sessions_held",
            "value": ws["held"],
            "target": GOALS["websocket"]["held"],
            "unit": "sessions",
            "op": ">=",
        },
        {
            "id": "hub.ws_rss_per_session_kib",
            "value": _at_held(ws, "rss_per_session_kib"),
            "target": GOALS["websocket"]["rss"],
            "unit": "KiB",
            "op": "<=",
        },
        {
            "id": "hub.ws_cpu_steady_pct",
            "value": _at_held(ws, "hub_cpu_pct"),
            "target": GOALS["websocket"]["cpu"],
            "unit": "% of one core",
            "op": "<=",
        },
        {
            "id": "hub.quic_sessions_held",
            "value": quic["held"],
            "target": GOALS["quic"]["held"],
            "unit": "sessions",
            "op": ">=",
        },
        {
            "id": "hub.quic_rss_per_session_kib",
            "value": _at_held(quic, "rss_per_session_kib"),
            "target": GOALS["quic"]["rss"],
            "unit": "KiB",
            "op": "<=",
        },
        {
            "id": "hub.delivery_p99_ms",
            "value": max(p99s) if p99s else float("nan"),
            "target": GOALS["delivery_p99_ms"],
            "unit": "ms",
            "op": "<=",
        },
    ]
    return {"results": results, "goals": goals}
