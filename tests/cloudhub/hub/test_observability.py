"""/metrics, /healthz, /readyz and structured logs of a running hub."""

from __future__ import annotations

import io
import json
import logging
import time

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from cloudhub.kube import PODS, KubeClient
from cloudhub.observability.logs import setup_logging
from cloudhub.standalone import APIServerSettings, EmbeddedAPIServer
from tests.cloudhub.hub.conftest import DEADLINE, Cluster, Hubs, pod


async def fetch(port: int, path: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{port}{path}") as resp:
            return resp.status, await resp.text()


def samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[s.name, tuple(sorted(s.labels.items()))] = s.value
    return out


async def test_metrics_health_and_readiness(
    hubs: Hubs, kube: KubeClient, namespace: str, unique
) -> None:
    hub = await hubs.start()
    assert await fetch(hub.http_port, "/healthz") == (200, "ok\n")
    assert await fetch(hub.http_port, "/readyz") == (200, "ok\n")
    quic, ws = hubs.agent(unique("edge-mq"), transport="quic"), hubs.agent(unique("edge-mw"))
    for agent in (quic, ws):
        await agent.wait_for(lambda a=agent: a.synced, DEADLINE)
    created = await kube.create(PODS, pod("web", namespace, ws.name))
    await ws.wait_for(lambda: created["metadata"]["uid"] in ws.store and ws.all_acked, DEADLINE)

    status, text = await fetch(hub.http_port, "/metrics")
    assert status == 200
    m = samples(text)
    assert m["edgefleet_hub_connected_nodes", (("transport", "quic"),)] == 1
    assert m["edgefleet_hub_connected_nodes", (("transport", "websocket"),)] == 1
    assert m["edgefleet_hub_sessions_opened_total", (("transport", "websocket"),)] >= 1
    assert m["edgefleet_hub_messages_total", (("direction", "out"), ("kind", "object_upsert"))] >= 1
    assert m["edgefleet_hub_messages_total", (("direction", "out"), ("kind", "sync_done"))] == 2
    assert m["edgefleet_hub_messages_total", (("direction", "in"), ("kind", "pod_status"))] >= 1
    assert m["edgefleet_hub_bytes_total", (("direction", "in"), ("transport", "websocket"))] > 0
    assert m["edgefleet_hub_bytes_total", (("direction", "out"), ("transport", "quic"))] > 0
    assert m["edgefleet_hub_pod_status_writes_total", (("result", "written"),)] >= 1
    # per-session depths as gauge histograms over all sessions, not one series per node
    assert m["edgefleet_hub_session_unacked_messages_gcount", ()] == 2
    assert m["edgefleet_hub_session_outbox_messages_bucket", (("le", "+Inf"),)] == 2
    assert (
        m[
            "edgefleet_hub_api_request_duration_seconds_count",
            (("resource", "pods"), ("verb", "update")),
        ]
        >= 1
    )
    assert (
        m[
            "edgefleet_hub_api_request_duration_seconds_count",
            (("resource", "pods"), ("verb", "watch")),
        ]
        >= 1
    )
    assert m["edgefleet_hub_informer_synced", (("resource", "pods"),)] == 1
    assert 0 <= m["edgefleet_hub_informer_lag_seconds", (("resource", "pods"),)] < DEADLINE
    # One per-node series only: each connected node's client certificate expiry (issue 16),
    # what an operator alerts on; every other figure is fleet-wide.
    named = [line for line in text.splitlines() if quic.name in line or ws.name in line]
    assert len(named) == 2, named
    assert all(
        line.startswith("edgefleet_hub_node_certificate_expiry_timestamp_seconds{")
        for line in named
    )
    now = time.time()
    for agent in (quic, ws):
        expiry = m[
            "edgefleet_hub_node_certificate_expiry_timestamp_seconds", (("node", agent.name),)
        ]
        assert now < expiry < now + 400 * 86400
    # process_* and the build: what standard alerts and dashboards expect.
    assert m["process_resident_memory_bytes", ()] > 0
    assert m["process_open_fds", ()] > 0
    builds = [labels for (name, labels) in m if name == "edgefleet_hub_build_info"]
    assert len(builds) == 1 and m["edgefleet_hub_build_info", builds[0]] == 1
    assert dict(builds[0])["version"]

    # a Node write of each kind was counted
    assert m["edgefleet_hub_node_writes_total", (("result", "created"), ("what", "node"))] == 2


async def test_readyz_reports_an_unreachable_api(pki_ca) -> None:
    api = EmbeddedAPIServer(APIServerSettings(data_dir=None, port=0))
    await api.__aenter__()
    stopped = False
    hubs = Hubs(Cluster("embedded", api.kubeconfig_path), pki_ca)
    try:
        hub = await hubs.start({"observability.ready_api_timeout": 0.5})
        assert await fetch(hub.http_port, "/readyz") == (200, "ok\n")
        await api.__aexit__(None, None, None)
        stopped = True
        status, text = await fetch(hub.http_port, "/readyz")
        assert status == 503
        assert "Kubernetes API unreachable" in text
        assert (await fetch(hub.http_port, "/healthz"))[0] == 200  # alive, just not ready
    finally:
        await hubs.close()
        if not stopped:
            await api.__aexit__(None, None, None)


async def test_structured_logs_name_the_node(hubs: Hubs, unique) -> None:
    stream = io.StringIO()
    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    setup_logging("json", "info", stream)
    try:
        await hubs.start()
        name = unique("edge-log")
        agent = hubs.agent(name)
        await agent.wait_for(lambda: agent.synced, DEADLINE)
        await agent.stop()
        await hubs.close()
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved:
            root.addHandler(handler)
        root.setLevel(level)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    about = [line for line in lines if name in line["message"] or line.get("node") == name]
    assert any("connected over websocket" in line["message"] for line in about)
    assert any("disconnected" in line["message"] for line in about)
    for line in about:
        assert line.get("node") == name, line
        assert {"time", "level", "logger", "message"} <= set(line)
