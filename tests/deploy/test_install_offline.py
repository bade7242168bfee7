"""deploy/install.sh where systemd is not running (a chroot, a container, an image prepared
under qemu) and ``--root`` images whose Python is not the one the venv is made for (issue 16:
``--dry-run`` refused without systemd; nothing checked an image's interpreter)."""

from __future__ import annotations

import asyncio
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from tests.deploy.test_install import SCRIPT, env, install
from tests.environment import missing

JOIN = ("--hub", "hub.example:7444", "--token", "abcdef.0123456789abcdef",
        "--ca-cert-hash", "sha256:" + "0" * 64)  # fmt: skip


def without_systemd(*args: str) -> tuple[str, ...]:
    """install.sh ARGS in a private mount namespace whose /run is an empty tmpfs: systemd
    is not running there, whatever this machine runs (the host's /run is untouched)."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        missing("unshare and root are needed to hide /run/systemd from install.sh")
    script = 'mount -t tmpfs -o size=1m none /run && exec bash "$@"'
    return ("unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh",
            str(SCRIPT), *args)  # fmt: skip


async def run(*command: str) -> subprocess.CompletedProcess:
    proc = await asyncio.create_subprocess_exec(
        *command, env=env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 300)
    return subprocess.CompletedProcess(command, proc.returncode or 0, out.decode(), err.decode())


def untouched() -> dict[str, bool]:
    """Which of the paths a real install writes exist on this machine."""
    paths = ("/opt/edgeagent", "/etc/edgeagent", "/var/lib/edgeagent",
             "/etc/systemd/system/edgeagent.service", "/usr/local/bin/edgeagent")  # fmt: skip
    return {path: os.path.lexists(path) for path in paths}


async def test_dry_run_works_where_systemd_is_not_running() -> None:
    before = untouched()
    result = await run(*without_systemd("--dry-run", "--python", sys.executable, *JOIN))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "systemd is not running here" in result.stdout
    assert "would write /etc/edgeagent/config.yaml" in result.stdout
    assert "would write /etc/systemd/system/edgeagent.service" in result.stdout
    assert (
        "would run: " in result.stdout and "edgeagent join --hub hub.example:7444" in result.stdout
    )
    assert "skipped (systemd is not running): systemctl daemon-reload" in result.stdout
    assert "0123456789abcdef" not in result.stdout  # the token's secret is not echoed
    assert untouched() == before


async def test_an_install_that_would_start_the_agent_needs_systemd() -> None:
    before = untouched()
    result = await run(*without_systemd("--python", sys.executable, *JOIN))
    assert result.returncode == 1
    assert "systemd is not running on this machine" in result.stderr
    assert "use --no-start to install without starting it" in result.stderr
    assert untouched() == before


@pytest.mark.parametrize("mode", ["--upgrade", "--uninstall", "--rollback"])
async def test_no_start_does_not_excuse_other_modes_from_systemd(mode: str) -> None:
    """--no-start is for installing: an upgrade, uninstall or rollback without systemd
    cannot stop or restart the agent, and is refused before it changes anything."""
    before = untouched()
    result = await run(*without_systemd(mode, "--no-start", "--python", sys.executable))
    assert result.returncode == 1
    assert "systemd is not running on this machine" in result.stderr
    assert untouched() == before


def image_with_python(root: pathlib.Path, version: str) -> pathlib.Path:
    """An image whose interpreter, at the path the venv will link to (this Python's base
    executable), is this machine's real CPython binary under the name python{version}."""
    wanted = pathlib.Path(sys._base_executable)
    target = root / wanted.relative_to("/")
    target.parent.mkdir(parents=True)
    binary = target.parent / f"python{version}"
    real = pathlib.Path(os.path.realpath(wanted))
    try:
        os.link(real, binary)  # the same bytes, not a 7 MB copy
    except OSError:
        shutil.copy2(real, binary)
    if binary != target:
        target.symlink_to(binary.name)
    return root


async def test_root_image_with_python_of_another_version_is_refused(
    tmp_path: pathlib.Path,
) -> None:
    root = image_with_python(tmp_path / "root", "3.9")
    before = sorted(root.rglob("*"))
    result = await install("--root", str(root), "--python", sys.executable, "--dry-run")
    assert result.returncode == 1, result.stdout
    assert f"--root {root}: the image's {sys._base_executable}" in result.stderr
    assert "Python 3.9, but the venv and its wheels would be made by" in result.stderr
    assert "Run install.sh inside the image instead" in result.stderr
    assert sorted(root.rglob("*")) == before


async def test_root_image_with_the_same_python_passes_the_check(tmp_path: pathlib.Path) -> None:
    version = "{}.{}".format(*sys.version_info[:2])
    root = image_with_python(tmp_path / "root", version)
    result = await install("--root", str(root), "--python", sys.executable, "--dry-run", *JOIN)
    assert result.returncode == 0, result.stderr
    assert "warning: --root" not in result.stdout and "would write" in result.stdout


async def test_a_dry_run_claims_nothing_was_done(tmp_path: pathlib.Path) -> None:
    """Found by breakit5: ``--dry-run`` printed "created the venv" and "enabled: the agent
    starts when the device boots" for a venv and a unit it did not make."""
    version = "{}.{}".format(*sys.version_info[:2])
    root = image_with_python(tmp_path / "root", version)
    result = await install("--root", str(root), "--python", sys.executable, "--dry-run", *JOIN)
    assert result.returncode == 0, result.stderr
    said = result.stdout.splitlines()
    assert [line for line in said if "created" in line or "enabled:" in line] == [], said
    assert any("would run: systemctl" in line and "enable" in line for line in said)


async def test_root_image_without_its_python_is_warned_about(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    result = await install("--root", str(root), "--python", sys.executable, "--dry-run")
    assert result.returncode == 0, result.stderr
    assert f"warning: --root {root}: the image has no {sys._base_executable}" in result.stdout
    assert "install python3 and python3-venv in the image" in result.stdout
    assert list(root.iterdir()) == []
