"""The agent as an edge node installs it (issue 16): ``edgefleet[agent]`` alone, from a
wheelhouse, in a fresh venv. Its installed size, and the idle footprint of that install's
``edgeagent run`` connected over QUIC to a real hub (``cloudhub serve`` on its embedded
API) with 10 pods Running (process runtime). Used by bench_agent.py.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import shlex
import shutil
import subprocess
import sys
import time

from cloudhub.demo.processes import HubProcess
from cloudhub.devtools.fleet import child_env, sweep
from cloudhub.kube import PODS, KubeClient
from tests.bench.settle import cpu_settled
from tests.deploy.wheels import build_wheel, make_wheelhouse
from tests.waiting import eventually

__all__ = ["agent_only_venv", "installed_bytes", "quic_footprint"]


def agent_only_venv(tmp: pathlib.Path) -> pathlib.Path:
    """A fresh venv with ``edgefleet[agent]`` installed from a wheelhouse (no index)."""
    wheel = build_wheel(tmp / "wheel")
    house = tmp / "house"
    house.mkdir()
    make_wheelhouse(wheel, house, "agent")
    venv = tmp / "agent-venv"
    # As deploy/install.sh makes it: no pip or setuptools in the venv, the packages put in
    # by the wheelhouse's pip run from outside it, pip taken out again if anything pulled
    # it in (the agent never runs pip itself).
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)  # fmt: skip
    (pip_wheel,) = sorted(house.glob("pip-*-py3-none-any.whl"))[-1:]
    subprocess.run(
        [sys.executable, pip_wheel / "pip", "--python", venv / "bin" / "python", "install",
         "-q", "--no-index", "--find-links", house, f"{wheel}[agent]"],
        check=True, timeout=600,
    )  # fmt: skip
    site = next((venv / "lib").glob("python3*/site-packages"))
    for path in [*site.glob("pip"), *site.glob("pip-*.dist-info"), *(venv / "bin").glob("pip*")]:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    kept = venv / "share" / "edgefleet"  # the pip wheel upgrades run (install.sh keeps it)
    kept.mkdir(parents=True)
    shutil.copy(pip_wheel, kept)
    return venv


def installed_bytes(venv: pathlib.Path) -> dict[str, int]:
    """Bytes of every file in the venv (apparent size, byte code included), and of its
    largest site-packages entries."""
    total, per = 0, {}
    site = next((venv / "lib").glob("python3*/site-packages"))
    for path in venv.rglob("*"):
        if path.is_file() and not path.is_symlink():
            size = path.stat().st_size
            total += size
            if site in path.parents:
                top = path.relative_to(site).parts[0]
                per[top] = per.get(top, 0) + size
    largest = dict(sorted(per.items(), key=lambda kv: -kv[1])[:6])
    return {"total": total, **{f"site:{k}": v for k, v in largest.items()}}


def _status(pid: int) -> dict[str, float]:
    """/proc/PID/status: the resident set split into anonymous memory (heap, Python
    objects), file-backed pages (the interpreter's and extensions' code), and the thread
    count (each thread a stack and possibly a malloc arena). MiB but Threads."""
    out = {}
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
            out[key] = int(value.split()[0]) / 1024
        elif key == "Threads":
            out[key] = int(value)
    return out


def _cpu_s(pid: int) -> float:
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def quic_footprint(venv: pathlib.Path, tmp: pathlib.Path, n: int, idle_s: float) -> dict:
    """RSS (MiB) and CPU of the agent-only install's idle ``edgeagent run`` on QUIC with
    ``n`` pods Running, sent by a real hub."""
    root = tmp / "fleet"
    root.mkdir(parents=True)
    hub = HubProcess(root)
    hub.start()
    agent = None
    try:
        await hub.wait_ready(120)
        token = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "cloudhub", "token", "create", "--kubeconfig",
            str(hub.kubeconfig), stdout=asyncio.subprocess.PIPE, env=child_env(),
        )  # fmt: skip
        out, _ = await token.communicate()
        command = shlex.split(out.decode().strip())
        node = "bench-quic"
        config = root / "agent.yaml"
        config.write_text(f"state_dir: {root / 'agent'}\nruntime:\n  kind: process\n")
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KUBECONFIG")}
        joined = await asyncio.to_thread(
            subprocess.run,
            [venv / "bin" / "edgeagent", *command[1:], "--node-name", node, "--config", config],
            capture_output=True, text=True, timeout=120, env=env, cwd=root,
        )  # fmt: skip
        if joined.returncode != 0:
            raise RuntimeError(f"benchmark: the join failed: {joined.stdout}{joined.stderr}")
        agent = await asyncio.to_thread(
            subprocess.Popen,
            [venv / "bin" / "edgeagent", "run", "--config", config, "--set",
             "hub.transports=quic", "--log-level", "WARNING"],
            env=env, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        async with await KubeClient.from_kubeconfig(str(hub.kubeconfig)) as kube:
            for i in range(n):
                await kube.create(PODS, _pod(i, node), "default")

            async def running() -> bool:
                if agent.poll() is not None:
                    raise RuntimeError("benchmark: the agent exited")
                pods, _ = await kube.list(PODS, "default")
                return sum(p.get("status", {}).get("phase") == "Running" for p in pods) == n

            t0 = time.monotonic()
            await eventually(running, f"{n} pods Running over QUIC", 180)
            started = time.monotonic() - t0
            settled_s = await cpu_settled(agent.pid)  # the start-up work over
            c0, w0 = _cpu_s(agent.pid), time.monotonic()
            await asyncio.sleep(idle_s)
            c1, w1 = _cpu_s(agent.pid), time.monotonic()
            status = _status(agent.pid)
            return {
                "rss_mib": round(status["VmRSS"], 1),
                "rss_anon_mib": round(status["RssAnon"], 1),
                "rss_file_mib": round(status["RssFile"], 1),
                "threads": status["Threads"],
                "cpu_pct": round(100.0 * (c1 - c0) / (w1 - w0), 2),
                "cpu_s_idle_window": round(c1 - c0, 2),
                "idle_window_s": round(w1 - w0, 1),
                "all_running_after_s": round(started, 2),
                "settled_after_s": round(settled_s, 1),
            }
    finally:
        if agent is not None and agent.poll() is None:
            agent.terminate()
            agent.wait(timeout=60)
        await hub.stop()
        sweep(root)


def _pod(i: int, node: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"idle-{i}", "namespace": "default"},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "100000"]}],
        },
    }
