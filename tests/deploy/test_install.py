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
from tests.deploy.wheels import (
    REPO,
    build_wheel,
    make_wheelhouse,
    wheelhouse_over_http,
    write_manifest,
)
from tests.environment import missing

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


def host_paths(tree: pathlib.Path, root: pathlib.Path) -> list[str]:
    """Files under ``tree`` (text or byte code) that name the prep directory ``root``."""
    needle = str(root).encode()
    return [
        str(path.relative_to(root))
        for path in tree.rglob("*")
        if path.is_file() and not path.is_symlink() and needle in path.read_bytes()
    ]


def no_pip(venv: pathlib.Path) -> list[str]:
    """pip, setuptools and their scripts found in the venv (none expected: install.sh
    installs with a pip from outside it)."""
    site = next((venv / "lib").glob("python3*/site-packages"))
    found = [
        p.name
        for p in site.iterdir()
        if p.name.split("-")[0] in ("pip", "setuptools", "pkg_resources", "_distutils_hack")
    ]
    return found + [p.name for p in (venv / "bin").glob("pip*")]


_VERSION = "import importlib.metadata as m; print(m.version('edgefleet'))"


def sha256_of(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def version_in(venv: pathlib.Path) -> str:
    out = subprocess.run(
        [venv / "bin" / "python", "-I", "-c", _VERSION],  # -I: not the tree's egg-info
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return out.stdout.strip()


async def first_boot(root: pathlib.Path, token_file: pathlib.Path | None = None):
    """Boot the image at ``root`` as far as the unit's ExecStartPre: its venv bound at
    /opt/edgeagent (in a private mount namespace: the host's /opt is untouched) and the
    first-boot join run from there, with the image's /etc/edgeagent and /var/lib/edgeagent."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        missing("unshare and root are needed to run an image's venv at /opt/edgeagent")
    etc, state = root / "etc" / "edgeagent", root / "var" / "lib" / "edgeagent"
    script = (
        "set -e; mount -t tmpfs -o size=1m none /opt; mkdir /opt/edgeagent;"
        f" mount --bind {root}/opt/edgeagent /opt/edgeagent;"
        " exec /opt/edgeagent/bin/edgeagent-first-boot"
        f" --token-file {token_file or etc / 'join-token'} --config {etc / 'config.yaml'}"
        f" --state-dir {state}"
    )
    proc = await asyncio.create_subprocess_exec(
        "unshare",
        "-m",
        "--propagation",
        "private",
        "sh",
        "-c",
        script,
        env=env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    return subprocess.CompletedProcess(script, proc.returncode or 0, out.decode(), err.decode())


@pytest.mark.slow
async def test_image_first_boot_upgrade_rollback_and_uninstall(
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
    assert "installed edgefleet 0.1.0 (the agent) in /opt/edgeagent" in first.stdout
    assert "holds no node identity" in first.stdout and "pi-installed joined" not in first.stdout
    assert "skipped (--root): systemctl restart edgeagent.service" not in first.stdout

    venv = root / "opt" / "edgeagent"
    state = root / "var" / "lib" / "edgeagent"
    etc = root / "etc" / "edgeagent"
    assert not (state / "pki").exists()  # no identity in the image
    token_file = etc / "join-token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert token_file.read_text().split()[:3] == ["edgeagent", "join", "--hub"]
    # Built for /opt/edgeagent: no path of the prep directory in any script or byte code.
    assert host_paths(venv, root) == []
    assert list(venv.rglob("*.pyc"))  # compiled for the target path, not left to first boot
    assert no_pip(venv) == []  # installed from outside: pip and setuptools stay out
    # ... and the pip wheel it was installed with is kept for upgrades (venvs.pip_command).
    assert [p.name.split("-")[0] for p in (venv / "share" / "edgefleet").iterdir()] == ["pip"]
    # 'edgeagent join --renew ...' and 'edgeagent status', as the agent's messages say.
    link = root / "usr" / "local" / "bin" / "edgeagent"
    assert os.readlink(link) == "/opt/edgeagent/bin/edgeagent"
    assert (venv / "share" / "edgeagent" / "edgeagent.service").read_bytes() == UNIT.read_bytes()
    unit = root / "etc" / "systemd" / "system" / "edgeagent.service"
    assert unit.read_bytes() == UNIT.read_bytes()
    assert os.access(venv / "bin" / "edgeagent-first-boot", os.X_OK)
    wants = root / "etc" / "systemd" / "system" / "multi-user.target.wants" / "edgeagent.service"
    assert os.readlink(wants) == "/etc/systemd/system/edgeagent.service"
    dropins = root / "etc" / "systemd" / "system" / "edgeagent.service.d"
    assert (dropins / "10-restart-backoff.conf").exists() == (systemd_version() >= 254)
    assert (dropins / "20-process-runtime.conf").exists()  # --runtime process
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    # The unit's ExecStartPre start guard is the installed agent's own.
    guard_file = state / "upgrade" / "guard.py"
    assert guard_file.read_bytes() == (REPO / "edgeagent" / "upgrade" / "guard.py").read_bytes()

    before = snapshot(root)
    second = await install(*args)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "already installed; nothing changed" in second.stdout
    assert snapshot(root) == before

    # The installed unit, its drop-ins and its real ExecStart pass systemd-analyze verify.
    assert await asyncio.to_thread(verify_tree, root) == ""
    await asyncio.to_thread(shutil.rmtree, root / "usr" / "lib")  # verify_tree's copy
    (root / "usr" / "bin" / "python3").unlink()  # and its stand-in interpreter

    # A device boots without its token file: a clear message, no identity, retried later.
    lost = await first_boot(root, token_file=etc / "no-such-token")
    assert lost.returncode == 1
    assert "has not joined and there is no join token at" in lost.stderr, lost.stderr
    assert not (state / "pki").exists()

    # The first boot: the image's venv runs at /opt/edgeagent and joins with the token file;
    # the key is made on the device, and the token file goes.
    boot = await first_boot(root)
    assert boot.returncode == 0, boot.stdout + boot.stderr
    assert not token_file.exists()
    config = yaml.safe_load((etc / "config.yaml").read_text())
    assert config["state_dir"] == "/var/lib/edgeagent"  # the path on the device
    assert config["node_name"] == "pi-installed"
    assert config["hub"]["url"] == f"quic://localhost:{hub.settings.session_port}"
    assert config["runtime"]["kind"] == "process"
    assert config["upgrade"] == {"enabled": True}  # the hub's EdgeUpgrades are carried out
    key = state / "pki" / "node.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    cert = pki.load_certificate_pem((state / "pki" / "node.crt").read_bytes())
    assert pki.node_name_from_cert(cert) == "pi-installed"
    again = await first_boot(root)  # joined: nothing to do, the spent token is not needed
    assert again.returncode == 0 and again.stderr == ""
    key_before = key.read_bytes()

    # --upgrade: the new version is installed beside, checked, swapped in; old -> new printed.
    # A config from before the agent had upgrades: --upgrade adds the group.
    config_file = etc / "config.yaml"
    lines = config_file.read_text().splitlines(keepends=True)
    at = lines.index("upgrade:\n")
    config_file.write_text("".join(lines[:at] + lines[at + 2 :]))
    assert "upgrade" not in yaml.safe_load(config_file.read_text())
    newer = await asyncio.to_thread(build_wheel, tmp_path / "newer", version="0.1.1")
    base = ["--root", str(root), "--wheelhouse", str(wheelhouse), "--python", sys.executable]
    up = await install(*base, "--upgrade", "--wheel", str(newer))
    assert up.returncode == 0, up.stdout + up.stderr
    assert "upgraded edgefleet 0.1.0 -> 0.1.1" in up.stdout
    assert "enabled agent upgrades from the hub" in up.stdout
    assert yaml.safe_load(config_file.read_text())["upgrade"] == {"enabled": True}
    assert version_in(venv) == "0.1.1"
    previous = root / "opt" / "edgeagent.previous"
    assert version_in(previous) == "0.1.0"
    # The new venv was built as the agent builds it: a copy of the running one.
    assert (venv / "pyvenv.cfg").read_bytes() == (previous / "pyvenv.cfg").read_bytes()
    assert (venv / ".edgefleet-wheel.sha256").read_text().strip() == sha256_of(newer)
    assert host_paths(venv, root) == []
    assert no_pip(venv) == []  # the upgrade, too, ran a pip from outside the venv
    same = await install(*base, "--upgrade", "--wheel", str(newer))
    assert same.returncode == 0 and "nothing to upgrade" in same.stdout

    # An upgrade to a broken agent: refused before anything is swapped.
    broken = await asyncio.to_thread(
        build_wheel,
        tmp_path / "broken",
        version="0.1.2",
        agent_main='raise ImportError("the broken build")\n',
    )
    bad = await install(*base, "--upgrade", "--wheel", str(broken))
    assert bad.returncode == 1
    assert "the new agent (edgefleet 0.1.2) does not start" in bad.stderr, bad.stderr
    assert "edgefleet 0.1.1 is still installed and keeps running" in bad.stderr
    assert "the broken build" in bad.stderr
    assert version_in(venv) == "0.1.1" and version_in(previous) == "0.1.0"
    assert not (root / "opt" / "edgeagent.new").exists()

    back = await install("--root", str(root), "--rollback")
    assert back.returncode == 0, back.stdout + back.stderr
    assert "rolled back edgefleet 0.1.1 -> 0.1.0" in back.stdout
    # The agent's rule (guard.swap_back): .previous comes back, the replaced one is .failed.
    assert version_in(venv) == "0.1.0"
    failed = root / "opt" / "edgeagent.failed"
    assert version_in(failed) == "0.1.1" and not previous.exists()
    twice = await install("--root", str(root), "--rollback")
    assert twice.returncode == 1 and "there is no /opt/edgeagent.previous" in twice.stderr
    assert version_in(venv) == "0.1.0"

    dry = await install("--root", str(root), "--uninstall", "--dry-run")
    assert dry.returncode == 0 and "would run: rm -rf" in dry.stdout
    assert venv.exists()

    removed = await install("--root", str(root), "--uninstall")
    assert removed.returncode == 0, removed.stderr
    assert not venv.exists() and not previous.exists() and not failed.exists()
    assert not unit.exists() and not wants.exists()
    assert not link.exists() and not link.is_symlink()
    assert key.exists() and "kept" in removed.stdout  # identity and store stay
    assert "the node pi-installed still exists in the cloud" in removed.stdout
    assert "cloudhub node revoke pi-installed" in removed.stdout
    assert "kubectl delete node pi-installed" in removed.stdout
    nothing = await install("--root", str(root), "--uninstall")
    assert nothing.returncode == 0 and "nothing to uninstall" in nothing.stdout

    # Reinstall for an offline site from the wheelhouse alone (no index, no --wheel): the
    # node's identity, kept by the uninstall, is reused; no token is needed.
    offline = await install(*base, "--runtime", "process")
    assert offline.returncode == 0, offline.stdout + offline.stderr
    assert "installed edgefleet 0.1.0 (the agent)" in offline.stdout
    assert (venv / "bin" / "edgeagent").exists() and unit.exists()
    assert key.read_bytes() == key_before
    purged = await install("--root", str(root), "--uninstall", "--purge")
    assert purged.returncode == 0
    assert not etc.exists() and not state.exists()


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


SMALL_WHEEL = "msgpack-1.0.8-cp311-cp311-manylinux_2_17_x86_64.whl"


def small_house(where: pathlib.Path, *, altered: bool = False) -> pathlib.Path:
    """A one-wheel wheelhouse (a few bytes: the checks run before anything is installed);
    ``altered``: its wheel changed after the manifest was written (a checksum mismatch)."""
    where.mkdir()
    (where / SMALL_WHEEL).write_bytes(b"not really a wheel")
    write_manifest(where)
    if altered:
        (where / SMALL_WHEEL).write_bytes(b"altered")
    return where


async def install_from(
    house: pathlib.Path | str, root: pathlib.Path
) -> subprocess.CompletedProcess:
    """install.sh into ``root`` (made if absent) from the wheelhouse ``house`` (a directory
    or a URL), with this Python."""
    await asyncio.to_thread(root.mkdir, exist_ok=True)
    return await install(
        "--root", str(root), "--python", sys.executable, "--wheelhouse", str(house)
    )


async def test_wheelhouse_with_a_wrong_checksum_is_refused(tmp_path: pathlib.Path) -> None:
    house = small_house(tmp_path / "house", altered=True)
    root = tmp_path / "root"
    result = await install_from(house, root)
    assert result.returncode == 1
    assert "checksum mismatch, nothing was installed" in result.stderr, result.stderr
    assert "msgpack-1.0.8" in result.stderr
    assert list(root.iterdir()) == []


async def test_wheelhouse_without_a_manifest_or_with_an_unlisted_wheel_is_refused(
    tmp_path: pathlib.Path,
) -> None:
    house = small_house(tmp_path / "house")
    (house / "extra-1.0-py3-none-any.whl").write_bytes(b"smuggled in")
    root = tmp_path / "root"
    unlisted = await install_from(house, root)
    assert unlisted.returncode == 1
    assert "not in its SHA256SUMS: extra-1.0-py3-none-any.whl" in unlisted.stderr
    (house / "SHA256SUMS").unlink()
    bare = await install_from(house, root)
    assert bare.returncode == 1 and "has no SHA256SUMS" in bare.stderr
    assert list(root.iterdir()) == []


async def test_wheelhouse_url_is_fetched_and_checked(tmp_path: pathlib.Path) -> None:
    """--wheelhouse https://…: the archive is fetched over HTTP (a real server on loopback)
    and its manifest checked; a wrong one stops the install before anything is changed."""
    house = small_house(tmp_path / "house", altered=True)
    with wheelhouse_over_http(house, "house.tar.gz", tmp_path / "served") as url:
        root = tmp_path / "root"
        result = await install_from(f"{url}/house.tar.gz", root)
        assert result.returncode == 1
        assert "fetching the wheelhouse" in result.stdout
        assert "checksum mismatch" in result.stderr, result.stderr
        gone = await install_from(f"{url}/nothing.tgz", root)
        assert gone.returncode == 1 and "cannot fetch" in gone.stderr
        assert list(root.iterdir()) == []


async def test_a_wheel_listed_only_as_part_of_another_name_is_unlisted(
    tmp_path: pathlib.Path,
) -> None:
    """Regression (break1): the manifest check was a substring ``grep -F "  NAME"``, so a
    wheel whose name began another listed file's (``x.whl`` beside ``x.whl.orig``) passed
    as listed, and ``sha256sum -c`` then checked only the other file."""
    house = small_house(tmp_path / "house")
    listed = house / "extra-1.0-py3-none-any.whl.orig"
    listed.write_bytes(b"the listed one")
    manifest = house / "SHA256SUMS"  # lists the .orig, not the wheel below
    digest = hashlib.sha256(listed.read_bytes()).hexdigest()
    manifest.write_text(manifest.read_text() + f"{digest}  {listed.name}\n")
    (house / "extra-1.0-py3-none-any.whl").write_bytes(b"smuggled in")
    root = tmp_path / "root"
    result = await install_from(house, root)
    assert result.returncode == 1, result.stderr
    assert "not in its SHA256SUMS: extra-1.0-py3-none-any.whl" in result.stderr
    assert list(root.iterdir()) == []


async def test_a_wheelhouse_and_root_with_spaces_in_their_paths(tmp_path: pathlib.Path) -> None:
    house = small_house(tmp_path / "my wheel house", altered=True)
    root = tmp_path / "a root"
    result = await install_from(house, root)
    assert result.returncode == 1
    assert "checksum mismatch, nothing was installed" in result.stderr, result.stderr
    assert list(root.iterdir()) == []


async def test_an_unlisted_source_archive_in_the_wheelhouse_is_refused(
    tmp_path: pathlib.Path,
) -> None:
    """Regression (break1): only ``*.whl`` were checked against SHA256SUMS, but pip's
    ``--find-links`` also takes source archives (and runs their setup.py)."""
    house = small_house(tmp_path / "house")
    (house / "msgpack-9.9.9.tar.gz").write_bytes(b"a setup.py that runs as root")
    root = tmp_path / "root"
    result = await install_from(house, root)
    assert result.returncode == 1, result.stderr
    assert "not in its SHA256SUMS: msgpack-9.9.9.tar.gz" in result.stderr
    assert list(root.iterdir()) == []
