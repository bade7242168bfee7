"""Processes of a fleet on one machine, for ``cloudhub demo``, the tests and the benchmarks:
a free loopback port, a child process with its log, the sweep that ends every process
started below a directory, and the agent settings that make a fleet react in seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import signal
import socket
import subprocess
import time
from dataclasses import dataclass

from cloudhub.devtools.errors import DevtoolsError

__all__ = ["FAST_AGENT_SETS", "Child", "child_env", "docker_agent_args", "free_port", "sweep"]

#: Agent settings (``edgeagent run --set``) of a fleet that must react in seconds: quick
#: commits, back-offs, reconnects and resyncs (seconds; production defaults in
#: docs/hublink.md). The demo and the tests each add their ``hub.liveness_timeout`` (the
#: demo shows an outage within 4 s; the tests allow 10 s on a loaded machine).
FAST_AGENT_SETS = (
    "store.commit_delay=0.1",
    "node_ip=127.0.0.1",
    "pods.backoff_initial=0.4",
    "pods.backoff_max=3",
    "pods.resync_period=2",
    "pods.default_grace_period=5",
    "hub.backoff_base=0.2",
    "hub.backoff_cap=1",
    "hub.healthy_after=1",
    "hub.quic_handshake_timeout=3",
    "hub.quic_retry_first=1",
)


def docker_agent_args(url: str, network: str, sandbox_image: str) -> list[str]:
    """``edgeagent run`` arguments for podman's Docker API at ``url`` (a
    :class:`~cloudhub.devtools.engine.PodmanEngine`'s ``url``, ``network`` and ``image``):
    busybox's ``sleep`` as the sandbox's command."""
    return [
        "--docker-url",
        url,
        "--set",
        f"runtime.docker.network={network}",
        "--set",
        f"runtime.docker.sandbox_image={sandbox_image}",
        "--set",
        "runtime.docker.sandbox_command=sleep,2147483647",
    ]


def free_port() -> int:
    """A loopback port free for both TCP and UDP (a session port carries both)."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
            tcp.bind(("127.0.0.1", 0))
            port = tcp.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
                try:
                    udp.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    raise DevtoolsError("no loopback port free for both TCP and UDP")


def child_env() -> dict[str, str]:
    """The environment of a child: this tree first on ``PYTHONPATH``, no systemd socket."""
    env = dict(os.environ)
    root = str(pathlib.Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("NOTIFY_SOCKET", None)
    return env


@dataclass
class Child:
    """One child process with its log file."""

    name: str
    args: list[str]
    cwd: pathlib.Path
    log_path: pathlib.Path
    proc: subprocess.Popen | None = None
    env: dict[str, str] | None = None
    """The child's environment (``None``: :func:`child_env`)."""

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.args,
                env=child_env() if self.env is None else self.env,
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    async def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds."""
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(proc.wait, timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                await asyncio.to_thread(proc.wait)


def _under(pid: int, root: str) -> bool:
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return False
    return cwd == root or cwd.startswith(root + os.sep)


def sweep(root: pathlib.Path, timeout: float = 5.0) -> list[int]:
    """End every process whose working directory is inside ``root``: what the demo
    started and what those started (the process runtime's pods run in their container
    directory below an agent's state directory). SIGTERM, then SIGKILL after ``timeout``.

    Returns:
        The pids that were still running and were signalled.
    """
    resolved = str(root.resolve())
    me = os.getpid()
    found = [
        int(p)
        for p in os.listdir("/proc")
        if p.isdigit() and int(p) != me and _under(int(p), resolved)
    ]
    for pid in found:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    alive = list(found)
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [pid for pid in alive if _under(pid, resolved)]
    for pid in alive:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return found
