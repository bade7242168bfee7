"""deploy/install.sh into a temporary root (``--root``): a real venv, the EdgeFleet wheel
built from this tree (its dependencies from a wheelhouse, no index), a real
join against a hub's join endpoint, the systemd unit enabled with ``systemctl --root``;
then idempotency, ``--dry-run``, ``--uninstall``, and each early failure."""

from __future__ import annotations

import asyncio
import hashlib
import os
import pathlib
import shutil
import stat
import subprocess
import sys

import pytest
import yaml

from protocol import pki
from tests.deploy.test_systemd_unit import systemd_version, verify_tree
from tests.deploy.wheels import REPO, build_wheel, make_wheelhouse

SCRIPT = REPO / "deploy" / "install.sh"
UNIT = REPO / "systemd" / "edgeagent.service"

pytestmark = pytest.mark.skipif(
    shutil.which("systemctl") is None, reason="systemctl is needed for --root enable"
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The EdgeFleet wheel built from this tree (from a copy, so the tree stays clean)."""
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="module")
def wheelhouse(wheel: pathlib.Path, tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """A wheelhouse as an offline site has it: EdgeFleet's wheel, every dependency of the
    agent's, and their SHA-256 manifest (from pip's cache, so any machine can run it)."""
    house = tmp_path_factory.mktemp("wheelhouse")
    make_wheelhouse(wheel, house, "agent")
    return house


def env(**extra: str) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the venv's code only
    out.update(extra)
    return out


async def install(*args: str, environ: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    proc = await asyncio.create_subprocess_exec(
        "bash",
        str(SCRIPT),
        *args,
        env=environ or env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 300)
    return subprocess.CompletedProcess(args, proc.returncode or 0, out.decode(), err.decode())


def snapshot(root: pathlib.Path) -> dict[str, tuple]:
    """Every path under root: type, mode, size, mtime and content hash (or link target)."""
    out = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            out[str(path.relative_to(root))] = ("link", os.readlink(path))
        elif stat.S_ISDIR(st.st_mode):
            out[str(path.relative_to(root))] = ("dir", stat.S_IMODE(st.st_mode))
        else:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            out[str(path.relative_to(root))] = (
                "file",
                stat.S_IMODE(st.st_mode),
                st.st_size,
                st.st_mtime_ns,
                digest,
            )
    return out


@pytest.mark.slow
async def test_install_join_idempotency_and_uninstall(
    start_hub, wheel: pathlib.Path, wheelhouse: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    hub = await start_hub()
    token, _ = await hub.tokens.create(ttl=3600, single_use=True, labels={"site": "lab"})
    root = tmp_path / "root"
    root.mkdir()
    args = [
        "--root",
        str(root),
        "--wheel",
        str(wheel),
        "--wheelhouse",
        str(wheelhouse),
        "--python",
        sys.executable,
        "--runtime",
        "process",
        "--hub",
        f"localhost:{hub.join_server.port}",
        "--token",
        token,
        "--ca-cert-hash",
        hub.ca.ca_hash,
        "--node-name",
        "pi-installed",
    ]
    first = await install(*args)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "node pi-installed joined hub" in first.stdout
    assert "skipped (--root): systemctl restart edgeagent.service" in first.stdout

    venv = root / "opt" / "edgeagent"
    assert (venv / "bin" / "edgeagent").exists()
    # 'edgeagent join --renew ...' and 'edgeagent status', as the agent's messages say.
    link = root / "usr" / "local" / "bin" / "edgeagent"
    assert os.readlink(link) == "/opt/edgeagent/bin/edgeagent"
    assert (venv / "share" / "edgeagent" / "edgeagent.service").read_bytes() == UNIT.read_bytes()
    unit = root / "etc" / "systemd" / "system" / "edgeagent.service"
    assert unit.read_bytes() == UNIT.read_bytes()
    wants = root / "etc" / "systemd" / "system" / "multi-user.target.wants" / "edgeagent.service"
    assert os.readlink(wants) == "/etc/systemd/system/edgeagent.service"
    dropins = root / "etc" / "systemd" / "system" / "edgeagent.service.d"
    assert (dropins / "10-restart-backoff.conf").exists() == (systemd_version() >= 254)
    assert (dropins / "20-process-runtime.conf").exists()  # --runtime process
    config = yaml.safe_load((root / "etc" / "edgeagent" / "config.yaml").read_text())
    assert config["state_dir"] == "/var/lib/edgeagent"  # the path on the device
    assert config["node_name"] == "pi-installed"
    assert config["hub"]["url"] == f"quic://localhost:{hub.settings.session_port}"
    assert config["runtime"]["kind"] == "process"
    state = root / "var" / "lib" / "edgeagent"
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    key = state / "pki" / "node.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    cert = pki.load_certificate_pem((state / "pki" / "node.crt").read_bytes())
    assert pki.node_name_from_cert(cert) == "pi-installed"
    # The installed agent reads the config and the certificate the script wrote.
    check = (
        "import pathlib, sys\n"
        "from edgeagent.settings import load_settings\n"
        "from edgeagent.certs import CertPaths\n"
        "s = load_settings(pathlib.Path(sys.argv[1]), env={},\n"
        "                  overrides={'state_dir': sys.argv[2]})\n"
        "print(s.node_name, s.hub.url, CertPaths.from_settings(s).load().chain[0].serial_number)\n"
    )
    proc = await asyncio.create_subprocess_exec(
        str(venv / "bin" / "python"),
        "-c",
        check,
        str(root / "etc" / "edgeagent" / "config.yaml"),
        str(state),
        env=env(),
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    expected = f"pi-installed {config['hub']['url']} {cert.serial_number}"
    assert out.decode().strip() == expected

    key_before = key.read_bytes()
    before = snapshot(root)
    second = await install(*args)  # the single-use token is spent: the join must be skipped
    assert second.returncode == 0, second.stdout + second.stderr
    assert "already installed; nothing changed" in second.stdout
    assert "already joined" in second.stdout and "edgeagent join --renew" in second.stdout
    assert snapshot(root) == before

    # The installed unit, its drop-ins and its real ExecStart pass systemd-analyze verify.
    assert await asyncio.to_thread(verify_tree, root) == ""
    await asyncio.to_thread(shutil.rmtree, root / "usr" / "lib")  # verify_tree's copy

    dry = await install(*args[:2], "--uninstall", "--dry-run")
    assert dry.returncode == 0 and "would run: rm -rf" in dry.stdout
    assert snapshot(root) == before

    removed = await install("--root", str(root), "--uninstall")
    assert removed.returncode == 0, removed.stderr
    assert not venv.exists() and not unit.exists() and not wants.exists()
    assert not link.exists() and not link.is_symlink()
    assert key.exists() and "kept" in removed.stdout  # identity and store stay
    again = await install("--root", str(root), "--uninstall")
    assert again.returncode == 0 and "nothing to uninstall" in again.stdout

    # Reinstall for an offline site from a wheelhouse (no index): the node's identity,
    # kept by the uninstall, is reused; no token is needed.
    back = await install(
        "--root",
        str(root),
        "--wheelhouse",
        str(wheelhouse),
        "--python",
        sys.executable,
        "--runtime",
        "process",
    )
    assert back.returncode == 0, back.stdout + back.stderr
    assert "installed edgefleet" in back.stdout and "joined" not in back.stdout
    assert (venv / "bin" / "edgeagent").exists() and unit.exists()
    assert key.read_bytes() == key_before
    purged = await install("--root", str(root), "--uninstall", "--purge")
    assert purged.returncode == 0
    assert not (root / "etc" / "edgeagent").exists() and not state.exists()


async def test_dry_run_changes_nothing(wheel: pathlib.Path, tmp_path: pathlib.Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    result = await install(
        "--root",
        str(root),
        "--wheel",
        str(wheel),
        "--python",
        sys.executable,
        "--dry-run",
        "--hub",
        "hub.example:7444",
        "--token",
        "abcdef.0123456789abcdef",
        "--ca-cert-hash",
        "sha256:" + "0" * 64,
    )
    assert result.returncode == 0, result.stderr
    assert "would run:" in result.stdout and "venv" in result.stdout
    assert "would write" in result.stdout
    assert "0123456789abcdef" not in result.stdout  # the token's secret is not echoed
    assert list(root.iterdir()) == []


async def test_old_python_is_refused_early(tmp_path: pathlib.Path) -> None:
    fake = tmp_path / "python3.8"
    fake.write_text(
        # Answers the version query as Python 3.8 would, and fails the ">= 3.10" check.
        '#!/bin/sh\ncase "$2" in *print*) echo 3.8.10; exit 0;; esac\nexit 1\n'
    )
    fake.chmod(0o755)
    root = tmp_path / "root"
    root.mkdir()
    result = await install("--root", str(root), "--python", str(fake))
    assert result.returncode == 1
    assert "Python >= 3.10 is required" in result.stderr and "3.8.10" in result.stderr
    assert list(root.iterdir()) == []


def path_without(command: str, bin_dir: pathlib.Path) -> str:
    """A PATH holding every command of the usual directories except ``command``."""
    bin_dir.mkdir()
    for directory in ("/usr/local/bin", "/usr/bin", "/bin"):
        for entry in pathlib.Path(directory).iterdir():
            target = bin_dir / entry.name
            if entry.name != command and not target.exists():
                target.symlink_to(entry)
    return str(bin_dir)


async def test_missing_systemd_is_refused_early(tmp_path: pathlib.Path) -> None:
    path = path_without("systemctl", tmp_path / "bin")
    root = tmp_path / "root"
    root.mkdir()
    result = await install("--root", str(root), "--python", sys.executable, environ=env(PATH=path))
    assert result.returncode == 1
    assert "systemd is required but systemctl was not found" in result.stderr
    assert list(root.iterdir()) == []


async def test_missing_container_engine_is_refused_early(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    result = await install(
        "--root", str(root), "--python", sys.executable, "--container-engine", "balena-engine"
    )
    assert result.returncode == 1
    assert "container engine 'balena-engine' was asked for but is not installed" in result.stderr
    assert list(root.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--bogus"], "unknown option: --bogus"),
        (["--token", "abcdef.0123456789abcdef"], "--token needs --hub and --ca-cert-hash"),
        (["--runtime", "lxc"], "--runtime must be docker or process"),
        (["--purge"], "--purge goes with --uninstall"),
        (["--root"], "--root needs a value"),
    ],
)
async def test_usage_errors(args: list[str], message: str) -> None:
    result = await install(*args)
    assert result.returncode == 2
    assert message in result.stderr
