"""Edge agent footprint: RSS and CPU idle, SQLite writes per idle hour, pod start latency,
offline reboot recovery.

- RSS/CPU: ``edgeagent run`` as a real process with production defaults, 0, 10 and 50
  cached pods (``sleep`` containers), on the process runtime and on podman's Docker API;
  measured after every pod is Running, over an idle window (RSS at its end, CPU as the
  share of one core from /proc/<pid>/stat).
- Disk writes: the real agent (store, process runtime, reconciler, housekeeping, and the
  built-in services at their defaults: metrics sampled every 15 s, the device API) in
  this process on an event loop whose clock is virtual: an idle hour passes in seconds,
  every timer firing as it would. Bytes are what the process wrote through write(2)
  (``wchar`` in /proc/self/io — SQLite pages and WAL frames, process-runtime records,
  logs). Measured offline (the goal) and connected to an in-memory hub session that acks
  everything (metrics batches sealed, sent and acknowledged every minute).
- Pod arrival → container started: the reconciler in this process; a pod is put into the
  store as the uplink would and the time until its container was started is taken.
- Offline recovery: seed 10 pods, run the agent until they run, stop it, remove every
  container and process, start it again with no hub: seconds until all 10 run again.

The end-to-end goals (pod created in the API → Running in the API) need the hub and are
not measured here.
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

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from edgeagent.store import Store  # noqa: E402
from tests.bench.settle import cpu_settled_sync  # noqa: E402
from tests.edgeagent import podman_engine  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")


class _Ref:
    def __init__(self, kind: str, namespace: str, name: str, uid: str) -> None:
        self.kind, self.namespace, self.name, self.uid = kind, namespace, name, uid


def _pod(i: int, kind: str, host_network: bool) -> dict:
    import uuid

    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"app-{i}", "namespace": "bench", "uid": str(uuid.uuid4())},
        "spec": {
            "hostNetwork": host_network,
            "containers": [
                {
                    "name": "c",
                    "image": podman_engine.BUSYBOX_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sleep", "100000"],
                }
            ],
        },
    }


def _seed(state: pathlib.Path, pods: list[dict]) -> None:
    store = Store.open(state / "store.db")
    try:
        for pod in pods:
            m = pod["metadata"]
            store.apply_upsert(_Ref("Pod", m["namespace"], m["name"], m["uid"]), "1", pod)
    finally:
        store.close()


def _agent_args(state: pathlib.Path, kind: str, engine) -> list[str]:
    args = [
        sys.executable,
        "-m",
        "edgeagent",
        "run",
        "--state-dir",
        str(state),
        "--node-name",
        "bench",
        "--runtime",
        kind,
        "--set",
        "node_ip=127.0.0.1",
        "--config",
        str(state.parent / "none.yaml"),
        "--log-level",
        "WARNING",
    ]
    if engine is not None:
        ds = podman_engine.docker_settings(engine)
        args += [
            "--docker-url",
            ds.url,
            "--set",
            f"runtime.docker.network={ds.network}",
            "--set",
            f"runtime.docker.sandbox_image={ds.sandbox_image}",
            "--set",
            "runtime.docker.sandbox_command=sleep,2147483647",
        ]
    (state.parent / "none.yaml").write_text("{}\n")
    return args


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _phases(state: pathlib.Path) -> list[str]:
    try:
        store = Store.open_readonly(state / "store.db")
    except Exception:
        return []
    try:
        return [s.get("phase", "") for s in store.pod_statuses().values()]
    finally:
        store.close()


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"benchmark: timed out waiting for {what}")
        time.sleep(0.1)


def _cpu_ticks(pid: int) -> int:
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def _rss_mib(pid: int) -> float:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def _remove_all(kind: str, state: pathlib.Path, engine) -> None:
    from edgeagent.runtime import Labels, make_runtime
    from edgeagent.settings import RuntimeSettings

    settings = (
        RuntimeSettings(kind=kind, docker=podman_engine.docker_settings(engine))
        if engine is not None
        else RuntimeSettings(kind=kind)
    )
    runtime = make_runtime(settings, state)
    await runtime.connect()
    try:
        infos = await runtime.list()
        infos.sort(key=lambda i: i.labels.get(Labels.CONTAINER_TYPE) == "sandbox")
        apps = [i for i in infos if i.labels.get(Labels.CONTAINER_TYPE) != "sandbox"]
        await asyncio.gather(*(runtime.remove(i.id) for i in apps))
        for i in infos:
            if i not in apps:
                await runtime.remove(i.id)
    finally:
        await runtime.close()


async def _running(kind: str, state: pathlib.Path, engine, uids: set[str]) -> set[str]:
    from edgeagent.runtime import ContainerState, Labels, make_runtime
    from edgeagent.settings import RuntimeSettings

    if engine is not None:
        import aiodocker

        docker = aiodocker.Docker(url=engine.url, api_version="v1.40")
        try:
            items = await docker.containers.list(
                all=True, filters={"label": [f"{Labels.CONTAINER_TYPE}=app"]}
            )
            return {
                c["Labels"][Labels.POD_UID]
                for c in items
                if c["State"] == "running" and c["Labels"].get(Labels.POD_UID) in uids
            }
        finally:
            await docker.close()
    runtime = make_runtime(RuntimeSettings(kind=kind), state)
    await runtime.connect()
    try:
        return {
            i.labels[Labels.POD_UID]
            for i in await runtime.list()
            if i.state is ContainerState.RUNNING and i.labels.get(Labels.POD_UID) in uids
        }
    finally:
        await runtime.close()


def footprint(kind: str, n: int, idle_s: float, tmp: pathlib.Path, engine) -> dict:
    """RSS (MiB) and CPU (% of one core) of an idle ``edgeagent run`` with ``n`` pods."""
    state = tmp / f"{kind}-{n}" / "state"
    state.mkdir(parents=True)
    _seed(state, [_pod(i, kind, host_network=True) for i in range(n)])
    proc = subprocess.Popen(
        _agent_args(state, kind, engine),
        env=_env(),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        t0 = time.monotonic()
        _wait(
            lambda: (
                proc.poll() is None
                and sum(p == "Running" for p in _phases(state)) == n
                and (n > 0 or (state / "store.db").exists())
            ),
            180,
            f"{n} pods running ({kind})",
        )
        started_s = time.monotonic() - t0
        settled_s = cpu_settled_sync(proc.pid)  # the start-up work over
        c0, w0 = _cpu_ticks(proc.pid), time.monotonic()
        time.sleep(idle_s)
        c1, w1 = _cpu_ticks(proc.pid), time.monotonic()
        return {
            "rss_mib": round(_rss_mib(proc.pid), 1),
            "cpu_pct": round(100.0 * (c1 - c0) / CLK_TCK / (w1 - w0), 2),
            "idle_window_s": round(w1 - w0, 1),
            "all_running_after_s": round(started_s, 2),
            "settled_after_s": round(settled_s, 1),
        }
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        asyncio.run(_remove_all(kind, state, engine))


# --- idle disk writes under virtual time -----------------------------------------------


async def _until(predicate, interval: float) -> None:
    """Poll a condition owned by another component (another process, the agent's store)."""
    while not predicate():  # noqa: ASYNC110
        await asyncio.sleep(interval)


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock jumps to the next timer whenever nothing is ready: real
    I/O still happens, but idle time costs no wall time."""

    def __init__(self) -> None:
        super().__init__()
        self._virtual = 0.0
        self.jumps = 0
        """How many times the clock jumped to a timer (evidence that timers fired)."""
        real_select = self._selector.select

        def select(timeout=None):
            events = real_select(0)
            if events:
                return events
            if timeout is None:
                return real_select(0.05)
            if timeout > 0:
                events = real_select(min(timeout, 0.002))  # a moment for real I/O in flight
                if events:
                    return events
                self._virtual += timeout
                self.jumps += 1
            return []

        self._selector.select = select

    def time(self) -> float:
        return self._virtual


def _io() -> dict[str, int]:
    out = {}
    for line in pathlib.Path("/proc/self/io").read_text().splitlines():
        key, _, value = line.partition(":")
        out[key] = int(value)
    return out


class _LoopbackHub:
    """An agent service standing in for the uplink: both sans-I/O ends of the real protocol
    session in memory, the hub end acking everything and ingesting metrics batches with the
    hub's own store. It drives the store's outbox and the agent context's sources (twin
    reports, metrics batches) the way the hub session does (``edgeagent.uplink``), so what
    the agent writes while connected is measured."""

    name = "loopback-hub"

    def __init__(self) -> None:
        from cloudhub.metrics import EdgeMetricsStore

        self.metrics = EdgeMetricsStore()
        self.messages = 0

    async def run(self, ctx) -> None:
        from edgeagent.uplink.sources.outbox import OutboxSource, hello, sent_messages
        from protocol.events import Acked, HelloReceived, MessageReceived
        from protocol.messages import MetricsBatch, Welcome
        from protocol.session import Role, Session

        loop = asyncio.get_running_loop()
        store = ctx.store
        sources = [OutboxSource(store), *ctx.sources]
        client = Session(Role.CLIENT, now=loop.time(), next_seq=store.next_seq())
        server = Session(Role.SERVER, now=loop.time())
        client.connect(
            hello(store, node_name=ctx.node_name, agent_version="bench"),
            loop.time(),
            pending=sent_messages(store),
        )
        server.receive_data(client.data_to_send(), loop.time())
        [hi] = [e for e in server.events_received() if isinstance(e, HelloReceived)]
        server.accept(Welcome(hi.version, time.time(), "bench", 0, 20.0), loop.time())
        client.receive_data(server.data_to_send(), loop.time())
        client.events_received()
        wake = asyncio.Event()
        for source in sources:
            source.session_started(0)
            source.add_wakeup(wake.set)
        store.add_dirty_hook(wake.set)
        while True:
            now = loop.time()
            for source in sources:
                for item in source.messages_to_send(client.window_free):
                    seq = client.send(item.message, now)
                    source.sent(item, seq)
                    if seq is not None:
                        store.note_seq_used(seq)
            for session in (client, server):
                timer = session.get_timer()
                if timer is not None and timer <= now:
                    session.handle_timer(now)
            for _ in range(4):
                server.receive_data(client.data_to_send(), now)
                client.receive_data(server.data_to_send(), now)
            for event in server.events_received():
                if isinstance(event, MessageReceived):
                    self.messages += 1
                    if isinstance(event.message, MetricsBatch):
                        self.metrics.ingest(ctx.node_name, event.message.samples, time.time())
            for event in client.events_received():
                if isinstance(event, Acked):
                    for source in sources:
                        source.acked(event.up_to)
            timers = [t for t in (client.get_timer(), server.get_timer()) if t is not None]
            wake.clear()
            try:
                await asyncio.wait_for(wake.wait(), max(min(timers) - loop.time(), 0.0))
            except asyncio.TimeoutError:
                pass


async def _idle_hour(
    tmp: pathlib.Path, n: int, hours: float, crashing: int = 0, connected: bool = False
) -> dict:
    from edgeagent.agent import Agent
    from edgeagent.sdnotify import Notifier
    from edgeagent.settings import AgentSettings, RuntimeSettings

    loop = asyncio.get_running_loop()
    state = tmp / "idle-writes" / "state"
    state.mkdir(parents=True)
    pods = [_pod(i, "process", True) for i in range(n)]
    for pod in pods[:crashing]:
        pod["spec"]["containers"][0]["command"] = ["sh", "-c", "sleep 1; exit 1"]
    _seed(state, pods)
    settings = AgentSettings(
        node_name="bench",
        state_dir=state,
        node_ip="127.0.0.1",
        runtime=RuntimeSettings(kind="process"),
    )
    epoch = time.time()
    hub = _LoopbackHub() if connected else None
    agent = Agent(
        settings,
        notifier=Notifier(None),
        services=[hub] if hub is not None else [],
        wall_clock=lambda: epoch + loop.time(),
        monotonic=loop.time,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        await _until(lambda: agent.context is not None, 0.1)
        store = agent.context.store

        def running() -> int:
            return sum(
                (store.pod_status(p.uid) or {}).get("phase") == "Running"
                for p in store.list_objects("Pod")
            )

        await _until(lambda: running() >= n - crashing, 0.5)
        await asyncio.sleep(60)  # settle: the start-up batch is committed
        before, v0, r0, j0 = _io(), loop.time(), time.monotonic(), loop.jumps
        batches0 = hub.metrics.stats.accepted if hub is not None else 0
        await asyncio.sleep(3600 * hours)
        after, v1, r1, j1 = _io(), loop.time(), time.monotonic(), loop.jumps
        per_hour = 3600 / (v1 - v0)
        backlog = store.metrics().backlog()
        extra = {}
        if hub is not None:
            extra["metrics_batches_acked_per_h"] = round(
                (hub.metrics.stats.accepted - batches0) * per_hour
            )
        return {
            **extra,
            "metrics_samples_buffered_after": backlog.samples,
            "metrics_batches_unacked_after": backlog.batches,
            "virtual_s": round(v1 - v0),
            "real_s": round(r1 - r0, 2),
            "wchar_bytes_per_h": round((after["wchar"] - before["wchar"]) * per_hour),
            "write_bytes_per_h": round((after["write_bytes"] - before["write_bytes"]) * per_hour),
            "syscw_per_h": round((after["syscw"] - before["syscw"]) * per_hour),
            "timer_wakeups_per_h": round((j1 - j0) * per_hour),  # resyncs etc. did run
            "outbox_depth_after": store.outbox_depth(),
        }
    finally:
        stop.set()
        await task
        await _remove_all("process", state, None)


def idle_writes(
    tmp: pathlib.Path, n: int, hours: float, crashing: int = 0, connected: bool = False
) -> dict:
    loop = VirtualClockLoop()
    try:
        return loop.run_until_complete(_idle_hour(tmp, n, hours, crashing, connected))
    finally:
        loop.close()


# --- pod arrival → container started ---------------------------------------------------


async def _arrival(kind: str, tmp: pathlib.Path, engine, count: int) -> dict:
    from edgeagent.pods import PodReconciler
    from edgeagent.runtime import make_runtime
    from edgeagent.settings import AgentSettings, RuntimeSettings

    state = tmp / f"arrival-{kind}" / "state"
    runtime_settings = (
        RuntimeSettings(kind=kind, docker=podman_engine.docker_settings(engine))
        if engine is not None
        else RuntimeSettings(kind=kind)
    )
    settings = AgentSettings(
        node_name="bench", state_dir=state, node_ip="127.0.0.1", runtime=runtime_settings
    )
    store = Store.open(settings.store_path, settings.store)
    runtime = make_runtime(runtime_settings, state, "127.0.0.1")
    await runtime.connect()
    reconciler = PodReconciler(store, runtime, settings, node_name="bench", host_ip="127.0.0.1")
    task = asyncio.create_task(reconciler.run())
    latencies = []
    rng = random.Random(1)
    try:
        for i in range(count):
            pod = _pod(i, kind, host_network=(i % 2 == 0))
            m = pod["metadata"]
            t0 = time.time()
            store.apply_upsert(_Ref("Pod", m["namespace"], m["name"], m["uid"]), "1", pod)
            await _until(lambda m=m: (m["uid"], "c") in reconciler.started_at, 0.002)
            latencies.append(reconciler.started_at[(m["uid"], "c")] - t0)
            await asyncio.sleep(rng.uniform(0.0, 0.2))
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await runtime.close()
        store.close()
        await _remove_all(kind, state, engine)
    latencies.sort()
    return {
        "pods": count,
        "p50_s": round(statistics.median(latencies), 3),
        "p99_s": round(latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))], 3),
        "max_s": round(latencies[-1], 3),
    }


# --- offline recovery ----------------------------------------------------------------------


def offline_recovery(kind: str, tmp: pathlib.Path, engine, n: int = 10) -> dict:
    state = tmp / f"recovery-{kind}" / "state"
    state.mkdir(parents=True)
    pods = [_pod(i, kind, host_network=(i % 2 == 0)) for i in range(n)]
    uids = {p["metadata"]["uid"] for p in pods}
    _seed(state, pods)
    args = _agent_args(state, kind, engine)
    proc = subprocess.Popen(
        args, env=_env(), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        _wait(lambda: sum(p == "Running" for p in _phases(state)) == n, 180, "first run")
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        asyncio.run(_remove_all(kind, state, engine))
        t0 = time.monotonic()
        proc = subprocess.Popen(
            args, env=_env(), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

        async def watch() -> float:
            while await _running(kind, state, engine, uids) != uids:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
            return time.monotonic() - t0

        seconds = asyncio.run(asyncio.wait_for(watch(), 120))
        return {
            "pods": n,
            "seconds": round(seconds, 2),
            "bridge_network_pods": sum(not p["spec"]["hostNetwork"] for p in pods),
        }
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        asyncio.run(_remove_all(kind, state, engine))


# --- runner ----------------------------------------------------------------------------------


def run(quick: bool) -> dict:
    idle_s = 3.0 if quick else 30.0
    sizes = (0, 10) if quick else (0, 10, 50)
    results: dict = {"load_average_1m": round(os.getloadavg()[0], 2), "quick": quick}
    goals = []
    with tempfile.TemporaryDirectory(prefix="bench-agent-") as tmp_name:
        tmp = pathlib.Path(tmp_name)
        for n in sizes:
            results[f"process_idle_{n}_pods"] = footprint("process", n, idle_s, tmp, None)
        results["idle_disk_writes_10_pods"] = idle_writes(tmp / "idle", 10, 1.0)
        # The same hour connected: a metrics batch sealed (one commit), sent and acked a minute.
        results["idle_disk_writes_10_pods_connected"] = idle_writes(
            tmp / "connected", 10, 0.25 if quick else 1.0, connected=True
        )
        # For scale: the same hour with one of the ten pods crash-looping (a restart every
        # 5 min at the back-off cap, each a status change, an event and a commit).
        results["disk_writes_10_pods_1_crashlooping"] = idle_writes(tmp / "crash", 10, 1.0, 1)
        results["pod_start_latency_process"] = asyncio.run(
            _arrival("process", tmp, None, 5 if quick else 20)
        )
        results["offline_recovery_process"] = offline_recovery("process", tmp, None)
        engine = None
        try:
            engine = podman_engine.start_engine(tmp / "podman")
        except podman_engine.EngineUnavailable as exc:
            results["docker"] = f"not measured: {exc}"
        if engine is not None:
            try:
                for n in (10,) if quick else sizes:
                    results[f"docker_idle_{n}_pods"] = footprint("docker", n, idle_s, tmp, engine)
                results["pod_start_latency_docker"] = asyncio.run(
                    _arrival("docker", tmp, engine, 5 if quick else 20)
                )
                if not quick:
                    results["offline_recovery_docker"] = offline_recovery("docker", tmp, engine)
            finally:
                podman_engine.stop_engine(engine)
        # As an edge node installs it: edgefleet[agent] alone, connected over QUIC.
        from tests.bench import agent_install

        venv = agent_install.agent_only_venv(tmp / "install")
        sizes_b = agent_install.installed_bytes(venv)
        results["agent_only_install_mb"] = {k: round(v / 1e6, 1) for k, v in sizes_b.items()}
        results["agent_only_quic_idle_10_pods"] = asyncio.run(
            agent_install.quic_footprint(venv, tmp / "quic", 10, idle_s)
        )
    goals.append(
        {
            "id": "agent.installed_mb",
            "value": round(sizes_b["total"] / 1e6, 1),
            "target": 60,
            "unit": "MB",
            "op": "<=",
        }
    )
    goals.append(
        {
            "id": "agent.rss_idle_10_pods_quic_mb",
            "value": results["agent_only_quic_idle_10_pods"]["rss_mib"],
            "target": 45,
            "unit": "MiB",
            "op": "<=",
        }
    )
    p10 = results["process_idle_10_pods"]
    goals.append(
        {
            "id": "agent.rss_idle_10_pods_mb",
            "value": p10["rss_mib"],
            "target": 45,
            "unit": "MiB",
            "op": "<=",
        }
    )
    if "docker_idle_10_pods" in results:
        goals.append(
            {
                "id": "agent.rss_idle_10_pods_docker_mb",
                "value": results["docker_idle_10_pods"]["rss_mib"],
                "target": 60,
                "unit": "MiB",
                "op": "<=",
            }
        )
    goals.append(
        {
            "id": "agent.cpu_idle_pct",
            "value": p10["cpu_pct"],
            "target": 1,
            "unit": "% of one core (process runtime, 10 pods)",
            "op": "<=",
        }
    )
    writes = results["idle_disk_writes_10_pods"]["wchar_bytes_per_h"]
    goals.append(
        {
            "id": "agent.disk_write_idle_mb_per_h",
            "value": round(writes / 1e6, 4),
            "target": 1,
            "unit": "MB/h",
            "op": "<=",
        }
    )
    goals.append(
        {
            "id": "agent.offline_recovery_s",
            "value": results["offline_recovery_process"]["seconds"],
            "target": 5,
            "unit": "s (10 pods, process runtime)",
            "op": "<=",
        }
    )
    return {"results": results, "goals": goals}
