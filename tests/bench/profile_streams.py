"""Where an idle exec stream's hub memory goes: a development tool, not a benchmark.

Runs ``cloudhub serve`` (as ``bench_streams`` does, embedded API, one real agent) under
``tracemalloc``, opens ``--count`` exec streams of ``cat`` (warm), snapshots the hub, opens
as many more, snapshots again, and prints per stream:

- the RSS growth and the growth of glibc's heap in use (``mallinfo2``: every C and
  Python allocation that is not in a pymalloc arena);
- the Python allocations' growth (tracemalloc, started at the first snapshot: what the
  second batch allocated and still holds), grouped by the line that allocated and by the
  innermost frame of *our* code on the traceback;
- the C remainder: heap-in-use growth minus the Python blocks that went to malloc
  (> 512 bytes), i.e. mostly OpenSSL's.

    .venv/bin/python tests/bench/profile_streams.py [--count 120] [--transport quic]

The hub is slower and larger while tracing; only the differences mean anything.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import signal
import sys
import tempfile
import tracemalloc
from collections import defaultdict

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from cloudhub.kube import NAMESPACES, PODS, KubeClient  # noqa: E402
from tests.bench.bench_e2e import HubProcess  # noqa: E402
from tests.bench.bench_streams import API, Exec, _running  # noqa: E402
from tests.edgeagent.hublink.fleet import AgentProcess  # noqa: E402
from tests.edgeagent.hublink.objects import pod  # noqa: E402
from tests.testpki import make_test_pki  # noqa: E402
from tests.waiting import eventually  # noqa: E402

#: Run in the hub process: the first SIGUSR1 starts tracemalloc (so the hub starts at its
#: usual speed), each one dumps a snapshot and the heap figures.
_WRAPPER = r"""
import ctypes, gc, json, os, runpy, signal, sys, tracemalloc
out = os.environ["PROFILE_OUT"]
class _Mallinfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
        "uordblks", "fordblks", "keepcost")]
_libc = ctypes.CDLL("libc.so.6")
_libc.mallinfo2.restype = _Mallinfo2
_n = [0]
def _snap(signum, frame):
    gc.collect()
    if not tracemalloc.is_tracing() and os.environ["PROFILE_FRAMES"] != "0":
        tracemalloc.start(int(os.environ["PROFILE_FRAMES"]))
    _n[0] += 1
    if tracemalloc.is_tracing():
        tracemalloc.take_snapshot().dump(f"{out}/snap{_n[0]}")
    m = _libc.mallinfo2()
    rss = int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    info = {f: getattr(m, f) for f, _ in _Mallinfo2._fields_}
    info["rss"] = rss
    info["traced"] = tracemalloc.get_traced_memory()[0]
    with open(f"{out}/snap{_n[0]}.json.tmp", "w") as f:
        json.dump(info, f)
    os.rename(f"{out}/snap{_n[0]}.json.tmp", f"{out}/snap{_n[0]}.json")
