"""Benchmark of the embedded API server: create throughput, listing 10,000 pods,
and watch fan-out (one writer at 1,000 events/s, 10 watchers).

Everything goes through real HTTPS: the server runs as ``python -m
cloudhub.standalone`` with its SQLite store (WAL, fsync at every group commit) in
its own process, and each client role runs in a process of its own. ``list``
reads through kubernetes_asyncio (raw JSON, ``_preload_content=False``, parsed
with ``json.loads``, as the hub's informers read). The load generators use plain
aiohttp with bodies encoded in advance, so that their own CPU cost stays small:
``create`` (pods, 32 requests in flight), ``write`` (merge patches of ConfigMaps
paced at the target rate, each stamped with its send time) and ``watch`` (10 watch
streams; delay = receive time - send time on the machine's monotonic clock).

Goals: ``api.list_10k_pods_s`` ≤ 1 s (median of 5 lists), ``api.watch_p99_ms`` ≤
50 ms (writer send to watcher receive, over all events of all watchers),
``api.create_per_s`` ≥ 500.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
NS_PODS = "bench-pods"
NS_WATCH = "bench-watch"
_SENT = re.compile(rb'"bench/sent":"([0-9.]+)"')


def _pod(i: int) -> dict[str, Any]:
    """A pod the size of a real one (~1.3 KiB of JSON once defaulted)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"pod-{i:05d}",
            "labels": {"app": f"app-{i % 50}", "tier": "edge", "placement": "bench"},
            "annotations": {"edgefleet.io/placement": f"bench-{i % 50}"},
        },
        "spec": {
            "nodeName": f"edge-{i % 200:03d}",
            "containers": [
                {
                    "name": "app",
                    "image": "registry.local/edge/app:1.4.2",
                    "env": [
                        {"name": "SITE", "value": f"site-{i % 20}"},
                        {"name": "MODE", "value": "prod"},
                    ],
                    "ports": [{"containerPort": 8080, "name": "http"}],
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "64Mi"},
                        "limits": {"cpu": "500m", "memory": "128Mi"},
                    },
                    "volumeMounts": [{"name": "config", "mountPath": "/etc/app"}],
                }
            ],
            "volumes": [{"name": "config", "configMap": {"name": "app-config"}}],
        },
    }


def _percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(pct / 100 * len(ordered) + 0.5) - 1))
    return ordered[index]


# -- client roles (each runs in its own process) -----------------------------------------


async def _client(kubeconfig: str) -> Any:
    from kubernetes_asyncio import client, config

    configuration = client.Configuration()
    await config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    configuration.connection_pool_maxsize = 64
    return client.ApiClient(configuration)


class _Raw:
    """A light HTTPS client for the load-generating roles: aiohttp with the
    kubeconfig's CA and token, bodies encoded once. It keeps the client's own CPU
    cost low, so that on a small machine the figures are the server's."""

    def __init__(self, kubeconfig: str, connections: int) -> None:
        import base64
        import ssl

        import aiohttp
        import yaml

        config = yaml.safe_load(pathlib.Path(kubeconfig).read_text())
        cluster = config["clusters"][0]["cluster"]
        self.base = cluster["server"]
        ctx = ssl.create_default_context(
            cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
        )
        self.headers = {
            "Authorization": "Bearer " + config["users"][0]["user"]["token"],
            "Accept": "application/json",
        }
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=ctx, limit=connections),
            timeout=aiohttp.ClientTimeout(total=None),
        )

    async def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        content_type: str = "application/json",
    ) -> tuple[int, bytes]:
        headers = dict(self.headers)
        if body is not None:
            headers["Content-Type"] = content_type
        async with self.session.request(
            method, self.base + path, data=body, headers=headers
        ) as resp:
            return resp.status, await resp.read()

    async def close(self) -> None:
        await self.session.close()


async def _ensure_namespace(api: Any, name: str) -> None:
    from kubernetes_asyncio import client
    from kubernetes_asyncio.client.exceptions import ApiException

    try:
        await client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    except ApiException as exc:
        if exc.status != 409:
            raise


