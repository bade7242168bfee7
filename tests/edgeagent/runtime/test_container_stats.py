"""``container_stats()`` of both runtimes against real containers and processes: the
figures agree with what podman itself reports (``podman stats``) and with what the kernel
says of the process tree (``/proc``), within the tolerances stated below.

Tolerances. podman: CPU equal within 1 % + 2 ms (both read the same cgroup counter; the
CLI prints it as a Go duration), memory within 0.5 % + 64 KiB (the CLI prints four
significant digits). Process runtime: CPU within 1 % + 20 ms (two reads of an idle tree;
``/proc`` counts in clock ticks of 10 ms), memory within 2 % + 256 KiB (RSS of a live
process moves a little between two reads).
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import re
import sys

import pytest

from edgeagent.runtime import ContainerState, Labels
from tests.edgeagent.conftest import make_pod
from tests.waiting import eventually, eventually_sync

pytestmark = pytest.mark.podman

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")

# Burn ~0.3 s of CPU, hold ~40 MB, then idle: the figures stay still while compared.
PY_WORKLOAD = (
    "import os, pathlib, time\n"
    "t = time.process_time()\n"
    "while time.process_time() - t < 0.3: pass\n"
    "data = bytearray(40 * 1024 * 1024)\n"
    "for i in range(0, len(data), 4096): data[i] = 1\n"
    "pathlib.Path('ready').write_text(str(os.getpid()))\n"
    "time.sleep(100000)\n"
)
SH_WORKLOAD = (
    "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; "
    "dd if=/dev/zero of=/dev/shm/hold bs=1M count=40 2>/dev/null; touch /tmp/ready; "
    "exec sleep 100000"
)


def _pod(kind: str) -> dict:
    if kind == "docker":
        work = {"name": "work", "command": ["/bin/sh", "-c", SH_WORKLOAD]}
        idle = {"name": "idle", "command": ["sleep", "100000"]}
    else:
        work = {"name": "work", "command": [sys.executable, "-c", PY_WORKLOAD]}
        idle = {"name": "idle", "command": ["sleep", "100000"]}
    for c in (work, idle):
        c.update(image="localhost/busybox:latest", imagePullPolicy="IfNotPresent")
    # Never: the container stopped at the end stays stopped (no restart racing teardown)
    return make_pod("stats", [work, idle], namespace="metrics", restartPolicy="Never")


def _duration_ns(text: str) -> int:
    """A Go ``time.Duration`` string (``1m2.5s``, ``263.44ms``, ``950µs``) in ns."""
    units = {"h": 3600e9, "m": 60e9, "s": 1e9, "ms": 1e6, "us": 1e3, "µs": 1e3, "ns": 1}
    total = 0.0
    for number, unit in re.findall(r"([0-9.]+)(h|ms|m|s|us|µs|ns)", text):
        total += float(number) * units[unit]
    return round(total)


def _size_bytes(text: str) -> int:
    """podman's human size (``54.37MB``: decimal units) in bytes."""
    number, unit = re.fullmatch(r"([0-9.]+)\s*([kMGT]?B)", text.strip()).groups()
    return round(float(number) * {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}[unit])


