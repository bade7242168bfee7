"""Agents installed by deploy/install.sh into roots, run under a stand-in for their
systemd unit: for ``cloudhub demo --upgrade``, the upgrade acceptance test and the
``upgrade`` benchmark.

:class:`SystemdUnit` does what systemd/edgeagent.service asks: before every start it runs
the installed start guard with the system's Python (``ExecStartPre=-``), it starts the
agent again whenever it exits (``Restart=always``, ``RestartSec`` shortened to 0.2 s), and
it leaves the pods alone (``KillMode=process``: only the agent's process is signalled).
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import os
import pathlib
import re
import subprocess
import sys

from cloudhub.devtools.errors import DevtoolsError
from cloudhub.devtools.wheels import REPO, build_wheel, make_wheelhouse

__all__ = [
    "SCRIPT",
    "SystemdUnit",
    "bumped",
    "current_version",
    "install",
    "install_roots",
    "installed_env",
    "installed_version",
]

SCRIPT = REPO / "deploy" / "install.sh"

#: ``RestartSec`` of the stand-in (seconds; the unit file's is longer).
RESTART_SEC = 0.2


def bumped(version: str) -> str:
    """``0.1.0`` -> ``0.1.1``: the next version, built from this tree.

    Raises:
        DevtoolsError: ``version`` does not start with MAJOR.MINOR.PATCH.
    """
    found = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    if found is None:
        raise DevtoolsError(f"version {version!r} is not MAJOR.MINOR.PATCH")
    major, minor, patch = found.groups()
    return f"{major}.{minor}.{int(patch) + 1}"


def current_version() -> str:
    """This tree's version (pyproject.toml).

    Raises:
        DevtoolsError: there is no source tree, or its pyproject.toml has no version.
    """
    try:
        text = (REPO / "pyproject.toml").read_text()
    except OSError as exc:
        raise DevtoolsError(f"no source tree at {REPO}: {exc}") from exc
    found = re.search(r'(?m)^version = "(.*)"$', text)
    if found is None:
        raise DevtoolsError(f"{REPO / 'pyproject.toml'} has no version")
    return found.group(1)


def installed_env() -> dict[str, str]:
    """The environment of an installed agent: no ``PYTHONPATH`` (its venv's code runs, not
    this tree's) and no systemd socket."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NOTIFY_SOCKET")}


def installed_version(prefix: pathlib.Path) -> str:
    """The EdgeFleet version installed in the venv ``prefix``, read from its metadata
    without running it (the hub does not import the agent); ``""`` when none is."""
    paths = [str(p) for p in prefix.glob("lib/python*/site-packages")]
    for dist in importlib.metadata.distributions(path=paths):
        if (dist.metadata["Name"] or "").lower() == "edgefleet":
            return dist.version
    return ""


class SystemdUnit:
    """The systemd unit's stand-in, mixed into an agent process class.

    The class provides ``prefix`` (the installed venv, ``<root>/opt/edgeagent``), ``state``
    (the agent's state directory), ``node``, ``start_once()`` (start the agent's process
    once and set ``proc``, a :class:`subprocess.Popen`) and ``async stop()`` (end it).
    Call :meth:`unit_init` from its ``__init__``. (No stubs here: the mixin comes first
    in the bases, and the class's own ``stop`` must win.)
    """

    prefix: pathlib.Path
    state: pathlib.Path
    node: str
    proc: subprocess.Popen | None

    def unit_init(self) -> None:
        self.starts: list[str] = []  # the version each start ran
        self.guard_outputs: list[str] = []
        self._stopping = False
        self._task: asyncio.Task | None = None

    def installed_version(self) -> str:
        """The version of the venv at ``prefix`` (``""`` when none is installed)."""
        return installed_version(self.prefix)

    def exec_start_pre(self) -> None:
        """``ExecStartPre=-``: the installed start guard; its failure is ignored."""
        base = getattr(sys, "_base_executable", sys.executable)
        script = self.state / "upgrade" / "guard.py"
        try:
            done = subprocess.run(
                [base, "-I", str(script), str(self.state)],
                capture_output=True,
                text=True,
                timeout=60,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            self.guard_outputs.append(str(exc))
            return
        self.guard_outputs.append(done.stderr)

    async def _supervise(self) -> None:
        while not self._stopping:
            await asyncio.to_thread(self.exec_start_pre)
            if self._stopping:  # stopped while the guard ran: no start after the stop
                break
            self.starts.append(self.installed_version())
            self.start_once()
            proc = self.proc
            assert proc is not None
            await asyncio.to_thread(proc.wait)
            if not self._stopping:
                await asyncio.sleep(RESTART_SEC)

    def up(self) -> None:
        """``systemctl start``: supervise the agent from now on (in this event loop)."""
        self._stopping = False
        self._task = asyncio.create_task(self._supervise(), name=f"unit-{self.node}")

    async def down(self) -> None:
        """``systemctl stop``: end the agent (not its pods) and stop restarting it."""
        self._stopping = True
        await self.stop()
        if self._task is not None:
            await asyncio.wait_for(self._task, 60)
            self._task = None


async def install(root: pathlib.Path, *args: str) -> None:
    """``deploy/install.sh --root ROOT ARGS...``.

    Raises:
        DevtoolsError: install.sh failed (its output is in the message) or took more than
            600 s.
    """
    proc = await asyncio.create_subprocess_exec(
        "bash", str(SCRIPT), "--root", str(root), *args, env=installed_env(),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 600)
    except asyncio.TimeoutError as exc:
        proc.kill()
        await proc.wait()
        raise DevtoolsError(f"install.sh --root {root} took more than 600 s") from exc
    if proc.returncode != 0:
        raise DevtoolsError(f"install.sh --root {root} failed:\n{out.decode()}{err.decode()}")


async def install_roots(
    work: pathlib.Path, nodes: tuple[str, ...], runtime: str = "process", *, quiet: bool = False
) -> dict[str, pathlib.Path]:
    """Build this tree's wheel and the agent's wheelhouse under ``work``, and install the
    agent with install.sh (``--runtime RUNTIME``) into ``work/<node>`` for each node,
    one at a time (two cores shared with the other tests). ``quiet``: pip's output is
    kept from the terminal (it is in the error).

    Returns:
        Each node's root.

    Raises:
        DevtoolsError: no source tree, or install.sh failed.
        subprocess.CalledProcessError: pip failed to build a wheel.
    """
    wheel = await asyncio.to_thread(build_wheel, work / "wheel", quiet=quiet)
    house = work / "house"
    house.mkdir()
    await asyncio.to_thread(make_wheelhouse, wheel, house, "agent", quiet=quiet)
    roots = {node: work / node for node in nodes}
    for root in roots.values():
        root.mkdir()
        await install(
            root, "--wheel", str(wheel), "--wheelhouse", str(house),
            "--python", sys.executable, "--runtime", runtime,
        )  # fmt: skip
    return roots
