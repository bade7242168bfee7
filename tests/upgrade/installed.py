"""Agents installed by deploy/install.sh into roots, run under a stand-in for their
systemd unit: shared by the acceptance test (test_acceptance.py) and the ``upgrade``
benchmark (tests/bench/bench_upgrade.py).

:class:`Unit` does what systemd/edgeagent.service asks: before every start it runs the
installed start guard with the system's Python (``ExecStartPre=-``), it starts the agent
again whenever it exits (``Restart=always``, ``RestartSec`` shortened to 0.2 s), and it
leaves the pods alone (``KillMode=process``: only the agent's process is signalled).
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import re
import subprocess
import sys

from edgeagent.upgrade import Layout
from tests.deploy.wheels import REPO, build_wheel, make_wheelhouse
from tests.edgeagent.hublink.fleet import AgentProcess, write_node_pki

__all__ = ["Unit", "bumped", "current_version", "install", "install_roots"]

SCRIPT = REPO / "deploy" / "install.sh"


def bumped(version: str) -> str:
    """``0.1.0`` -> ``0.1.1``: the next version, built from this tree."""
    major, minor, patch = re.match(r"(\d+)\.(\d+)\.(\d+)", version).groups()
    return f"{major}.{minor}.{int(patch) + 1}"


def current_version() -> str:
    return re.search(r'(?m)^version = "(.*)"$', (REPO / "pyproject.toml").read_text()).group(1)


class Unit(AgentProcess):
    """The systemd unit's stand-in for the agent installed under ``root``."""

    def __init__(
        self,
        root: pathlib.Path,
        node: str,
        hub_url: str,
        ca,
        *,
        bad_version: str = "",
        kind: str = "process",
        engine=None,
    ):
        super().__init__(root / "run", node, kind, hub_url, ca, engine=engine)
        self.install_root = root
        self.prefix = root / "opt" / "edgeagent"
        self.state = root / "var" / "lib" / "edgeagent"
        self.config = root / "etc" / "edgeagent" / "config.yaml"
        self.bad_version = bad_version
        self.starts: list[str] = []  # the version each start ran
        self.guard_outputs: list[str] = []
        self._stopping = False
        self._task: asyncio.Task | None = None
        write_node_pki(self.state / "pki", ca, node)  # what 'edgeagent join' leaves

    def args(self) -> list[str]:
        args = super().args()
        args[0] = str(self.prefix / "bin" / "python")
        if self.bad_version and Layout(self.prefix).version() == self.bad_version:
            args[args.index("--config") + 1] = str(self.config) + ".missing"
        return args

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NOTIFY_SOCKET")}
        self.starts.append(Layout(self.prefix).version())
        with open(self.log_path, "a") as log:
            log.write(f"--- start {self.starts[-1]} ---\n")
            log.flush()
            self.proc = subprocess.Popen(
                self.args(), env=env, stdout=log, stderr=log, cwd=self.root, start_new_session=True
            )

    def _exec_start_pre(self) -> None:
        base = getattr(sys, "_base_executable", sys.executable)
        script = self.state / "upgrade" / "guard.py"
        done = subprocess.run(
            [base, "-I", str(script), str(self.state)], capture_output=True, text=True, timeout=60
        )
        self.guard_outputs.append(done.stderr)

    async def _supervise(self) -> None:
        while not self._stopping:
            await asyncio.to_thread(self._exec_start_pre)
            self.start()
            proc = self.proc
            await asyncio.to_thread(proc.wait)
            if not self._stopping:
                await asyncio.sleep(0.2)  # RestartSec (shortened)

    def up(self) -> None:
        self._stopping = False
        self._task = asyncio.create_task(self._supervise(), name=f"unit-{self.node}")

    async def down(self) -> None:
        self._stopping = True
        await self.stop()
        if self._task is not None:
            await asyncio.wait_for(self._task, 60)
            self._task = None


async def install(root: pathlib.Path, *args: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = await asyncio.create_subprocess_exec(
        "bash", str(SCRIPT), "--root", str(root), *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 600)
    assert proc.returncode == 0, out.decode() + err.decode()


async def install_roots(work: pathlib.Path, nodes: tuple[str, ...]) -> dict[str, pathlib.Path]:
    """Build this tree's wheel and the agent's wheelhouse under ``work``, and install the
    agent with install.sh (``--runtime process``) into ``work/<node>`` for each node,
    one at a time (two cores shared with the other tests)."""
    wheel = await asyncio.to_thread(build_wheel, work / "wheel")
    house = work / "house"
    house.mkdir()
    await asyncio.to_thread(make_wheelhouse, wheel, house, "agent")
    roots = {node: work / node for node in nodes}
    for root in roots.values():
        root.mkdir()
        await install(
            root, "--wheel", str(wheel), "--wheelhouse", str(house),
            "--python", sys.executable, "--runtime", "process",
        )  # fmt: skip
    return roots