def _proc_tree(pid: int) -> tuple[int, int]:
    """CPU ns (own and reaped children, clock ticks) and RSS bytes of a process tree, read
    from /proc without psutil."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = pathlib.Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat[stat.rfind(")") + 2 :].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    todo, cpu_ticks, rss_pages = [pid], 0, 0
    while todo:
        p = todo.pop()
        todo.extend(children.get(p, []))
        fields = pathlib.Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        cpu_ticks += sum(int(fields[i]) for i in (11, 12, 13, 14))  # utime stime cutime cstime
        rss_pages += int(pathlib.Path(f"/proc/{p}/statm").read_text().split()[1])
    return cpu_ticks * 1_000_000_000 // CLK_TCK, rss_pages * PAGE


def _close(actual: int, expected: int, relative: float, absolute: int) -> bool:
    return abs(actual - expected) <= expected * relative + absolute


async def test_container_stats_agree_with_the_engine_and_the_kernel(harness, request) -> None:
    pod = harness.apply(_pod(harness.kind))
    await harness.wait_phase(pod, "Running", timeout=60)
    uid = pod["metadata"]["uid"]
    infos = await harness.runtime.list({Labels.POD_UID: uid})
    apps = {
        i.labels[Labels.CONTAINER_NAME]: i
        for i in infos
        if i.labels.get(Labels.CONTAINER_TYPE) == "app" and i.state is ContainerState.RUNNING
    }
    assert set(apps) == {"work", "idle"}

    async def ready() -> bool:
        if harness.kind == "docker":
            result = await harness.runtime.exec(apps["work"].id, ["test", "-e", "/tmp/ready"], 10)
            return result.exit_code == 0
        return any(harness.state_dir.rglob("ready"))

    await eventually(ready, timeout=60, what="the workload to hold its memory")
    stats = await harness.runtime.container_stats()
    ours = {s.container: s for s in stats if s.pod == "stats"}
    assert set(ours) == {"work", "idle"}  # the sandbox is not a container of the pod spec
    for name, s in ours.items():
        assert (s.namespace, s.container_id) == ("metrics", apps[name].id)
    work = ours["work"]
    if harness.kind == "docker":
        engine = request.getfixturevalue("podman")
        answer = json.loads(
            engine.podman("stats", "--no-stream", "--format", "json", work.container_id)
        )[0]
        engine_cpu = _duration_ns(answer["cpu_time"])
        engine_mem = _size_bytes(answer["mem_usage"].split("/")[0])
        assert _close(work.cpu_usage_core_ns, engine_cpu, 0.01, 2_000_000), (work, answer)
        assert _close(work.memory_working_set_bytes, engine_mem, 0.005, 65536), (work, answer)
        assert work.memory_working_set_bytes >= 40 * 1024 * 1024  # the /dev/shm file
        assert work.cpu_usage_core_ns > ours["idle"].cpu_usage_core_ns
    else:
        (ready_file,) = harness.state_dir.rglob("ready")  # in the container's directory
        pid = int(ready_file.read_text())
        kernel_cpu, kernel_rss = _proc_tree(pid)
        assert _close(work.cpu_usage_core_ns, kernel_cpu, 0.01, 20_000_000), (work, kernel_cpu)
        assert _close(work.memory_working_set_bytes, kernel_rss, 0.02, 262144), (work, kernel_rss)
        assert work.cpu_usage_core_ns >= 0.25e9 and work.memory_working_set_bytes >= 40 * 2**20
    # a stopped container is not reported
    await harness.runtime.stop(apps["idle"].id, grace=0)
    after = {s.container for s in await harness.runtime.container_stats() if s.pod == "stats"}
    assert "idle" not in after


# --- the process runtime and a cgroup of the container's own -------------------------------

CGROUP_WORKLOAD = (
    "import os, pathlib, time\n"
    "def burn(s):\n"
    "    t = time.process_time()\n"
    "    while time.process_time() - t < s: pass\n"
    "burn(0.5)\n"  # before the move: not in the cgroup's counters
    "pathlib.Path('pid').write_text(str(os.getpid()))\n"
    "while not os.path.exists('go'): time.sleep(0.01)\n"
    "burn(0.2)\n"
    "data = bytearray(30 * 1024 * 1024)\n"
    "for i in range(0, len(data), 4096): data[i] = 1\n"
    "pathlib.Path('ready').write_text('1')\n"
    "time.sleep(100000)\n"
)


def _cgroupfs(root: str) -> bool:
    return pathlib.Path(root).is_dir()


class Cgroup:
    """A cgroup made for the test: v1 (``cpuacct`` + ``memory``) or v2; skips with the
    reason where it cannot be made."""

    def __init__(self, reader, name: str) -> None:
        self.reader = reader
        if reader.version == 1:
            self.dirs = [
                pathlib.Path(reader.root) / "cpuacct" / name,
                pathlib.Path(reader.root) / "memory" / name,
            ]
            if not self.dirs[0].parent.is_dir():
                self.dirs[0] = pathlib.Path(reader.root) / "cpu,cpuacct" / name
        else:
            self.dirs = [pathlib.Path(reader.root) / name]
        try:
            for d in self.dirs:
                d.mkdir()
        except OSError as exc:
            pytest.skip(f"cannot make a cgroup here: {exc}")
        self.path = "/" + name

    def add(self, pid: int) -> None:
        for d in self.dirs:
            (d / "cgroup.procs").write_text(str(pid))

    def cpu_ns(self) -> int:
        if self.reader.version == 1:
            return int((self.dirs[0] / "cpuacct.usage").read_text())
        for line in (self.dirs[0] / "cpu.stat").read_text().splitlines():
            if line.startswith("usage_usec "):
                return int(line.split()[1]) * 1000
        raise AssertionError("no usage_usec")

    def remove(self) -> None:
        def removed(d: pathlib.Path) -> bool:
            try:
                d.rmdir()
            except OSError:  # the killed processes are still leaving
                return False
            return True

        for d in self.dirs:
            eventually_sync(lambda d=d: removed(d), f"{d} removed", 10)


async def test_process_container_in_a_cgroup_of_its_own_is_read_from_it(tmp_path) -> None:
    import uuid

    from edgeagent.runtime import ContainerConfig
    from edgeagent.runtime.process import ProcessRuntime
    from edgeagent.runtime.stats import CgroupReader
    from edgeagent.settings import ProcessSettings

    reader = CgroupReader()
    if not _cgroupfs(reader.root) or os.geteuid() != 0:
        pytest.skip("needs root and a cgroup filesystem")
    rt = ProcessRuntime(tmp_path / "rt", ProcessSettings(), "127.0.0.1")
    await rt.connect()
    group = Cgroup(reader, f"eftest-{uuid.uuid4().hex[:8]}")
    try:
        ids = {}
        for name, argv in (
            ("work", (sys.executable, "-c", CGROUP_WORKLOAD)),
            ("idle", ("/bin/sh", "-c", "echo $$ > pid; exec sleep 100000")),
        ):
            labels = {
                Labels.MANAGED: "true",
                Labels.POD_UID: "u-cg",
                Labels.POD_NAME: "cg",
                Labels.POD_NAMESPACE: "metrics",
                Labels.CONTAINER_NAME: name,
                Labels.CONTAINER_TYPE: "app",
            }
            config = ContainerConfig(name=f"cg-{name}", image="", command=argv, labels=labels)
            ids[name] = await rt.create(config)
            await rt.start(ids[name])
        work_dir = tmp_path / "rt" / ids["work"] / "root"
        await eventually(lambda: (work_dir / "pid").exists(), timeout=60, what="work started")
        pid = int((work_dir / "pid").read_text())
        group.add(pid)
        (work_dir / "go").write_text("")
        await eventually(lambda: (work_dir / "ready").exists(), timeout=60, what="work ready")
        stats = {s.container: s for s in await rt.container_stats()}
        work = stats["work"]
        cgroup_cpu = group.cpu_ns()
        tree_cpu, _ = _proc_tree(pid)
        # From the cgroup: what it counted since the move, not the 0.5 s burnt before it.
        assert _close(work.cpu_usage_core_ns, cgroup_cpu, 0.01, 2_000_000), (work, cgroup_cpu)
        assert work.cpu_usage_core_ns <= tree_cpu - 0.4e9, (work, tree_cpu)
        assert work.cpu_usage_core_ns >= 0.15e9
        assert work.memory_working_set_bytes >= 30 * 2**20
        assert stats["idle"].cpu_usage_core_ns < 0.1e9  # idle is read from its process tree
        # A cgroup two containers share says nothing about either: both go by process tree.
        idle_file = tmp_path / "rt" / ids["idle"] / "root" / "pid"
        await eventually(lambda: idle_file.exists() and idle_file.read_text(), what="idle pid")
        idle_pid = int(idle_file.read_text())
        group.add(idle_pid)
        shared = {s.container: s for s in await rt.container_stats()}["work"]
        tree_cpu, tree_rss = _proc_tree(pid)
        assert _close(shared.cpu_usage_core_ns, tree_cpu, 0.01, 20_000_000), (shared, tree_cpu)
        assert _close(shared.memory_working_set_bytes, tree_rss, 0.02, 262144)
    finally:
        for info in await rt.list():
            await rt.remove(info.id)
        await rt.close()
        group.remove()


async def test_removing_a_container_whose_start_was_cancelled_ends_its_processes(
    tmp_path,
) -> None:
    """An agent stopping in the middle of ``start()`` (after the fork) must not leave the
    command running when the container is then removed (found by the stats tests)."""
    from edgeagent.runtime import ContainerConfig
    from edgeagent.runtime.process import ProcessRuntime, proc_start_time
    from edgeagent.settings import ProcessSettings

    rt = ProcessRuntime(tmp_path / "rt", ProcessSettings(), "127.0.0.1")
    await rt.connect()
    try:
        config = ContainerConfig(
            name="cancelled",
            image="",
            command=("/bin/sh", "-c", "echo $$ > mypid; exec sleep 100000"),
            labels={Labels.MANAGED: "true"},
        )
        cid = await rt.create(config)
        start = asyncio.ensure_future(rt.start(cid))
        await asyncio.sleep(0)  # start() forks, then waits for the shim's pid file
        start.cancel()
        await asyncio.gather(start, return_exceptions=True)
        pid_file = tmp_path / "rt" / cid / "root" / "mypid"
        await eventually(lambda: pid_file.exists() and pid_file.read_text().strip(), what="pid")
        pid = int(pid_file.read_text())
        assert proc_start_time(pid) is not None
        await rt.remove(cid)
        await eventually(lambda: proc_start_time(pid) is None, what="the command to end")
    finally:
        for info in await rt.list():
            await rt.remove(info.id)
        await rt.close()