signal.signal(signal.SIGUSR1, _snap)
sys.argv = ["cloudhub"] + sys.argv[1:]
runpy.run_module("cloudhub", run_name="__main__", alter_sys=True)
"""


async def _snapshot(hub: HubProcess, out: pathlib.Path, n: int) -> dict:
    assert hub.proc is not None
    hub.proc.send_signal(signal.SIGUSR1)
    done = out / f"snap{n}.json"
    await eventually(done.exists, f"hub snapshot {n}", 120)
    return json.loads(done.read_text())


def _ours(frame_file: str) -> bool:
    return str(ROOT) in frame_file and "/.venv/" not in frame_file


def _report(out: pathlib.Path, a: dict, b: dict, count: int, top: int, show: str) -> None:
    per = 1024 * count
    print(f"RSS growth           {(b['rss'] - a['rss']) / per:7.2f} KiB/stream")
    heap = (b["uordblks"] + b["hblkhd"]) - (a["uordblks"] + a["hblkhd"])
    print(f"malloc heap in use   {heap / per:7.2f} KiB/stream")
    if not (out / "snap1").exists():
        return  # untraced: RSS and heap only
    print(f"tracemalloc traced   {(b['traced'] - a['traced']) / per:7.2f} KiB/stream")
    s1 = tracemalloc.Snapshot.load(str(out / "snap1"))
    s2 = tracemalloc.Snapshot.load(str(out / "snap2"))
    big1 = sum(t.size for t in s1.traces if t.size > 512)
    big2 = sum(t.size for t in s2.traces if t.size > 512)
    print(f"  of it > 512 B      {(big2 - big1) / per:7.2f} KiB/stream (malloc'd by Python)")
    print(f"C remainder          {(heap - (big2 - big1)) / per:7.2f} KiB/stream")
    print("\n-- Python growth by allocating line (bytes/stream, blocks/stream) --")
    for stat in s2.compare_to(s1, "lineno")[:top]:
        frame = stat.traceback[0]
        print(
            f"{stat.size_diff / count:8.0f} {stat.count_diff / count:6.1f}  "
            f"{frame.filename.replace(str(ROOT) + '/', '')}:{frame.lineno}"
        )
    print("\n-- where the largest lines were called from (innermost first) --")
    shown = [
        stat
        for stat in s2.compare_to(s1, "traceback")
        if show and f"{stat.traceback[-1].filename}:{stat.traceback[-1].lineno}".endswith(show)
    ]
    for stat in shown[:top] or s2.compare_to(s1, "traceback")[: top // 3]:
        frames = [
            f"{f.filename.replace(str(ROOT) + '/', '').split('site-packages/')[-1]}:{f.lineno}"
            for f in list(stat.traceback)[::-1][:8]
        ]
        print(
            f"{stat.size_diff / count:8.0f} {stat.count_diff / count:6.1f}  " + " < ".join(frames)
        )
    print("\n-- Python growth by innermost frame of our code --")
    groups: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for stat in s2.compare_to(s1, "traceback"):
        ours = [f for f in stat.traceback if _ours(f.filename)]
        key = (
            f"{ours[-1].filename.replace(str(ROOT) + '/', '')}:{ours[-1].lineno}"
            if ours
            else "(no frame of ours)"
        )
        groups[key][0] += stat.size_diff
        groups[key][1] += stat.count_diff
    ranked = sorted(groups.items(), key=lambda kv: -kv[1][0])
    for key, (size, blocks) in ranked[:top]:
        print(f"{size / count:8.0f} {blocks / count:6.1f}  {key}")


async def _main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="profile-streams-") as tmp_name:
        tmp = pathlib.Path(tmp_name)
        out = tmp / "snapshots"
        out.mkdir()
        pki_ca = make_test_pki()
        hub = HubProcess(tmp / "hub", pki_ca)
        hub.args[1:3] = ["-c", _WRAPPER]
        os.environ["PROFILE_FRAMES"] = str(args.frames)
        os.environ["PROFILE_OUT"] = str(out)
        hub.start()
        kube = await KubeClient.from_kubeconfig(str(hub.kubeconfig))
        agent = AgentProcess(
            tmp / "edge",
            "edge-profile",
            "process",
            f"quic://127.0.0.1:{hub.port}",
            pki_ca.ca,
            quick=False,
            sets=(f"hub.transports={args.transport}",),
        )
        agent.start()
        try:
            ns = "profile"
            await kube.create(
                NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
            )
            await kube.create(PODS, pod("echo", ns, agent.node, "echo ready; exec sleep 3600"))
            await _running(kube, ns, "echo")
            api = API(hub.kubeconfig)
            warm = [await Exec.open(api, ns, "echo") for _ in range(args.count)]
            for one in warm:
                await one.roundtrip()
            a = await _snapshot(hub, out, 1)
            idle = [await Exec.open(api, ns, "echo") for _ in range(args.count)]
            for one in idle:
                await one.roundtrip()
            b = await _snapshot(hub, out, 2)
            _report(out, a, b, args.count, args.top, args.show)
            for one in warm + idle:
                one.close()
        finally:
            await agent.stop()
            await agent.remove_everything()
            await kube.close()
            hub.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=120, help="streams per batch")
    parser.add_argument("--transport", default="quic", choices=("quic", "websocket"))
    parser.add_argument(
        "--frames", type=int, default=30, help="tracemalloc frames kept (0: no tracing)"
    )
    parser.add_argument("--top", type=int, default=40, help="lines printed per table")
    parser.add_argument(
        "--show", default="", help="print the tracebacks of the lines ending so (file:line)"
    )
    asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    main()