async def role_create(kubeconfig: str, count: int, concurrency: int) -> dict[str, Any]:
    raw = _Raw(kubeconfig, concurrency)
    try:
        status, _ = await raw.request(
            "POST", "/api/v1/namespaces", json.dumps({"metadata": {"name": NS_PODS}}).encode()
        )
        if status not in (201, 409):
            raise RuntimeError(f"namespace create failed: {status}")
        bodies = [json.dumps(_pod(i)).encode() for i in range(count)]
        todo = iter(bodies)
        latencies: list[float] = []
        path = f"/api/v1/namespaces/{NS_PODS}/pods"

        async def worker() -> None:
            for body in todo:
                started = time.perf_counter()
                status, data = await raw.request("POST", path, body)
                if status != 201:
                    raise RuntimeError(f"create failed: {status} {data[:200]!r}")
                latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    finally:
        await raw.close()
    return {
        "created": count,
        "elapsed_s": elapsed,
        "per_s": count / elapsed,
        "latency_p50_ms": _percentile(latencies, 50) * 1000,
        "latency_p99_ms": _percentile(latencies, 99) * 1000,
    }


async def role_list(kubeconfig: str, repeat: int) -> dict[str, Any]:
    from kubernetes_asyncio import client

    api = await _client(kubeconfig)
    try:
        core = client.CoreV1Api(api)
        times, sizes, counts = [], [], []
        for _ in range(repeat):
            started = time.perf_counter()
            resp = await core.list_namespaced_pod(NS_PODS, _preload_content=False)
            data = await resp.read()
            resp.release()
            parsed = json.loads(data)
            times.append(time.perf_counter() - started)
            sizes.append(len(data))
            counts.append(len(parsed["items"]))
    finally:
        await api.close()
    return {
        "items": counts[-1],
        "bytes": sizes[-1],
        "median_s": statistics.median(times),
        "min_s": min(times),
        "max_s": max(times),
    }


async def role_watch(
    kubeconfig: str, watchers: int, expected: int, timeout_s: float
) -> dict[str, Any]:
    raw = _Raw(kubeconfig, watchers + 2)
    try:
        await raw.request(
            "POST", "/api/v1/namespaces", json.dumps({"metadata": {"name": NS_WATCH}}).encode()
        )
        _, data = await raw.request("GET", f"/api/v1/namespaces/{NS_WATCH}/configmaps")
        start_rv = json.loads(data)["metadata"]["resourceVersion"]
        delays: list[float] = []
        received = [0] * watchers
        first_last: list[list[float]] = [[0.0, 0.0] for _ in range(watchers)]
        url = (
            f"{raw.base}/api/v1/namespaces/{NS_WATCH}/configmaps?watch=true"
            f"&resourceVersion={start_rv}&timeoutSeconds={int(timeout_s) + 30}"
        )

        async def one(index: int, ready: asyncio.Event) -> None:
            async with raw.session.get(url, headers=raw.headers) as resp:
                ready.set()
                while received[index] < expected:
                    line = await resp.content.readline()
                    if not line:
                        break
                    now = time.monotonic()
                    # The stamp is read without parsing the whole event: the
                    # watcher process must keep up with 10,000 events/s itself.
                    found = _SENT.search(line)
                    if found is None:
                        continue
                    delays.append(now - float(found.group(1)))
                    received[index] += 1
                    if received[index] == 1:
                        first_last[index][0] = now
                    first_last[index][1] = now

        readies = [asyncio.Event() for _ in range(watchers)]
        tasks = [asyncio.create_task(one(i, readies[i])) for i in range(watchers)]
        await asyncio.gather(*(r.wait() for r in readies))
        print("ready", flush=True)
        await asyncio.wait(tasks, timeout=timeout_s)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        await raw.close()
    spans = [last - first for first, last in first_last if last > first]
    return {
        "watchers": watchers,
        "events_received": sum(received),
        "events_per_s_per_watcher": statistics.mean(
            [n / s for n, s in zip(received, spans, strict=False) if s > 0] or [0.0]
        ),
        "delay_p50_ms": _percentile(delays, 50) * 1000,
        "delay_p99_ms": _percentile(delays, 99) * 1000,
        "delay_max_ms": max(delays, default=float("nan")) * 1000,
    }


