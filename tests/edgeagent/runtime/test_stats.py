"""Per-container usage: cgroup v1/v2 readers, Docker stats, process trees vs psutil."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import psutil
import pytest

from edgeagent.errors import StatsError
from edgeagent.runtime.stats import (
    CgroupReader,
    ResourceUsage,
    process_tree_usage,
    usage_from_docker_stats,
)


def write(path: pathlib.Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cgroup_v2(tmp_path: pathlib.Path) -> None:
    write(tmp_path / "cgroup.controllers", "cpuset cpu io memory pids\n")
    pod = tmp_path / "edgeagent.slice/pod-1"
    write(pod / "cpu.stat", "usage_usec 1234567\nuser_usec 1000000\nsystem_usec 234567\n")
    write(pod / "memory.current", "52428800\n")
    write(pod / "memory.stat", "anon 40000000\nfile 12000000\ninactive_file 10485760\n")
    reader = CgroupReader(str(tmp_path))
    assert reader.version == 2
    assert reader.read("/edgeagent.slice/pod-1") == ResourceUsage(1_234_567_000, 41_943_040)


def test_cgroup_v1_with_combined_cpu_hierarchy(tmp_path: pathlib.Path) -> None:
    write(tmp_path / "cpu,cpuacct/edgeagent/pod-1/cpuacct.usage", "987654321\n")
    mem = tmp_path / "memory/edgeagent/pod-1"
    write(mem / "memory.usage_in_bytes", "1000000\n")
    write(mem / "memory.stat", "cache 0\ninactive_file 5\ntotal_inactive_file 2000000\n")
    reader = CgroupReader(str(tmp_path))
    assert reader.version == 1
    # Inactive file pages larger than usage (stale stat): the working set is 0, not negative.
    assert reader.read("edgeagent/pod-1") == ResourceUsage(987_654_321, 0)


def test_missing_or_garbled_cgroup_raises_sampling_error(tmp_path: pathlib.Path) -> None:
    write(tmp_path / "cgroup.controllers", "cpu memory\n")
    reader = CgroupReader(str(tmp_path))
    with pytest.raises(StatsError, match="cgroup /gone"):
        reader.read("/gone")
    write(tmp_path / "bad/cpu.stat", "usage_usec 1\n")
    write(tmp_path / "bad/memory.current", "lots\n")
    write(tmp_path / "bad/memory.stat", "")
    with pytest.raises(StatsError, match="cgroup bad"):
        reader.read("bad")


def own_cgroup(reader: CgroupReader) -> str:
    if reader.version == 1:
        return "/"  # the hierarchy root this container sees (exists in cpuacct and memory)
    for line in pathlib.Path("/proc/self/cgroup").read_text().splitlines():
        if line.startswith("0::"):
            return line[3:]
    pytest.skip("no cgroup v2 entry in /proc/self/cgroup")


def test_real_cgroup_of_this_machine_covers_this_process() -> None:
    reader = CgroupReader()
    if not os.path.isdir(reader.root):
        pytest.skip("no cgroup filesystem mounted")
    usage = reader.read(own_cgroup(reader))
    own = psutil.Process().cpu_times()
    assert usage.cpu_usage_core_ns >= (own.user + own.system) * 1e9 * 0.99
    assert usage.memory_working_set_bytes > 0


@pytest.mark.parametrize(
    ("stats", "expected"),
    [
        (  # Docker on cgroup v1
            {
                "cpu_stats": {"cpu_usage": {"total_usage": 5_000_000_000}},
                "memory_stats": {"usage": 80_000_000, "stats": {"total_inactive_file": 30_000_000}},
            },
            ResourceUsage(5_000_000_000, 50_000_000),
        ),
        (  # Docker / podman on cgroup v2
            {
                "cpu_stats": {"cpu_usage": {"total_usage": 7}},
                "memory_stats": {"usage": 4096, "stats": {"inactive_file": 1024}},
            },
            ResourceUsage(7, 3072),
        ),
        (  # a container that just stopped: no memory stats
            {"cpu_stats": {"cpu_usage": {"total_usage": 1}}, "memory_stats": {}},
            ResourceUsage(1, 0),
        ),
    ],
)
def test_docker_stats(stats: dict, expected: ResourceUsage) -> None:
    assert usage_from_docker_stats(stats) == expected


@pytest.mark.parametrize(
    "stats",
    [{}, {"cpu_stats": {}}, {"cpu_stats": {"cpu_usage": {"total_usage": "x"}}}, {"cpu_stats": 3}],
)
def test_docker_stats_of_the_wrong_shape(stats: dict) -> None:
    with pytest.raises(StatsError, match="docker stats"):
        usage_from_docker_stats(stats)


BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.2: pass"
CHILD = f"""
import subprocess, sys, time
subprocess.run([sys.executable, "-c", {BURN!r}])
t = time.process_time()
while time.process_time() - t < 0.2:
    pass
data = bytearray(30 * 1024 * 1024)
print("ready", flush=True)
sys.stdin.read()
"""


def test_process_tree_matches_psutil_for_the_same_process() -> None:
    """A pod process that burned CPU itself and in a reaped child, then went idle."""
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        usage = process_tree_usage(proc.pid)
        ps = psutil.Process(proc.pid)
        t = ps.cpu_times()
        expected_ns = (t.user + t.system + t.children_user + t.children_system) * 1e9
        # The process is idle (blocked on stdin): the two reads see the same counters.
        assert abs(usage.cpu_usage_core_ns - expected_ns) <= 20_000_000
        assert usage.cpu_usage_core_ns >= 0.35e9  # 0.2 s own + 0.2 s in the reaped child
        rss = ps.memory_info().rss
        assert abs(usage.memory_working_set_bytes - rss) <= rss * 0.05
        assert usage.memory_working_set_bytes >= 30 * 1024 * 1024
    finally:
        proc.communicate(input="")
    with pytest.raises(StatsError, match=f"process {proc.pid}"):
        process_tree_usage(proc.pid)


def test_cgroup_of_a_process_and_of_a_gone_one() -> None:
    reader = CgroupReader()
    lines = pathlib.Path("/proc/self/cgroup").read_text().splitlines()
    cpu, memory = reader.cgroup_of("self")
    if reader.version == 2:
        assert f"0::{cpu}" in lines and cpu == memory
    else:
        assert any(line.endswith(f":{cpu}") and "cpuacct" in line for line in lines)
        assert any(line.endswith(f":{memory}") and ":memory:" in line for line in lines)
    proc = subprocess.Popen(["true"])
    proc.wait()
    with pytest.raises(StatsError, match=f"cgroup of process {proc.pid}"):
        reader.cgroup_of(proc.pid)


def test_v1_memory_may_live_elsewhere_than_cpu(tmp_path: pathlib.Path) -> None:
    write(tmp_path / "cpuacct/a/cpuacct.usage", "123\n")
    write(tmp_path / "memory/b/memory.usage_in_bytes", "5000\n")
    write(tmp_path / "memory/b/memory.stat", "total_inactive_file 1000\n")
    reader = CgroupReader(str(tmp_path))
    assert reader.read("/a", "/b") == ResourceUsage(123, 4000)
