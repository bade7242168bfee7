"""``python -m tests.sim``: simulated agents in a separate process, as benchmarks run them."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import sys
import time

from cloudhub.kube import PODS, KubeClient
from protocol import pki
from tests.cloudhub.hub.conftest import DEADLINE, Hubs, pod
from tests.sim import CREATED_AT

ROOT = pathlib.Path(__file__).resolve().parents[3]


async def test_agents_in_a_separate_process_connect_and_report_latency(
    hubs: Hubs, kube: KubeClient, namespace: str, unique, tmp_path: pathlib.Path
) -> None:
    hub = await hubs.start()
    ca = hubs.pki.ca
    (tmp_path / "ca.pem").write_bytes(pki.dump_certificate_pem(ca.certificate))
    (tmp_path / "ca.key").write_bytes(pki.dump_private_key_pem(ca.private_key))
    prefix = unique("proc") + "-"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.sim",
        "--ca-cert",
        str(tmp_path / "ca.pem"),
        "--ca-key",
        str(tmp_path / "ca.key"),
        "--nodes",
        "3",
        "--prefix",
        prefix,
        "--transport",
        "quic",
        "--quic-port",
        str(hub.quic_port),
        "--report-interval",
        "0.2",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None and proc.stdin is not None
    try:

        async def until(predicate) -> dict:
            while True:
                line = json.loads(await proc.stdout.readline())
                if predicate(line):
                    return line

        line = await asyncio.wait_for(until(lambda x: x["synced"] == 3), DEADLINE)
        assert line["agents"] == 3 and line["errors"] == 0
        body = pod("timed", namespace, f"{prefix}1")
        body["metadata"]["annotations"] = {CREATED_AT: repr(time.time())}
        await kube.create(PODS, body)
        line = await asyncio.wait_for(until(lambda x: x["latencies_ms"]), DEADLINE)
        [latency] = line["latencies_ms"]
        assert 0 < latency < DEADLINE * 1000
        assert len(hub.registry) == 3
    finally:
        proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), DEADLINE)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0