async def role_write(
    kubeconfig: str, rate: float, duration_s: float, objects: int
) -> dict[str, Any]:
    raw = _Raw(kubeconfig, 64)
    try:
        await raw.request(
            "POST", "/api/v1/namespaces", json.dumps({"metadata": {"name": NS_WATCH}}).encode()
        )
        names = [f"cm-{i:03d}" for i in range(objects)]
        for name in names:
            await raw.request(
                "POST",
                f"/api/v1/namespaces/{NS_WATCH}/configmaps",
                json.dumps({"metadata": {"name": name}, "data": {"v": "0"}}).encode(),
            )
        line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        assert line.strip() == "go", line
        total = int(rate * duration_s)
        latencies: list[float] = []
        failures = 0

        async def write(i: int) -> None:
            nonlocal failures
            sent = time.monotonic()
            body = json.dumps(
                {"metadata": {"annotations": {"bench/sent": repr(sent)}}, "data": {"v": str(i)}}
            ).encode()
            status, _ = await raw.request(
                "PATCH",
                f"/api/v1/namespaces/{NS_WATCH}/configmaps/{names[i % objects]}",
                body,
                "application/merge-patch+json",
            )
            if status != 200:
                failures += 1
            latencies.append(time.monotonic() - sent)

        started = time.monotonic()
        tasks = []
        for i in range(total):
            due = started + i / rate
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(write(i)))
        await asyncio.gather(*tasks)
        elapsed = time.monotonic() - started
    finally:
        await raw.close()
    return {
        "writes": total,
        "write_failures": failures,
        "write_rate_per_s": total / elapsed,
        "write_latency_p50_ms": _percentile(latencies, 50) * 1000,
        "write_latency_p99_ms": _percentile(latencies, 99) * 1000,
    }


# -- orchestration --------------------------------------------------------------------


def _python(args: list[str], **kwargs: Any) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, *args], cwd=ROOT, env=env, text=True, **kwargs)


def _role(kubeconfig: str, *args: str) -> dict[str, Any]:
    proc = _python(
        ["-m", "tests.bench.bench_api", "--kubeconfig", kubeconfig, *args], stdout=subprocess.PIPE
    )
    out, _ = proc.communicate(timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"bench role {args[0]} failed ({proc.returncode})")
    return json.loads(out.strip().splitlines()[-1])


def _start_server(data_dir: pathlib.Path) -> tuple[subprocess.Popen[str], str]:
    server = _python(
        ["-m", "cloudhub.standalone", "--data-dir", str(data_dir), "--port", "0"],
        stdout=subprocess.PIPE,
    )
    assert server.stdout is not None
    kubeconfig = ""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = server.stdout.readline()
        if not line:
            raise RuntimeError("the API server exited during start-up")
        if line.startswith("kubeconfig "):
            kubeconfig = line.split(" ", 1)[1].strip()
            break
    if not kubeconfig:
        raise RuntimeError("the API server did not start within 60 s")
    return server, kubeconfig


def _cpu(pid: int) -> float:
    """CPU seconds (user + system) the process has used so far."""
    import psutil

    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def _rss(pid: int) -> int:
    """Resident memory of the process (bytes)."""
    import psutil

    return psutil.Process(pid).memory_info().rss


