"""The agent on the architecture (issue 16 item 3, "prove it on the architecture"): in a
Debian 12 arm64 root run under qemu user emulation (scripts/qemu-root.sh), deploy/install.sh
(as root, no systemd running, ``--no-start``) installs the agent from the aarch64 wheelhouse
of deploy/build-wheelhouse.sh with no network at all, then joins a hub running on this
machine with a real bootstrap token; the agent runs there (aarch64 CPython, aarch64 wheels),
a pod on the process runtime prints ``uname -m`` = aarch64 and is Running in the hub's API,
and a device twin goes round: desired in the API -> the edge's device API -> a reported value
-> the Device's status. Also: ``--root`` refuses to prepare that image with this machine's
Python (another architecture). Slow (minutes cold: the root, the wheels), run by default.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import platform
import shlex
import shutil
import subprocess
import sys
import time

import pytest

from cloudhub.demo.processes import HubProcess
from cloudhub.devtools.fleet import child_env, sweep
from cloudhub.kube import DEVICEMODELS, DEVICES, NODES, PODS, KubeClient
from edgeagent.mappers import APIUnavailable, DeviceAPIError, DeviceClient
from tests.bench.agent_install import installed_bytes
from tests.deploy.conftest import node_pod
from tests.deploy.qemu import chroot, mounted_root, unpacked_root
from tests.deploy.wheels import REPO
from tests.edgeagent.hublink.fleet import AGENT_TEST_SETS
from tests.environment import not_applicable
from tests.twins.kubeedge import VLED_DEVICE, VLED_MODEL, device, model, reported_value
from tests.waiting import eventually

pytestmark = pytest.mark.slow

#: What the device image has besides Debian's minbase: the interpreter and its venv module
#: (Raspberry Pi OS and JetPack ship both).
PACKAGES = ("python3-venv",)
NODE = "edge-arm64"
DEVICE = "vled-instance-01"
TIMEOUT = 240.0  # seconds: an emulated agent starts in tens of seconds on a loaded machine
#: Seconds for one install.sh run under emulation (pip and compileall: ~5 min at load 10).
INSTALL_TIMEOUT = 1500.0


@pytest.fixture(scope="module")
def arm64_root() -> pathlib.Path:
    return unpacked_root("arm64", PACKAGES)


@pytest.fixture(scope="module")
def aarch64_house(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """deploy/build-wheelhouse.sh for the device: aarch64, CPython 3.11 (bookworm's)."""
    out = tmp_path_factory.mktemp("arm64-house") / "wheelhouse"
    built = subprocess.run(
        [str(REPO / "deploy" / "build-wheelhouse.sh"), "--out", str(out), "--arch", "aarch64",
         "--python", "3.11", "--no-archive"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    return out


def elf_machine(path: pathlib.Path) -> int:
    """The ELF ``e_machine`` of a little-endian program or library (0xB7: aarch64)."""
    head = path.read_bytes()[:20]
    assert head[:4] == b"\x7fELF", path
    return int.from_bytes(head[18:20], "little")


async def run(command: list[str], timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    proc = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    return subprocess.CompletedProcess(command, proc.returncode or 0, out.decode(), err.decode())


async def join_line(hub: HubProcess) -> dict[str, str]:
    """``cloudhub token create``'s join command, as ``{"--hub": …, "--token": …, …}``."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "cloudhub", "token", "create", "--kubeconfig", str(hub.kubeconfig),
        stdout=asyncio.subprocess.PIPE, env=child_env(),
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    words = shlex.split(out.decode().strip().splitlines()[-1])
    assert words[:2] == ["edgeagent", "join"], words
    return dict(zip(words[2::2], words[3::2], strict=True))


def patient_hub(root: pathlib.Path) -> HubProcess:
    """The demo's hub (embedded API, loopback), allowing an emulated agent 20 s of silence."""
    hub = HubProcess(root)
    at = hub.args.index("--session-liveness-timeout")
    hub.args[at + 1] = "20"
    return hub


async def install_offline(view: pathlib.Path, *args: str) -> subprocess.CompletedProcess:
    """install.sh inside the device, in a network namespace of its own with no interface
    up: nothing can come from an index."""
    command = chroot(view, "bash", "/root/edgefleet/deploy/install.sh", *args)
    return await run(["unshare", "--net", "--", *command], INSTALL_TIMEOUT)


@pytest.mark.timeout(3600)  # cold: the root (95 s quiet, 29 min at load 10) and wheels first
async def test_agent_on_arm64_from_the_wheelhouse_joins_runs_a_pod_and_a_twin(
    arm64_root: pathlib.Path, aarch64_house: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    started = time.monotonic()
    hub = patient_hub(tmp_path / "fleet")
    hub.start()
    agent: subprocess.Popen | None = None
    try:
        with mounted_root(arm64_root) as view:
            shutil.copytree(aarch64_house, view / "root" / "wheelhouse")
            for part in ("deploy", "systemd"):
                shutil.copytree(REPO / part, view / "root" / "edgefleet" / part)
            installed = await install_offline(
                view, "--wheelhouse", "/root/wheelhouse", "--runtime", "process", "--no-start"
            )
            out = installed.stdout + installed.stderr
            assert installed.returncode == 0, out
            assert "installed edgefleet 0.1.0 (the agent) in /opt/edgeagent" in out
            assert "systemctl not found: the unit is written but not enabled" in out
            assert (view / "etc/systemd/system/edgeagent.service").is_file()
            venv = view / "opt" / "edgeagent"
            machine = await run(chroot(view, "/opt/edgeagent/bin/python", "-c",
                                       "import platform; print(platform.machine())"))  # fmt: skip
            assert machine.stdout.strip() == "aarch64", machine
            (rust,) = venv.glob("lib/python3.11/site-packages/cryptography/hazmat/bindings/*.so")
            assert elf_machine(rust) == 0xB7  # the aarch64 wheel's native code
            installed_mb = installed_bytes(venv)["total"] / 1e6
            print(f"\nagent.installed_mb (arm64 root) = {installed_mb:.1f} (goal <= 60)")
            assert installed_mb <= 60

            await hub.wait_ready(120)
            line = await join_line(hub)
            joined = await run(
                chroot(view, "bash", "/root/edgefleet/deploy/install.sh", "--no-start",
                       "--runtime", "process", "--wheelhouse", "/root/wheelhouse",
                       "--node-name", NODE, *(w for kv in line.items() for w in kv)),
                INSTALL_TIMEOUT,
            )  # fmt: skip
            assert joined.returncode == 0, joined.stdout + joined.stderr
            assert "not started (--no-start)" in joined.stdout
            assert (view / "var/lib/edgeagent/pki/node.key").is_file()

            agent = await asyncio.to_thread(start_agent, view, tmp_path / "agent.log")
            await on_the_node(hub, view, agent, tmp_path / "agent.log")
    finally:
        if agent is not None and agent.poll() is None:
            agent.terminate()
            await asyncio.to_thread(agent.wait, 60)
        await hub.stop()
        sweep(tmp_path / "fleet")
    print(f"arm64 proof: {time.monotonic() - started:.1f} s wall")


def start_agent(view: pathlib.Path, log_path: pathlib.Path) -> subprocess.Popen:
    """``edgeagent run`` of the device's venv, inside the device (pid: the agent itself)."""
    sets = [w for s in AGENT_TEST_SETS for w in ("--set", s)]
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            chroot(view, "/opt/edgeagent/bin/edgeagent", "run",
                   "--config", "/etc/edgeagent/config.yaml", *sets),
            stdout=log, stderr=log, stdin=subprocess.DEVNULL,
        )  # fmt: skip


async def on_the_node(
    hub: HubProcess, view: pathlib.Path, agent: subprocess.Popen, log: pathlib.Path
) -> None:
    """The joined arm64 agent, running: Ready, a pod, a device twin round trip."""

    def alive() -> None:
        assert agent.poll() is None, log.read_text(errors="replace")[-3000:]

    async with await KubeClient.from_kubeconfig(str(hub.kubeconfig)) as kube:

        async def ready() -> bool:
            alive()
            nodes, _ = await kube.list(NODES)
            return any(
                n["metadata"]["name"] == NODE
                and any(c["type"] == "Ready" and c["status"] == "True"
                        for c in n.get("status", {}).get("conditions", []))
                for n in nodes
            )  # fmt: skip

        await eventually(ready, f"node {NODE} Ready", TIMEOUT)
        pod = node_pod("arch", NODE, ["sh", "-c", "uname -m; exec sleep 100000"])
        await kube.create(PODS, pod, "default")

        async def running() -> bool:
            alive()
            got = await kube.get(PODS, "arch", "default")
            return got.get("status", {}).get("phase") == "Running"

        await eventually(running, "the pod Running in the hub's API", TIMEOUT)

        def printed() -> list[str]:
            """The last word of each line the container printed (its log files are
            ``<logs>/<namespace>_<pod>_<uid>/<container>/<attempt>.log``, as kubelet's)."""
            logs = (view / "var" / "lib" / "edgeagent").rglob("default_arch_*/c/*.log")
            return [line.split()[-1] for p in logs for line in p.read_text().splitlines() if line]

        assert await eventually(printed, "the pod's log", TIMEOUT) == ["aarch64"]

        await kube.create(DEVICEMODELS, model(VLED_MODEL, "default"))
        await kube.create(DEVICES, device(VLED_DEVICE, "default", NODE, desired={"status": "1"}))
        mapper = DeviceClient(str(view / "var" / "lib" / "edgeagent" / "devices.sock"))

        async def desired():
            alive()
            try:
                return await mapper.get_desired("default", DEVICE)
            except (APIUnavailable, DeviceAPIError):  # not there yet
                return None

        assert (await eventually(desired, "desired at the edge", TIMEOUT)).properties == {
            "status": 1
        }
        await mapper.report("default", DEVICE, {"status": 1})

        async def reported() -> bool:
            alive()
            return reported_value(await kube.get(DEVICES, DEVICE, "default"), "status") == "1"

        await eventually(reported, "the reported value in the Device's status", TIMEOUT)


@pytest.mark.timeout(1800)
def test_root_image_of_another_architecture_is_refused(arm64_root: pathlib.Path) -> None:
    """install.sh --root on the arm64 image with this machine's Debian Python: the venv and
    its wheels would be x86_64 while the image's /usr/bin/python3.11 is aarch64."""
    python = pathlib.Path("/usr/bin/python3")
    if not python.exists() or platform.machine() == "aarch64":
        not_applicable("needs a /usr/bin/python3 of another architecture than arm64")
    with mounted_root(arm64_root) as view:
        before = sorted(os.listdir(view))
        result = subprocess.run(
            ["bash", str(REPO / "deploy" / "install.sh"), "--root", str(view),
             "--python", str(python), "--dry-run"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert result.returncode == 1, result.stdout
        assert "the image's /usr/bin/python3 (/usr/bin/python3.11) is aarch64" in result.stderr
        assert f"{platform.machine()} Python 3.11: the agent would not start" in result.stderr
        assert sorted(os.listdir(view)) == before