def run(quick: bool) -> dict[str, Any]:
    pods = 2_000 if quick else 10_000
    duration_s = 3.0 if quick else 10.0
    rate, watchers = 1000.0, 10
    with tempfile.TemporaryDirectory(prefix="bench-api-") as tmp:
        server, kubeconfig = _start_server(pathlib.Path(tmp) / "data")
        try:
            cpu0 = _cpu(server.pid)
            create = _role(kubeconfig, "create", "--count", str(pods), "--concurrency", "32")
            cpu1 = _cpu(server.pid)
            listing = _role(kubeconfig, "list", "--repeat", "5")
            cpu2 = _cpu(server.pid)
            rss = _rss(server.pid)
            writer = _python(
                [
                    "-m",
                    "tests.bench.bench_api",
                    "--kubeconfig",
                    kubeconfig,
                    "write",
                    "--rate",
                    str(rate),
                    "--duration",
                    str(duration_s),
                    "--objects",
                    "100",
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            watcher = _python(
                [
                    "-m",
                    "tests.bench.bench_api",
                    "--kubeconfig",
                    kubeconfig,
                    "watch",
                    "--watchers",
                    str(watchers),
                    "--expected",
                    str(int(rate * duration_s)),
                    "--timeout",
                    str(duration_s + 60),
                ],
                stdout=subprocess.PIPE,
            )
            assert watcher.stdout is not None and writer.stdin is not None
            if watcher.stdout.readline().strip() != "ready":
                raise RuntimeError("the watchers did not start")
            cpu3 = _cpu(server.pid)
            writer.stdin.write("go\n")
            writer.stdin.flush()
            write_out, _ = writer.communicate(timeout=900)
            watch_out, _ = watcher.communicate(timeout=900)
            cpu4 = _cpu(server.pid)
            write = json.loads(write_out.strip().splitlines()[-1])
            watch = json.loads(watch_out.strip().splitlines()[-1])
        finally:
            server.terminate()
            server.wait(timeout=60)
    results = {
        "pods": pods,
        "create": {**create, "server_cpu_us_per_create": (cpu1 - cpu0) / pods * 1e6},
        "list": {**listing, "server_cpu_s_per_list": (cpu2 - cpu1) / 5},
        "watch": {
            **watch,
            **write,
            "server_cpu_us_per_write_with_fanout": (cpu4 - cpu3) / max(1, write["writes"]) * 1e6,
        },
        "server_rss_mib_with_pods": rss / 2**20,
        "load_average_1m": os.getloadavg()[0],
    }
    return {
        "results": results,
        "goals": [
            {
                "id": "api.list_10k_pods_s",
                "value": listing["median_s"],
                "target": 1.0,
                "unit": "s",
                "op": "<=",
            },
            {
                "id": "api.watch_p99_ms",
                "value": watch["delay_p99_ms"],
                "target": 50.0,
                "unit": "ms",
                "op": "<=",
            },
            {
                "id": "api.create_per_s",
                "value": create["per_s"],
                "target": 500.0,
                "unit": "creates/s",
                "op": ">=",
            },
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="client roles of the API benchmark")
    parser.add_argument("--kubeconfig", required=True)
    sub = parser.add_subparsers(dest="role", required=True)
    p = sub.add_parser("create")
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--concurrency", type=int, default=32)
    p = sub.add_parser("list")
    p.add_argument("--repeat", type=int, default=5)
    p = sub.add_parser("watch")
    p.add_argument("--watchers", type=int, default=10)
    p.add_argument("--expected", type=int, required=True)
    p.add_argument("--timeout", type=float, required=True)
    p = sub.add_parser("write")
    p.add_argument("--rate", type=float, required=True)
    p.add_argument("--duration", type=float, required=True)
    p.add_argument("--objects", type=int, default=100)
    args = parser.parse_args()
    if args.role == "create":
        out = asyncio.run(role_create(args.kubeconfig, args.count, args.concurrency))
    elif args.role == "list":
        out = asyncio.run(role_list(args.kubeconfig, args.repeat))
    elif args.role == "watch":
        out = asyncio.run(role_watch(args.kubeconfig, args.watchers, args.expected, args.timeout))
    else:
        out = asyncio.run(role_write(args.kubeconfig, args.rate, args.duration, args.objects))
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
